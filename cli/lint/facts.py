"""What the checks share: the facts of the whole program (`Project`) and how a finding is made.

The rules judge a file with the program it belongs to: the script and every local module it
imports (program.py). `Project` says whether the program initialises a process group (the sampler,
save and download rules apply only then), calls `set_epoch`, reads the local rank from the
environment, loads a checkpoint back into a DDP wrapper, or uses CUDA with no check for it, and
what the job's layout is (a rule's severity can depend on it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ddpctl.lint.findings import Finding
from ddpctl.lint.guards import is_rank_expr
from ddpctl.lint.index import ENV_KINDS, LOCAL_RANK, WRAPPER, Index, const_str, dotted, last_name
from ddpctl.lint.program import UNKNOWN_LAYOUT, Layout, Program
from ddpctl.lint.rules import BY_ID, Severity
from ddpctl.lint.source import Source

INIT_CALLS = frozenset({"init_process_group", "init_device_mesh", "init_distributed"})
LOCAL_ENV = frozenset(name for name, kind in ENV_KINDS.items() if kind == LOCAL_RANK)
LOCAL_CALLS = frozenset({"get_node_local_rank", "local_process_index"})


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


def _needs_cuda(idx: Index, call: ast.Call) -> bool:
    func = call.func
    name = last_name(func)
    if not isinstance(func, ast.Attribute):
        return False
    callee = idx.callee(call)
    if name == "cuda" or (name in ("set_device", "set_device_index") and ("cuda" in callee or "accelerator" in callee)):
        return True
    if name == "to" and call.args:
        target = call.args[0]
        text = const_str(target) or ""
        if text.startswith("cuda") or (isinstance(target, ast.JoinedStr) and "cuda" in ast.unparse(target)):
            return True
        return isinstance(target, ast.Name | ast.Attribute) and is_rank_expr(idx, target)  # an int: a GPU
    return False


def _uses_cuda_always(idx: Index) -> bool:
    """CUDA used with no check for it: `torch.cuda.set_device(...)`, `model.cuda()`, `.to(rank)`,
    `.to("cuda")`, DDP given device_ids."""
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


@dataclass(frozen=True)
class Project:
    """Facts over the whole program."""

    distributed: bool  # it initialises a process group
    set_epoch: bool  # it calls X.set_epoch(epoch) in a loop or a function
    reads_local_rank: bool  # it reads the local rank from the launcher (LOCAL_RANK, get_node_local_rank)
    program: Program | None = None
    layout: Layout = UNKNOWN_LAYOUT
    cuda_always: bool = False  # it uses CUDA with no check for it: gloo would not make it run on CPU
    loads_into_wrapper: bool = False  # a DDP wrapper's load_state_dict: its own checkpoint comes back

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
    program = idx.program
    if function is not None and program is not None and "." not in key:
        for module, call, _ in program.calls_of(program.module_of(idx), function):
            if any(kind in module.idx.kinds(a) for a in (*call.args, *(k.value for k in call.keywords))):
                return f" (a parameter of {function.name}, given it at {module.src.display}:{call.lineno})"
    return ""
