"""The user's workspace, in the pod: fetch the archive, check its sha256, unpack it, work in it.

Before torchrun starts (``ddpctl_trainer.launch`` calls ``prepare``, or ``python3 -m
ddpctl_trainer.workspace CMD...`` / ``python3 workspace.py CMD...`` runs it and then execs CMD), with
what the pod's env says (``protocol.WORKSPACE_*_ENV``):

1. fetch: the archive is a file (the key of the workspace's Secret, mounted), or an object store
   URL, downloaded (obstore, as checkpoints are) into the target folder under a hidden name and
   removed after;
2. verify: the sha256 of the decompressed tar must be the one the CLI packed; nothing is written to
   the target before it is;
3. unpack into the target folder (an emptyDir): regular files and folders only, no absolute paths,
   no ``..``, nothing through a link (a link already in the folder is replaced, never followed),
   modes 0755 or 0644 whatever the archive says;
4. the target becomes the working directory, and the first entry of ``PYTHONPATH``.

A missing or corrupt archive ends the pod at once: one line (``ddpctl-trainer: error: workspace:
...``) on stderr and in the termination message (``/dev/termination-log``, which ``ddpctl status``
shows), and exit 2 (``EXIT_USAGE``), which no failure rule retries: the same archive fails the same
way on every retry. A store that cannot be reached (after the client's retries) exits 1, which the
rules retry. Only the target folder is written (Pod Security "restricted", a read-only root file
system); standard library only, obstore only for a URL. This file also runs on its own, beside
``protocol.py``, in an image that has python3 and nothing of ddpctl.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import stat
import sys
import tarfile
import zlib
from collections.abc import MutableMapping, Sequence
from pathlib import Path, PurePosixPath

try:
    from . import protocol
except ImportError:  # a lone file beside protocol.py (the workspace's Secret ships both)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under -I or PYTHONSAFEPATH
    import protocol  # type: ignore[no-redef, import-not-found]

_CHUNK = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DOWNLOAD_NAME = ".ddpctl-workspace.tar.gz.part"
TAG = f"{protocol.ERROR_TAG}workspace: "


class WorkspaceError(Exception):
    """The workspace cannot be set up: the message is the one line, `exit_code` the pod's code."""

    def __init__(self, message: str, exit_code: int = protocol.EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# ------------------------------------------------------------------------------------ fetch


def _scrub(text: str, env: MutableMapping[str, str]) -> str:
    """One line, without credentials: secret variables' values, URL queries, user:password@."""
    text = " ".join(text.split("\n\nDebug source:", 1)[0].split())
    for name in protocol.OBJECT_STORE_SECRET_ENV:
        value = env.get(name, "")
        if len(value) >= 4:
            text = text.replace(value, "***")
    text = re.sub(r"(https?://[^\s?]+)\?\S*", r"\1?***", text)
    text = re.sub(r"(://)[^/@\s]+@", r"\1***@", text)
    return text[:297] + "..." if len(text) > 300 else text


def fetch(source: str, target: Path) -> Path:
    """The archive as a local file: `source` itself (a mounted file), or an object store URL
    downloaded into `target` (the caller removes it after unpacking). The client's endpoint and
    credentials come from the process's environment, as the checkpoints' do."""
    env = os.environ
    if protocol.url_scheme(source) is None:
        if not os.path.isfile(source):
            raise WorkspaceError(f"archive {source} is missing (is the workspace's Secret mounted there?)")
        return Path(source)
    problem = protocol.checkpoint_url_problem(source)
    if problem is not None:
        raise WorkspaceError(f"{protocol.WORKSPACE_ARCHIVE_ENV}: {problem[0]}")
    try:
        import obstore
        from obstore.store import from_url
    except ImportError:
        raise WorkspaceError(
            f"archive {source} is in an object store, and this image has no obstore "
            "(build it with --build-arg OBJECT_STORE=1)"
        ) from None
    folder, _, name = source.rpartition("/")
    dest = target / _DOWNLOAD_NAME
    options: dict[str, object] = {}
    endpoint = env.get(protocol.OBJECT_STORE_ENDPOINT_ENV, "").lower()
    if protocol.url_scheme(source) == "s3" and endpoint.startswith("http://"):
        options["allow_http"] = True  # an S3-compatible server without TLS, named explicitly
    try:
        client = from_url(folder, client_options=options, retry_config={"max_retries": 3})  # type: ignore[call-overload]
        result = obstore.get(client, name)
        target.mkdir(parents=True, exist_ok=True)
        _unlink(dest)
        with open(dest, "xb") as f:
            for chunk in result.stream(min_chunk_size=_CHUNK):
                f.write(memoryview(chunk))
    except FileNotFoundError:
        _unlink(dest)
        raise WorkspaceError(f"archive {source} is missing from the object store") from None
    except OSError as exc:
        _unlink(dest)
        if exc.filename is not None:  # the target folder, not the store
            raise WorkspaceError(f"cannot write {dest} ({exc.strerror}): mount an emptyDir there") from None
        raise WorkspaceError(f"fetching {source} failed ({_scrub(str(exc), env)})", protocol.EXIT_FAILURE) from None
    except Exception as exc:  # noqa: BLE001 - obstore's errors: a server down, refused credentials
        _unlink(dest)
        reason = f"{type(exc).__name__}: {_scrub(str(exc), env)}"
        raise WorkspaceError(f"fetching {source} failed ({reason})", protocol.EXIT_FAILURE) from None
    return dest


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


# ------------------------------------------------------------------------------------ verify


def verify(archive: Path, sha256: str) -> None:
    """The sha256 of the decompressed tar must be `sha256`; a truncated or garbled gzip stream, or
    another tar, is a WorkspaceError."""
    digest = hashlib.sha256()
    try:
        with gzip.open(archive, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        raise WorkspaceError(f"archive {archive} is corrupt ({_gzip_problem(exc)})") from None
    if digest.hexdigest() != sha256:
        raise WorkspaceError(
            f"archive {archive} is corrupt: its contents have sha256 {digest.hexdigest()[:12]}..., not {sha256[:12]}..."
        )


def _gzip_problem(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "truncated: the gzip stream ends early"
    return f"not a gzip stream: {exc}" if isinstance(exc, gzip.BadGzipFile) else str(exc)


# ------------------------------------------------------------------------------------ unpack


def _safe_name(name: str) -> PurePosixPath:
    """A member's path, relative and inside the target, or a WorkspaceError."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or "\\" in name or "\0" in name:
        raise WorkspaceError(f"archive holds an unsafe path {name!r}")
    parts = [p for p in path.parts if p != "."]
    if not parts or ".." in parts:
        raise WorkspaceError(f"archive holds an unsafe path {name!r}")
    return PurePosixPath(*parts)


def _make_dirs(target: Path, rel: PurePosixPath) -> None:
    """Create `rel`'s folders below `target`, one by one: a link there (not ours: the archive has
    none) is removed, never followed; a file there is replaced by a folder."""
    here = target
    for part in rel.parts:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            os.mkdir(here, 0o755)
            continue
        if stat.S_ISDIR(st.st_mode):
            continue
        os.unlink(here)
        os.mkdir(here, 0o755)


def unpack(archive: Path, target: Path) -> int:
    """Unpack the .tar.gz `archive` (verified) into `target`; the number of files comes back."""
    files = 0
    target.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                rel = _safe_name(member.name)
                if member.isdir():
                    _make_dirs(target, rel)
                    continue
                if not member.isreg():
                    raise WorkspaceError(f"archive holds {member.name!r}, which is not a file or folder")
                _make_dirs(target, rel.parent)
                dest = target / rel
                try:
                    if stat.S_ISDIR(os.lstat(dest).st_mode):
                        raise WorkspaceError(f"{dest} is a folder, the archive's {member.name!r} a file")
                    os.unlink(dest)  # a file or link left by an earlier run in this emptyDir: replaced
                except FileNotFoundError:
                    pass
                source = tar.extractfile(member)
                assert source is not None  # a regular file
                mode = 0o755 if member.mode & stat.S_IXUSR else 0o644
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)  # O_EXCL: never through a link
                with os.fdopen(fd, "wb") as out:
                    while chunk := source.read(_CHUNK):
                        out.write(chunk)
                os.chmod(dest, mode)  # the umask may have taken bits away
                files += 1
    except WorkspaceError:
        raise
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise WorkspaceError(f"archive {archive} is corrupt ({exc})") from None
    except OSError as exc:
        raise WorkspaceError(f"cannot unpack into {target} ({exc.strerror or exc}): mount an emptyDir there") from None
    return files


# ------------------------------------------------------------------------------------ the pod


def prepare(env: MutableMapping[str, str] | None = None) -> Path | None:
    """Set the workspace up as the env says (see the module's doc): the target folder, now the
    working directory and first on PYTHONPATH in `env`; None when the pod ships no workspace."""
    env = os.environ if env is None else env
    source = env.get(protocol.WORKSPACE_ARCHIVE_ENV, "")
    if not source:
        return None
    sha256 = env.get(protocol.WORKSPACE_SHA256_ENV, "").strip().lower()
    if not _SHA256.fullmatch(sha256):
        raise WorkspaceError(f"{protocol.WORKSPACE_SHA256_ENV} must be the archive's sha256 (64 hex digits)")
    target = Path(env.get(protocol.WORKSPACE_DIR_ENV) or protocol.WORKSPACE_DIR)
    if not target.is_absolute():
        raise WorkspaceError(f"{protocol.WORKSPACE_DIR_ENV} must be an absolute path, not {str(target)!r}")
    archive = fetch(source, target)
    try:
        verify(archive, sha256)
        unpack(archive, target)
    finally:
        if archive.name == _DOWNLOAD_NAME:
            _unlink(archive)
    os.chdir(target)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(target) + (os.pathsep + old if old else "")
    helpers = _lay_out_helpers(target)
    if helpers is not None:
        env["PYTHONPATH"] += os.pathsep + str(helpers)
    return target


def _lay_out_helpers(target: Path) -> Path | None:
    """Run as a lone file (an image without ddpctl): the modules shipped beside this one that a
    user's script may import (``from ddpctl_trainer.stragglers import Stragglers``), laid out as that
    package under ``protocol.WORKSPACE_HELPERS`` of the workspace; None when this file is the
    installed package's (the image has it all) or the modules are not here."""
    if __package__:
        return None
    here = Path(__file__).resolve().parent
    files = [here / name for name in protocol.WORKSPACE_UNPACKER_FILES if name != "workspace.py"]
    if not all(f.is_file() for f in files):
        return None
    root = target / protocol.WORKSPACE_HELPERS
    package = root / protocol.TRAINER_MODULE
    try:
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            '"""ddpctl\'s helpers for a user\'s own script, shipped with its workspace."""\n'
        )
        for f in files:
            (package / f.name).write_bytes(f.read_bytes())
    except OSError as exc:
        raise WorkspaceError(f"cannot write {package} ({exc.strerror or exc}): mount an emptyDir at {target}") from None
    return root


def report(error: WorkspaceError, termination_log: str = protocol.TERMINATION_LOG) -> int:
    """Say why in one line, on stderr and as the container's termination message (where the file
    exists: in a Kubernetes container); the exit code comes back."""
    line = TAG + " ".join(str(error).split())
    print(line, file=sys.stderr, flush=True)
    if os.path.exists(termination_log):
        try:
            with open(termination_log, "w") as f:
                f.write(line[-4000:] + "\n")
        except OSError:
            pass
    return error.exit_code


def prepare_or_report(env: MutableMapping[str, str] | None = None) -> int:
    """`prepare`, its failure reported: 0, or the exit code the pod must end with."""
    try:
        prepare(env)
    except WorkspaceError as exc:
        return report(exc)
    return protocol.EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """`python3 -m ddpctl_trainer.workspace CMD ARGS...`: set the workspace up, then become CMD
    (exec: its exit code is the pod's)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    code = prepare_or_report()
    if code:
        return code
    if not args:
        return protocol.EXIT_OK
    try:
        os.execvp(args[0], args)  # noqa: S606 - the pod's own command, by argv, no shell
    except OSError as exc:
        return report(WorkspaceError(f"cannot run {args[0]!r} ({exc.strerror})"))


if __name__ == "__main__":
    sys.exit(main())
