"""What the checks share: the facts of the whole program (`Project`) and how a finding is made.

The rules judge a file with the program it belongs to: the script and every local module it
imports (program.py). `Project` says whether the program initialises a process group (the sampler,
save and download rules apply only then), calls `set_epoch`, reads the local rank from the
environment, picks a device from the local rank (a device use given it, not a mere read), loads a
checkpoint back into a DDP wrapper, or uses CUDA with no check for it, and what the job's layout is
(a rule's severity can depend on it).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddpctl.lint.findings import Finding
from ddpctl.lint.guards import is_rank_expr
from ddpctl.lint.index import ENV_KINDS, LOCAL_RANK, WRAPPER, Index, const_str, dotted, last_name
from ddpctl.lint.program import UNKNOWN_LAYOUT, Layout, Program, program_of
from ddpctl.lint.rules import BY_ID, Severity
from ddpctl.lint.source import Source
from ddpctl.records import record

INIT_CALLS = frozenset({"init_process_group", "init_device_mesh", "init_distributed"})
LOCAL_ENV = frozenset(name for name, kind in ENV_KINDS.items() if kind == LOCAL_RANK)
LOCAL_CALLS = frozenset({"get_node_local_rank", "local_process_index"})


SET_DEVICE = frozenset({"set_device", "set_device_index"})


def device_sinks(idx: Index, call: ast.Call) -> Iterator[tuple[ast.expr, str]]:
    """The arguments of `call` that name a device, and how the call reads (for the message)."""
    name = idx.callee(call)
    last = name.rsplit(".", 1)[-1]
    func = call.func
    if last in SET_DEVICE and call.args and ("cuda" in name or "accelerator" in name or name == last):
        yield (
            call.args[0],
            "torch.accelerator.set_device_index" if last == "set_device_index" else "torch.cuda.set_device",
        )
    if isinstance(func, ast.Attribute) and func.attr in ("to", "cuda") and call.args:
        yield call.args[0], f".{func.attr}()"
    for kw in call.keywords:
        if kw.arg == "device_ids":
            values = kw.value.elts if isinstance(kw.value, ast.List | ast.Tuple) else [kw.value]
            for value in values:
                yield value, "device_ids"
        elif kw.arg in ("output_device", "device", "map_location"):
            yield kw.value, f"{kw.arg}="


def _per_process(idx: Index, expr: ast.AST, depth: int = 0) -> bool:
    """A device chosen per process: from the local rank (`local_rank`, `f"cuda:{local_rank}"`,
    `torch.device("cuda", local_rank)`, ...), or `rank % n`."""
    if depth > 4:
        return False
    if LOCAL_RANK in idx.kinds(expr):
        return True
    deeper = depth + 1
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        if const_str(expr.left) is None:
            return True  # `rank % n`: one device per process on a node
        return _per_process(idx, expr.right, deeper)  # `"cuda:%d" % local_rank`
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _per_process(idx, expr.left, deeper) or _per_process(idx, expr.right, deeper)
    if isinstance(expr, ast.JoinedStr):
        return any(_per_process(idx, v.value, deeper) for v in expr.values if isinstance(v, ast.FormattedValue))
    if isinstance(expr, ast.Tuple | ast.List):
        return any(_per_process(idx, e, deeper) for e in expr.elts)
    if isinstance(expr, ast.Call) and expr.args and last_name(expr.func) in ("int", "str", "device", "format"):
        return any(_per_process(idx, a, deeper) for a in expr.args)
    key = dotted(expr) if isinstance(expr, ast.Name | ast.Attribute) else None
    if key:
        return any(_per_process(idx, v, deeper) for v in idx.values_of(key, expr)[1])
    return False


def picks_local_device(idx: Index) -> bool:
    """A device use (`set_device`, `.to`, `.cuda`, `device_ids`, `device=`, ...) given a device chosen
    per process, or `CUDA_VISIBLE_DEVICES` set from the local rank; a read of the local rank that
    picks no device (a print, a log line) is not one."""
    for call in idx.calls:
        for expr, _ in device_sinks(idx, call):
            if _per_process(idx, expr):
                return True
    for target in idx.subscript_stores:
        statement = idx.statement_of(target)
        if (
            isinstance(statement, ast.Assign)
            and idx.qualname(target.value) == "os.environ"
            and const_str(target.slice) == "CUDA_VISIBLE_DEVICES"
            and _per_process(idx, statement.value)
        ):
            return True
    return False


def is_set_epoch(idx: Index, call: ast.Call) -> bool:
    return (
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "set_epoch"
        and bool(call.args)
        and not isinstance(call.args[0], ast.Constant)
        and idx.in_loop_or_function(call)
    )


def _cuda_checked(idx: Index, node: ast.AST) -> bool:
    """Under an `if` that asks for CUDA itself (`torch.cuda.is_available()`, `device.type == "cuda"`)."""
    child = node
    for up in idx.ancestors(node):
        if isinstance(up, ast.If | ast.IfExp) and child is not up.test:
            text = ast.unparse(up.test).lower()
            if "cuda" in text or "is_available" in text or "nccl" in text:
                return True
        child = up
    return False


def _cuda_string(expr: ast.AST) -> bool:
    """A string that names a CUDA device: `"cuda"`, `"cuda:1"`, `f"cuda:{i}"`, `"cuda:%d" % i`,
    `"cuda:" + str(i)`, `"cuda:{}".format(i)`."""
    text = const_str(expr)
    if text is not None:
        return text.startswith("cuda")
    if isinstance(expr, ast.JoinedStr):
        return bool(expr.values) and (const_str(expr.values[0]) or "").startswith("cuda")
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod | ast.Add):
        return (const_str(expr.left) or "").startswith("cuda")
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format":
        return (const_str(expr.func.value) or "").startswith("cuda")
    return False


def _cuda_device(idx: Index, expr: ast.AST, depth: int = 0) -> bool:
    """`expr` is always a CUDA device: a CUDA device string, `torch.device("cuda...")` or
    `torch.device("cuda", i)`, or a name every assignment of which (none under a CUDA check) is one.
    A name with no assignment here (`args.device`, an argparse default) is not known to be one."""
    if depth > 4:
        return False
    if _cuda_string(expr):
        return True
    if isinstance(expr, ast.Call) and idx.callee(expr) == "torch.device" and expr.args:
        return _cuda_device(idx, expr.args[0], depth + 1)
    key = dotted(expr) if isinstance(expr, ast.Name | ast.Attribute) else None
    if key:
        values = idx.values_of(key, expr)[1]
        return bool(values) and all(not _cuda_checked(idx, v) and _cuda_device(idx, v, depth + 1) for v in values)
    return False


def _needs_cuda(idx: Index, call: ast.Call) -> bool:
    """`call` fails without CUDA: `.cuda()`, `torch.cuda.set_device`, `.to(rank)` (an int: a GPU), or a
    device use (`.to`, `device=`, `device_ids`, `map_location=`, ...) given a CUDA device."""
    func = call.func
    name = last_name(func)
    if isinstance(func, ast.Attribute):
        callee = idx.callee(call)
        if name == "cuda" or (
            name in ("set_device", "set_device_index") and ("cuda" in callee or "accelerator" in callee)
        ):
            return True
        if name == "to" and call.args:
            target = call.args[0]
            if isinstance(target, ast.Name | ast.Attribute) and is_rank_expr(idx, target):
                return True
    return any(_cuda_device(idx, expr) for expr, _ in device_sinks(idx, call))


def _uses_cuda_always(idx: Index) -> bool:
    """CUDA used with no check for it: `torch.cuda.set_device(...)`, `model.cuda()`, `.to(rank)`,
    `.to("cuda")`, `.to(device)` of `device = torch.device(f"cuda:{i}")`, DDP given device_ids."""
    for call in idx.calls:
        ddp = idx.callee(call).rsplit(".", 1)[-1] in ("DistributedDataParallel", "DDP")
        given = next((k.value for k in call.keywords if k.arg == "device_ids"), None)
        uses = (ddp and given is not None and not _none_somewhere(given)) or _needs_cuda(idx, call)
        if uses and not _cuda_checked(idx, call):
            return True
    return False


def _none_somewhere(value: ast.AST) -> bool:
    """`device_ids=None`, or `[dev] if on_cuda else None` (what `--fix` writes): no GPU on the CPU path."""
    if isinstance(value, ast.Constant) and value.value is None:
        return True
    return isinstance(value, ast.IfExp) and (_none_somewhere(value.body) or _none_somewhere(value.orelse))


def _loads_into_wrapper(idx: Index) -> bool:
    return any(
        isinstance(c.func, ast.Attribute) and c.func.attr == "load_state_dict" and WRAPPER in idx.kinds(c.func.value)
        for c in idx.calls
    )


@record
class Project:
    """Facts over the whole program."""

    distributed: bool  # it initialises a process group
    set_epoch: bool  # it calls X.set_epoch(epoch) in a loop or a function
    reads_local_rank: bool  # it reads the local rank from the launcher (LOCAL_RANK, get_node_local_rank)
    program: Program | None = None
    layout: Layout = UNKNOWN_LAYOUT
    cuda_always: bool = False  # it uses CUDA with no check for it: gloo would not make it run on CPU
    loads_into_wrapper: bool = False  # a DDP wrapper's load_state_dict: its own checkpoint comes back
    local_device: bool = False  # a device use is given a device chosen per process (picks_local_device)

    @classmethod
    def of(cls, program: Program, layout: Layout = UNKNOWN_LAYOUT) -> Project:
        indexes = [m.idx for m in program.modules]
        return cls(
            any(any(idx.callee(c).rsplit(".", 1)[-1] in INIT_CALLS for c in idx.calls) for idx in indexes),
            any(any(is_set_epoch(idx, c) for c in idx.calls) for idx in indexes),
            any(
                bool(LOCAL_ENV & idx.strings) or any(last_name(c.func) in LOCAL_CALLS for c in idx.calls)
                for idx in indexes
            ),
            program,
            layout,
            any(_uses_cuda_always(idx) for idx in indexes),
            any(_loads_into_wrapper(idx) for idx in indexes),
            any(picks_local_device(idx) for idx in indexes),
        )


def finding(
    src: Source,
    node: ast.AST,
    rule_id: str,
    message: str,
    fix: str | None = None,
    severity: Severity | None = None,
) -> Finding:
    rule = BY_ID[rule_id]
    line = getattr(node, "lineno", 1)
    col = src.char_col(line, getattr(node, "col_offset", 0)) + 1
    return Finding(
        src.display,
        line,
        col,
        rule.id,
        severity or rule.severity,
        message,
        fix or rule.fix,
        fixable=rule.fixable,
        node=node,
    )


def short(node: ast.AST, limit: int = 60) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def origin(idx: Index, expr: ast.AST, kind: str) -> str:
    """` (rank = dist.get_rank(), line 12)`: where a name got its rank, for the message; for a
    parameter, the call that passed it."""
    key = dotted(expr) if isinstance(expr, ast.Name | ast.Attribute) else None
    if key is None:
        return ""
    for value in idx.values_of(key, expr)[1]:
        if kind in idx.kinds(value) and hasattr(value, "lineno"):
            return f" ({key} = {short(value, 40)}, line {value.lineno})"
    function = idx.function_of(expr)
    program = program_of(idx)
    if function is not None and program is not None and "." not in key:
        for module, call, _ in program.calls_of(program.module_of(idx), function):
            if any(kind in module.idx.kinds(a) for a in (*call.args, *(k.value for k in call.keywords))):
                return f" (a parameter of {function.name}, given it at {module.src.display}:{call.lineno})"
    return ""
