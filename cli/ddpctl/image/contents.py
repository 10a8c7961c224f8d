"""What a local image holds: its ID, WORKDIR and labels, and whether a path is in it.

`submit` asks, before anything is created, whether the file torchrun will run (the image's WORKDIR
plus `--script`) is in the image, when the image is in the local engine: `image inspect` for its
ID, WORKDIR and labels, then `create` (a container that is never started, from the local image
only: nothing is pulled) and `cp` of that one path, answered from a cache by image ID (an ID names
immutable content), so a second submit of the same image asks the engine once. An image that is
not local (in a registry only) is not pulled: the caller is told it was not checked, and goes on.

Nothing here imports torch or kubernetes.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path

from ddpctl.errors import UsageError
from ddpctl.records import record

ENGINES = ("docker", "podman")
WORKSPACE_LABEL = "io.ddpctl.workspace.sha256"  # the folder's code an image `ddpctl build` made carries
FOLDER_LABEL = "io.ddpctl.workspace.folder"  # which folder that was: `folder_id` of its path
TIMEOUT_S = 60


@record
class LocalImage:
    """An image in the local engine, as `image inspect` describes it."""

    engine: str
    name: str
    id: str
    workdir: str  # "/" when the image sets none: where the pod's command runs
    labels: dict[str, str] = field(default_factory=dict)
    env: tuple[str, ...] = ()  # KEY=VALUE, as the image sets them (PATH says where its Python is)

    def path_of(self, relative: str) -> str:
        """Where a relative path given to torchrun or python is found in a container of this image."""
        return posixpath.normpath(posixpath.join(self.workdir, relative))


def folder_id(folder: Path) -> str:
    """A folder's identity in an image's label: a hash of its absolute path (the path itself, a
    user's home among it, stays on the machine), so that `submit` compares the label with the
    version of the folder that was built, wherever below it it runs."""
    import hashlib

    return hashlib.sha256(str(folder.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def local_engine(path: str | None = None) -> str | None:
    """The first of docker and podman on PATH (None: neither)."""
    return next((e for e in ENGINES if shutil.which(e, path=path) is not None), None)


def _run(argv: list[str], *, keep_stdout: bool = True) -> subprocess.CompletedProcess[bytes] | None:
    """`argv`'s result (stdout dropped unless `keep_stdout`), None when it could not be run in time."""
    try:
        return subprocess.run(
            argv,
            stdout=subprocess.PIPE if keep_stdout else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            timeout=TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def inspect(engine: str, image: str) -> LocalImage | None:
    """The image in `engine`'s local store, or None when it is not there (or the engine does not answer)."""
    proc = _run([engine, "image", "inspect", "--format", "{{json .}}", image])
    if proc is None or proc.returncode != 0:
        return None
    try:
        data = json.loads(proc.stdout.decode("utf-8", "replace").splitlines()[0])
    except (ValueError, IndexError):
        return None
    config = data.get("Config") or {}
    return LocalImage(
        engine=engine,
        name=image,
        id=str(data.get("Id") or ""),
        workdir=str(config.get("WorkingDir") or "/"),
        labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
        env=tuple(str(e) for e in (config.get("Env") or ())),
    )


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ddpctl" / "image-paths.json"


def _cached() -> dict[str, object]:
    """What was learnt of local images, by image ID: whether a path is there (a bool), the packages
    and torch versions it holds (a dict)."""
    try:
        data = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): v for k, v in data.items()} if isinstance(data, dict) else {}


def _remember(key: str, value: bool | dict[str, str]) -> None:
    from ddpctl.atomic import write_text_atomic

    known = _cached()
    known[key] = value
    try:
        write_text_atomic(cache_file(), json.dumps(known, sort_keys=True, indent=0) + "\n")
    except OSError:
        pass  # a cache that cannot be written costs a second look next time, nothing else


def has_path(image: LocalImage, path: str) -> bool | None:
    """Whether the absolute `path` is in the image: a container created (never started) from the
    local image and `cp` of that path; None when the engine could not say. Cached by image ID."""
    key = f"{image.id}\0{path}"
    known = _cached().get(key)
    if image.id and isinstance(known, bool):
        return known
    with _Container(image) as box:
        if box is None:
            return None
        copied = _run([image.engine, "cp", f"{box.id}:{path}", "-"], keep_stdout=False)
    if copied is None:
        return None
    # cp answers "Could not find the file" (docker) or "no such file or directory" (podman) for a path not there
    present = copied.returncode == 0
    if not present and not _says_missing(copied.stderr):
        return None
    if image.id:
        _remember(key, present)
    return present


def _says_missing(stderr: bytes) -> bool:
    text = stderr.decode("utf-8", "replace").lower()
    return "could not find" in text or "no such file" in text or "not found" in text


@record
class Wanted:
    """The job's code, as the pods will look for it: the flag that names it and the relative path."""

    flag: str  # --script, --command
    relative: str  # as given: relative to the image's WORKDIR, or absolute

    @property
    def where(self) -> str:
        return self.relative if self.relative.startswith("/") else f"{self.relative} in its WORKDIR"


def check_code_in_image(
    image: str,
    wanted: Wanted,
    *,
    folder_hash: Callable[[dict[str, str]], str],
    engine: str | None = None,
) -> list[str]:
    """What `submit` says of the user's own image before anything is created: notes (not checked:
    not local; an older version of the folder's code), or UsageError when the local image lacks
    the file the pods would run (exit 2, naming the image, its WORKDIR and the path looked for)."""
    chosen = engine or local_engine()
    if chosen is None:
        return [f"note: no docker or podman here: whether the image {image} holds {wanted.relative} was not checked"]
    found = inspect(chosen, image)
    if found is None:
        return [
            f"note: the image {image} is not in the local {chosen} engine: whether it holds {wanted.where} was "
            "not checked"
        ]
    path = found.path_of(wanted.relative)
    present = has_path(found, path)
    if present is None:
        return [f"note: {chosen} could not look into the image {image}: whether it holds {path} was not checked"]
    if not present:
        if wanted.relative.startswith("/"):
            raise UsageError(
                f'{wanted.flag}: the image {image} has no {path}: the pods would fail with "No such file"; copy the '
                "file there in its Dockerfile, pass the path it has in the image, or ship the folder with "
                "--workspace . and a relative path"
            )
        raise UsageError(
            f"{wanted.flag}: the image {image} has no {path} (its WORKDIR {found.workdir} + {wanted.relative}): the "
            f'pods would fail with "No such file"; copy the file there in its Dockerfile (COPY . {found.workdir}/), '
            "pass the path it has in the image, or ship the folder with --workspace ."
        )
    carried = found.labels.get(WORKSPACE_LABEL, "")
    if carried:
        current = folder_hash(found.labels)  # "": the folder built is not here to compare
        if current and carried != current:
            return [
                f"warning: the image {image} carries an older version of this folder's code (workspace "
                f"{carried[:12]}, now {current[:12]}): the pods would run the old {wanted.relative}; rebuild it "
                "(ddpctl build), or ship the folder with --workspace ."
            ]
    return []


# --------------------------------------------------------------------------------------------
# What Python packages a local image holds: its site-packages' distribution names
# --------------------------------------------------------------------------------------------

LIST_TIMEOUT_S = 300  # a site-packages of CUDA wheels streams gigabytes through `cp`, once per image ID
_SITE = re.compile(r"^lib/(python3(?:\.\d+)?)/(site|dist)-packages/?$")
_DIST = re.compile(r"^(?P<name>[^/-]+)(?:-(?P<version>[^/-]+))?(?:-py\d[^/]*)?\.(?:dist-info|egg-info|egg-link)/?$")
_VERSION = re.compile(r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.MULTILINE)


def prefixes(image: LocalImage) -> list[str]:
    """Where the image's Pythons may live, best first: the environments its PATH names (a venv's,
    conda's bin), VIRTUAL_ENV and CONDA_PREFIX, then /usr/local and /usr."""
    env = dict(e.split("=", 1) for e in image.env if "=" in e)
    found = [env.get("VIRTUAL_ENV", ""), env.get("CONDA_PREFIX", "")]
    bins = [p.rstrip("/") for p in env.get("PATH", "").split(":")]
    found += [posixpath.dirname(p) for p in bins if p.endswith("/bin")]
    found += ["/usr/local", "/usr"]
    return [p for p in dict.fromkeys(posixpath.normpath(p) for p in found if p.startswith("/")) if p != "/"]


class _Container:
    """A container created (never started) from a local image, to copy paths out of; removed on exit."""

    def __init__(self, image: LocalImage) -> None:
        self.image = image
        self.id = ""

    def __enter__(self) -> _Container | None:
        image = self.image.id or self.image.name
        created = _run([self.image.engine, "create", "--pull", "never", image, "ddpctl-never-started"])
        if created is None or created.returncode != 0:
            return None
        self.id = created.stdout.decode().strip().splitlines()[-1]
        return self

    def __exit__(self, *exc: object) -> None:
        if self.id:
            _run([self.image.engine, "rm", "--force", self.id])

    def read(self, path: str) -> bytes | None:
        """The bytes of the file `path` (None: not there, or not a file)."""
        import io
        import tarfile

        proc = _run([self.image.engine, "cp", f"{self.id}:{path}", "-"])
        if proc is None or proc.returncode != 0:
            return None
        try:
            with tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:") as tar:
                member = tar.next()
                f = tar.extractfile(member) if member is not None and member.isfile() else None
                return f.read() if f is not None else None
        except tarfile.TarError:
            return None

    def walk(self, path: str, keep: Callable[[str], bool | None]) -> bool:
        """Stream `cp` of the folder `path` (entries named from its last part down, in the engine's
        order: by name, a folder before its contents), calling `keep` with each entry's name; `keep`
        answering None stops the stream (and the copy). False: the engine could not copy it."""
        import tarfile
        import threading

        argv = [self.image.engine, "cp", f"{self.id}:{path}", "-"]
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        except OSError:
            return False
        timer = threading.Timer(LIST_TIMEOUT_S, proc.kill)
        timer.start()
        assert proc.stdout is not None
        complete = True
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|", bufsize=1 << 20) as tar:
                while (member := tar.next()) is not None:
                    tar.members.clear()  # type: ignore[attr-defined]  # a stream of many entries: keep none
                    if keep(member.name.rstrip("/") + ("/" if member.isdir() else "")) is None:
                        complete = False
                        break
        except tarfile.TarError:
            pass  # nothing (the path is not there) or a stream cut short: said by the exit code
        finally:
            if not complete:
                proc.kill()
            proc.stdout.close()
            code = proc.wait()
            timer.cancel()
        return not complete or code == 0


def _site_dirs(box: _Container) -> list[str]:
    """The site-packages (and Debian's dist-packages) folders under the image's prefixes."""
    found: list[str] = []
    for prefix in prefixes(box.image):
        found += _sites_under(box, prefix)
    return list(dict.fromkeys(found))


def _sites_under(box: _Container, prefix: str) -> list[str]:
    """`prefix`/lib/python3*/{site,dist}-packages: lib/ is streamed by name until its python3*
    folders are passed, and stops at the first entry inside a site folder (what is below it is
    listed by `installed`): the standard library is read past, not the packages."""
    here: list[str] = []

    def keep(name: str) -> bool | None:
        parts = name.rstrip("/").split("/")
        if len(parts) >= 2 and parts[1] > "python3" and not parts[1].startswith("python3"):
            return None  # past python3*: lib/ is sent by name
        if _SITE.match(name):
            here.append(name.rstrip("/"))
            return True
        if here and len(parts) > 3 and name.startswith(here[-1] + "/"):
            return None
        return True

    box.walk(f"{prefix}/lib", keep)
    return [f"{prefix}/{rel}" for rel in here]


def _packages_in(box: _Container, site: str) -> dict[str, str] | None:
    """{canonical name: version} of the distributions in `site`; None when the copy failed."""
    from packaging.utils import canonicalize_name

    held: dict[str, str] = {}

    def keep(name: str) -> bool:
        parts = name.rstrip("/").split("/")
        if len(parts) == 2:
            match = _DIST.match(parts[1] + ("/" if name.endswith("/") else ""))
            if match:
                held.setdefault(canonicalize_name(match.group("name")), match.group("version") or "")
        return True

    return held if box.walk(site, keep) else None


def _cached_facts(key: str) -> dict[str, str] | None:
    value = _cached().get(key)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else None


def installed(image: LocalImage) -> dict[str, str] | None:
    """{canonical name: version ("" when its folder names none)} of the Python distributions in
    the image's site-packages, read from their `*.dist-info`/`*.egg-info` folders' names by `cp`
    out of a container created (never started) from the local image; cached by image ID. None: the
    engine could not say."""
    key = f"{image.id}\0packages"
    if image.id and (known := _cached_facts(key)) is not None:
        return known
    with _Container(image) as box:
        if box is None:
            return None
        held: dict[str, str] = {}
        complete = True
        for site in _site_dirs(box):
            listed = _packages_in(box, site)
            complete = complete and listed is not None
            for name, version in (listed or {}).items():
                held.setdefault(name, version)
    if image.id and complete:  # a listing cut short (the engine failed, the time ran out) is not kept
        _remember(key, held)
    return held


def torch_versions(image: LocalImage) -> dict[str, str]:
    """{"torch": ..., "torchvision": ...} as the image's torch/version.py and
    torchvision/version.py say (`__version__`, local suffix kept), by `cp` of those two files from
    its site-packages; cached by image ID. Empty: not found, or the engine could not say."""
    key = f"{image.id}\0torch"
    if image.id and (known := _cached_facts(key)) is not None:
        return known
    versions: dict[str, str] = {}
    with _Container(image) as box:
        if box is None:
            return {}
        for site in _site_dirs(box):
            for name in ("torch", "torchvision"):
                if name in versions:
                    continue
                text = box.read(f"{site}/{name}/version.py")
                match = _VERSION.search(text.decode("utf-8", "replace")) if text is not None else None
                if match:
                    versions[name] = match.group(1)
            if "torch" in versions:
                break
    if image.id:
        _remember(key, versions)
    return versions


def built_folder_version(labels: Mapping[str, str], cwd: Path | None = None) -> str:
    """The current version (`version_of`) of the folder an image's labels say it was built from:
    the current folder or the one above it that `folder_id` names (a build with --context .., a
    submit from a subfolder); "" when it is neither (built elsewhere: nothing to compare). An
    image labelled before the folder was named: the current folder's."""
    from ddpctl.workspace.pack import version_of

    cwd = (cwd or Path.cwd()).resolve()
    wanted = labels.get(FOLDER_LABEL, "")
    if not wanted:
        return version_of(cwd)
    return next((version_of(f) for f in (cwd, *cwd.parents) if folder_id(f) == wanted), "")
