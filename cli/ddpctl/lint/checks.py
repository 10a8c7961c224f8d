"""The checkers: one function per rule of rules.py, each reading one file's `Index` with the facts of
the program it belongs to (`Project`, facts.py); the device rules are in devices.py."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator

from ddpctl.lint import devices
from ddpctl.lint.datasets import download_argument
from ddpctl.lint.facts import Project, finding, short
from ddpctl.lint.findings import Finding
from ddpctl.lint.guards import guard, is_rank_expr
from ddpctl.lint.index import (
    WRAPPER,
    Index,
    arg,
    const_str,
    dotted,
    has_star_kwargs,
    is_const,
    last_name,
)
from ddpctl.lint.rules import BY_ID
from ddpctl.lint.source import Source

FSDP_WRAPS = frozenset({"FullyShardedDataParallel", "fully_shard", "FSDP"})
DDP_WRAPS = frozenset({"DistributedDataParallel", "DDP"})
OPTIMIZERS = frozenset(
    {
        "SGD",
        "Adam",
        "AdamW",
        "Adagrad",
        "Adadelta",
        "Adamax",
        "ASGD",
        "LBFGS",
        "NAdam",
        "RAdam",
        "RMSprop",
        "Rprop",
        "SparseAdam",
        "Adafactor",
        "Lion",
        "LAMB",
        "FusedAdam",
        "FusedLAMB",
        "AdamW8bit",
        "Adam8bit",
    }
)
NON_DISTRIBUTED_SAMPLERS = frozenset({"RandomSampler", "SequentialSampler"})
CVD = "CUDA_VISIBLE_DEVICES"


# ---------------------------------------------------------------------------------------- DDP000


def ignores_without_reason(src: Source) -> Iterator[Finding]:
    for ignore in src.ignores.values():
        if not ignore.reason:
            rule = BY_ID["DDP000"]
            yield Finding(
                src.display,
                ignore.line,
                ignore.col,
                rule.id,
                rule.severity,
                f"ignore[{', '.join(ignore.rules)}] gives no reason",
                rule.fix,
            )


# ---------------------------------------------------------------------------------------- DDP003/DDP004


def _unwrap_model(expr: ast.AST) -> ast.AST:
    """`model` of `model.to(device)` / `model.cuda()`."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("to", "cuda"):
        expr = expr.func.value
    return expr


def _is_optimizer(idx: Index, call: ast.Call) -> bool:
    name = idx.callee(call)
    last = name.rsplit(".", 1)[-1]
    if name.startswith("torch.optim.") and "lr_scheduler" not in name and "swa_utils" not in name:
        return last[:1].isupper()
    return last in OPTIMIZERS


def _parameter_owners(call: ast.Call) -> set[str]:
    owners = set()
    for node in ast.walk(call):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("parameters", "named_parameters")
        ):
            key = dotted(_unwrap_model(node.func.value))
            if key:
                owners.add(key)
    return owners


def optimizer_before_wrap(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    wraps: list[tuple[int, str, str, ast.Call]] = []  # (scope, key, kind, call)
    optimizers: list[tuple[int, set[str], ast.Call]] = []
    for call in idx.calls:
        scope = id(idx.function_of(call) or idx.tree)
        last = last_name(call.func) or ""
        resolved = idx.callee(call).rsplit(".", 1)[-1]
        kind = "fsdp" if resolved in FSDP_WRAPS or last in FSDP_WRAPS else None
        kind = kind or ("ddp" if resolved in DDP_WRAPS or last in DDP_WRAPS else None)
        if kind and call.args:
            key = dotted(_unwrap_model(call.args[0]))
            if key:
                wraps.append((scope, key, kind, call))
        elif _is_optimizer(idx, call):
            owners = _parameter_owners(call)
            if owners:
                optimizers.append((scope, owners, call))
    for scope, owners, opt in optimizers:
        later = [w for w in wraps if w[0] == scope and w[1] in owners and w[3].lineno > opt.lineno]
        if not later:
            continue
        fsdp = next((w for w in later if w[2] == "fsdp"), None)
        _, key, kind, wrap = fsdp or later[0]
        wrapper = "FSDP" if kind == "fsdp" else "DDP"
        yield finding(
            src,
            opt,
            "DDP003" if kind == "fsdp" else "DDP004",
            f"the optimizer takes {key}'s parameters before {wrapper} wraps {key} (line {wrap.lineno})",
        )


# ---------------------------------------------------------------------------------------- DDP005/006/007


def _mentions_rank(idx: Index, expr: ast.AST, depth: int = 2) -> bool:
    """Whether `expr` (or, through names, what they hold) uses a rank: a dataset sharded by hand."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Name | ast.Attribute | ast.Call) and is_rank_expr(idx, node):
            return True
        if (
            depth
            and isinstance(node, ast.Name)
            and any(_mentions_rank(idx, v, depth - 1) for v in idx.values_of(node.id, node)[1])
        ):
            return True
    return False


def loaders(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    for call in idx.calls:
        last = idx.callee(call).rsplit(".", 1)[-1]
        if last.endswith("DistributedSampler"):  # and subclasses named so
            shuffle = arg(call, "shuffle", 3)
            if not project.set_epoch and not is_const(shuffle, False):
                yield finding(src, call, "DDP007", "this DistributedSampler never gets set_epoch(epoch)")
            continue
        if last != "DataLoader":
            continue
        sampler = arg(call, "sampler", 3)
        batch_sampler = arg(call, "batch_sampler", 4)
        shuffle = arg(call, "shuffle", 2)
        given = [s for s in (sampler, batch_sampler) if s is not None and not is_const(s, None)]
        if given and is_const(shuffle, True):
            yield finding(src, call, "DDP006", "this DataLoader has a sampler and shuffle=True")
            continue
        if not project.distributed or has_star_kwargs(call):
            continue
        plain = [s for s in given if isinstance(s, ast.Call) and last_name(s.func) in NON_DISTRIBUTED_SAMPLERS]
        if given and not plain:
            continue
        dataset = arg(call, "dataset", 0)
        if dataset is not None and (_mentions_rank(idx, dataset) or _is_subset(idx, dataset)):
            continue  # sharded by rank by hand, or a chosen subset (the samples a DistributedSampler dropped)
        if guard(idx, call) is True:
            continue  # e.g. an evaluation on rank 0 only
        what = f"sampler={short(plain[0])}" if plain else "no sampler"
        yield finding(src, call, "DDP005", f"this DataLoader has {what} in a distributed program")


def _is_subset(idx: Index, dataset: ast.AST, depth: int = 0) -> bool:
    if isinstance(dataset, ast.Call):
        return last_name(dataset.func) == "Subset"
    key = dotted(dataset) if isinstance(dataset, ast.Name | ast.Attribute) else None
    return bool(key) and depth < 3 and any(_is_subset(idx, v, depth + 1) for v in idx.values_of(key or "", dataset)[1])


# ---------------------------------------------------------------------------------------- DDP008/009


def _names_rank(idx: Index, path: ast.AST | None) -> bool:
    return path is not None and _mentions_rank(idx, path)


def _is_buffer(idx: Index, path: ast.AST | None) -> bool:
    if isinstance(path, ast.Call):
        return last_name(path.func) in ("BytesIO", "getvalue")
    if isinstance(path, ast.Name):
        return any(isinstance(v, ast.Call) and last_name(v.func) == "BytesIO" for v in idx.values_of(path.id, path)[1])
    return False


def saves(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    for call in idx.calls:
        if idx.callee(call) != "torch.save" or not call.args:
            continue
        if not project.loads_into_wrapper:  # a checkpoint the wrapper loads back keeps its `module.` keys
            yield from _wrapper_state_dicts(src, idx, call)
        if not project.distributed:
            continue
        path = arg(call, "f", 1)
        if _names_rank(idx, path) or _is_buffer(idx, path):
            continue
        if guard(idx, call) is False:
            yield finding(src, call, "DDP008", "torch.save runs on every rank")


def _wrapper_state_dicts(src: Source, idx: Index, save: ast.Call) -> Iterator[Finding]:
    todo: list[tuple[ast.AST, int]] = [(save.args[0], 0)]
    seen: set[int] = set()
    while todo:
        expr, depth = todo.pop()
        for node in ast.walk(expr):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "state_dict"
                and WRAPPER in idx.kinds(node.func.value)
            ):
                owner = short(node.func.value)
                yield finding(
                    src,
                    node,
                    "DDP009",
                    f"{owner} is a DDP/DataParallel wrapper: its state_dict() keys start with `module.`",
                    f"save `{owner}.module.state_dict()`",
                )
            elif isinstance(node, ast.Name) and depth < 3:
                _, values = idx.values_of(node.id, node)
                _, items = idx.values_of(node.id, node, items=True)
                todo.extend((v, depth + 1) for v in (*values, *items))


# ---------------------------------------------------------------------------------------- DDP011


def downloads(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    if not project.distributed:
        return
    barriers = [c for c in idx.calls if last_name(c.func) == "barrier"]
    for call in idx.calls:
        download = download_argument(idx, call)
        if download is None or not is_const(download, True):
            continue
        if guard(idx, call) is not False:
            continue
        function = idx.function_of(call)
        if any(idx.function_of(b) is function and b.lineno < call.lineno for b in barriers):
            continue
        stmt = idx.statement_of(call)
        if any(_first_block(w) and any(s is stmt for s in _statements(w)) for w in idx.withs):
            continue
        yield finding(src, call, "DDP011", f"{short(call.func)}(download=True) runs on every rank at once")


def _first_block(node: ast.With | ast.AsyncWith) -> bool:
    return any("first" in (last_name(item.context_expr) or "").lower() for item in node.items)


def _statements(node: ast.AST) -> Iterator[ast.AST]:
    for child in ast.walk(node):
        if isinstance(child, ast.stmt) and child is not node:
            yield child


# ---------------------------------------------------------------------------------------- DDP012


def _is_torch_import(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in ("torch", "torchvision") for a in node.names)
    return node.level == 0 and (node.module or "").split(".")[0] in ("torch", "torchvision")


def _sets_cvd(idx: Index) -> Iterator[ast.AST]:
    for target in idx.subscript_stores:
        if idx.qualname(target.value) == "os.environ" and const_str(target.slice) == CVD:
            yield target
    for call in idx.calls:
        name = idx.qualname(call.func)
        if name in ("os.environ.setdefault", "os.putenv") and call.args and const_str(call.args[0]) == CVD:
            yield call
        elif name == "os.environ.update":
            keys = [k.arg for k in call.keywords]
            for a in call.args:
                if isinstance(a, ast.Dict):
                    keys.extend(const_str(k) for k in a.keys if k is not None)
            if CVD in keys:
                yield call


def visible_devices_after_torch(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    torch_imports = [n for n in idx.import_nodes if _is_torch_import(n)]
    if not torch_imports:
        return
    top_level = [n for n in torch_imports if idx.function_of(n) is None]
    for node in _sets_cvd(idx):
        function = idx.function_of(node)
        if function is None:
            before = [n for n in top_level if n.lineno < getattr(node, "lineno", 0)]
        else:
            before = top_level + [
                n for n in torch_imports if idx.function_of(n) is function and n.lineno < getattr(node, "lineno", 0)
            ]
        if before:
            yield finding(
                src, node, "DDP012", f"CUDA_VISIBLE_DEVICES is set after torch is imported (line {before[0].lineno})"
            )


# ---------------------------------------------------------------------------------------- DDP013


def data_parallel(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    for call in idx.calls:
        if idx.callee(call).rsplit(".", 1)[-1] == "DataParallel":
            yield finding(src, call, "DDP013", "nn.DataParallel runs one process for every GPU")


Check = Callable[[Source, Index, Project], Iterable[Finding]]

CHECKS: tuple[Check, ...] = (
    devices.global_rank_device,
    devices.local_rank_argument,
    optimizer_before_wrap,
    loaders,
    saves,
    devices.hard_coded_nccl,
    downloads,
    visible_devices_after_torch,
    data_parallel,
    devices.one_device,
)


def check(src: Source, idx: Index, project: Project) -> list[Finding]:
    found = list(ignores_without_reason(src))
    for checker in CHECKS:
        found.extend(checker(src, idx, project))
    return found
