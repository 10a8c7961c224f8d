"""TorchFix (PyTorch's own linter: PyPI `torchfix`, the `lint` extra) on the statements it looks at.

TorchFix parses with libcst and resolves every name in the file: about 4 s for a 2,000-line script
on this machine, and importing it takes 0.35-1 s more (bench/bench_lint.py). So ddpctl's own pass,
which has the syntax tree anyway, first marks what TorchFix's default checks can fire on: calls of
`torch.load` without `weights_only`, of the functions in TorchFix's own list of deprecated ones
(its `deprecated_symbols.yaml`, read as text), of `torch.utils.checkpoint.checkpoint` without
`use_reentrant`, of torchvision models with `pretrained`, ... Only when there are some is TorchFix
imported, and it runs on those statements alone, each on its own line after the file's imports: its
own visitors decide, with its own messages, and each finding is mapped back to its line and column.
A file of 2,000 lines costs what its few marked statements cost.

Without TorchFix installed, ddpctl's own check of `torch.load` without `weights_only` stands in,
under TorchFix's code TOR102, so ignore comments and tools read the same either way.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from ddpctl.lint.findings import Finding
from ddpctl.lint.index import Index, is_const, keyword
from ddpctl.lint.rules import torchfix_severity
from ddpctl.lint.source import Source, split_lines
from ddpctl.records import record

REFERENCE = "https://github.com/pytorch-labs/torchfix"
NONPUBLIC = frozenset(
    {"torch.utils.data._utils.collate.default_collate", "torch.utils.data._utils.collate.default_convert"}
)
V2_TO_TENSOR = "torchvision.transforms.v2.ToTensor"
SINGLETON_MODULES = ("datasets", "models", "transforms")
# The TorchFix codes the gate below covers: a test holds this equal to TorchFix's default selection.
GATED_CODES = frozenset(
    {
        "TOR001",
        "TOR002",
        "TOR003",
        "TOR004",
        "TOR101",
        "TOR102",
        "TOR103",
        "TOR104",
        "TOR105",
        "TOR106",
        "TOR107",
        "TOR201",
        "TOR202",
        "TOR203",
    }
)


@cache
def location() -> Path | None:
    """TorchFix's package folder, found without importing it; None when it is not installed."""
    spec = importlib.util.find_spec("torchfix")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@cache
def version() -> str | None:
    """TorchFix's version, read from its source (importlib.metadata costs ~20 ms to import)."""
    where = location()
    if where is None:
        return None
    try:
        text = (where / "torchfix.py").read_text(encoding="utf-8")
    except OSError:
        return None
    found = re.search(r"^__version__\s*=\s*[\"']([^\"']+)", text, re.MULTILINE)
    return found.group(1) if found else None


@cache
def deprecated_names() -> frozenset[str]:
    """The qualified names TorchFix reports as deprecated or removed, from its own list."""
    where = location()
    if where is None:
        return frozenset()
    try:
        text = (where / "deprecated_symbols.yaml").read_text(encoding="utf-8")
    except OSError:
        return frozenset()
    return frozenset(re.findall(r"^- name:\s*(\S+)", text, re.MULTILINE))


def _one(expr: ast.AST) -> bool:
    return is_const(expr, 1) or is_const(expr, 1.0)


def candidates(idx: Index) -> list[ast.AST]:
    """The nodes TorchFix's default checks can fire on (a superset: TorchFix decides)."""
    deprecated = deprecated_names()
    found: list[ast.AST] = []
    for call in idx.calls:
        name = idx.qualname(call.func) or ""
        unsafe_load = name == "torch.load" and keyword(call, "weights_only") is None
        reentrant = name == "torch.utils.checkpoint.checkpoint" and keyword(call, "use_reentrant") is None
        if unsafe_load or reentrant or name in deprecated or name in NONPUBLIC or name == V2_TO_TENSOR:
            found.append(call)
        elif name == "torch.log" and call.args:
            value = call.args[0]
            if (
                isinstance(value, ast.BinOp)
                and isinstance(value.op, ast.Add)
                and (_one(value.left) or _one(value.right))
            ):
                found.append(call)
        elif name == "torch.exp":
            up = idx.parent.get(call)
            if isinstance(up, ast.BinOp) and isinstance(up.op, ast.Sub) and up.left is call and _one(up.right):
                found.append(up)
        elif name.startswith("torchvision.models") and (
            call.args or keyword(call, "pretrained") or keyword(call, "pretrained_backbone")
        ):
            found.append(call)
    for node in idx.import_nodes:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = {f"{node.module}.{a.name}" for a in node.names}
            if names & (deprecated | NONPUBLIC | {V2_TO_TENSOR}):
                found.append(node)
        elif isinstance(node, ast.Import) and any(
            a.name == f"torchvision.{m}" and a.asname == m for a in node.names for m in SINGLETON_MODULES
        ):
            found.append(node)
    for stmt in idx.simple_statements:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "require_grad" for t in stmt.targets
        ):
            found.append(stmt)
    return found


@record
class Piece:
    """A fragment of the file copied onto its own lines of the excerpt TorchFix reads."""

    line: int  # its first line in the excerpt (1-based)
    src_line: int  # and in the file
    src_col: int  # the column (characters) its text starts at in the file


def excerpt(src: Source, idx: Index, nodes: list[ast.AST]) -> tuple[str, list[Piece]]:
    """The file's imports, then each node's statement (or, in a compound statement's header, the
    node alone), each verbatim from its first column on."""
    fragments: dict[int, ast.AST] = {}
    for node in [*idx.import_nodes, *nodes]:
        stmt = idx.statement_of(node)
        piece = stmt if stmt is not None and not hasattr(stmt, "body") else node
        fragments[id(piece)] = piece
    ordered = sorted(fragments.values(), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
    out: list[str] = []
    pieces: list[Piece] = []
    for node in ordered:
        segment = src.segment(node)
        if not segment:
            continue
        line = getattr(node, "lineno", 1)
        pieces.append(Piece(len(out) + 1, line, src.char_col(line, getattr(node, "col_offset", 0))))
        out.extend(split_lines(segment))
    return "\n".join(out) + "\n", pieces


def _where(pieces: list[Piece], line: int, col: int) -> tuple[int, int]:
    """A (line, 0-based column) of the excerpt as (line, 1-based column) of the file."""
    piece = max((p for p in pieces if p.line <= line), key=lambda p: p.line, default=None)
    if piece is None:
        return line, col + 1
    offset = line - piece.line
    return piece.src_line + offset, col + 1 + (piece.src_col if offset == 0 else 0)


def _visit(text: str) -> list[Violation]:
    """TorchFix's default-selected violations in `text` (a whole module)."""
    import libcst as cst
    from torchfix.torchfix import DISABLED_BY_DEFAULT, GET_ALL_VISITORS

    wrapper = cst.MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)
    visitors = GET_ALL_VISITORS()
    wrapper.visit_batched(visitors)
    off = tuple(DISABLED_BY_DEFAULT)
    found: list[Any] = [v for visitor in visitors for v in visitor.violations if not v.error_code.startswith(off)]
    return [Violation(v.error_code, v.line, v.column, v.message, v.replacement is not None) for v in found]


class Violation(NamedTuple):
    code: str
    line: int
    column: int  # 0-based
    message: str
    fixable: bool  # TorchFix can rewrite it


def _cache_dir() -> Path | None:
    """Per user, private: TorchFix's verdicts on an excerpt never change for one TorchFix version."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = Path(base, "ddpctl", f"torchfix-{version()}")
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = directory.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    return directory


def violations(text: str) -> list[Violation]:
    """`_visit(text)`, remembered by the text's hash: importing TorchFix costs 0.35 s or more, so a
    script linted again (before each `ddpctl run`) with the same marked statements costs nothing."""
    import hashlib
    import json

    from ddpctl.atomic import write_text_atomic

    directory = _cache_dir()
    path = directory / f"{hashlib.sha256(text.encode()).hexdigest()}.json" if directory else None
    if path is not None:
        try:
            return [Violation(*row) for row in json.loads(path.read_text(encoding="utf-8"))]
        except (OSError, ValueError, TypeError):
            pass
    found = _visit(text)
    if path is not None:
        try:
            write_text_atomic(path, json.dumps([list(v) for v in found]))
        except OSError:
            pass
    return found


def _message(text: str, fixable: bool) -> tuple[str, str]:
    head, sep, tail = text.partition(". ")
    if sep:
        tail = tail.strip().rstrip(".")
        return head.strip(), tail[:1].lower() + tail[1:]
    fix = "`torchfix --fix` rewrites it" if fixable else f"see {REFERENCE}"
    return text.strip().rstrip("."), fix


def run(src: Source, idx: Index) -> Iterator[Finding]:
    """TorchFix's findings in `src`, or ddpctl's stand-in for TOR102 when TorchFix is not installed."""
    nodes = candidates(idx)
    if not nodes:
        return
    if location() is None:
        yield from unsafe_loads(src, idx, nodes)
        return
    text, pieces = excerpt(src, idx, nodes)
    try:
        found = violations(text)
    except Exception:  # noqa: BLE001 - libcst refused the excerpt: the whole file, slower but the same checks
        found, pieces = violations(src.text), []
    seen: set[tuple[int, int, str]] = set()
    for v in found:
        line, col = _where(pieces, v.line, v.column) if pieces else (v.line, v.column + 1)
        if (line, col, v.code) in seen:
            continue
        seen.add((line, col, v.code))
        message, fix = _message(v.message, v.fixable)
        yield Finding(src.display, line, col, v.code, torchfix_severity(v.code), message, fix, "torchfix")


def unsafe_loads(src: Source, idx: Index, nodes: list[ast.AST]) -> Iterator[Finding]:
    for node in nodes:
        if isinstance(node, ast.Call) and idx.qualname(node.func) == "torch.load":
            line = node.lineno
            yield Finding(
                src.display,
                line,
                src.char_col(line, node.col_offset) + 1,
                "TOR102",
                torchfix_severity("TOR102"),
                "`torch.load` without `weights_only` unpickles whatever the file holds (TorchFix's TOR102, "
                "checked by ddpctl: TorchFix is not installed)",
                "pass weights_only=True (False only for a file you trust that needs full pickle)",
            )
