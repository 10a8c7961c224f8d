"""Which files of a folder are the user's code: chosen as git and Docker choose them.

A path is decided, first rule that applies:

1. `.git` (a folder, or a submodule's or worktree's file) never goes;
2. `include` patterns (`workspace.include`, git's syntax, from the root) ship what they match,
   whatever the rules below say: that is how a likely secret, or an ignored file, is shipped;
3. ignored: `exclude` patterns (`workspace.exclude`, git's syntax, from the root), the
   `.gitignore` of the folder and of every folder above it inside the workspace (git's rules,
   through pathspec: a deeper file wins, and in each file the last matching pattern; a folder that
   is ignored is not entered, so nothing below it can be re-included, as in git), and the root's
   `.dockerignore` (Docker's rules, `dockerignore.py`);
4. a likely secret (`SECRET_PATTERNS`) is left out, and named in the pack's summary line; so is a
   link whose target (its path in the workspace) is one (the content of what goes is scanned for
   key material when it is packed, `scan.py`, but for the files `include` names);
5. anything else goes: regular files, and symbolic links whose target stays inside the workspace
   (packed as what they point to: a file's content, a folder's files). A link that leaves the
   workspace, or points nowhere, is a usage error naming it (`lenient`: left out, as is what
   cannot be read; for a hash that only names a folder's version). Sockets, FIFOs and devices are
   left out (`not a file`).

Only the `.gitignore` files inside the workspace count, not those above it, `.git/info/exclude` or
a user's global excludes file: the same folder packs the same on every machine. Folders go in the
archive only as the parents of files (git keeps no empty folder), so a fresh clone packs to the
same hash as the folder it came from.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from ddpctl.errors import SpecError, printable
from ddpctl.records import record

from .dockerignore import DockerIgnore

# Likely secrets, in git's syntax (each matches at any depth unless anchored): what would hand a
# pod, and everyone who can read the workspace's object, someone's credentials. A file or folder
# named in `workspace.include` ships anyway.
SECRET_PATTERNS: tuple[str, ...] = (
    # environment files, but not their committed templates
    ".env",
    ".env.*",
    ".envrc",
    "!.env.example",
    "!.env.sample",
    "!.env.template",
    "!.env.dist",
    # private keys and key stores
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.ppk",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    # credential folders and files of ssh, gpg, the clouds, Kubernetes, Docker and package indexes
    ".ssh/",
    ".gnupg/",
    ".aws/",
    ".azure/",
    "**/.config/gcloud/",
    ".kube/",
    "kubeconfig*",
    "*.kubeconfig",
    "**/.docker/config.json",
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".pypirc",
    ".npmrc",
    ".vault-token",
    ".htpasswd",
    "credentials.json",
    "client_secret*.json",
    "application_default_credentials.json",
    # the token files of the Hugging Face, Weights & Biases, Databricks and cloud CLIs
    "**/.huggingface/token",
    "**/huggingface/token",
    "**/huggingface/stored_tokens",
    "**/.config/wandb/",
    ".databrickscfg",
    ".oci/",
    ".s3cfg",
    ".boto",
    ".pgpass",
    # infrastructure state and variables (they hold the credentials they were applied with)
    "*.tfstate",
    "*.tfstate.*",
    "*.tfvars",
    "*.tfvars.json",
    "!*.tfvars.example",
    ".terraformrc",
    "secrets.*",
    "!secrets.example.*",
    "!secrets.py",
)

GITIGNORE = ".gitignore"
DOCKERIGNORE = ".dockerignore"
NEVER = ".git"
_GLOB = frozenset("*?[\\")
_ANY_DEPTH = "^(?:.+/)?"  # how pathspec starts the expression of a pattern without a `/` in it
_FOLDER_MARKS = ("(?:(?:/)|$)", "(?:/)")  # how it ends one (a file or a folder's contents; a folder's)
_GROUP_NAME = re.compile(r"\(\?P<\w+>")  # pathspec names groups; an alternation of them may not repeat a name


@record
class File:
    """One file to pack: its path in the archive and where to read it."""

    path: str  # relative to the workspace, `/`-separated
    source: str  # the file to read (a link's target, for a link); its owner's exec bit sets the mode
    named: bool = False  # named by `workspace.include`: shipped as it is, its content not scanned


@record
class Selection:
    """What goes and what was left out, and why."""

    root: Path
    files: tuple[File, ...]  # in the archive's order (`path_key`)
    secrets: tuple[str, ...] = ()  # left out as likely secrets (a folder ends with `/`)
    ignored: tuple[str, ...] = ()  # left out by .gitignore, .dockerignore or workspace.exclude
    special: tuple[str, ...] = ()  # sockets, FIFOs, devices: not files


def leave_out_with(field_name: str) -> str:
    """Where a path is left out: the spec's `workspace.exclude`; `ddpctl build` (field `build`),
    which has no such key, reads the folder's .dockerignore."""
    return ".dockerignore" if field_name == "build" else f"{field_name}.exclude"


def path_key(path: str) -> tuple[str, ...]:
    """The archive's order: folder by folder, by code point (= UTF-8 bytes), a folder before its
    contents."""
    return tuple(path.split("/"))


def _of_name(expression: str) -> bool:
    """Whether pathspec's `expression` matches a path's last part only: it starts `^(?:.+/)?` and
    the rest can match no `/` but the folder mark at its end (so `**/a/b` and `.*` do not)."""
    if not expression.startswith(_ANY_DEPTH):
        return False
    rest = expression[len(_ANY_DEPTH) :]
    for mark in _FOLDER_MARKS:
        rest = rest.removesuffix(mark)
    rest = re.sub(r"\\.", "", rest).replace("[^/]", "")
    return "/" not in rest and "." not in rest


class _Spec:
    """A list of patterns in git's syntax: pathspec decides, and one regular expression made of all
    of its patterns' expressions answers first for the many paths that match none of them (pathspec
    tries each pattern in turn, which made choosing 10,000 files slower than packing them)."""

    def __init__(self, lines: Iterable[str], field_name: str, by_name: bool = True) -> None:
        try:
            self.spec = pathspec.GitIgnoreSpec.from_lines(list(lines))
        except Exception as exc:  # noqa: BLE001 - pathspec raises several kinds for a bad pattern
            raise SpecError(field_name, f"a pattern is not valid ({printable(str(exc))})", "fix or remove it") from None
        expressions = [
            _GROUP_NAME.sub("(?:", p.regex.pattern)
            for p in self.spec.patterns
            if p.include is not None and isinstance(p, pathspec.RegexPattern) and p.regex is not None
        ]
        # Most patterns have no `/` but a trailing one: pathspec's expression starts `^(?:.+/)?`,
        # and git matches them against the last part of the path alone. During a walk that is all
        # they can match (a folder they match is not entered), so they are tried on the name.
        names = [e[len(_ANY_DEPTH) :] for e in expressions if by_name and _of_name(e)]
        paths = [e for e in expressions if not (by_name and _of_name(e))]
        self.names = re.compile("^(?:" + "|".join(names) + ")") if names else None
        self.paths = re.compile("|".join(f"(?:{e})" for e in paths)) if paths else None

    def verdict(self, path: str, name: str) -> bool | None:
        """True: a pattern matches `path` (`name` is its last part; a folder's both end with `/`);
        False: a `!pattern` does, last; None: none does."""
        if (self.names is None or self.names.match(name) is None) and (
            self.paths is None or self.paths.search(path) is None
        ):
            return None
        return self.spec.check_file(path).include

    def matches(self, path: str, name: str) -> bool:
        return bool(self.verdict(path, name))


def _literal_prefix(pattern: str) -> str | None:
    """The folder an anchored include pattern starts in (`configs/prod/*.key` -> `configs/prod`);
    None for one that names no folder to walk into: a name matched at any depth (no `/` but a
    trailing one, which does not reach into left-out folders) or at the root only (`/*.key`)."""
    text = pattern.rstrip("/")
    if "/" not in text.lstrip("/"):
        return None
    parts = []
    for part in text.lstrip("/").split("/"):
        if _GLOB & set(part):
            break
        parts.append(part)
    return "/".join(parts)


@dataclass
class _Rules:
    include: _Spec
    include_prefixes: list[str]
    exclude: _Spec
    secrets: _Spec
    docker: DockerIgnore | None
    secrets_found: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    special: list[str] = field(default_factory=list)
    files: list[File] = field(default_factory=list)

    def included(self, rel: str, name: str) -> bool:
        """`include` patterns match as pathspec does, folders above included: `.ssh/` ships the
        files in it (which, walked, would each be a likely secret again)."""
        return self.include.matches(rel, name)

    def reaches_into(self, rel: str) -> bool:
        """Whether an include pattern may match something below the excluded folder `rel`."""
        return any(
            prefix == rel or prefix.startswith(rel + "/") or rel.startswith(prefix + "/") or not prefix
            for prefix in self.include_prefixes
        )


_Ignores = tuple[tuple[str, _Spec], ...]  # (folder, its .gitignore) from the root down


def _git_ignored(ignores: _Ignores, rel: str, name: str) -> bool:
    """git's verdict: the deepest .gitignore with a matching pattern decides, and in it the last."""
    for base, spec in reversed(ignores):
        sub = rel[len(base) + 1 :] if base else rel
        verdict = spec.verdict(sub, name)
        if verdict is not None:
            return verdict
    return False


def select(
    root: Path | str,
    exclude: Sequence[str] = (),
    include: Sequence[str] = (),
    *,
    field_name: str = "workspace",
    lenient: bool = False,
) -> Selection:
    """The files of the workspace `root` (see the module's doc). `field_name` names the spec key in
    errors (a link leaving the workspace, a file that cannot be read, a bad pattern). `lenient`:
    what would be such an error for a path (a link that leaves, points nowhere or loops, a folder
    that cannot be read, a name that is not UTF-8) leaves the path out instead: nothing ships, the
    selection only names the folder's version."""
    given = Path(root)
    try:
        real_root = given.resolve(strict=True)
    except OSError:
        raise SpecError(field_name, f"{printable(str(given))} does not exist", "give an existing folder") from None
    if not real_root.is_dir():
        raise SpecError(field_name, f"{printable(str(given))} is not a folder", "give the folder of your code")
    for pattern in exclude:
        if pattern.strip().startswith("!"):
            raise SpecError(
                f"{field_name}.exclude",
                f"{printable(pattern)!r} re-includes",
                f"name what to ship in {field_name}.include instead",
            )
    docker: DockerIgnore | None = None
    dockerfile = real_root / DOCKERIGNORE
    if dockerfile.is_file():
        try:
            docker = DockerIgnore.from_text(dockerfile.read_text(encoding="utf-8", errors="surrogateescape"))
        except ValueError as exc:
            raise SpecError(field_name, f"{DOCKERIGNORE}: {printable(str(exc))}", "fix the pattern") from None
    rules = _Rules(
        include=_Spec(include, f"{field_name}.include", by_name=False),
        include_prefixes=[p for p in map(_literal_prefix, include) if p is not None],
        exclude=_Spec(exclude, f"{field_name}.exclude"),
        secrets=_Spec(SECRET_PATTERNS, "SECRET_PATTERNS"),
        docker=docker,
    )
    _Walker(real_root, rules, field_name, lenient).walk(
        str(real_root), "", (), only_includes=False, seen=(str(real_root),)
    )
    return Selection(
        root=real_root,
        files=tuple(rules.files),
        secrets=tuple(sorted(rules.secrets_found, key=path_key)),
        ignored=tuple(sorted(rules.ignored, key=path_key)),
        special=tuple(sorted(rules.special, key=path_key)),
    )


_DIR, _FILE, _OTHER, _BROKEN = "dir", "file", "other", "broken"


def _kind(entry: os.DirEntry[str], is_link: bool) -> str:
    """What an entry is (a link: what it points to), from the directory listing where it can: a
    file's mode is read when it is packed."""
    try:
        if not is_link:
            if entry.is_dir(follow_symlinks=False):
                return _DIR
            return _FILE if entry.is_file(follow_symlinks=False) else _OTHER
        mode = os.stat(entry.path).st_mode
    except OSError:
        return _BROKEN
    return _DIR if stat.S_ISDIR(mode) else _FILE if stat.S_ISREG(mode) else _OTHER


class _Walker:
    def __init__(self, root: Path, rules: _Rules, field_name: str, lenient: bool = False) -> None:
        self.root = str(root)
        self.rules = rules
        self.field = field_name
        self.lenient = lenient

    def _fail(self, rel: str, problem: str, fix: str = "") -> SpecError:
        return SpecError(
            self.field, f"{printable(rel)} {problem}", fix or f"leave it out with {leave_out_with(self.field)}"
        )

    def walk(self, real_dir: str, rel_dir: str, ignores: _Ignores, only_includes: bool, seen: tuple[str, ...]) -> None:
        """One folder: `real_dir` on disk is `rel_dir` in the archive. `only_includes`: inside a
        folder that is left out, where only what an include pattern names goes. `seen`: the real
        folders above, to refuse a link back to one of them (a loop). Entries are visited in name
        order, so files come out in the archive's order (`path_key`)."""
        rules = self.rules
        gitignore = os.path.join(real_dir, GITIGNORE)
        if not only_includes and os.path.isfile(gitignore):
            with open(gitignore, encoding="utf-8", errors="surrogateescape") as f:
                where = f"{self.field} ({rel_dir or '.'}/{GITIGNORE})"
                ignores = (*ignores, (rel_dir, _Spec(f.read().splitlines(), where)))
        try:
            with os.scandir(real_dir) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            if self.lenient:
                return
            raise self._fail(rel_dir or ".", f"cannot be read ({exc.strerror})") from None
        for entry in entries:
            name = entry.name
            if name == NEVER:
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if not rel.isascii():
                try:
                    rel.encode("utf-8")
                except UnicodeEncodeError:
                    if self.lenient:
                        continue
                    raise self._fail(rel, "has a name that is not UTF-8", "rename it, or leave it out") from None
            is_link = entry.is_symlink()
            kind = _kind(entry, is_link)
            is_dir = kind == _DIR
            # a folder's path and name end with `/`, as pattern matching wants them
            path, key = (rel + "/", name + "/") if is_dir else (rel, name)
            if rules.included(path, key):
                self._take(entry, rel, kind, is_link, ignores, seen, only_includes=False, named=True)
                continue
            if only_includes:
                if is_dir and rules.reaches_into(rel):
                    self._take(entry, rel, kind, is_link, ignores, seen, only_includes=True)
                continue
            by_docker = rules.docker is not None and rules.docker.excluded(rel)
            # a folder .dockerignore excludes is walked still when a `!pattern` may re-include
            # something below it (each file's own verdict decides), as Docker does
            walk_anyway = by_docker and is_dir and rules.docker is not None and rules.docker.may_reinclude_below(rel)
            if rules.exclude.matches(path, key) or _git_ignored(ignores, path, key) or (by_docker and not walk_anyway):
                self._leave_out(entry, rel, kind, is_link, ignores, seen, rules.ignored)
            elif rules.secrets.matches(path, key) or (is_link and self._points_at_secret(entry, kind)):
                self._leave_out(entry, rel, kind, is_link, ignores, seen, rules.secrets_found)
            else:
                self._take(entry, rel, kind, is_link, ignores, seen, only_includes=False)

    def _points_at_secret(self, entry: os.DirEntry[str], kind: str) -> bool:
        """Whether a link's target, as a path in the workspace, is a likely secret (or lies in a
        folder that is one): `config.txt -> .env` is as secret as `.env`. A target outside the
        workspace is refused when the link is taken."""
        target = os.path.realpath(entry.path)
        if not target.startswith(self.root + os.sep):
            return False
        rel = os.path.relpath(target, self.root).replace(os.sep, "/")
        return bool(self.rules.secrets.spec.check_file(rel + "/" if kind == _DIR else rel).include)

    def _leave_out(
        self,
        entry: os.DirEntry[str],
        rel: str,
        kind: str,
        is_link: bool,
        ignores: _Ignores,
        seen: tuple[str, ...],
        why: list[str],
    ) -> None:
        """Leave `entry` out (said in `why`); walk a folder still when an include pattern may name
        something below it."""
        why.append(rel + "/" if kind == _DIR else rel)
        if kind == _DIR and self.rules.reaches_into(rel):
            self._take(entry, rel, kind, is_link, ignores, seen, only_includes=True)

    def _take(
        self,
        entry: os.DirEntry[str],
        rel: str,
        kind: str,
        is_link: bool,
        ignores: _Ignores,
        seen: tuple[str, ...],
        only_includes: bool,
        named: bool = False,
    ) -> None:
        """Pack `entry` (a file), or walk it (a folder); a link only when it stays inside. `named`:
        an include pattern matches it."""
        source = entry.path
        if is_link:
            source = os.path.realpath(entry.path)
            outside = source != self.root and not source.startswith(self.root + os.sep)
            if self.lenient and (outside or kind == _BROKEN):
                return
            if source != self.root and not source.startswith(self.root + os.sep):
                raise self._fail(
                    rel,
                    f"is a symbolic link to {printable(source)}, outside the workspace",
                    f"copy what it points to into the folder, or leave it out with {leave_out_with(self.field)}",
                )
            if kind == _BROKEN:
                raise self._fail(
                    rel,
                    "is a symbolic link to nothing",
                    f"remove it, or leave it out with {leave_out_with(self.field)}",
                )
        if kind == _DIR:
            if any(source == s or s.startswith(source + os.sep) for s in seen):
                if self.lenient:
                    return
                raise self._fail(rel, "is a symbolic link to a folder above it (a loop)")
            self.walk(source, rel, ignores, only_includes, (*seen, source))
        elif kind == _FILE:
            self.rules.files.append(File(rel, source, named))
        elif kind == _OTHER and not only_includes:
            self.rules.special.append(rel)


__all__ = ["SECRET_PATTERNS", "File", "Selection", "path_key", "select"]
