"""A Python file as the checks read it: its text, its syntax tree, and its `# ddpctl: ignore[...]` comments.

Nothing here imports or runs the file: `ast.parse` reads it. A file that does not parse is bad input
(exit 2), named with its line and column.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from ddpctl.errors import UsageError
from ddpctl.records import record

# Python's line ends (str.splitlines also splits on form feeds and other separators ast does not count)
_LINE_END = re.compile(r"\r\n|\r|\n")
# `# ddpctl: ignore[DDP013] the reason` or `# ddpctl: ignore[DDP001, TOR102] reason`
_IGNORE = re.compile(r"#\s*ddpctl:\s*ignore\[([^\]]*)\]\s*[:\-\u2013\u2014]?\s*(.*)$")


@record
class Ignore:
    """One ignore comment: the rules it names and its reason ('' when it gives none)."""

    line: int
    col: int  # 1-based, of the `#`
    rules: tuple[str, ...]
    reason: str


@dataclass
class Source:
    path: Path
    display: str  # the path as findings name it (relative to the working directory when under it)
    text: str
    lines: list[str]
    tree: ast.Module
    ignores: dict[int, Ignore] = field(default_factory=dict)

    def segment(self, node: ast.AST) -> str:
        """The source text of `node` (ast.get_source_segment splits the whole file on each call)."""
        first: int = getattr(node, "lineno", 1)
        last: int = getattr(node, "end_lineno", None) or first
        start = self.char_col(first, getattr(node, "col_offset", 0))
        end = self.char_col(last, getattr(node, "end_col_offset", 0) or 0)
        if first == last:
            return self.lines[first - 1][start:end]
        return "\n".join([self.lines[first - 1][start:], *self.lines[first : last - 1], self.lines[last - 1][:end]])

    def char_col(self, line: int, byte_col: int) -> int:
        """ast's column (UTF-8 bytes into the line) as characters."""
        if line < 1 or line > len(self.lines):
            return byte_col
        text = self.lines[line - 1]
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def split_lines(text: str, keepends: bool = False) -> list[str]:
    """`text` split where Python ends a line (the lines ast's line numbers count)."""
    if not keepends:
        return _LINE_END.split(text)
    out, start = [], 0
    for match in _LINE_END.finditer(text):
        out.append(text[start : match.end()])
        start = match.end()
    if start < len(text):
        out.append(text[start:])
    return out


def decode(path: Path, display: str, data: bytes) -> str:
    """The file's text in its declared encoding (PEP 263), UTF-8 by default."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        raise UsageError(f"{display}: cannot read it as Python source ({exc}); give a Python file") from None


def parse_ignores(lines: list[str]) -> dict[int, Ignore]:
    found: dict[int, Ignore] = {}
    for number, text in enumerate(lines, start=1):
        if "ddpctl" not in text:
            continue
        match = _IGNORE.search(text)
        if match:
            rules = tuple(r.strip().upper() for r in match.group(1).split(",") if r.strip())
            reason = match.group(2).split("#", 1)[0].strip()  # a comment after it is no reason
            found[number] = Ignore(number, match.start() + 1, rules, reason)
    return found


def load(path: Path, display: str) -> Source:
    """Read and parse one file; UsageError (exit 2) when it cannot be read or does not parse."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{display}: cannot read it ({exc.strerror or exc})") from None
    return parse(path, display, decode(path, display, data))


def parse(path: Path, display: str, text: str) -> Source:
    try:
        tree = ast.parse(text, filename=display)
    except SyntaxError as exc:
        where = f"{display}:{exc.lineno or 1}:{exc.offset or 1}"
        raise UsageError(f"{where}: syntax error: {exc.msg}; fix it, then lint again") from None
    except ValueError as exc:  # e.g. a NUL byte
        raise UsageError(f"{display}: cannot parse it ({exc})") from None
    except (RecursionError, MemoryError):  # nesting deeper than Python's parser can build
        raise UsageError(f"{display}: nested too deeply to parse; split the expression, then lint again") from None
    lines = split_lines(text)
    return Source(path, display, text, lines, tree, parse_ignores(lines))
