"""Process setup and teardown from whichever engine started us.

The rank, world size and local rank are read from the environment *before* any process group
exists (``detect``), so argument checks can run on every rank alike. Launchers covered:

* torchrun (also as started by PyTorchJob, Trainer v2 TrainJob, JobSet and Indexed Jobs through
  ``PET_*`` variables): sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
  ``GROUP_RANK``;
* a PyTorchJob without torchrun: ``RANK`` is the pod index and ``WORLD_SIZE`` the pod count,
  which is only the process rank when each pod runs one process;
* an Indexed Job / JobSet pod run with plain ``python``: ``JOB_COMPLETION_INDEX`` as the rank
  when ``WORLD_SIZE`` and ``MASTER_ADDR`` are given;
* plain ``python``: one process.

The device always comes from ``LOCAL_RANK`` (never from the global rank: on a second node the
global rank is past the last GPU index).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import TrainerError, TrainerFailure, UsageError
from .protocol import COMPLETION_INDEX_ENV, JOB_NODE_RANK_ENV, JOB_WORLD_SIZE_ENV, NODE_FIRST_RANK_ENV

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the job. Global and local rank are kept apart on purpose."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    restart_count: int
    launcher: str
    coordinator: str | None = None  # HOST:PORT of the job's coordinator (pod recovery), else None

    @property
    def is_main(self) -> bool:
        """Rank 0 writes checkpoints and metrics."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is None:
            raise UsageError(f"environment variable {name} is not set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"environment variable {name}={raw!r} is not an integer") from None


def _nproc_per_node(env: Mapping[str, str]) -> int:
    """PET_NPROC_PER_NODE as a count; non-numeric values (auto, gpu, cpu) count as one here."""
    raw = env.get("PET_NPROC_PER_NODE", "1")
    return int(raw) if raw.isdigit() else 1


def detect(env: Mapping[str, str] | None = None) -> DistContext:
    """Read this process's place in the job from the environment; no process group needed."""
    env = os.environ if env is None else env
    restarts = _int(env, "TORCHELASTIC_RESTART_COUNT", 0)
    if "LOCAL_RANK" in env and "RANK" in env and "WORLD_SIZE" in env:
        rank = _int(env, "RANK")
        world = _int(env, "WORLD_SIZE")
        local_rank = _int(env, "LOCAL_RANK")
        local_world = _int(env, "LOCAL_WORLD_SIZE", 1)
        node_rank = _int(env, "GROUP_RANK", rank // max(local_world, 1))
        launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"
    elif "WORLD_SIZE" in env and ("RANK" in env or COMPLETION_INDEX_ENV in env):
        # A pod started with plain python by an operator: its index is the rank only when each
        # pod runs exactly one process.
        source = "RANK" if "RANK" in env else COMPLETION_INDEX_ENV
        nproc = _nproc_per_node(env)
        if nproc > 1:
            raise UsageError(
                f"PET_NPROC_PER_NODE={nproc} but the trainer was started without torchrun: "
                "launch it as `torchrun -m ddpctl_trainer ...` so each process gets its LOCAL_RANK"
            )
        rank = _int(env, source)
        world = _int(env, "WORLD_SIZE")
        local_rank, local_world, node_rank = 0, 1, rank
        launcher = "pod-index"
    else:
        nnodes = env.get("PET_NNODES", "1")
        if nnodes not in ("1", "1:1") or _nproc_per_node(env) > 1:
            raise UsageError(
                f"PET_NNODES={nnodes} / PET_NPROC_PER_NODE={env.get('PET_NPROC_PER_NODE', '1')} describe a "
                "multi-process job but RANK/WORLD_SIZE are not set: launch with `torchrun -m ddpctl_trainer ...`"
            )
        return DistContext(0, 0, 1, 1, 0, restarts, "single")
    from .recovery import coordinator_address

    coordinator = coordinator_address(env)
    if coordinator is not None:  # torchrun runs this node alone: the job's layout is ddpctl's
        rank = _int(env, NODE_FIRST_RANK_ENV) + local_rank
        world = _int(env, JOB_WORLD_SIZE_ENV)
        node_rank = _int(env, JOB_NODE_RANK_ENV)
        launcher = "torchrun+coordinator"
    if world < 1:
        raise UsageError(f"WORLD_SIZE must be at least 1, got {world}")
    if not 0 <= rank < world:
        raise UsageError(f"RANK={rank} is outside 0..{world - 1} (WORLD_SIZE={world})")
    if local_rank < 0:
        raise UsageError(f"LOCAL_RANK must be 0 or more, got {local_rank}")
    if world > 1 and not env.get("MASTER_ADDR") and coordinator is None:
        raise UsageError(
            "WORLD_SIZE > 1 but MASTER_ADDR is not set: launch with torchrun or set MASTER_ADDR/MASTER_PORT"
        )
    return DistContext(rank, local_rank, world, local_world, node_rank, restarts, launcher, coordinator)


def resolve_backend(choice: str, cuda_available: bool) -> str:
    """``auto`` picks nccl with CUDA and gloo otherwise."""
    if choice == "auto":
        return "nccl" if cuda_available else "gloo"
    if choice == "nccl" and not cuda_available:
        raise UsageError("--backend nccl needs CUDA but no GPU is visible: use --backend gloo (or auto)")
    return choice


def device_for(ctx: DistContext, backend: str) -> torch.device:
    """The device from LOCAL_RANK: ``cuda:<LOCAL_RANK>`` with nccl (or CUDA present), else cpu."""
    import torch

    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        if ctx.local_rank >= count:
            raise UsageError(
                f"LOCAL_RANK={ctx.local_rank} but only {count} GPU(s) are visible: "
                "lower --nproc-per-node to the GPUs per node"
            )
        return torch.device("cuda", ctx.local_rank)
    return torch.device("cpu")


def setup(ctx: DistContext, backend: str, timeout_s: int, need_group: bool) -> torch.device:
    """Pick the device and, when needed, join the process group. Returns the device.

    A single process needs no group for DDP (there is nothing to synchronise), but FSDP always
    runs inside one; for that case a private in-memory store avoids needing MASTER_ADDR.
    """
    import torch
    import torch.distributed as dist

    device = device_for(ctx, backend)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not (need_group or ctx.is_distributed) or dist.is_initialized():
        return device
    timeout = datetime.timedelta(seconds=timeout_s)
    kwargs: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
    if ctx.coordinator is not None:
        from . import recovery

        recovery.start(ctx.coordinator, ctx.rank, ctx.world_size, backend, timeout).join(**kwargs)
    elif ctx.world_size == 1 and not os.environ.get("MASTER_ADDR"):
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout, **kwargs)
    else:
        # torchrun's agent shares one TCPStore across restarts; keys left by the previous attempt
        # (peer addresses of dead processes) would be read by the new one, so each attempt gets
        # its own key prefix.
        from torch.distributed.rendezvous import rendezvous

        store, _, _ = next(rendezvous("env://", rank=ctx.rank, world_size=ctx.world_size, timeout=timeout))
        store = dist.PrefixStore(f"ddpctl_trainer/attempt_{ctx.restart_count}", store)
        dist.init_process_group(
            backend, store=store, rank=ctx.rank, world_size=ctx.world_size, timeout=timeout, **kwargs
        )
    return device


def teardown() -> None:
    """Leave the process group if we joined one; safe to call more than once and after errors."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch missing entirely
        return
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001, S110 - a broken group must not mask the real exit status
            pass


def group_active() -> bool:
    """True when collectives are possible (and needed): not for a replacement still setting
    itself up alone (``recovery.solo``), whose peers are busy training."""
    import torch.distributed as dist

    from .recovery import solo

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1 and not solo()


def barrier() -> None:
    """A barrier that is a no-op in a single process."""
    import torch.distributed as dist

    if group_active():
        dist.barrier()


T = TypeVar("T")


def broadcast_object(obj: T, src: int = 0) -> T:
    """Send a picklable object from ``src`` to every rank (returns it on every rank)."""
    import torch.distributed as dist

    if not group_active():
        return obj
    box: list[T] = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]  # the object rank `src` sent: of its type, as every rank runs the same code


def all_gather_object(obj: T) -> list[T]:
    """Gather one picklable object per rank, in rank order."""
    import torch.distributed as dist

    if not group_active():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out  # one T per rank: every rank sent the same kind of object


def on_every_rank(make: Callable[[], T], device: torch.device) -> T:
    """``make()``, once every rank has made its own: a ``TrainerError`` on any rank stops all."""
    import torch
    import torch.distributed as dist

    made: T | None = None
    error: TrainerError | None = None
    try:
        made = make()
    except TrainerError as exc:
        error = exc
    if group_active():
        flag = torch.tensor([0.0 if error else 1.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if error is None and flag.item() < 1:
            raise TrainerFailure("another rank failed while setting up (see its error line); stopping")
    if error is not None:
        raise error
    assert made is not None
    return made
