"""A project's requirements as `ddpctl build` installs them, and what an image's torch allows.

requirements.txt is read as pip reads it (continuation lines, comments, `-r`/`-c` includes relative
to the including file) and split three ways: the lines the dependency layer installs (flattened
into one generated file, so the layer is cached by the requirements' content alone), the
constraints (`-c` files, flattened into a second one), and the local paths (`-e .`, `./pkg`,
`file:` paths), installed after the code layer, where their files are. An include that is missing,
a URL or outside the project, and a local path that is missing or outside the project, are one-line
errors naming the file and line.

A pin of torch or torchvision that the base image's version does not satisfy is refused: pip would
replace the image's torch (a multi-GB download, and an ABI the image's other wheels were not built
for). ddpctl's own images' torch is known here (scripts/torch-version.env; a test holds them equal);
another image's is read from the local engine, asked only when there is a pin: its `io.ddpctl.torch`
label, else the `__version__` of its torch/version.py and torchvision/version.py, copied out of a
container created (never started) from it and cached by image ID (`contents.torch_versions`).

Nothing here imports torch or kubernetes; `packaging` is imported where a version is compared.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.errors import UsageError
from ddpctl.records import record
from ddpctl_trainer.protocol import WORKSPACE_DIR  # where the code layer puts the project

if TYPE_CHECKING:
    from packaging.requirements import Requirement

REQUIREMENTS = "requirements.txt"
TORCH_VERSION = "2.14.1"  # scripts/torch-version.env: the torch of ddpctl's base and trainer images
TORCHVISION_VERSION = "0.29.1"
TORCH_LABEL = "io.ddpctl.torch"  # "torch 2.14.1, torchvision 0.29.1", set by scripts/make-base-image.sh
CHECKED = ("torch", "torchvision")
OUR_REPOS = ("ddpctl-trainer", "ddpctl-base")
# What ddpctl's trainer image holds: the train extra (torch, torchvision, tqdm) and what torch and
# torchvision install with them.
TRAINER_PACKAGES = (
    "torch", "torchvision", "tqdm", "numpy", "pillow", "filelock", "typing-extensions", "sympy", "mpmath",
    "networkx", "jinja2", "markupsafe", "fsspec", "setuptools", "pip",
)  # fmt: skip

_INCLUDE = re.compile(r"^(?:(-r|-c)\s*=?\s*|(--requirement|--constraint)(?:\s*=\s*|\s+))(\S.*)$")
_EDITABLE = re.compile(r"^(?:-e|--editable)(?:\s*=\s*|\s+|(?=[./~]))(\S.*)$")
_COMMENT = re.compile(r"(^|\s+)#.*$")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


@record
class Line:
    """A requirement as written: the file (relative to the project) and line it came from."""

    file: str
    number: int  # 0: pyproject.toml's [project] dependencies
    text: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.number}" if self.number else f"{self.file} ([project] dependencies)"


@record
class Requirements:
    """A project's requirements, split as the build installs them."""

    install: tuple[str, ...] = ()  # the dependency layer's lines: named requirements, URLs, options
    constraints: tuple[str, ...] = ()  # the `-c` files' lines
    local: tuple[str, ...] = ()  # local paths, rewritten to where the code layer puts them
    named: tuple[Line, ...] = field(default=(), compare=False)  # every requirement with a name, for the checks
    files: tuple[str, ...] = field(default=(), compare=False)  # the files read, relative to the project


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each of pip's lines: `\\` continues a line, `#` starts a comment."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        joined = " ".join(_COMMENT.sub("", pending + line).split())  # pip joins the lines; spaces are one
        pending = ""
        if joined:
            out.append((start, joined))
    if pending.strip():
        out.append((start, " ".join(_COMMENT.sub("", pending).split())))
    return out


class _Reader:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.install: list[str] = []
        self.constraints: list[str] = []
        self.local: list[str] = []
        self.named: list[Line] = []
        self.seen: list[str] = []

    def rel(self, path: Path) -> str:
        return path.relative_to(self.folder).as_posix()

    def inside(self, path: Path) -> bool:
        return path == self.folder or path.is_relative_to(self.folder)

    def read(self, path: Path, *, constraint: bool) -> None:
        rel = self.rel(path)
        if rel in self.seen:
            return  # an include cycle, or a file included twice: pip reads it once for what it adds
        self.seen.append(rel)
        for number, text in logical_lines(path.read_text(encoding="utf-8")):
            self.line(path, Line(rel, number, text), constraint=constraint)

    def line(self, path: Path, line: Line, *, constraint: bool) -> None:
        text = line.text
        include = _INCLUDE.match(text)
        if include:
            flag = include.group(1) or include.group(2)
            target = include.group(3).strip().strip("'\"")
            self.include(path, line, target, constraint=flag in ("-c", "--constraint"))
            return
        editable = _EDITABLE.match(text)
        if editable:
            target = editable.group(1).strip()
            if _URL.match(target) and not target.lower().startswith("file:"):
                self.add(line, text, constraint=constraint)  # an editable VCS URL: the dependency layer's
            else:
                self.add_local(line, "-e " + self.local_path(line, target), constraint=constraint)
            return
        if text.startswith("-"):
            self.install.append(text)  # a global option (--index-url, --pre, ...): both installs need it
            return
        if is_local(text, self.folder):
            self.add_local(line, self.local_path(line, text), constraint=constraint)
            return
        self.add(line, text, constraint=constraint)
        if _NAME.match(text):
            self.named.append(line)

    def include(self, path: Path, line: Line, target: str, *, constraint: bool) -> None:
        what = "constraints" if constraint else "requirements"
        if _URL.match(target):
            raise UsageError(
                f"{line.where}: {line.text}: a {what} file at a URL is not fetched by ddpctl build; save it in the "
                "project folder and include it by its path"
            )
        found = (path.parent / target).resolve()
        if not self.inside(found):
            raise UsageError(
                f"{line.where}: {line.text}: {target} is outside the project folder {self.folder}, so it is not in "
                "the build; copy it into the folder and include it from there"
            )
        if not found.is_file():
            raise UsageError(f"{line.where}: {line.text}: no {what} file {self.rel(found)} in {self.folder}")
        self.read(found, constraint=constraint)

    def add(self, line: Line, text: str, *, constraint: bool) -> None:
        (self.constraints if constraint else self.install).append(text)

    def add_local(self, line: Line, text: str, *, constraint: bool) -> None:
        if constraint:
            raise UsageError(f"{line.where}: {line.text}: a local path cannot be a constraint; move it to requirements")
        self.local.append(text)

    def local_path(self, line: Line, text: str) -> str:
        """`text` with its path (relative to the project folder, as pip run there reads it) made the
        path it has in the image; a path outside the project, or missing, is an error."""
        body, sep, rest = _split_tail(text)
        direct = "@" in body and not body.startswith((".", "/", "~"))
        name, at, target = body.partition("@") if direct else ("", "", body)
        target = target.strip()
        scheme = ""
        if target.lower().startswith("file:"):
            scheme, target = "file://", re.sub(r"^file:(//(localhost)?)?", "", target, flags=re.IGNORECASE)
        bracket = re.search(r"\[[^\]]*\]$", target)
        path_text, extras = (target[: bracket.start()], bracket.group(0)) if bracket else (target, "")
        found = (self.folder / Path(path_text).expanduser()).resolve()
        if not self.inside(found):
            raise UsageError(
                f"{line.where}: {line.text}: {path_text} is outside the project folder {self.folder}, so it is not in "
                "the build; move it into the folder, or install it from a package index"
            )
        if not found.exists():
            raise UsageError(f"{line.where}: {line.text}: no {path_text} in {self.folder}")
        relative = self.rel(found)
        image_path = WORKSPACE_DIR if relative == "." else f"{WORKSPACE_DIR}/{relative}"
        if scheme:
            image_path = scheme + image_path
        head = f"{name.strip()} @ " if at else ""
        return f"{head}{image_path}{extras}{sep}{rest}"


def _split_tail(text: str) -> tuple[str, str, str]:
    """(requirement, separator, the rest): the markers (`; ...`) and per-line options kept apart."""
    match = re.search(r"\s*;|\s+--?[A-Za-z]", text)
    if match is None:
        return text, "", ""
    return text[: match.start()], text[match.start() : match.end()], text[match.end() :]


def is_local(text: str, folder: Path) -> bool:
    """Whether a requirement line names a local path, as pip tells one: a `file:` URL, a path
    (it starts with `.`, `/` or `~`, or holds a `/` without being a URL), or an archive that exists."""
    body = _split_tail(text)[0].strip()
    if re.search(r"@\s*file:", body, re.IGNORECASE) or body.lower().startswith("file:"):
        return True
    if _URL.match(body) or "@" in body:
        return False
    if body.startswith((".", "/", "~")) or "/" in body or "\\" in body:
        return True
    return body.endswith((".whl", ".zip", ".tar.gz", ".tar.bz2")) and (folder / body).is_file()


def pyproject_dependencies(folder: Path) -> tuple[str, ...]:
    """pyproject.toml's [project] dependencies (none without the file)."""
    import tomllib

    project = folder / "pyproject.toml"
    if not project.is_file():
        return ()
    try:
        data = tomllib.loads(project.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"pyproject.toml: {exc}; fix it, or remove it from the project folder") from None
    listed = (data.get("project") or {}).get("dependencies") or []
    return tuple(str(d) for d in listed if isinstance(d, str))


def read_requirements(folder: Path, pyproject_deps: tuple[str, ...] = ()) -> Requirements:
    """`folder`'s requirements.txt with its includes, and pyproject.toml's [project] dependencies."""
    folder = folder.resolve()
    reader = _Reader(folder)
    top = folder / REQUIREMENTS
    if top.is_file():
        reader.read(top, constraint=False)
    for dep in pyproject_deps:
        reader.install.append(dep)
        reader.named.append(Line("pyproject.toml", 0, dep))
    return Requirements(
        tuple(dict.fromkeys(reader.install)),
        tuple(dict.fromkeys(reader.constraints)),
        tuple(dict.fromkeys(reader.local)),
        tuple(reader.named),
        tuple(reader.seen),
    )


# --------------------------------------------------------------------------------------------
# torch and torchvision: what the base image has, and whether a pin allows it
# --------------------------------------------------------------------------------------------


def parse_torch_label(text: str) -> dict[str, str]:
    """`torch 2.14.1, torchvision 0.29.1` -> {"torch": "2.14.1", "torchvision": "0.29.1"}."""
    found = {}
    for part in text.split(","):
        name, _, version = part.strip().partition(" ")
        if name and version.strip():
            found[name.lower()] = version.strip()
    return found


def known_torch(image: str) -> dict[str, str] | None:
    """The torch of an image known without asking an engine: ddpctl's own images, and the official
    pytorch/pytorch images (their tag starts with the version). None: not known here."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if last.split(":", 1)[0] in OUR_REPOS:
        return {"torch": TORCH_VERSION, "torchvision": TORCHVISION_VERSION}
    official = re.match(r"^(?:docker\.io/)?(?:library/)?pytorch/pytorch:(\d+\.\d+(?:\.\d+)?)(?:-|$)", name)
    if official:
        return {"torch": official.group(1)}
    return None


def local_torch(image: str) -> dict[str, str] | None:
    """The torch (and torchvision) of a local image: its `io.ddpctl.torch` label, else what its
    torch/version.py and torchvision/version.py say; None when the image is not local or holds no
    torch that can be read."""
    from ddpctl.image.contents import inspect, local_engine, torch_versions

    engine = local_engine()
    found = inspect(engine, image) if engine else None
    if found is None:
        return None
    return parse_torch_label(found.labels.get(TORCH_LABEL, "")) or torch_versions(found) or None


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def allows(specifier: str, version: str) -> bool:
    """Whether a version specifier (`==2.1.0+cpu`, `>=2.4`, `~=2.14`) allows `version`, local
    suffixes (`+cpu`, `+cu121`) ignored on both sides."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        wanted = SpecifierSet(",".join(f"{s.operator}{_public(s.version)}" for s in SpecifierSet(specifier)))
        return wanted.contains(Version(_public(version)), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return True  # what packaging cannot read, pip will judge


def check_torch_pins(
    reqs: Requirements, base: str, *, look_up: Callable[[str], dict[str, str] | None] = local_torch
) -> list[str]:
    """Notes (the base image's torch is not known); UsageError (exit 2) for a pin of torch or
    torchvision the base image's version does not satisfy. The engine is asked only for an image
    ddpctl does not know, and only when there is a pin."""
    pins = [(line, req) for line, req in _parsed(reqs.named) if req.name.lower() in CHECKED and str(req.specifier)]
    if not pins:
        return []
    versions = known_torch(base)
    if versions is None:
        versions = look_up(base) or {}
    notes = []
    for line, req in pins:
        name = req.name.lower()
        have = versions.get(name)
        if have is None:
            notes.append(
                f"note: the {name} of the base image {base} is not known (it is not in the local engine, or holds "
                f"no {name}/version.py ddpctl found): {line.where}'s {line.text} was not checked against it"
            )
            continue
        if not allows(str(req.specifier), have):
            raise UsageError(
                f"{line.where}: {line.text} asks for {name}{req.specifier}, but the base image {base} has {name} "
                f"{have}: pip would replace it (a multi-GB download, and an ABI the image's other wheels were not "
                f"built for); drop the pin (the image's {name} {have} is used), or build on an image with that "
                f"{name}: --base-image IMAGE"
            )
    return notes


def _parsed(lines: tuple[Line, ...]) -> list[tuple[Line, Requirement]]:
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement

    image_env: dict[str, str] = {str(k): str(v) for k, v in default_environment().items()}
    image_env.update(sys_platform="linux", platform_system="Linux", os_name="posix")  # the image's, not this machine's
    out: list[tuple[Line, Requirement]] = []
    for line in lines:
        try:
            text = re.split(r"\s+--?[A-Za-z]", line.text, maxsplit=1)[0]
            spec, semi, marker = text.partition(";")
            req = Requirement(re.sub(r"(\d)\+[A-Za-z0-9.]+", r"\1", spec) + semi + marker)  # `+cpu` ignored
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(image_env):
            continue
        out.append((line, req))
    return out


def trainer_image_lacks(folder: Path, image: str) -> str | None:
    """With --workspace on ddpctl's trainer image: a warning naming what the folder's requirements
    ask for that the image does not hold (packages it lacks, torch pins it does not satisfy), known
    without asking an engine. None when it holds them all (or there are none)."""
    from packaging.utils import canonicalize_name

    try:
        reqs = read_requirements(folder, pyproject_dependencies(folder))
    except (UsageError, OSError, UnicodeDecodeError):
        return None  # `ddpctl build` says what is wrong with them; --workspace installs none of them
    held = {canonicalize_name(n) for n in TRAINER_PACKAGES}
    versions = known_torch(image) or {}
    lacking: list[str] = []
    for _line, req in _parsed(reqs.named):
        have = versions.get(req.name.lower())
        if canonicalize_name(req.name) not in held:
            lacking.append(req.name)
        elif have is not None and str(req.specifier) and not allows(str(req.specifier), have):
            lacking.append(f"{req.name}{req.specifier} (it has {have})")
    if not lacking:
        return None
    return (
        f"the image {image} lacks what the workspace's requirements ask for: {', '.join(dict.fromkeys(lacking))} "
        "(--workspace ships code, not packages): build them in with `ddpctl build` in the folder and pass its tag "
        "with --image"
    )


def image_lacks(folder: Path, image: str, trainer_image: bool) -> list[str]:
    """`submit --workspace`: what the folder's requirements ask for that `image` does not hold, as
    notes and warnings ("warning: ...", "note: ..."). ddpctl's trainer image is known offline
    (`trainer_image_lacks`); another image is looked into when it is in the local engine: the
    names of its site-packages' distributions (`installed`, cached by image ID) and their versions,
    so every package it lacks is named, and a torch or torchvision pin it does not satisfy. An image
    only in a registry is not pulled: one note says it was not checked. Empty: nothing to say."""
    if trainer_image:
        lacks = trainer_image_lacks(folder, image)
        return [f"warning: {lacks}"] if lacks else []
    try:
        reqs = read_requirements(folder, pyproject_dependencies(folder))
    except (UsageError, OSError, UnicodeDecodeError):
        return []  # `ddpctl build` says what is wrong with them; --workspace installs none of them
    wanted = _parsed(reqs.named)
    if not wanted:
        return []
    from ddpctl.image.contents import inspect, installed, local_engine

    engine = local_engine()
    found = inspect(engine, image) if engine else None
    if found is None:
        where = f"in the local {engine} engine" if engine else "local (no docker or podman here)"
        by_name = known_torch(image) or {}  # a pytorch/pytorch tag's torch is known without the image
        wrong = _lacking([(line, req) for line, req in wanted if req.name.lower() in by_name], by_name)
        said = [
            f"warning: the image {image} does not satisfy the workspace's requirements: {', '.join(wrong)} "
            "(--workspace ships code, not packages): build an image with them (`ddpctl build`) and pass its "
            "tag with --image"
        ]
        return (said if wrong else []) + [
            f"note: the image {image} is not {where}: whether it holds the workspace's requirements was not checked"
        ]
    held = installed(found)
    if held is None:
        return [f"note: {engine} could not look into the image {image}: its packages were not checked"]
    lacking = _lacking(wanted, held)
    if not lacking:
        return []
    return [
        f"warning: the image {image} lacks what the workspace's requirements ask for: {', '.join(lacking)} "
        "(--workspace ships code, not packages): build an image with them (`ddpctl build`) and pass its tag "
        "with --image"
    ]


def _lacking(wanted: list[tuple[Line, Requirement]], held: dict[str, str]) -> list[str]:
    """The requirements `held` ({canonical name: version}) does not satisfy, as they are named:
    a package it lacks by its name, a version it does not allow with the version it has."""
    from packaging.utils import canonicalize_name

    lacking: list[str] = []
    for _line, req in wanted:
        have = held.get(canonicalize_name(req.name))
        if have is None:
            lacking.append(req.name)
        elif have and str(req.specifier) and not allows(str(req.specifier), have):
            lacking.append(f"{req.name}{req.specifier} (it has {have})")
    return list(dict.fromkeys(lacking))
