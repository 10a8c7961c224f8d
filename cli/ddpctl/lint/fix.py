"""`ddpctl lint --fix`: the mechanical rewrites, as exact edits of the file's text.

Only three rules are rewritten, and only at their findings:

- DDP001 (device from the global rank): the device becomes `LOCAL_DEVICE`, one constant added after
  the imports: `cuda:<LOCAL_RANK>` with CUDA, else the CPU, so the fixed script also runs in
  `ddpctl run --local`. `torch.cuda.set_device(...)` runs only on CUDA, `device_ids`/`output_device`
  are None on the CPU (as DDP wants there), `torch.accelerator.set_device_index(...)` takes its
  index, `.cuda(rank)` becomes `.to(LOCAL_DEVICE)`, a device
  string `f"cuda:{rank}"` becomes `str(LOCAL_DEVICE)`.
- DDP002 (`--local_rank` argument): its default becomes `LOCAL_RANK` from the environment, so
  torchrun's processes get their local rank and a launcher that passes the argument still works.
- DDP010 (hard-coded nccl): `"nccl" if torch.cuda.is_available() else "gloo"`.

`import os` / `import torch` are added when the file lacks them. Each edit replaces the exact source
span ast gives (no reformatting); everything else stays byte for byte. The result must parse, or
nothing is written. libcst is not needed: the edits are few and their spans exact.

The files of a program are written all or nothing: every fixed text must compile (`compile`, which
also refuses what parses but cannot run), each is staged in a temp file in its own folder, and only
when all are staged, and no file changed since it was read, are they renamed over the files. On a
failure (a full disk, a read-only folder) no file is changed, the temps are removed, and a note
says why.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field

from ddpctl.errors import RuntimeFailure
from ddpctl.lint.findings import Finding
from ddpctl.lint.index import Index, const_str, keyword, last_name
from ddpctl.lint.source import Source, split_lines
from ddpctl.records import record

FIXED_RULES = frozenset({"DDP001", "DDP002", "DDP010"})
DEVICE_NAMES = ("LOCAL_DEVICE", "DDP_LOCAL_DEVICE", "LOCAL_RANK_DEVICE")


@record
class Edit:
    start: int  # character offsets into the text
    end: int
    text: str


@dataclass
class Fixed:
    """What --fix made of one file: the new text, the findings it rewrote and those it could not."""

    src: Source
    text: str
    fixed: list[Finding] = field(default_factory=list)
    skipped: list[Finding] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.text != self.src.text

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                split_lines(self.src.text, keepends=True),
                split_lines(self.text, keepends=True),
                fromfile=f"a/{self.src.display}",
                tofile=f"b/{self.src.display}",
            )
        )


class _Fixer:
    def __init__(self, src: Source, idx: Index) -> None:
        self.src = src
        self.idx = idx
        self.starts = [0]
        for line in split_lines(src.text, keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.need_os = self.need_torch = self.need_device = False
        self.torch = self._bound("torch") or "torch"
        self.os = self._bound("os") or "os"
        used = {n.id for n in ast.walk(src.tree) if isinstance(n, ast.Name)}
        self.device = next((n for n in DEVICE_NAMES if n not in used), DEVICE_NAMES[-1] + "_")

    # ------------------------------------------------------------------ positions
    def offset(self, line: int, byte_col: int) -> int:
        return self.starts[line - 1] + self.src.char_col(line, byte_col)

    def span(self, node: ast.AST) -> tuple[int, int]:
        start: int = self.offset(getattr(node, "lineno", 1), getattr(node, "col_offset", 0))
        end: int = self.offset(getattr(node, "end_lineno", 1), getattr(node, "end_col_offset", 0))
        return start, end

    def text_of(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.src.text[start:end]

    def replace(self, node: ast.AST, text: str) -> Edit:
        start, end = self.span(node)
        return Edit(start, end, text)

    def _bound(self, module: str) -> str | None:
        """The module-level name `module` is imported as (`import torch.distributed` binds `torch`)."""
        for stmt in self.src.tree.body:
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname and alias.name == module:
                        return alias.asname
                    if not alias.asname and alias.name.split(".")[0] == module:
                        return module
        return None

    def indent_unit(self) -> str:
        for stmt in ast.walk(self.src.tree):
            body = getattr(stmt, "body", None)
            if isinstance(stmt, ast.stmt) and isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                first: ast.stmt = body[0]
                inner = first.col_offset - stmt.col_offset
                if inner > 0:
                    line = self.src.lines[first.lineno - 1]
                    return line[: first.col_offset][-inner:] if line[:1] == "\t" else " " * inner
        return "    "

    # ------------------------------------------------------------------ the rules
    def fix(self, f: Finding) -> Edit | None:
        node = f.node
        if node is None:
            return None
        if f.rule == "DDP010":
            return self._backend(node)
        if f.rule == "DDP002" and isinstance(node, ast.Call):
            return self._local_rank_default(node)
        if f.rule == "DDP001":
            return self._device(node)
        return None

    def _backend(self, node: ast.AST) -> Edit:
        self.need_torch = True
        text = self.text_of(node)
        if isinstance(node, ast.Attribute):
            other = text[: -len(node.attr)] + "GLOO"
        else:
            quote = text[-1] if text[-1:] in ("'", '"') else '"'
            other = f"{quote}gloo{quote}"
        return self.replace(node, f"{text} if {self.torch}.cuda.is_available() else {other}")

    def _local_rank_default(self, call: ast.Call) -> Edit | None:
        self.need_os = True
        flag = next((a for a in call.args if const_str(a)), None)
        quote = self.text_of(flag)[-1] if flag is not None else '"'
        name = f"{quote}LOCAL_RANK{quote}"
        env = f"{self.os}.environ"
        default = keyword(call, "default")
        value = default.value if default is not None else None
        if value is not None and _is_int(value):
            new = f"int({env}.get({name}, {self.text_of(value)}))"
        else:
            otherwise = self.text_of(value) if value is not None else "None"
            new = f"int({env}[{name}]) if {name} in {env} else {otherwise}"
        if value is not None:
            return self.replace(value, new)
        last = max([*call.args, *(k.value for k in call.keywords)], key=lambda n: (n.end_lineno, n.end_col_offset))
        end = self.span(last)[1]
        return Edit(end, end, f", default={new}")

    def _device(self, node: ast.AST) -> Edit | None:
        self.need_device = self.need_torch = self.need_os = True
        dev = self.device
        if isinstance(node, ast.JoinedStr | ast.BinOp):
            return self.replace(node, f"str({dev})")
        if isinstance(node, ast.Call) and last_name(node.func) == "device":
            return self.replace(node, dev)
        up = self.idx.parent.get(node)
        on_cuda = f'{dev}.type == "cuda"'
        if isinstance(up, ast.List | ast.Tuple):  # device_ids=[rank]
            holder = self.idx.parent.get(up)
            if isinstance(holder, ast.keyword) and holder.arg == "device_ids" and len(up.elts) == 1:
                return self.replace(up, f"[{dev}] if {on_cuda} else None")
            return None
        if isinstance(up, ast.keyword):
            if up.arg == "device_ids":
                return self.replace(node, f"[{dev}] if {on_cuda} else None")
            if up.arg == "output_device":
                return self.replace(node, f"{dev} if {on_cuda} else None")
            return self.replace(node, dev)  # device=, map_location=
        if isinstance(up, ast.Call) and up.args and up.args[0] is node:
            func = up.func
            if isinstance(func, ast.Attribute) and func.attr == "to":
                return self.replace(node, dev)
            if isinstance(func, ast.Attribute) and func.attr == "cuda":
                rest = [self.text_of(a) for a in up.args[1:]] + [self.text_of(k) for k in up.keywords]
                return self.replace(up, f"{self.text_of(func.value)}.to({', '.join([dev, *rest])})")
            if last_name(func) in ("set_device", "set_device_index"):
                return self._set_device(up)
        return None

    def _set_device(self, call: ast.Call) -> Edit:
        """`torch.cuda.set_device(rank)` / `torch.accelerator.set_device_index(rank)`: the local device
        (its index for the latter), on CUDA only."""
        dev = self.device
        index = last_name(call.func) == "set_device_index"
        guarded = f"{self.text_of(call.func)}({dev}.index)" if index else f"{self.text_of(call.func)}({dev})"
        stmt = self.idx.statement_of(call)
        alone = isinstance(stmt, ast.Expr) and stmt.value is call and self._own_lines(stmt)
        if stmt is not None and alone:
            indent = " " * stmt.col_offset
            text = f'if {dev}.type == "cuda":\n{indent}{self.indent_unit()}{guarded}'
            return self.replace(stmt, text)
        return self.replace(call, f'({guarded} if {dev}.type == "cuda" else None)')

    def _own_lines(self, stmt: ast.stmt) -> bool:
        """The statement is alone on its lines (no `;` neighbour, no `if x: stmt` header)."""
        first = self.src.lines[stmt.lineno - 1]
        last = self.src.lines[(stmt.end_lineno or stmt.lineno) - 1]
        before = first[: stmt.col_offset]
        after = last.encode("utf-8")[stmt.end_col_offset or 0 :].decode("utf-8", errors="ignore").strip()
        return not before.strip() and (not after or after.startswith("#"))

    # ------------------------------------------------------------------ imports and the device constant
    def header(self) -> list[Edit]:
        edits: list[Edit] = []
        body = self.src.tree.body
        imports = [s for s in body if isinstance(s, ast.Import | ast.ImportFrom)]
        future = [s for s in imports if isinstance(s, ast.ImportFrom) and s.module == "__future__"]
        regular = [s for s in imports if s not in future]
        docstring = body[0] if body and isinstance(body[0], ast.Expr) and const_str(body[0].value) else None
        top = regular[0] if regular else None
        after_preamble = max([*future, *([docstring] if docstring else [])], key=lambda s: s.lineno, default=None)

        def line_start(line: int) -> int:
            return self.starts[line - 1]

        def after(stmt: ast.stmt | None) -> int:
            return self.starts[stmt.end_lineno] if stmt is not None and stmt.end_lineno else 0  # the next line's start

        if self.need_os and not self._bound("os"):
            at = line_start(top.lineno) if top else after(after_preamble)
            edits.append(Edit(at, at, "import os\n"))
        if self.need_torch and not self._bound("torch"):
            torch_import = next((s for s in regular if _imports_torch(s)), None)
            at = (
                line_start(torch_import.lineno)
                if torch_import
                else (after(regular[-1]) if regular else after(after_preamble))
            )
            edits.append(Edit(at, at, "import torch\n"))
        if self.need_device:
            edits.append(self._device_constant(body, regular))
        return edits

    def _device_constant(self, body: list[ast.stmt], regular: list[ast.Import | ast.ImportFrom]) -> Edit:
        leading: ast.stmt | None = None
        for stmt in body:
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                leading = stmt
            elif not (isinstance(stmt, ast.Expr) and const_str(stmt.value)) and not self._env_setup(stmt):
                break
        anchors = [leading] if leading is not None else []
        anchors += [s for s in regular if self._binds(s)]
        anchor = max(anchors, key=lambda s: s.lineno, default=None)
        at = self.starts[anchor.end_lineno] if anchor is not None and anchor.end_lineno else 0
        t, o, dev = self.torch, self.os, self.device
        text = (
            "\n# The device from LOCAL_RANK (torchrun sets it for each process on a node), or the CPU without CUDA.\n"
            f"{dev} = (\n"
            f'    {t}.device("cuda", int({o}.environ.get("LOCAL_RANK", "0"))) if {t}.cuda.is_available() '
            f'else {t}.device("cpu")\n'
            ")\n"
        )
        return Edit(at, at, text)

    def _binds(self, stmt: ast.Import | ast.ImportFrom) -> bool:
        return isinstance(stmt, ast.Import) and any(
            (a.asname or a.name).split(".")[0] in (self.torch, self.os) for a in stmt.names
        )

    def _env_setup(self, stmt: ast.stmt) -> bool:
        """`os.environ[...] = ...` between imports (set before torch is imported, on purpose)."""
        return isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Subscript) and self.idx.qualname(t.value) == "os.environ" for t in stmt.targets
        )


def _imports_torch(stmt: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(stmt, ast.ImportFrom):
        return stmt.level == 0 and (stmt.module or "").split(".")[0] == "torch"
    return any(alias.name.split(".")[0] == "torch" for alias in stmt.names)


def _is_int(node: ast.expr) -> bool:
    """`0`, `-1`: a default `int(os.environ.get("LOCAL_RANK", ...))` can take."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return False
    return isinstance(value, int) and not isinstance(value, bool)


def apply(text: str, edits: list[Edit]) -> str:
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        text = text[: edit.start] + edit.text + text[edit.end :]
    return text


def fix(src: Source, idx: Index, findings: list[Finding]) -> Fixed:
    """The file with every finding of FIXED_RULES rewritten; overlapping ones are left for a re-run."""
    fixer = _Fixer(src, idx)
    result = Fixed(src, src.text)
    edits: list[Edit] = []
    for f in sorted(findings, key=lambda f: f.sort_key()):
        if f.rule not in FIXED_RULES:
            continue
        edit = fixer.fix(f)
        if edit is None or any(e.start < edit.end and edit.start < e.end for e in edits):
            result.skipped.append(f)
            continue
        edits.append(edit)
        result.fixed.append(f)
    if not edits:
        return result
    text = apply(src.text, [*edits, *fixer.header()])
    try:
        ast.parse(text)
    except SyntaxError as exc:
        raise RuntimeFailure(
            f"internal error: the fixed {src.display} would not parse (line {exc.lineno}: {exc.msg}); nothing written"
        ) from None
    result.text = text
    return result
