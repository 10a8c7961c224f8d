"""Guards that guard: whether a statement runs on rank 0 only, judged under torchrun's environment.

A test is read as two facts: whether it holds only on rank 0 (`if test:` guards its body) and
whether its negation does (`else:`, and what follows `if test: return` guards). `and`, `or` and `not`
combine them as logic does, so `rank == 0 and epoch % 5 == 0` guards, `rank == 0 or epoch == 0` does
not, and `not args.multiprocessing_distributed or args.rank % ngpus == 0` does not either: under
torchrun the flag keeps its argparse default (False), so the test is true on every rank.

- **Rank-0 tests**: `RANK == 0` (also `< 1`, `<= 0`) for a rank expression (a name holding a rank, a
  name such as `rank`, `global_rank`, `local_rank`, `gpu_id`, `dist.get_rank()`, `rank % n`), a
  main-process flag or helper (`is_main`, `is_master`, `accelerator.is_main_process`,
  `trainer.is_global_zero`, `utils.is_main_process()`, or a function of the program that returns a
  rank-0 test), and a name assigned one. `RANK in {-1, 0}` (YOLOv5's guard) is one too: under torchrun
  the rank is never -1, so only 0 can match; but `args.local_rank in [-1, 0]` keeps its argparse
  default (-1) under torchrun and is true on every rank. `rank != 0`, `rank > 0` and `if rank:` hold off rank 0. The
  local rank counts: one writer per node is PyTorch's multi-node tutorial's choice for node-local
  storage.
- **torchrun's environment**: `WORLD_SIZE > 1`, so `world_size == 1` is false and `world_size > 1`
  true; `"RANK" in os.environ` and `dist.is_initialized()` are true; `rank != -1` is true; a name
  that says the run is distributed (`distributed`, `ddp`, `use_ddp`, `multi_gpu`), unless it is
  assigned something this reading can judge, is true; an argparse flag that nothing assigns keeps
  its default (torchrun passes the script none of its own flags). `not distributed` is therefore
  false: it is no guard by itself, only what it is combined with counts.
- **Where**: in the body of an `if` (or `x if c else y`) whose test holds only on rank 0, in the
  `else` of one whose negation does, after such an early exit (`if rank != 0: return`), in a function
  decorated `@rank_zero_only`, or in a function whose every call in the program is itself guarded.
"""

from __future__ import annotations

import ast
import re
from typing import NamedTuple

from ddpctl.lint.index import (
    RANK_CALLS,
    RANK_NAMES,
    RANK_ZERO_DECORATOR,
    FunctionNode,
    Index,
    const_str,
    dotted,
    last_name,
)
from ddpctl.lint.program import program_of

MAIN_NAME = re.compile(
    r"(is_)?(main|master|chief|leader|primary|root|global_zero|world_process_zero|local_process_zero|"
    r"rank_?zero|rank_?0|local_main|local_master)(_process|_rank|_proc|_worker)?",
    re.IGNORECASE,
)
WORLD_NAMES = frozenset({"world_size", "get_world_size", "world", "num_processes", "num_replicas", "ddp_world_size"})
DISTRIBUTED_NAMES = frozenset({"ddp", "use_ddp", "multi_gpu", "is_ddp", "is_distributed", "distributed"})
ALWAYS_TRUE_CALLS = frozenset({"is_initialized", "is_dist_avail_and_initialized", "is_dist_available_and_initialized"})
LAUNCHER_ENV = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE"})
EXITS = frozenset({"exit", "_exit", "quit"})
DEPTH = 4


class Truth(NamedTuple):
    """`only`: the test holds only on rank 0 (or never); `unless`: its negation does."""

    only: bool
    unless: bool

    def negate(self) -> Truth:
        return Truth(self.unless, self.only)


TRUE = Truth(False, True)
FALSE = Truth(True, False)
RANK0 = Truth(True, False)
OFF0 = Truth(False, True)
UNKNOWN = Truth(False, False)


def is_rank_expr(idx: Index, expr: ast.AST) -> bool:
    from ddpctl.lint.index import GLOBAL_RANK, LOCAL_RANK

    if isinstance(expr, ast.Name | ast.Attribute):
        if idx.kinds(expr) & {GLOBAL_RANK, LOCAL_RANK}:
            return True
        return (last_name(expr) or "").lower() in RANK_NAMES
    if isinstance(expr, ast.Call):
        name = idx.callee(expr)
        if name in ("int", "str") and len(expr.args) == 1:
            return is_rank_expr(idx, expr.args[0])
        if name.rsplit(".", 1)[-1] in (*RANK_CALLS, "get_local_rank", "get_process_index"):
            return True
        return bool(idx.kinds(expr) & {GLOBAL_RANK, LOCAL_RANK})
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        return is_rank_expr(idx, expr.left)  # rank % gpus_per_node: the local rank
    return bool(idx.kinds(expr) & {GLOBAL_RANK, LOCAL_RANK})


def _int(expr: ast.AST) -> int | None:
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = _int(expr.operand)
        return -inner if inner is not None else None
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    return None


def _rank_compare(op: ast.cmpop, value: int) -> Truth:
    """`rank OP value`, rank >= 0, rank 0 one of the processes."""
    if value < 0:
        if isinstance(op, ast.Eq | ast.Lt | ast.LtE):
            return FALSE
        return TRUE
    table: dict[type[ast.cmpop], Truth] = {
        ast.Eq: RANK0 if value == 0 else UNKNOWN,
        ast.NotEq: OFF0 if value == 0 else UNKNOWN,
        ast.Lt: RANK0 if value == 1 else (FALSE if value == 0 else UNKNOWN),
        ast.LtE: RANK0 if value == 0 else UNKNOWN,
        ast.Gt: OFF0 if value == 0 else UNKNOWN,
        ast.GtE: OFF0 if value == 1 else (TRUE if value == 0 else UNKNOWN),
    }
    return table.get(type(op), UNKNOWN)


_FLIP: dict[type[ast.cmpop], ast.cmpop] = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}


def _world_compare(op: ast.cmpop, value: int) -> Truth:
    """`WORLD_SIZE OP value`, WORLD_SIZE > 1."""
    if isinstance(op, ast.Eq):
        return FALSE if value <= 1 else UNKNOWN
    if isinstance(op, ast.NotEq):
        return TRUE if value <= 1 else UNKNOWN
    if isinstance(op, ast.Gt | ast.GtE):
        return TRUE if value <= (1 if isinstance(op, ast.Gt) else 2) else UNKNOWN
    if isinstance(op, ast.Lt | ast.LtE):
        return FALSE if value <= (2 if isinstance(op, ast.Lt) else 1) else UNKNOWN
    return UNKNOWN


def _constant(idx: Index, expr: ast.AST) -> tuple[bool, object]:
    """A literal, or the default of an argparse flag nothing assigns: (known, value)."""
    if isinstance(expr, ast.Constant):
        return True, expr.value
    value = _int(expr)
    if value is not None:
        return True, value
    program = program_of(idx)
    argument = program.argument(expr) if program is not None else None
    if argument is not None:
        if argument.default is None:
            return True, None
        try:
            return True, ast.literal_eval(argument.default)
        except ValueError:
            return False, None
    return False, None


def _membership(idx: Index, left: ast.AST, right: ast.AST) -> Truth:
    """`rank in {-1, 0}`: under torchrun the rank is >= 0, so only the non-negative members count;
    a flag torchrun never passes keeps its default instead (`args.local_rank in [-1, 0]` is true)."""
    if not isinstance(right, ast.Set | ast.List | ast.Tuple):
        return UNKNOWN
    members = [_int(e) for e in right.elts]
    if any(m is None for m in members):
        return UNKNOWN
    program = program_of(idx)
    flag: ast.AST | None = None
    if program is not None:
        key = dotted(left)
        values = idx.values_of(key, left)[1] if isinstance(left, ast.Name) and key else []
        flag = left if program.argument(left) is not None else None
        if flag is None and len(values) == 1 and program.argument(values[0]) is not None:
            flag = values[0]  # `local_rank = opt.local_rank`
    if flag is not None:
        known, value = _constant(idx, flag)
        return (TRUE if value in members else FALSE) if known else UNKNOWN
    if not is_rank_expr(idx, left):
        return UNKNOWN
    reachable = {m for m in members if m is not None and m >= 0}
    if not reachable:
        return FALSE
    return RANK0 if reachable == {0} else UNKNOWN


def _compare(idx: Index, test: ast.Compare, depth: int) -> Truth:
    if len(test.ops) != 1:
        return UNKNOWN
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if isinstance(op, ast.In | ast.NotIn) and idx.qualname(right) == "os.environ":
        if const_str(left) in LAUNCHER_ENV:
            return TRUE if isinstance(op, ast.In) else FALSE
        return UNKNOWN
    if isinstance(op, ast.In | ast.NotIn):
        verdict = _membership(idx, left, right)
        return verdict.negate() if isinstance(op, ast.NotIn) else verdict
    for a, b, o in ((left, right, op), (right, left, _FLIP.get(type(op), op))):
        value = _int(b)
        if value is None:
            continue
        if is_rank_expr(idx, a):
            return _rank_compare(o, value)
        name = (last_name(a) or "").lower()
        if (
            name in WORLD_NAMES
            or idx.env_name(a) == "WORLD_SIZE"
            or (isinstance(a, ast.Call) and a.args and idx.env_name(a.args[0]) == "WORLD_SIZE")
        ):
            return _world_compare(o, value)
    known_left, lv = _constant(idx, left)
    known_right, rv = _constant(idx, right)
    if known_left and known_right:
        if isinstance(op, ast.Eq | ast.Is):
            result = lv == rv if isinstance(op, ast.Eq) else lv is rv
        elif isinstance(op, ast.NotEq | ast.IsNot):
            result = lv != rv if isinstance(op, ast.NotEq) else lv is not rv
        else:
            return UNKNOWN
        return TRUE if result else FALSE
    return UNKNOWN


def _assigned(idx: Index, expr: ast.AST, depth: int) -> Truth | None:
    """The verdict of what a name holds, when every assignment to it agrees."""
    key = dotted(expr)
    if key is None or depth >= DEPTH:
        return None
    values = idx.values_of(key, expr)[1]
    sources = [(idx, v) for v in values]
    program = program_of(idx)
    if not values and program is not None and "." in key and not key.startswith("self."):
        sources = [(m.idx, v) for m, v in program.attr_values(key.rsplit(".", 1)[1])]
    if not sources:
        return None
    verdicts = {truth(i, v, depth + 1) for i, v in sources}
    return verdicts.pop() if len(verdicts) == 1 else UNKNOWN


def _name(idx: Index, expr: ast.Name | ast.Attribute, depth: int) -> Truth:
    name = (last_name(expr) or "").lower()
    if MAIN_NAME.fullmatch(name):
        return RANK0
    if is_rank_expr(idx, expr):
        return OFF0  # `if rank:`
    program = program_of(idx)
    if program is not None and program.argument(expr) is not None:
        known, value = _constant(idx, expr)
        return (TRUE if value else FALSE) if known else UNKNOWN
    held = _assigned(idx, expr, depth)
    if held is not None and held != UNKNOWN:
        return held
    if name in DISTRIBUTED_NAMES or "distributed" in name or name.endswith("_ddp"):
        return TRUE
    return held or UNKNOWN


def _call(idx: Index, call: ast.Call, depth: int) -> Truth:
    name = last_name(call.func) or ""
    if MAIN_NAME.fullmatch(name):
        return RANK0
    if name in ALWAYS_TRUE_CALLS:
        return TRUE
    if name in ("int", "bool") and len(call.args) == 1:
        return truth(idx, call.args[0], depth + 1)
    program = program_of(idx)
    if program is not None and depth < DEPTH:
        target = program.resolve_call(program.module_of(idx), call.func)
        if target is not None:
            module, function = target
            verdicts = {truth(module.idx, r.value, depth + 1) for r in module.idx.returns.get(function, ()) if r.value}
            if len(verdicts) == 1:
                return verdicts.pop()
    return UNKNOWN


def truth(idx: Index, test: ast.AST | None, depth: int = 0) -> Truth:
    """What `test` says about the process it runs in, under torchrun (see the module's docstring)."""
    if test is None or depth > DEPTH + 2:
        return UNKNOWN
    if isinstance(test, ast.Constant):
        return TRUE if test.value else FALSE
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return truth(idx, test.operand, depth + 1).negate()
    if isinstance(test, ast.BoolOp):
        parts = [truth(idx, v, depth + 1) for v in test.values]
        if isinstance(test.op, ast.And):
            return Truth(any(p.only for p in parts), all(p.unless for p in parts))
        return Truth(all(p.only for p in parts), any(p.unless for p in parts))
    if isinstance(test, ast.Compare):
        return _compare(idx, test, depth)
    if isinstance(test, ast.Name | ast.Attribute):
        return _name(idx, test, depth)
    if isinstance(test, ast.Call):
        return _call(idx, test, depth)
    if isinstance(test, ast.NamedExpr):
        return truth(idx, test.value, depth + 1)
    if isinstance(test, ast.BinOp) and is_rank_expr(idx, test):
        return OFF0  # `if rank % 8:`
    return UNKNOWN


# ---------------------------------------------------------------------------------------- where


def _exits(body: list[ast.stmt]) -> bool:
    last = body[-1] if body else None
    if isinstance(last, ast.Return | ast.Raise | ast.Continue | ast.Break):
        return True
    return isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and last_name(last.value.func) in EXITS


def _block_of(parent: ast.AST, child: ast.stmt) -> list[ast.stmt] | None:
    for name in ("body", "orelse", "finalbody"):
        block = getattr(parent, name, None)
        if isinstance(block, list) and any(s is child for s in block):
            return block
    for handler in getattr(parent, "handlers", ()):
        if any(s is child for s in handler.body):
            return list(handler.body)
    return None


def lexically_guarded(idx: Index, node: ast.AST) -> bool:
    """`node` is under a rank-0 test within its own function (or at module level)."""
    child = node
    for up in idx.ancestors(node):
        if isinstance(up, ast.If | ast.IfExp):
            in_body = child is up.body or (isinstance(up.body, list) and any(s is child for s in up.body))
            in_else = child is up.orelse or (isinstance(up.orelse, list) and any(s is child for s in up.orelse))
            if in_body and truth(idx, up.test).only:
                return True
            if in_else and truth(idx, up.test).unless:
                return True
        if isinstance(child, ast.stmt):
            block = _block_of(up, child)
            if block is not None:
                for before in block:
                    if before is child:
                        break
                    if (
                        isinstance(before, ast.If)
                        and not before.orelse
                        and _exits(before.body)
                        and truth(idx, before.test).unless
                    ):
                        return True
        if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            return False
        child = up
    return False


def guard(idx: Index, node: ast.AST) -> bool | None:
    """True when `node` runs only on rank 0 (or one process per node), False when it runs on every
    rank, None when the program cannot tell (its function is never called)."""
    if lexically_guarded(idx, node):
        return True
    function = idx.function_of(node)
    if function is None:
        return False
    return function_guard(idx, function)


def function_guard(idx: Index, function: FunctionNode) -> bool | None:
    cache = idx._function_guard
    if function in cache:
        return cache[function]
    cache[function] = None  # recursion: no verdict from itself
    result: bool | None
    if any(RANK_ZERO_DECORATOR.search(ast.unparse(d)) for d in function.decorator_list):
        result = True
    else:
        sites: list[tuple[Index, ast.AST]] = [(idx, s) for s in idx.sites_of(function)]
        program = program_of(idx)
        if program is not None:
            seen = {id(s) for _, s in sites}
            module = program.module_of(idx)
            sites += [(m.idx, c) for m, c, _ in program.calls_of(module, function) if id(c) not in seen]
        verdicts = [guard(i, s) for i, s in sites]
        if not verdicts:
            result = None
        elif any(v is False for v in verdicts):
            result = False
        elif all(v is True for v in verdicts):
            result = True
        else:
            result = None
    cache[function] = result
    return result
