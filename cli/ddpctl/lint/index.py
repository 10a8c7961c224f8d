"""What the checks ask of one file, computed once from its syntax tree (the file is never run).

- **Names**: each import's local name maps to its qualified name (`dist` -> `torch.distributed`), so
  `dist.get_rank`, `torch.distributed.get_rank` and `from torch.distributed import get_rank` read alike.
- **Where a value comes from**: a name (or `self.attr`, across the class's methods) holds the global
  rank when something assigned to it does: `dist.get_rank()`, `os.environ["RANK"]` (also through a
  dict or a dict comprehension over `os.environ`, `env["RANK"]`), `int(...)` of one of those, or
  another such name; a function's parameter holds what its callers pass, a call what the function
  returns (`rank, world = setup()` by position), in any file of the program (program.py). `% n` does
  not carry it (`rank % torch.cuda.device_count()` is the single-node tutorial's device, right when
  every node has the same GPUs); other arithmetic neither. The local rank (`LOCAL_RANK`), a device
  built from the global rank (`f"cuda:{rank}"`, `"cuda:%d" % rank`, `"cuda:" + str(rank)`,
  `"cuda:{}".format(rank)`, `torch.device("cuda", rank)`), and a DDP/DataParallel wrapper are
  followed the same way. Flow-insensitive: any assignment in the scope counts. A process index that
  `mp.spawn` passes is no rank of torchrun's.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Protocol

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef

GLOBAL_RANK = "global-rank"
LOCAL_RANK = "local-rank"
GLOBAL_DEVICE = "global-device"
WRAPPER = "wrapper"
NONE: frozenset[str] = frozenset()

# The launchers' environment: the global and the local rank of this process.
ENV_KINDS = {
    "RANK": GLOBAL_RANK,
    "LOCAL_RANK": LOCAL_RANK,
    "SLURM_PROCID": GLOBAL_RANK,
    "SLURM_LOCALID": LOCAL_RANK,
    "OMPI_COMM_WORLD_RANK": GLOBAL_RANK,
    "OMPI_COMM_WORLD_LOCAL_RANK": LOCAL_RANK,
    "PMIX_RANK": GLOBAL_RANK,
}
ENV_READERS = frozenset({"os.environ.get", "os.getenv", "os.environ.setdefault"})
RANK_CALLS = {"get_rank": GLOBAL_RANK, "get_global_rank": GLOBAL_RANK, "get_node_local_rank": LOCAL_RANK}
WRAPPERS = frozenset({"DistributedDataParallel", "DataParallel"})
# Names that read as a process's rank in a test (`if local_rank == 0:`), whatever they were assigned.
RANK_NAMES = frozenset(
    {
        "rank",
        "global_rank",
        "local_rank",
        "rank_id",
        "process_rank",
        "world_rank",
        "node_local_rank",
        "gpu_id",
        "gpu",
        "process_index",
        "local_process_index",
    }
)
RANK_ZERO_DECORATOR = re.compile(r"rank_?zero|rank_?0|main_process|master_only|on_main", re.IGNORECASE)
# Fields whose values are shared singletons (Load, Store, Add, ...): nothing to walk into.
_SKIP_FIELDS = frozenset({"ctx", "op", "ops"})
_SIMPLE = frozenset(
    {
        ast.Expr,
        ast.Assign,
        ast.AugAssign,
        ast.AnnAssign,
        ast.Return,
        ast.Delete,
        ast.Pass,
        ast.Break,
        ast.Continue,
        ast.Raise,
        ast.Assert,
        ast.Import,
        ast.ImportFrom,
        ast.Global,
        ast.Nonlocal,
    }
)


def dotted(expr: ast.AST) -> str | None:
    """`self.model` for an attribute chain over a name, else None."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        base = dotted(expr.value)
        return f"{base}.{expr.attr}" if base else None
    return None


def last_name(expr: ast.AST) -> str | None:
    """The last component of a name, attribute or a call of one: `is_main` of `ctx.is_main()`."""
    if isinstance(expr, ast.Call):
        expr = expr.func
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def const_str(expr: ast.AST | None) -> str | None:
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None


def is_const(expr: ast.AST | None, value: object) -> bool:
    return isinstance(expr, ast.Constant) and type(expr.value) is type(value) and expr.value == value


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def arg(call: ast.Call, name: str, position: int | None = None) -> ast.expr | None:
    """The argument `name`, given by keyword or at `position` (before any `*args`)."""
    found = keyword(call, name)
    if found is not None:
        return found.value
    if (
        position is not None
        and position < len(call.args)
        and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1])
    ):
        return call.args[position]
    return None


def has_star_kwargs(call: ast.Call) -> bool:
    return any(k.arg is None for k in call.keywords)


class Resolver(Protocol):
    """What an Index asks of the program it is read in (ddpctl.lint.program.Program answers): the
    kinds of value that cross a module's edge, through calls, parameters and attributes."""

    def return_kinds(self, idx: Index, call: ast.Call, item: int | None = None) -> frozenset[str] | None: ...
    def param_kinds(self, idx: Index, function: FunctionNode, name: str) -> frozenset[str]: ...
    def attr_kinds(self, attr: str) -> frozenset[str]: ...


class Index:
    """One file's facts (see the module's docstring)."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parent: dict[ast.AST, ast.AST] = {}
        self.imports: dict[str, str] = {}
        self.import_nodes: list[ast.Import | ast.ImportFrom] = []
        self.calls: list[ast.Call] = []
        self.functions: dict[str, list[FunctionNode]] = {}
        self.assigned: dict[tuple[int, str], list[ast.expr]] = {}
        self.items: dict[tuple[int, str], list[ast.expr]] = {}  # `name[k] = value`
        self.sites: dict[str, list[tuple[ast.AST, ast.AST]]] = {}  # (call or callback, its name), by last name
        self.simple_statements: list[ast.stmt] = []
        self.subscript_stores: list[ast.Subscript] = []  # `x[k] = ...` (os.environ["CUDA_VISIBLE_DEVICES"])
        self.withs: list[ast.With | ast.AsyncWith] = []
        self.strings: set[str] = set()  # short string constants (env names)
        self._kinds: dict[tuple[int, str], frozenset[str]] = {}
        self._callee: dict[ast.Call, str] = {}
        self._scope_of: dict[ast.AST, ast.AST] = {}  # each node's function (def), or the module
        self._function_guard: dict[FunctionNode, bool | None] = {}
        self.returns: dict[FunctionNode, list[ast.Return]] = {}
        self.attr_reads: set[str] = set()  # `X.attr` read, X not self
        self.program: Resolver | None = None  # set when the file is read as part of a program
        self._walk()

    # ------------------------------------------------------------------ the one pass over the tree
    def _walk(self) -> None:
        # Each node is visited with the function it is in and, in a method, (class, name of `self`):
        # what an assignment needs to know where it binds. Written for speed (a 2,000-line file has
        # ~40,000 nodes): dispatch on the exact type, no generators, no `ctx`/operator singletons.
        stack: list[tuple[ast.AST, ast.AST, tuple[ast.ClassDef, str] | None]] = [(self.tree, self.tree, None)]
        parent = self.parent
        scope_of = self._scope_of
        while stack:
            node, scope, method = stack.pop()
            scope_of[node] = scope
            kind = type(node)
            inner, inner_method = scope, method
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                function: FunctionNode = node  # type: ignore[assignment]
                self.functions.setdefault(function.name, []).append(function)
                owner = parent.get(node)
                inner = node
                args = function.args.args
                inner_method = (owner, args[0].arg) if isinstance(owner, ast.ClassDef) and args else None
            for field in node._fields:
                if field in _SKIP_FIELDS:
                    continue
                value = getattr(node, field, None)
                if isinstance(value, list):
                    for item in value:
                        if isinstance(item, ast.AST):
                            parent[item] = node
                            stack.append((item, inner, inner_method))
                elif isinstance(value, ast.AST):
                    parent[value] = node
                    stack.append((value, inner, inner_method))
            if kind is ast.Call:
                call: ast.Call = node  # type: ignore[assignment]
                self.calls.append(call)
                self._site(call.func, call)
                for value in (*call.args, *(k.value for k in call.keywords)):
                    if isinstance(value, ast.Name | ast.Attribute):
                        self._site(value, value)
            elif kind is ast.Attribute:
                if type(node.ctx) is ast.Load and not (  # type: ignore[attr-defined]
                    isinstance(node.value, ast.Name) and node.value.id == "self"  # type: ignore[attr-defined]
                ):
                    self.attr_reads.add(node.attr)  # type: ignore[attr-defined]
            elif kind is ast.Constant:
                text = node.value  # type: ignore[attr-defined]
                if isinstance(text, str) and len(text) < 40:
                    self.strings.add(text)
            elif kind in _SIMPLE:
                self.simple_statements.append(node)  # type: ignore[arg-type]
                if kind is ast.Assign:
                    assign: ast.Assign = node  # type: ignore[assignment]
                    for target in assign.targets:
                        self._bind(target, assign.value, scope, method)
                elif kind is ast.AnnAssign and node.value is not None:  # type: ignore[attr-defined]
                    self._bind(node.target, node.value, scope, method)  # type: ignore[attr-defined]
                elif kind is ast.Import or kind is ast.ImportFrom:
                    self._import(node)  # type: ignore[arg-type]
                elif kind is ast.Return and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
                    self.returns.setdefault(scope, []).append(node)  # type: ignore[arg-type]
            elif kind is ast.NamedExpr:
                self._bind(node.target, node.value, scope, method)  # type: ignore[attr-defined]
            elif kind is ast.With or kind is ast.AsyncWith:
                self.withs.append(node)  # type: ignore[arg-type]

    def _site(self, func: ast.AST, node: ast.AST) -> None:
        name = last_name(func)
        if name:
            self.sites.setdefault(name, []).append((node, func))

    def sites_of(self, function: FunctionNode) -> list[ast.AST]:
        """Where this file calls `function` (or passes it on): `name(...)` for a function,
        `obj.name(...)` for a method, but not `torch.save(...)` for a function named `save`."""
        method = isinstance(self.parent.get(function), ast.ClassDef)
        found = []
        for node, func in self.sites.get(function.name, []):
            if isinstance(func, ast.Name):
                keep = not method
            else:
                root = func
                while isinstance(root, ast.Attribute):
                    root = root.value
                keep = method and not (isinstance(root, ast.Name) and root.id in self.imports)
            if keep and not self._inside(node, function):
                found.append(node)
        return found

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        self.import_nodes.append(node)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.imports[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    self.imports[top] = top
            return
        module = "." * node.level + (node.module or "")
        joint = module if module.endswith(".") or not module else module + "."  # `from . import x`: `.x`
        for alias in node.names:
            if alias.name != "*":
                self.imports[alias.asname or alias.name] = joint + alias.name

    def _bind(self, target: ast.expr, value: ast.expr, scope: ast.AST, method: tuple[ast.ClassDef, str] | None) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts):
                    self._bind(t, v, scope, method)
            elif isinstance(value, ast.Call):  # `rank, world = setup()`: the call's element i
                for i, t in enumerate(target.elts):
                    self._bind(
                        t, ast.copy_location(ast.Subscript(value, ast.Constant(i), ast.Load()), value), scope, method
                    )
            return
        table = self.assigned
        if isinstance(target, ast.Subscript):
            self.subscript_stores.append(target)
            target, table = target.value, self.items
        key = dotted(target)
        if key:
            owner = method[0] if method and key.startswith(method[1] + ".") else scope
            table.setdefault((id(owner), key), []).append(value)

    # ------------------------------------------------------------------ scopes
    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parent:
            node = self.parent[node]
            yield node

    def function_of(self, node: ast.AST) -> FunctionNode | None:
        """The function (def) whose body holds `node`; lambdas are looked through."""
        scope = self._scope_of.get(node)
        return scope if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef) else None

    def _scopes(self, node: ast.AST) -> list[ast.AST]:
        """The scopes a name at `node` is looked up in, innermost first, the module last."""
        scopes = [up for up in self.ancestors(node) if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef)]
        return [*scopes, self.tree]

    def _class_of_method(self, node: ast.AST) -> tuple[ast.ClassDef, str] | None:
        """(class, name of `self`) when `node` is in a method."""
        function = self.function_of(node)
        if function is None:
            return None
        owner = self.parent.get(function)
        if isinstance(owner, ast.ClassDef) and function.args.args:
            return owner, function.args.args[0].arg
        return None

    def values_of(self, key: str, at: ast.AST, items: bool = False) -> tuple[int, list[ast.expr]]:
        """What was assigned to `key` (or, with `items`, to `key[...]`) in the scope `at` sees it in
        (Python's rule: the innermost function that assigns it, else the module), and that scope's id."""
        table = self.items if items else self.assigned
        method = self._class_of_method(at)
        if method and key.startswith(method[1] + "."):
            scope = id(method[0])
            return scope, table.get((scope, key), [])
        for scope_node in self._scopes(at):
            scope = id(scope_node)
            if (scope, key) in self.assigned or (scope, key) in self.items:
                return scope, table.get((scope, key), [])
        return id(self.tree), []

    # ------------------------------------------------------------------ names and values
    def qualname(self, expr: ast.AST) -> str | None:
        """`torch.distributed.init_process_group` for `dist.init_process_group` after
        `import torch.distributed as dist`; an unimported name stands for itself."""
        if isinstance(expr, ast.Name):
            return self.imports.get(expr.id, expr.id)
        if isinstance(expr, ast.Attribute):
            base = self.qualname(expr.value)
            return f"{base}.{expr.attr}" if base else None
        return None

    def callee(self, call: ast.Call) -> str:
        """The called function's qualified name, or its last name, or ''."""
        name = self._callee.get(call)
        if name is None:
            name = self._callee[call] = self.qualname(call.func) or last_name(call.func) or ""
        return name

    def env_name(self, expr: ast.AST) -> str | None:
        """`RANK` for `os.environ["RANK"]`, `os.environ.get("RANK", ...)`, `os.getenv("RANK")`."""
        if isinstance(expr, ast.Subscript) and self.qualname(expr.value) == "os.environ":
            return const_str(expr.slice)
        if isinstance(expr, ast.Call) and expr.args and self.qualname(expr.func) in ENV_READERS:
            return const_str(expr.args[0])
        return None

    def kinds(self, expr: ast.AST | None) -> frozenset[str]:
        """Where the value of `expr` comes from: GLOBAL_RANK, LOCAL_RANK, GLOBAL_DEVICE, WRAPPER."""
        if expr is None:
            return NONE
        if isinstance(expr, ast.Name | ast.Attribute):
            key = dotted(expr)
            if key is not None:
                return self._key_kinds(key, expr)
            return NONE
        env = self.env_name(expr)
        if env is not None:
            kind = ENV_KINDS.get(env)
            return frozenset({kind}) if kind else NONE
        if isinstance(expr, ast.Call):
            return self._call_kinds(expr)
        if isinstance(expr, ast.Subscript):
            return self._item_kinds(expr)
        if isinstance(expr, ast.JoinedStr):
            head = const_str(expr.values[0]) if expr.values else None
            if head and head.startswith("cuda"):
                inner = frozenset().union(
                    *(self.kinds(v.value) for v in expr.values if isinstance(v, ast.FormattedValue))
                )
                return frozenset({GLOBAL_DEVICE}) if GLOBAL_RANK in inner else NONE
            return NONE
        if isinstance(expr, ast.BinOp):
            head = const_str(expr.left)
            if head and head.startswith("cuda") and isinstance(expr.op, ast.Mod | ast.Add):
                return frozenset({GLOBAL_DEVICE}) if GLOBAL_RANK in self.kinds(expr.right) else NONE
            return NONE
        if isinstance(expr, ast.IfExp):
            both = self.kinds(expr.body) | self.kinds(expr.orelse)
            if any(isinstance(b, ast.Attribute) and b.attr == "module" for b in (expr.body, expr.orelse)):
                return both - {WRAPPER}  # `m.module if hasattr(m, "module") else m`: unwrapped
            return both
        if isinstance(expr, ast.BoolOp):
            return frozenset().union(*(self.kinds(v) for v in expr.values))
        if isinstance(expr, ast.NamedExpr):
            return self.kinds(expr.value)
        return NONE

    def _item_kinds(self, expr: ast.Subscript) -> frozenset[str]:
        """`env["RANK"]` of a dict over `os.environ`, `d["rank"]` of a dict literal, `setup()[0]`."""
        key = expr.slice.value if isinstance(expr.slice, ast.Constant) else None
        if key is None:
            return NONE
        base = expr.value
        if isinstance(base, ast.Call) and isinstance(key, int) and self.program is not None:
            return self.program.return_kinds(self, base, key) or NONE
        if not isinstance(base, ast.Name) or not isinstance(key, str):
            return NONE
        found: set[str] = set()
        for value in self.values_of(base.id, base)[1]:
            if self.qualname(value) == "os.environ" or (
                isinstance(value, ast.Call) and self.qualname(value.func) in ("os.environ.copy", "dict")
            ):
                found.add(ENV_KINDS.get(key, ""))
            elif isinstance(value, ast.DictComp) and self.env_name(value.value) is None:
                inner = value.value
                reads_env = isinstance(inner, ast.Subscript | ast.Call) and any(
                    self.qualname(n) == "os.environ" or self.qualname(n) in ENV_READERS for n in ast.walk(inner)
                )
                if reads_env:
                    found.add(ENV_KINDS.get(key, ""))
            elif isinstance(value, ast.Dict):
                for k, v in zip(value.keys, value.values):
                    if const_str(k) == key:
                        found |= self.kinds(v)
        found.discard("")
        return frozenset(found)

    def _call_kinds(self, call: ast.Call) -> frozenset[str]:
        name = self.callee(call)
        last = name.rsplit(".", 1)[-1]
        if last in RANK_CALLS:
            return frozenset({RANK_CALLS[last]})
        func = call.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "format"
            and (const_str(func.value) or "").startswith("cuda")
        ):
            inner = frozenset().union(*(self.kinds(a) for a in call.args))
            return frozenset({GLOBAL_DEVICE}) if GLOBAL_RANK in inner else NONE
        if last in WRAPPERS:
            return frozenset({WRAPPER})
        if name in ("int", "str") and len(call.args) == 1:
            return self.kinds(call.args[0]) & {GLOBAL_RANK, LOCAL_RANK}
        if name == "torch.device":
            inner = frozenset().union(*(self.kinds(a) for a in call.args))
            if GLOBAL_RANK in inner or GLOBAL_DEVICE in inner:
                return frozenset({GLOBAL_DEVICE})
            return NONE
        if self.program is not None:
            returned = self.program.return_kinds(self, call)
            if returned is not None:
                return returned
        return NONE

    def _key_kinds(self, key: str, at: ast.AST) -> frozenset[str]:
        owner = self._param_owner(key, at)
        if owner is not None:  # a parameter: what its callers pass, and what its function assigns
            scope, values = id(owner), self.assigned.get((id(owner), key), [])
        else:
            scope, values = self.values_of(key, at)
        memo = (scope, key)
        if memo in self._kinds:
            return self._kinds[memo]
        self._kinds[memo] = NONE  # a cycle (x = x + 1) adds nothing
        result = frozenset().union(*(self.kinds(v) for v in values)) if values else NONE
        if self.program is not None:
            if owner is not None:
                result |= self.program.param_kinds(self, owner, key)
            elif not values and "." in key and not key.startswith("self."):
                result |= self.program.attr_kinds(key.rsplit(".", 1)[1])
        self._kinds[memo] = result
        return result

    def _param_owner(self, key: str, at: ast.AST) -> FunctionNode | None:
        """The function whose parameter `key` (a plain name) is, where `at` reads it."""
        if "." in key:
            return None
        for up in self.ancestors(at):
            if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef):
                a = up.args
                if any(p.arg == key for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)):
                    return up
                if (id(up), key) in self.assigned:
                    return None
        return None

    def _inside(self, node: ast.AST, outer: ast.AST) -> bool:
        return any(up is outer for up in self.ancestors(node))

    def in_loop_or_function(self, node: ast.AST) -> bool:
        return any(
            isinstance(
                up,
                ast.For
                | ast.AsyncFor
                | ast.While
                | ast.FunctionDef
                | ast.AsyncFunctionDef
                | ast.ListComp
                | ast.SetComp
                | ast.GeneratorExp
                | ast.DictComp,
            )
            for up in self.ancestors(node)
        )

    def under_cuda_check(self, node: ast.AST) -> bool:
        """`node` is in a branch of an `if` (or `x if c else y`) whose test looks at the device."""
        child = node
        for up in self.ancestors(node):
            if isinstance(up, ast.If | ast.IfExp) and child is not up.test:
                text = ast.unparse(up.test).lower()
                if any(word in text for word in ("cuda", "gpu", "accelerator", "device", "nccl")):
                    return True
            child = up
        return False

    def statement_of(self, node: ast.AST) -> ast.stmt | None:
        if isinstance(node, ast.stmt):
            return node
        for up in self.ancestors(node):
            if isinstance(up, ast.stmt):
                return up
        return None
