"""The checkers: one function per rule of rules.py, each reading one file's `Index`.

A file is judged with the files it is linked to by imports among those linted together (what it
imports, and what imports it, transitively; not its siblings): `Project` says whether one of them
initialises a process group (the sampler, save and download rules apply only then), calls
`set_epoch`, or reads `LOCAL_RANK`. A user's `train.py` and the `data.py` it imports are judged
together; two unrelated scripts in one folder are not.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddpctl.lint.findings import Finding
from ddpctl.lint.index import (
    GLOBAL_DEVICE,
    GLOBAL_RANK,
    WRAPPER,
    Index,
    arg,
    const_str,
    dotted,
    has_star_kwargs,
    is_const,
    keyword,
    last_name,
)
from ddpctl.lint.rules import BY_ID
from ddpctl.lint.source import Source

INIT_CALLS = frozenset({"init_process_group", "init_device_mesh", "init_distributed"})
LOCAL_RANK_FLAGS = frozenset({"--local_rank", "--local-rank"})
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


@dataclass(frozen=True)
class Project:
    """Facts over a file and the files linked to it by imports."""

    distributed: bool  # one of them initialises a process group
    set_epoch: bool  # one of them calls X.set_epoch(epoch) in a loop or a function
    reads_local_rank: bool  # one of them names LOCAL_RANK (os.environ["LOCAL_RANK"], .get, getenv)

    @classmethod
    def of(cls, indexes: Sequence[Index]) -> Project:
        """The facts of these files taken together."""
        return cls(
            any(any(idx.callee(c).rsplit(".", 1)[-1] in INIT_CALLS for c in idx.calls) for idx in indexes),
            any(any(_is_set_epoch(idx, c) for c in idx.calls) for idx in indexes),
            any("LOCAL_RANK" in idx.strings for idx in indexes),
        )


def _module_names(paths: Sequence[Path]) -> list[list[str]]:
    """Each file's dotted names, from its stem up to the folder all the files share."""
    resolved = [p.resolve() for p in paths]
    root = Path(os.path.commonpath([p.parent for p in resolved])) if resolved else Path()
    names = []
    for path in resolved:
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        names.append([".".join(parts[i:]) for i in range(len(parts))])
    return names


def _imported(idx: Index) -> set[str]:
    """The dotted module names a file imports (relative imports without their dots)."""
    out: set[str] = set()
    for node in idx.import_nodes:
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        else:
            base = node.module or ""
            if base:
                out.add(base)
            out.update(f"{base}.{alias.name}" if base else alias.name for alias in node.names)
    return out


def projects(paths: Sequence[Path], indexes: Sequence[Index]) -> list[Project]:
    """Each file's `Project`: the facts of it, what it imports and what imports it (transitively)."""
    by_name: dict[str, set[int]] = {}
    for i, names in enumerate(_module_names(paths)):
        for name in names:
            by_name.setdefault(name, set()).add(i)
    down: list[set[int]] = [set() for _ in indexes]
    up: list[set[int]] = [set() for _ in indexes]
    for i, idx in enumerate(indexes):
        for name in _imported(idx):
            for j in by_name.get(name, ()):
                if j != i:
                    down[i].add(j)
                    up[j].add(i)

    def reach(start: int, edges: list[set[int]]) -> set[int]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in edges[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    own = [Project.of([idx]) for idx in indexes]
    out = []
    for i in range(len(indexes)):
        linked = reach(i, down) | reach(i, up)
        out.append(
            Project(
                any(own[j].distributed for j in linked),
                any(own[j].set_epoch for j in linked),
                any(own[j].reads_local_rank for j in linked),
            )
        )
    return out


def _is_set_epoch(idx: Index, call: ast.Call) -> bool:
    return (
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "set_epoch"
        and bool(call.args)
        and not isinstance(call.args[0], ast.Constant)
        and idx.in_loop_or_function(call)
    )


def finding(src: Source, node: ast.AST, rule_id: str, message: str, fix: str | None = None) -> Finding:
    rule = BY_ID[rule_id]
    line = getattr(node, "lineno", 1)
    col = src.char_col(line, getattr(node, "col_offset", 0)) + 1
    return Finding(
        src.display, line, col, rule.id, rule.severity, message, fix or rule.fix, fixable=rule.fixable, node=node
    )


def _short(node: ast.AST, limit: int = 60) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _origin(idx: Index, expr: ast.AST, kind: str) -> str:
    """` (rank = dist.get_rank(), line 12)`: where a name got its rank, for the message."""
    key = dotted(expr) if isinstance(expr, ast.Name | ast.Attribute) else None
    if key is None:
        return ""
    for value in idx.values_of(key, expr)[1]:
        if kind in idx.kinds(value):
            return f" ({key} = {_short(value, 40)}, line {value.lineno})"
    return ""


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


# ---------------------------------------------------------------------------------------- DDP001


def device_sinks(idx: Index, call: ast.Call) -> Iterator[tuple[ast.expr, str]]:
    """The arguments of `call` that name a device, and how the call reads (for the message)."""
    name = idx.callee(call)
    last = name.rsplit(".", 1)[-1]
    func = call.func
    if last == "set_device" and call.args and ("cuda" in name or name == "set_device"):
        yield call.args[0], "torch.cuda.set_device"
    if isinstance(func, ast.Attribute) and func.attr in ("to", "cuda") and call.args:
        yield call.args[0], f".{func.attr}()"
    for kw in call.keywords:
        if kw.arg == "device_ids":
            values = kw.value.elts if isinstance(kw.value, ast.List | ast.Tuple) else [kw.value]
            for value in values:
                yield value, "device_ids"
        elif kw.arg in ("output_device", "device", "map_location"):
            yield kw.value, f"{kw.arg}="


def global_rank_device(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    seen: set[int] = set()
    for call in idx.calls:
        for expr, where in device_sinks(idx, call):
            kinds = idx.kinds(expr)
            if GLOBAL_RANK in kinds and id(expr) not in seen:
                seen.add(id(expr))
                yield finding(
                    src,
                    expr,
                    "DDP001",
                    f"{where} gets the global rank `{_short(expr)}`{_origin(idx, expr, GLOBAL_RANK)}: a GPU "
                    "index only on the first node",
                )
            elif GLOBAL_DEVICE in kinds and _builds_device(expr) and id(expr) not in seen:
                seen.add(id(expr))
                yield finding(src, expr, "DDP001", f"`{_short(expr)}` builds the device from the global rank")
        if idx.callee(call) == "torch.device" and GLOBAL_DEVICE in idx.kinds(call) and id(call) not in seen:
            seen.add(id(call))
            yield finding(src, call, "DDP001", f"`{_short(call)}` builds the device from the global rank")
    for (_, _), values in idx.assigned.items():
        for value in values:
            if _builds_device(value) and id(value) not in seen and GLOBAL_DEVICE in idx.kinds(value):
                seen.add(id(value))
                yield finding(src, value, "DDP001", f"`{_short(value)}` builds the device from the global rank")


def _builds_device(expr: ast.AST) -> bool:
    return isinstance(expr, ast.JoinedStr | ast.BinOp) or (
        isinstance(expr, ast.Call) and last_name(expr.func) == "device"
    )


# ---------------------------------------------------------------------------------------- DDP002


def local_rank_argument(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    if project.reads_local_rank:
        return
    for call in idx.calls:
        if last_name(call.func) != "add_argument":
            continue
        flags = [const_str(a) for a in call.args]
        flag = next((f for f in flags if f in LOCAL_RANK_FLAGS), None)
        if flag:
            yield finding(
                src, call, "DDP002", f"the local rank comes only from the {flag} argument, which torchrun never passes"
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
        if isinstance(node, ast.Name | ast.Attribute | ast.Call) and idx.is_rank_expr(node):
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
        if dataset is not None and _mentions_rank(idx, dataset):
            continue  # sharded by rank by hand
        if idx.guard(call) is True:
            continue  # e.g. an evaluation on rank 0 only
        what = f"sampler={_short(plain[0])}" if plain else "no sampler"
        yield finding(src, call, "DDP005", f"this DataLoader has {what} in a distributed program")


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
        yield from _wrapper_state_dicts(src, idx, call)
        if not project.distributed:
            continue
        path = arg(call, "f", 1)
        if _names_rank(idx, path) or _is_buffer(idx, path):
            continue
        if idx.guard(call) is False:
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
                owner = _short(node.func.value)
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


# ---------------------------------------------------------------------------------------- DDP010


def _nccl(expr: ast.AST) -> bool:
    text = const_str(expr)
    return (text is not None and text.lower() == "nccl") or (isinstance(expr, ast.Attribute) and expr.attr == "NCCL")


def hard_coded_nccl(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    for call in idx.calls:
        if last_name(call.func) != "init_process_group":
            continue
        backend = arg(call, "backend", 0)
        if backend is None or idx.under_cuda_check(call):
            continue
        constants: list[ast.AST] = []
        if _nccl(backend):
            constants.append(backend)
        elif isinstance(backend, ast.Name | ast.Attribute):  # backend = "nccl"; args.dist_backend = "nccl"
            key = dotted(backend)
            if key:
                constants.extend(v for v in idx.values_of(key, backend)[1] if _nccl(v))
        for constant in constants:
            if not idx.under_cuda_check(constant):
                name = const_str(constant) or _short(constant)
                yield finding(src, constant, "DDP010", f"the process group's backend is always {name}")


# ---------------------------------------------------------------------------------------- DDP011


def downloads(src: Source, idx: Index, project: Project) -> Iterator[Finding]:
    if not project.distributed:
        return
    barriers = [c for c in idx.calls if last_name(c.func) == "barrier"]
    for call in idx.calls:
        download = keyword(call, "download")
        if download is None or not is_const(download.value, True):
            continue
        if idx.guard(call) is not False:
            continue
        function = idx.function_of(call)
        if any(idx.function_of(b) is function and b.lineno < call.lineno for b in barriers):
            continue
        stmt = idx.statement_of(call)
        if any(_first_block(w) and any(s is stmt for s in _statements(w)) for w in idx.withs):
            continue
        yield finding(src, call, "DDP011", f"{_short(call.func)}(download=True) runs on every rank at once")


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
    global_rank_device,
    local_rank_argument,
    optimizer_before_wrap,
    loaders,
    saves,
    hard_coded_nccl,
    downloads,
    visible_devices_after_torch,
    data_parallel,
)


def check(src: Source, idx: Index, project: Project) -> list[Finding]:
    found = list(ignores_without_reason(src))
    for checker in CHECKS:
        found.extend(checker(src, idx, project))
    return found
