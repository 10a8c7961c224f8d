"""`.dockerignore` as Docker reads it (moby's `patternmatcher` and `ignorefile`), not as git does.

pathspec implements git's rules, and Docker's differ: a pattern is matched against the whole path
from the build context's root (`*.pyc` is only the root's; `**/*.pyc` is any folder's), `*` and `?`
never cross a `/`, `**` crosses any number of folders, a pattern that matches a folder also matches
everything below it, and the last pattern that matches a path (or one of its parents) decides,
`!pattern` re-including it. So this module translates each pattern to a regular expression the way
`patternmatcher.Pattern.compile` does, and matches like `MatchesOrParentMatches`. Reading the file:
a line starting with `#` is a comment, lines are stripped, each pattern is cleaned like Go's
`filepath.Clean` and a leading `/` dropped (it means the context's root, which every pattern is
relative to anyway).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

from ddpctl.records import record

_REGEX_SPECIAL = ".+()|{}$^"  # what Go's filepath.Match treats literally but a regex would not


def _clean(pattern: str) -> str:
    """Go's `filepath.Clean` (which, unlike posixpath.normpath, keeps no leading `//`)."""
    cleaned = posixpath.normpath(pattern)
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


def _translate(pattern: str) -> re.Pattern[str]:
    """The regular expression `patternmatcher` compiles `pattern` to (its exact, prefix and suffix
    shortcuts are the same matches as this expression)."""
    out = ["^"]
    i, n = 0, len(pattern)
    in_class = False  # inside `[...]`, characters go through as Go's regexp reads them
    while i < n:
        ch = pattern[i]
        i += 1
        if in_class:
            if ch == "\\" and i < n:
                out.append(re.escape(pattern[i]))
                i += 1
            else:
                out.append(ch)
                in_class = ch != "]"
        elif ch == "*":
            if i < n and pattern[i] == "*":
                i += 1
                if i < n and pattern[i] == "/":
                    i += 1  # `**/` is `**`
                out.append(".*" if i >= n else "(.*/)?")
            else:
                out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "\\":
            if i < n:
                out.append(re.escape(pattern[i]))
                i += 1
            else:
                out.append(r"\\")
        elif ch == "[":
            out.append(ch)
            in_class = True
        elif ch in _REGEX_SPECIAL or ch == "]":
            out.append("\\" + ch)
        else:
            out.append(ch)
    out.append("$")
    try:
        return re.compile("".join(out), re.DOTALL)
    except re.error as exc:
        raise ValueError(f"bad pattern {pattern!r} ({exc})") from None


@record
class _Pattern:
    text: str
    regex: re.Pattern[str]
    exclusion: bool  # `!pattern`: re-includes what it matches


class DockerIgnore:
    """The patterns of one `.dockerignore`; `excluded(path)` says whether Docker leaves `path` out
    of the build context (paths relative to the context's root, `/`-separated)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns: list[_Pattern] = []
        for raw in patterns:
            text = raw.strip()
            if not text:
                continue
            exclusion = text.startswith("!")
            if exclusion:
                text = text[1:].strip()
                if not text:
                    raise ValueError("'!' alone is not a pattern")
            text = _clean(text)
            if len(text) > 1 and text.startswith("/"):
                text = text[1:]
            self.patterns.append(_Pattern(text, _translate(text), exclusion))

    @classmethod
    def from_text(cls, text: str) -> DockerIgnore:
        """A `.dockerignore` file's text: `#` comments, one pattern a line (a UTF-8 BOM dropped)."""
        lines = text.removeprefix("\ufeff").splitlines()
        return cls(line for line in lines if not line.startswith("#"))

    def may_reinclude_below(self, folder: str) -> bool:
        """Whether a `!pattern` may match something below the excluded `folder`: then it is walked
        still, as Docker does, each file's own verdict deciding. Patterns are anchored at the
        root: one whose literal start (before its first wildcard) leads elsewhere cannot."""
        for pattern in self.patterns:
            if not pattern.exclusion:
                continue
            literal = []
            for part in pattern.text.split("/"):
                if any(c in part for c in "*?[\\"):
                    break
                literal.append(part)
            prefix = "/".join(literal)
            if prefix == folder or prefix.startswith(folder + "/") or folder.startswith(prefix + "/") or not prefix:
                return True
        return False

    def excluded(self, path: str) -> bool:
        """`MatchesOrParentMatches`: the last pattern matching `path` or one of its parent folders
        decides."""
        parent = posixpath.dirname(path)
        parents = parent.split("/") if parent else []
        matched = False
        for pattern in self.patterns:
            if pattern.exclusion != matched:
                continue  # only an exclusion can change a match, only an inclusion a non-match
            hit = pattern.regex.match(path) is not None
            if not hit:
                hit = any(pattern.regex.match("/".join(parents[: i + 1])) for i in range(len(parents)))
            if hit:
                matched = not pattern.exclusion
        return matched
