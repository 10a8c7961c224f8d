"""What the checks ask of one file, computed once from its syntax tree (the file is never run).

- **Names**: each import's local name maps to its qualified name (`dist` -> `torch.distributed`), so
  `dist.get_rank`, `torch.distributed.get_rank` and `from torch.distributed import get_rank` read alike.
- **Where a value comes from**: a name (or `self.attr`, across the class's methods) holds the global
  rank when something assigned to it does: `dist.get_rank()`, `os.environ["RANK"]`, `int(...)` of one of
  those, or another such name. `% n` does not carry it (`rank % torch.cuda.device_count()` is the
  single-node tutorial's device, right when every node has the same GPUs); other arithmetic neither.
  The local rank (`LOCAL_RANK`), a device built from the global rank, and a DDP/DataParallel wrapper
  are followed the same way. Flow-insensitive: any assignment in the scope counts.
- **Rank-0 guards** (`guard`): a statement runs on one process (per job or per node) when it is in the
  body of an `if` whose test is a rank-0 test, in the `else` of its negation, after an early exit
  (`if rank != 0: return`), in a function decorated `@rank_zero_only`, or in a function whose every
  call in this file is itself guarded. A rank-0 test is `RANK == 0` for a rank expression (a name
  holding a rank, a name such as `rank`, `global_rank`, `local_rank`, `gpu_id`, `dist.get_rank()`,
  `rank % n`), a main-process flag (`is_main`, `is_master`, `accelerator.is_main_process`,
  `trainer.is_global_zero`, ...), or a single-process test (`world_size == 1`, `not distributed`);
  `and` with one of those, `or` of only those. The local rank counts: one writer per node is
  PyTorch's multi-node tutorial's choice for node-local storage.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

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
MAIN_NAME = re.compile(
    r"(is_)?(main|master|chief|leader|primary|root|global_zero|world_process_zero|local_process_zero|"
    r"rank_?zero|rank_?0|local_main|local_master)(_process|_rank|_proc)?",
    re.IGNORECASE,
)
RANK_ZERO_DECORATOR = re.compile(r"rank_?zero|rank_?0|main_process|master_only|on_main", re.IGNORECASE)
EXITS = frozenset({"exit", "_exit", "quit"})
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
        for alias in node.names:
            if alias.name != "*":
                self.imports[alias.asname or alias.name] = f"{module}.{alias.name}" if module else alias.name

    def _bind(self, target: ast.expr, value: ast.expr, scope: ast.AST, method: tuple[ast.ClassDef, str] | None) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts):
                    self._bind(t, v, scope, method)
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

    def _call_kinds(self, call: ast.Call) -> frozenset[str]:
        name = self.callee(call)
        last = name.rsplit(".", 1)[-1]
        if last in RANK_CALLS:
            return frozenset({RANK_CALLS[last]})
        if last in WRAPPERS:
            return frozenset({WRAPPER})
        if name in ("int", "str") and len(call.args) == 1:
            return self.kinds(call.args[0]) & {GLOBAL_RANK, LOCAL_RANK}
        if name == "torch.device":
            inner = frozenset().union(*(self.kinds(a) for a in call.args))
            if GLOBAL_RANK in inner or GLOBAL_DEVICE in inner:
                return frozenset({GLOBAL_DEVICE})
        return NONE

    def _key_kinds(self, key: str, at: ast.AST) -> frozenset[str]:
        scope, values = self.values_of(key, at)
        memo = (scope, key)
        if memo in self._kinds:
            return self._kinds[memo]
        self._kinds[memo] = NONE  # a cycle (x = x + 1) adds nothing
        result = frozenset().union(*(self.kinds(v) for v in values)) if values else NONE
        self._kinds[memo] = result
        return result

    # ------------------------------------------------------------------ rank tests and guards
    def is_rank_expr(self, expr: ast.AST) -> bool:
        if self.kinds(expr) & {GLOBAL_RANK, LOCAL_RANK}:
            return True
        if isinstance(expr, ast.Name | ast.Attribute):
            return (last_name(expr) or "").lower() in RANK_NAMES
        if isinstance(expr, ast.Call):
            name = self.callee(expr)
            if name in ("int", "str") and len(expr.args) == 1:
                return self.is_rank_expr(expr.args[0])
            return name.rsplit(".", 1)[-1] in (*RANK_CALLS, "get_local_rank")
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
            return self.is_rank_expr(expr.left)  # rank % gpus_per_node: the local rank
        return False

    def _is_main_flag(self, expr: ast.AST) -> bool:
        name = last_name(expr)
        return bool(name and MAIN_NAME.fullmatch(name))

    def _single_process(self, expr: ast.AST) -> bool:
        """`world_size == 1`, `dist.get_world_size() == 1`."""
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.ops[0], ast.Eq):
            side = expr.left if is_const(expr.comparators[0], 1) else expr.comparators[0]
            if is_const(expr.left, 1) or is_const(expr.comparators[0], 1):
                name = (last_name(side) or "").lower()
                return name in ("world_size", "get_world_size", "world", "num_processes")
        return False

    def _not_distributed(self, operand: ast.AST) -> bool:
        """The operand of a `not` that means "this is one process": `not distributed`, `not dist.is_initialized()`."""
        name = (last_name(operand) or "").lower()
        return "distributed" in name or name in ("is_initialized", "ddp", "use_ddp", "multi_gpu", "multiprocessing")

    def rank0_test(self, test: ast.AST) -> bool:
        """True where `test` holds only on rank 0 (of the job, or of a node), or in a single process."""
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, op, right = test.left, test.ops[0], test.comparators[0]
            if isinstance(op, ast.Eq) and (is_const(right, 0) and self.is_rank_expr(left)):
                return True
            if isinstance(op, ast.Eq) and (is_const(left, 0) and self.is_rank_expr(right)):
                return True
            if isinstance(op, ast.Lt) and is_const(right, 1) and self.is_rank_expr(left):
                return True
            return self._single_process(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            operand = test.operand
            return self.is_rank_expr(operand) or self._not_distributed(operand) or self.not_rank0_test(operand)
        if isinstance(test, ast.BoolOp):
            if isinstance(test.op, ast.And):
                return any(self.rank0_test(v) for v in test.values)
            return all(self.rank0_test(v) for v in test.values)
        if isinstance(test, ast.Name | ast.Attribute | ast.Call):
            return self._is_main_flag(test)
        return False

    def not_rank0_test(self, test: ast.AST) -> bool:
        """True where `test` holds only off rank 0: `rank != 0`, `rank > 0`, `not is_main`."""
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, op, right = test.left, test.ops[0], test.comparators[0]
            if isinstance(op, ast.NotEq | ast.Gt | ast.IsNot) and is_const(right, 0) and self.is_rank_expr(left):
                return True
            if isinstance(op, ast.NotEq) and is_const(left, 0) and self.is_rank_expr(right):
                return True
            return isinstance(op, ast.GtE) and is_const(right, 1) and self.is_rank_expr(left)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._is_main_flag(test.operand) or self.rank0_test(test.operand)
        if isinstance(test, ast.BoolOp):
            if isinstance(test.op, ast.Or):
                return any(self.not_rank0_test(v) for v in test.values)
            return all(self.not_rank0_test(v) for v in test.values)
        if isinstance(test, ast.Name | ast.Attribute):
            return self.is_rank_expr(test)  # `if rank:` (nonzero)
        return False

    def _exits(self, body: list[ast.stmt]) -> bool:
        last = body[-1] if body else None
        if isinstance(last, ast.Return | ast.Raise | ast.Continue | ast.Break):
            return True
        return isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and last_name(last.value.func) in EXITS

    def lexically_guarded(self, node: ast.AST) -> bool:
        """`node` is under a rank-0 test within its own function (or at module level)."""
        child = node
        for up in self.ancestors(node):
            if isinstance(up, ast.If | ast.IfExp):
                in_body = child is up.body or (isinstance(up.body, list) and any(s is child for s in up.body))
                in_else = child is up.orelse or (isinstance(up.orelse, list) and any(s is child for s in up.orelse))
                if in_body and self.rank0_test(up.test):
                    return True
                if in_else and self.not_rank0_test(up.test):
                    return True
            if isinstance(child, ast.stmt):
                block = self._block_of(up, child)
                if block is not None:
                    for before in block:
                        if before is child:
                            break
                        if (
                            isinstance(before, ast.If)
                            and not before.orelse
                            and self.not_rank0_test(before.test)
                            and self._exits(before.body)
                        ):
                            return True
            if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
                return False
            child = up
        return False

    @staticmethod
    def _block_of(parent: ast.AST, child: ast.stmt) -> list[ast.stmt] | None:
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and any(s is child for s in block):
                return block
        for handler in getattr(parent, "handlers", ()):
            if any(s is child for s in handler.body):
                return list(handler.body)
        return None

    def guard(self, node: ast.AST) -> bool | None:
        """True when `node` runs only on rank 0 (or one process per node), False when it runs on every
        rank, None when this file cannot tell (its function is called from elsewhere)."""
        if self.lexically_guarded(node):
            return True
        function = self.function_of(node)
        if function is None:
            return False
        return self.function_guard(function)

    def function_guard(self, function: FunctionNode) -> bool | None:
        if function in self._function_guard:
            return self._function_guard[function]
        self._function_guard[function] = None  # recursion: no verdict from itself
        result: bool | None
        if any(RANK_ZERO_DECORATOR.search(ast.unparse(d)) for d in function.decorator_list):
            result = True
        else:
            verdicts = [self.guard(s) for s in self.sites_of(function)]
            if not verdicts:
                result = None
            elif any(v is False for v in verdicts):
                result = False
            elif all(v is True for v in verdicts):
                result = True
            else:
                result = None
        self._function_guard[function] = result
        return result

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
