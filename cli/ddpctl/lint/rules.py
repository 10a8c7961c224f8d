"""The rules `ddpctl lint` checks, as data: an id, a severity, a one-line why and the fix.

The checkers (checks.py) refer to a rule by its id; docs/lint-rules.md is generated from this table
(`make docs`), so a rule's why and fix are written once. TorchFix's findings (TOR...) are not rules
of ours: `torchfix_severity` says how they count.
"""

from __future__ import annotations

from enum import Enum

from ddpctl.records import record


class Severity(str, Enum):
    """An error makes `ddpctl lint` exit 1 (and `ddpctl submit` stop): only where the rule is certain
    the script fails or trains wrong under torchrun. What depends on the configuration is a warning or
    info, the reason in its message; warnings and info are printed only."""

    error = "error"
    warning = "warning"
    info = "info"


@record
class Rule:
    id: str
    name: str
    severity: Severity  # the default; a rule whose verdict depends on the job's layout says so in `when`
    finds: str  # what the rule finds, for the docs page
    why: str  # why it is wrong, one line
    fix: str  # what to do, one line: the part after `; ` of each finding
    fixable: bool = False  # `ddpctl lint --fix` rewrites it
    when: str = ""  # how the severity depends on the job, for the docs page


RULES: tuple[Rule, ...] = (
    Rule(
        "DDP000",
        "ignore-without-reason",
        Severity.warning,
        "a `# ddpctl: ignore[RULE]` comment that gives no reason",
        "a silenced finding should say why the code is right, for whoever reads it next",
        "write the reason after the bracket, e.g. `# ddpctl: ignore[DDP013] --strategy dp is the user's choice`",
    ),
    Rule(
        "DDP001",
        "device-from-global-rank",
        Severity.error,
        "the device chosen from the global rank (`dist.get_rank()`, `RANK`, through names, dicts, attributes, "
        "parameters and returns) in `torch.cuda.set_device`, `torch.accelerator.set_device_index`, `.to()`, "
        "`.cuda()`, `device_ids`, `output_device`, `device=`, `torch.device(...)`, a device string built by f-string, "
        "`%`, `+` or `.format`",
        "the global rank counts every process of the job: on node 1 and later it is past the node's last GPU "
        "(invalid device ordinal), or puts two processes on one GPU",
        'take the device from the local rank, `int(os.environ["LOCAL_RANK"])` (torchrun sets it for each process)',
        fixable=True,
        when="error for a job of several nodes and for a standalone `ddpctl lint` (which assumes several); "
        "info for a one-node job, where the global rank is the local rank",
    ),
    Rule(
        "DDP002",
        "local-rank-argument",
        Severity.error,
        "a `--local_rank`/`--local-rank` argument whose value the program reads, while nothing in it reads "
        "`LOCAL_RANK` from the environment (an argument kept only so the old launcher's flag parses is fine)",
        "torchrun passes no such argument (only the deprecated torch.distributed.launch did): every process "
        "keeps the argument's default",
        'read the local rank from the environment, `int(os.environ["LOCAL_RANK"])`, or default the argument to it',
        fixable=True,
    ),
    Rule(
        "DDP003",
        "optimizer-before-fsdp",
        Severity.error,
        "an optimizer built from a model's parameters before FSDP (`FullyShardedDataParallel`, `fully_shard`) "
        "wraps that model, in the same function",
        "FSDP replaces the module's parameters with flat or sharded ones: the optimizer updates tensors the "
        "model no longer uses, so the model never learns",
        "build the optimizer after the wrap, from the wrapped model's parameters",
    ),
    Rule(
        "DDP004",
        "optimizer-before-ddp",
        Severity.info,
        "an optimizer built from a model's parameters before `DistributedDataParallel` wraps that model, in the "
        "same function",
        "harmless (DDP keeps the module's parameter tensors), but the recipe builds it after the wrap, and "
        "that order is also the one FSDP needs",
        "build the optimizer after `DDP(model)`",
    ),
    Rule(
        "DDP005",
        "loader-without-distributed-sampler",
        Severity.warning,
        "a `DataLoader` with no sampler (or a plain one), outside a rank-0 branch, in a program that initialises "
        "a process group; not over a `Subset` or a dataset sharded by rank by hand",
        "every rank iterates the whole dataset: an epoch trains world-size times on the same samples, and "
        "the ranks see the same batches",
        "pass `sampler=DistributedSampler(dataset)` (and no shuffle=True: the sampler shuffles)",
    ),
    Rule(
        "DDP006",
        "shuffle-with-sampler",
        Severity.error,
        "a `DataLoader` given both a sampler and `shuffle=True`",
        "DataLoader raises ValueError at construction: a sampler and shuffle=True exclude each other",
        "drop shuffle=True; `DistributedSampler(dataset, shuffle=True)` (its default) shuffles",
    ),
    Rule(
        "DDP007",
        "sampler-without-set-epoch",
        Severity.warning,
        "a shuffling `DistributedSampler` while no file of the program calls `set_epoch(epoch)` in a loop or a "
        "function",
        "the sampler seeds its shuffle with the epoch it was given: without set_epoch every epoch repeats "
        "the same order",
        "call `sampler.set_epoch(epoch)` (or `loader.sampler.set_epoch(epoch)`) at the start of each epoch",
    ),
    Rule(
        "DDP008",
        "save-on-every-rank",
        Severity.warning,
        "`torch.save` that runs on every rank under torchrun (no test that implies rank 0 around it, judged "
        "with WORLD_SIZE > 1 and argparse defaults), in a program that initialises a process group; a path "
        "that names the rank is one file per rank, on purpose",
        "every rank writes the same file at once: wasted I/O and, on a shared volume, a torn checkpoint",
        "save on rank 0 only (`if dist.get_rank() == 0:`), then `dist.barrier()` before any rank reads it",
    ),
    Rule(
        "DDP009",
        "wrapper-state-dict",
        Severity.warning,
        "`torch.save` of the `state_dict()` of a `DistributedDataParallel`/`DataParallel` wrapper, in a "
        "program that never loads a checkpoint back into such a wrapper",
        "the wrapper prefixes every key with `module.`: the plain model cannot load the checkpoint",
        "save `model.module.state_dict()`",
    ),
    Rule(
        "DDP010",
        "hard-coded-nccl",
        Severity.warning,
        '`backend="nccl"` written in the `init_process_group` call, outside a branch that checks for CUDA, in a '
        "program that could otherwise run on CPU (no unconditional `torch.cuda.set_device`, `.cuda()`, nor device use "
        'given a CUDA device: `"cuda:%d" % i`, an f-string or `.format`, `torch.device("cuda...")`, or a name '
        "always holding one)",
        "nccl needs CUDA GPUs: the same script fails on CPU, in CI and in `ddpctl run --local` (gloo)",
        'choose by device: `"nccl" if torch.cuda.is_available() else "gloo"`',
        fixable=True,
    ),
    Rule(
        "DDP011",
        "download-on-every-rank",
        Severity.warning,
        "a dataset made with `download=True` (by keyword, or at its position for a torchvision dataset) on "
        "every rank at once: no rank-0 test around it, no barrier before it, no `with ...first...():` block "
        "(e.g. `main_process_first`); in distributed code, as DDP008",
        "every process downloads and unpacks into the same folder at the same time: archives get corrupted, "
        "or fetched once per process",
        "download on (local) rank 0 first, then `dist.barrier()`, then load with download=False on every rank",
    ),
    Rule(
        "DDP012",
        "cuda-visible-devices-after-torch",
        Severity.warning,
        "`CUDA_VISIBLE_DEVICES` set in the process after `import torch`",
        "CUDA reads the variable once, when it initialises: set after torch is imported, it is ignored as soon "
        "as anything has touched CUDA",
        "set it before `import torch`, or in the launcher's environment (in a pod, Kubernetes assigns the GPUs)",
    ),
    Rule(
        "DDP013",
        "data-parallel",
        Severity.info,
        "`nn.DataParallel`",
        "DataParallel is one process driving every GPU from threads: slower than DDP even on one machine, "
        "and single-node only; PyTorch recommends DDP",
        "use `DistributedDataParallel` under torchrun (`ddpctl run --local` tries it on CPU)",
    ),
    Rule(
        "DDP014",
        "every-process-on-one-device",
        Severity.error,
        "`DistributedDataParallel` without `device_ids` on a model moved to the default CUDA device "
        "(`model.cuda()`, `.to(\"cuda\")`), in a program where no device use (`set_device`, `.to`, `.cuda`, "
        "`device_ids`, `device=`, `CUDA_VISIBLE_DEVICES`) is given the local rank or `rank % n` (a read of the local "
        "rank that picks no device, such as a print, does not count)",
        "every process of a node runs on cuda:0: they compete for one GPU (or NCCL refuses the duplicate GPU) "
        "while the others idle",
        'pick the device from the local rank first: `torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))`, '
        "then `DDP(model, device_ids=[local_rank])`",
        when="error when the job runs several processes per node, and for a standalone `ddpctl lint` (which "
        "assumes several); info with one process per node",
    ),
)

BY_ID = {rule.id: rule for rule in RULES}


def torchfix_severity(code: str) -> Severity:
    """TorchFix's codes by family: TOR0xx are bugs and removed functions (errors; but TOR003, a
    checkpoint call without an explicit `use_reentrant`, only asks for an argument: a warning), TOR1xx
    deprecated or unsafe calls and TOR2xx deprecated torchvision usage (warnings), the rest hints (info)."""
    if code == "TOR003":
        return Severity.warning
    if code.startswith("TOR0"):
        return Severity.error
    if code.startswith(("TOR1", "TOR2")):
        return Severity.warning
    return Severity.info
