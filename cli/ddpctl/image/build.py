"""`ddpctl build`: the trainer image from the repo's Dockerfile, tagged by what went into it.

The tag is a content hash of the build context as the engine sees it (the files left after
`.dockerignore`, their paths and exec bits) plus the Dockerfile and the build args, so the same
sources always give the same tag and any change gives a new one (no stale `:latest` on nodes).
The builder is docker, podman or buildah: auto-detected, or chosen with --builder.

Nothing here imports torch or kubernetes.
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.errors import RuntimeFailure, UsageError
from ddpctl.records import record

if TYPE_CHECKING:
    pass

BUILDERS = ("docker", "podman", "buildah")
DEFAULT_REPO = "ddpctl-trainer"
TAIL_LINES = 15
HASH_LEN = 12


# --------------------------------------------------------------------------------------------
# .dockerignore and the content hash
# --------------------------------------------------------------------------------------------


@record
class IgnoreRule:
    pattern: re.Pattern[str]
    exclude: bool  # False for `!pattern` (an exception)
    literal: str = ""  # the pattern's text before its first wildcard

    def may_reinclude_under(self, directory: str) -> bool:
        """Could this exception bring back something below `directory`?"""
        return not self.exclude and (
            self.literal.startswith(directory + "/") or (directory + "/").startswith(self.literal)
        )


def _glob_to_regex(pattern: str) -> str:
    """Docker's .dockerignore syntax (Go filepath.Match plus `**`) as a regex over '/' paths."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = pattern.find("]", i)
            if end == -1:
                out.append(re.escape(ch))
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                if body.startswith(("^", "!")):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end
        elif ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 1
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def parse_dockerignore(text: str) -> list[IgnoreRule]:
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclude = not line.startswith("!")
        if not exclude:
            line = line[1:].strip()
        line = os.path.normpath(line).replace(os.sep, "/").lstrip("/")
        if line in (".", ""):
            continue
        # A pattern that names a directory covers everything beneath it.
        literal = re.split(r"[*?\[\\]", line, maxsplit=1)[0]
        rules.append(IgnoreRule(re.compile(f"^{_glob_to_regex(line)}(?:/.*)?$"), exclude, literal))
    return rules


def is_ignored(rel: str, rules: Sequence[IgnoreRule]) -> bool:
    """The last rule that matches decides, as in Docker."""
    ignored = False
    for rule in rules:
        if rule.pattern.match(rel):
            ignored = rule.exclude
    return ignored


def context_files(context: Path, rules: Sequence[IgnoreRule]) -> list[str]:
    """Paths (relative, '/'-separated, sorted) of the regular files the engine will receive."""
    files = []
    for root, dirs, names in os.walk(context):
        rel_root = Path(root).relative_to(context).as_posix()
        rel_root = "" if rel_root == "." else rel_root + "/"
        # Skip ignored directories (.git, .venv) unless an exception could re-include a file below.
        dirs[:] = sorted(
            d
            for d in dirs
            if not (is_ignored(rel_root + d, rules) and not any(r.may_reinclude_under(rel_root + d) for r in rules))
        )
        for name in sorted(names):
            rel = rel_root + name
            path = Path(root) / name
            if path.is_file() and not path.is_symlink() and not is_ignored(rel, rules):
                files.append(rel)
    return sorted(files)


def content_hash(
    context: Path, dockerfile: Path, build_args: Mapping[str, str], labels: Mapping[str, str] | None = None
) -> tuple[str, int]:
    """sha256 over the context files (path, exec bit, bytes), the Dockerfile, the build args and
    the labels. Returns (hex digest, number of files)."""
    ignore = context / ".dockerignore"
    rules = parse_dockerignore(ignore.read_text()) if ignore.is_file() else []
    files = context_files(context, rules)
    digest = hashlib.sha256()
    for rel in files:
        path = context / rel
        digest.update(f"file\0{rel}\0{int(os.access(path, os.X_OK))}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    digest.update(b"dockerfile\0" + dockerfile.read_bytes())
    for key in sorted(build_args):
        digest.update(f"arg\0{key}={build_args[key]}\0".encode())
    for key in sorted(labels or {}):
        digest.update(f"label\0{key}={(labels or {})[key]}\0".encode())
    return digest.hexdigest(), len(files)


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------


def _which(name: str, path: str | None = None) -> str | None:
    return shutil.which(name, path=path)


def detect_builder(choice: str | None, path: str | None = None) -> str:
    """The builder to use: the one asked for (it must exist) or the first of docker, podman,
    buildah found on PATH."""
    if choice and choice != "auto":
        if choice not in BUILDERS:
            raise UsageError(f"--builder: {choice!r} is not one of {', '.join(BUILDERS)}; choose one of them or auto")
        if _which(choice, path) is None:
            raise RuntimeFailure(
                f"--builder {choice}: {choice} is not installed (not on PATH); install it (Docker: bash "
                "scripts/install-docker.sh) or choose another builder"
            )
        return choice
    for name in BUILDERS:
        if _which(name, path) is not None:
            return name
    raise RuntimeFailure(
        "no container builder found: install docker, podman or buildah (Docker: bash scripts/install-docker.sh), or "
        "pass --builder"
    )


def engine_answers(engine: str) -> str | None:
    """None when the engine works; else why not (one line). buildah needs no daemon."""
    if engine == "buildah":
        return None
    try:
        proc = subprocess.run([engine, "info", "--format", "{{json .}}"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{engine} info failed: {exc}"
    if proc.returncode != 0:
        text = " ".join((proc.stderr or proc.stdout).split())
        return text[:300] or f"{engine} info exited with {proc.returncode}"
    return None


def require_engine(engine: str) -> None:
    problem = engine_answers(engine)
    if problem:
        hint = (
            "start it (sudo systemctl start docker, or bash scripts/install-docker.sh)"
            if engine == "docker"
            else f"check `{engine} info`"
        )
        raise RuntimeFailure(f"the {engine} engine does not answer: {problem}; {hint}")


@record
class BuildPlan:
    builder: str
    context: Path
    dockerfile: Path
    repo: str
    digest: str
    files: int
    build_args: Mapping[str, str]
    extra_tags: tuple[str, ...] = ()
    fixed_tag: str = ""  # the tag, when not the content hash's first HASH_LEN hex (a workspace build's)
    labels: Mapping[str, str] = field(default_factory=dict)  # --label KEY=VALUE

    @property
    def tag(self) -> str:
        return f"{self.repo}:{self.fixed_tag or self.digest[:HASH_LEN]}"

    @property
    def tags(self) -> tuple[str, ...]:
        return (self.tag,) + self.extra_tags

    def argv(self) -> list[str]:
        sub = ["bud"] if self.builder == "buildah" else ["build"]
        cmd = [self.builder, *sub, "-f", str(self.dockerfile)]
        for tag in self.tags:
            cmd += ["-t", tag]
        for key in sorted(self.build_args):
            cmd += ["--build-arg", f"{key}={self.build_args[key]}"]
        for key in sorted(self.labels):
            cmd += ["--label", f"{key}={self.labels[key]}"]
        # A failed step must not leave its intermediate container behind.
        cmd += ["--layers"] if self.builder == "buildah" else ["--force-rm"]
        cmd.append(str(self.context))
        return cmd


_REPO = re.compile(r"^[a-z0-9]+([._-]+[a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$")


def repo_of(image: str) -> str:
    """`registry:5000/team/trainer:1.0` -> `registry:5000/team/trainer` (digest and tag dropped)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return name


def parse_build_args(items: Iterable[str]) -> dict[str, str]:
    args: dict[str, str] = {}
    for item in items:
        key, found, value = item.partition("=")
        if not found or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise UsageError(f"--build-arg: {item!r} is not KEY=VALUE; e.g. --build-arg PIP_PACKAGES=tqdm")
        args[key] = value
    return args


def check_builder_name(builder: str | None) -> None:
    if builder not in (None, "auto", *BUILDERS):
        raise UsageError(f"--builder: {builder!r} is not one of {', '.join(BUILDERS)}; choose one of them or auto")


def plan_build(
    *,
    builder: str | None,
    dockerfile: Path | None,
    context: Path | None,
    repo: str,
    build_args: Mapping[str, str],
    base_image: str | None,
    latest: bool,
    path: str | None = None,
    tag: str = "",
    labels: Mapping[str, str] | None = None,
) -> BuildPlan:
    """Resolve the builder, files and tag. Reads files; starts nothing."""
    check_builder_name(builder)
    if context is None:
        context = dockerfile.parent if dockerfile is not None else Path.cwd()
    context = context.resolve()
    dockerfile = (dockerfile or context / "Dockerfile").resolve()
    if not context.is_dir():
        raise UsageError(f"--context: {context} is not a directory")
    if not dockerfile.is_file():
        raise UsageError(f"no Dockerfile at {dockerfile}; run ddpctl build in the project's root or pass --file PATH")
    if not _REPO.match(repo):
        raise UsageError(
            f"--repo: {repo!r} is not an image repository; use lowercase names like 'registry.example.com/team/trainer'"
        )
    args = dict(build_args)
    if base_image is not None:
        if not base_image or any(c.isspace() for c in base_image):
            raise UsageError(f"--base-image: {base_image!r} is not an image reference")
        args["BASE_IMAGE"] = base_image
    chosen = detect_builder(builder, path)
    digest, files = content_hash(context, dockerfile, args, labels)
    extra = (f"{repo}:latest",) if latest else ()
    return BuildPlan(chosen, context, dockerfile, repo, digest, files, args, extra, tag, dict(labels or {}))


def _stream(
    cmd: Sequence[str], echo: Callable[[str], None] | None, env: Mapping[str, str] | None = None
) -> tuple[int, list[str]]:
    """Run `cmd`, echoing each line; returns (exit code, the last lines)."""
    tail: collections.deque[str] = collections.deque(maxlen=200)
    try:
        proc = subprocess.Popen(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
        )
    except OSError as exc:
        raise RuntimeFailure(f"cannot run {cmd[0]}: {exc.strerror or exc}") from None
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            if echo is not None:
                echo(line)
        code = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    return code, list(tail)


def _last_error_line(lines: Sequence[str]) -> str:
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith(("Removing intermediate", "---> ", " ---> ")):
            return " ".join(text.split())[:300]
    return "no output"


def _fail(what: str, code: int, tail: Sequence[str], quiet: bool) -> RuntimeFailure:
    """The log tail on stderr (when it was not streamed already), then one line."""
    if quiet and tail:
        sys.stderr.write("".join(f"  | {line}\n" for line in tail[-TAIL_LINES:]))
        sys.stderr.flush()
    return RuntimeFailure(f"{what} failed (exit code {code}): {_last_error_line(tail)}")


def run_build(plan: BuildPlan, *, quiet: bool = False, echo: Callable[[str], None] | None = None) -> str:
    """Build (and tag) the image; returns the content-hash tag. A failure raises one line."""
    require_engine(plan.builder)
    env = dict(os.environ)
    code, tail = _stream(plan.argv(), None if quiet else echo, env)
    if code != 0:
        raise _fail(
            f"{plan.builder} build of {plan.dockerfile.name}{_failed_step(tail, plan.build_args)}", code, tail, quiet
        )
    return plan.tag


_STEP = re.compile(r"^(?:STEP |Step )(\d+/\d+)\s*:\s*(.*)$|^#\d+ \[[^\]]*\] (.*)$")


def _failed_step(lines: Sequence[str], args: Mapping[str, str]) -> str:
    """' at step 2/13 (FROM ddpctl-base:cpu)': the last step the builder started, args filled in."""
    for line in reversed(lines):
        match = _STEP.match(line.strip())
        if match:
            number, text = (match.group(1), match.group(2)) if match.group(1) else ("", match.group(3))
            text = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: args.get(m.group(1), m.group(0)), text)
            text = " ".join(text.split())[:120]
            return f" at step {number} ({text})" if number else f" at ({text})"
    return ""


def push(builder: str, tags: Sequence[str], *, quiet: bool = False, echo: Callable[[str], None] | None = None) -> None:
    for tag in tags:
        code, tail = _stream([builder, "push", tag], None if quiet else echo)
        if code != 0:
            raise _fail(f"{builder} push {tag}", code, tail, quiet)


def build_and_publish(
    plan: BuildPlan,
    *,
    push_tags: bool = False,
    kind_cluster: str | None = None,
    quiet: bool = False,
    echo: Callable[[str], None] | None = None,
) -> str:
    """Build, then optionally push and load into kind: what `ddpctl build` and `submit --build` do."""
    if kind_cluster:
        require_kind()  # before a build that would be wasted
    tag = run_build(plan, quiet=quiet, echo=echo)
    if push_tags:
        push(plan.builder, plan.tags, quiet=quiet, echo=echo)
    if kind_cluster:
        load_kind(plan.builder, tag, kind_cluster, quiet=quiet, echo=echo)
    return tag


def require_kind() -> None:
    if _which("kind") is None:
        raise RuntimeFailure(
            "--load-kind: kind is not installed (not on PATH); install it (see docs/kind.md), or push the image with "
            "--push"
        )


def load_kind(
    builder: str, tag: str, cluster: str, *, quiet: bool = False, echo: Callable[[str], None] | None = None
) -> None:
    """Copy the image onto the nodes of the kind cluster `cluster` (no registry needed)."""
    require_kind()
    if builder == "docker":
        cmd = ["kind", "load", "docker-image", tag, "--name", cluster]
        code, tail = _stream(cmd, None if quiet else echo)
    else:
        with tempfile.TemporaryDirectory(prefix="ddpctl-kind-") as tmp:
            archive = Path(tmp) / "image.tar"
            code, tail = _stream(
                [
                    builder,
                    "push" if builder == "buildah" else "save",
                    *([tag, f"docker-archive:{archive}:{tag}"] if builder == "buildah" else ["-o", str(archive), tag]),
                ],
                None if quiet else echo,
            )
            if code == 0:
                code, tail = _stream(
                    ["kind", "load", "image-archive", str(archive), "--name", cluster], None if quiet else echo
                )
    if code != 0:
        raise _fail(f"kind load into cluster {cluster}", code, tail, quiet)


def image_exists(engine: str, image: str) -> bool:
    try:
        proc = subprocess.run([engine, "image", "inspect", image], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0
