"""The checkers of where a process runs: DDP001 (the device from the global rank), DDP002 (a
`--local_rank` argument torchrun never passes), DDP010 (a backend that needs CUDA in a script that
could run without it) and DDP014 (every process on one device)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddpctl.lint.facts import Project, device_sinks, finding, origin, short
from ddpctl.lint.findings import Finding
from ddpctl.lint.index import GLOBAL_DEVICE, GLOBAL_RANK, Index, const_str, dotted, keyword, last_name
from ddpctl.lint.program import _dest
from ddpctl.lint.rules import Severity
from ddpctl.lint.source import Source

LOCAL_RANK_FLAGS = frozenset({"--local_rank", "--local-rank"})
DDP_WRAPS = frozenset({"DistributedDataParallel", "DDP"})

# ---------------------------------------------------------------------------------------- DDP001


def _builds_device(expr: ast.AST) -> bool:
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format":
        return (const_str(expr.func.value) or "").startswith("cuda")
    return isinstance(expr, ast.JoinedStr | ast.BinOp) or (
        isinstance(expr, ast.Call) and last_name(expr.func) == "device"
    )


def global_rank_device(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    multi = project.layout.multi_node
    severity = Severity.error if multi else Severity.info
    tail = (
        "a GPU index only on the first node"
        if project.layout.nodes is None
        else ("past the node's GPUs on node 1 and later" if multi else "right on this one-node job only")
    )
    seen: set[int] = set()

    def built(node: ast.AST) -> Finding:
        seen.add(id(node))
        return finding(
            src, node, "DDP001", f"`{short(node)}` builds the device from the global rank: {tail}", None, severity
        )

    for call in idx.calls:
        for expr, where in device_sinks(idx, call):
            kinds = idx.kinds(expr)
            if GLOBAL_RANK in kinds and id(expr) not in seen:
                seen.add(id(expr))
                yield finding(
                    src,
                    expr,
                    "DDP001",
                    f"{where} gets the global rank `{short(expr)}`{origin(idx, expr, GLOBAL_RANK)}: {tail}",
                    None,
                    severity,
                )
            elif GLOBAL_DEVICE in kinds and _builds_device(expr) and id(expr) not in seen:
                yield built(expr)
        if idx.callee(call) == "torch.device" and GLOBAL_DEVICE in idx.kinds(call) and id(call) not in seen:
            yield built(call)
    for (_, _), values in idx.assigned.items():
        for value in values:
            if _builds_device(value) and id(value) not in seen and GLOBAL_DEVICE in idx.kinds(value):
                yield built(value)


# ---------------------------------------------------------------------------------------- DDP002


def local_rank_argument(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    if project.reads_local_rank:
        return
    program = project.program
    for call in idx.calls:
        if last_name(call.func) != "add_argument":
            continue
        flags = [const_str(a) for a in call.args]
        flag = next((f for f in flags if f in LOCAL_RANK_FLAGS), None)
        if not flag:
            continue
        dest = _dest(call) or "local_rank"
        if program is not None and not program.reads_attr(dest):
            continue  # kept only so the old launcher's flag parses: its value is never read
        yield finding(
            src,
            call,
            "DDP002",
            f"the local rank comes only from the {flag} argument, which torchrun never passes: every process keeps "
            "its default",
        )


# ---------------------------------------------------------------------------------------- DDP010


def _nccl(expr: ast.AST) -> bool:
    text = const_str(expr)
    return (text is not None and text.lower() == "nccl") or (isinstance(expr, ast.Attribute) and expr.attr == "NCCL")


def hard_coded_nccl(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    if project.cuda_always:
        return  # it needs CUDA anyway: gloo would not make it run on CPU
    for call in idx.calls:
        if last_name(call.func) != "init_process_group":
            continue
        backend = arg_backend(call)
        if backend is None or not _nccl(backend) or idx.under_cuda_check(call):
            continue
        name = const_str(backend) or short(backend)
        yield finding(
            src, backend, "DDP010", f"the process group's backend is always {name}, and nothing else needs CUDA"
        )


def arg_backend(call: ast.Call) -> ast.expr | None:
    found = keyword(call, "backend")
    if found is not None:
        return found.value
    return call.args[0] if call.args and not isinstance(call.args[0], ast.Starred) else None


# ---------------------------------------------------------------------------------------- DDP014


def _cuda_target(idx: Index, expr: ast.AST | None) -> bool:
    """`"cuda"`, `torch.device("cuda")`, or a name holding one."""
    if expr is None:
        return False
    text = const_str(expr)
    if text is not None:
        return text == "cuda" or text == "cuda:0"
    if isinstance(expr, ast.Call) and last_name(expr.func) == "device" and expr.args:
        return len(expr.args) == 1 and _cuda_target(idx, expr.args[0])
    key = dotted(expr) if isinstance(expr, ast.Name | ast.Attribute) else None
    if key:
        values = idx.values_of(key, expr)[1]
        return bool(values) and all(_cuda_target(idx, v) for v in values)
    return False


def _on_cuda(idx: Index, model: ast.AST, scope: ast.AST | None) -> bool:
    """The model is moved to the one default CUDA device: `model.cuda()`, `model.to("cuda")`."""
    while isinstance(model, ast.Call) and isinstance(model.func, ast.Attribute) and model.func.attr in ("to", "cuda"):
        if model.func.attr == "cuda" and not model.args:
            return True
        if model.func.attr == "to" and model.args and _cuda_target(idx, model.args[0]):
            return True
        model = model.func.value
    key = dotted(model)
    if key is None:
        return False
    for call in idx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or dotted(func.value) != key or idx.function_of(call) is not scope:
            continue
        if func.attr == "cuda" and not call.args and not call.keywords:
            return True
        if func.attr == "to" and call.args and _cuda_target(idx, call.args[0]):
            return True
    return any(_on_cuda(idx, v, scope) for v in idx.values_of(key, model)[1] if isinstance(v, ast.Call))


def one_device(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    if not project.distributed or project.local_device:
        return  # a local-rank read that picks no device (a print, a log line) does not count
    several = project.layout.multi_process
    for call in idx.calls:
        if idx.callee(call).rsplit(".", 1)[-1] not in DDP_WRAPS or not call.args:
            continue
        given = keyword(call, "device_ids")
        if given is not None and not (isinstance(given.value, ast.Constant) and given.value.value is None):
            continue
        if not _on_cuda(idx, call.args[0], idx.function_of(call)):
            continue
        layout = (
            "several processes per node"
            if project.layout.procs_per_node is None
            else (f"{project.layout.procs_per_node} processes per node")
        )
        yield finding(
            src,
            call,
            "DDP014",
            f"DDP wraps a model on the default CUDA device with no device_ids, and nothing in the program picks a "
            f"device from the local rank: with {layout} every process runs on cuda:0",
            None,
            Severity.error if several else Severity.info,
        )
