"""``run_checks``: measure on every rank, gather everything on every rank, judge, report.

Called inside an initialised process group (after rendezvous, before the first step), by every
rank of the job alike; every rank returns the same ``Report``. In order:

1. where each rank runs (node rank, pod, Kubernetes node, host), gathered;
2. the GEMM: on CPU one node at a time on each machine (machines side by side), its ranks together
   when its cores hold all their threads, else one at a time (``judge.node_slots``), in rounds, so
   ranks never compete for cores: each round gives every rank one timed window, and a rank's
   figure is its best window; on GPU every rank at once (each has its own GPU);
3. on GPU the host-to-device copy, scheduled like the CPU GEMM (ranks of a node share the host's
   memory and PCIe switches);
4. the all-reduce over the whole world (bus bandwidth), then NCCL's transport, read from each
   rank's own NCCL lines once that all-reduce has connected the nodes;
5. with 3 nodes or more, node pairs in sub-groups (``judge.first_pairs`` / ``judge.next_pairs``);
6. judging (``judge``) and the report (``report``).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from .. import dist as d
from ..dist import DistContext
from ..protocol import NODE_NAME_ENV, POD_NAME_ENV, usable_cores
from . import measure, nccl
from .config import PreflightConfig
from .judge import (
    PairFigure,
    Place,
    alone_slots,
    busbw,
    node_slots,
    nodes_of,
    pair_rounds,
    waves,
)
from .report import Figures, Report, assemble


def my_place(ctx: DistContext, env: dict[str, str] | None = None) -> Place:
    """Where this rank runs: the pod from DDP_POD_NAME (downward API) or HOSTNAME, the Kubernetes
    node from DDP_NODE_NAME (downward API: spec.nodeName)."""
    env = dict(os.environ) if env is None else env
    host = socket.gethostname()
    pod = env.get(POD_NAME_ENV) or env.get("HOSTNAME") or host
    node = env.get(NODE_NAME_ENV) or None
    cores = usable_cores()
    return Place(ctx.rank, ctx.local_rank, ctx.node_rank, pod, node, host, cores, max(1, torch.get_num_threads()))


def _timed_locally(
    make: Callable[[], Callable[[], object]],
    slots: list[list[int]],
    rank: int,
    device: torch.device,
    cfg: PreflightConfig,
) -> measure.Window | None:
    """Time ``make()``'s kernel on this rank in its slots: a warm-up round, then ``repeats``
    rounds of one window each, a world barrier between slots. Every rank runs every round."""
    mine = any(rank in slot for slot in slots)
    bench = measure.Local(make(), device, cfg.window_s) if mine else None
    d.barrier()
    for slot in slots:
        if bench is not None and rank in slot:
            bench.warm_up()
        d.barrier()
    for _ in range(cfg.repeats):
        for slot in slots:
            if bench is not None and rank in slot:
                bench.window()
            d.barrier()
    return bench.best if bench is not None else None


def _world_allreduce(nbytes: int, device: torch.device, cfg: PreflightConfig) -> float:
    """This rank's best seconds per all-reduce over the whole world."""
    everywhere = measure.AllReduce(None, nbytes, device, cfg.window_s)
    everywhere.warm_up()
    for _ in range(cfg.repeats):
        everywhere.window()
    return everywhere.best


def _measure_pairs(
    places: list[Place], rank: int, device: torch.device, nbytes: int, cfg: PreflightConfig
) -> Callable[[list[tuple[int, int]], int], dict[tuple[int, int], float]]:
    """``judge.pair_rounds``' measurement: one round of pairs, each in a sub-group of its two
    nodes' ranks; returns every pair's bus bandwidth, on every rank. Pairs that share a machine
    take turns window by window (``judge.waves``), so a burst of other work on a shared host slows
    one window of several pairs, not every window of one."""
    nodes = nodes_of(places)
    me = next(p.node for p in places if p.rank == rank)

    def measure_round(pairs: list[tuple[int, int]], round_no: int) -> dict[tuple[int, int], float]:
        # every rank creates every group, in the same order (torch's rule for new_group)
        groups = {pair: dist.new_group([p.rank for n in pair for p in nodes[n]]) for pair in pairs}
        mine: measure.AllReduce | None = None
        for pair, group in groups.items():
            if me in pair and isinstance(group, dist.ProcessGroup):  # others get NON_GROUP_MEMBER
                mine = measure.AllReduce(group, nbytes, device, cfg.window_s)
        turns = waves(pairs, places)
        for step in ["warm-up"] + ["window"] * cfg.repeats:
            for wave in turns:
                if mine is not None and any(me in pair for pair in wave):
                    if step == "warm-up":
                        mine.warm_up()
                    else:
                        mine.window()
                d.barrier()
        for group in groups.values():
            if isinstance(group, dist.ProcessGroup):
                dist.destroy_process_group(group)
        my_pair = next((pair for pair in pairs if me in pair), None)
        gathered = d.all_gather_object((my_pair, mine.best if mine is not None else None))
        out = {}
        for pair in pairs:
            slowest = max(s for where, s in gathered if where == pair and s is not None)  # it ends with its last rank
            out[pair] = busbw(nbytes, slowest, sum(len(nodes[x]) for x in pair))
        return out

    return measure_round


def run_checks(ctx: DistContext, device: torch.device, backend: str, config: PreflightConfig) -> Report:
    """Measure, gather and judge on every rank (see the module's docstring); the same Report everywhere."""
    t0 = time.perf_counter()
    places = sorted(d.all_gather_object(my_place(ctx)), key=lambda p: p.rank)
    on_gpu = device.type == "cuda"
    everyone = [[p.rank for p in places]]

    n = config.gemm_size(device.type)
    compute = _timed_locally(
        lambda: measure.gemm(device, n)[0], everyone if on_gpu else node_slots(places), ctx.rank, device, config
    )
    h2d_bytes = int(config.h2d_mib * 2**20)
    h2d = (
        _timed_locally(lambda: measure.host_to_device(device, h2d_bytes), alone_slots(places), ctx.rank, device, config)
        if on_gpu
        else None
    )

    nbytes = config.allreduce_bytes(device.type)
    world_s = _world_allreduce(nbytes, device, config) if d.group_active() else None
    if on_gpu:
        torch.cuda.empty_cache()  # the checks' buffers are gone: leave their memory to training
    transport: nccl.Transport | None = None
    if backend == "nccl":
        _, lines = nccl.read_own_lines()
        transport = nccl.parse(lines)

    mine: dict[str, Any] = {
        "compute_s": compute.seconds if compute else None,
        "cpu_share": compute.cpu_share if compute and not on_gpu else None,
        "h2d_s": h2d.seconds if h2d else None,
        "world_s": world_s,
        "transport": transport,
    }
    gathered: list[dict[str, Any]] = d.all_gather_object(mine)
    pairs: list[PairFigure] = []
    if len(nodes_of(places)) >= 3:
        pairs = pair_rounds(
            list(nodes_of(places)), config.tolerance, _measure_pairs(places, ctx.rank, device, nbytes, config)
        )

    def of(key: str) -> dict[int, Any]:
        return {p.rank: g[key] for p, g in zip(places, gathered) if g[key] is not None}

    figures = Figures(
        places=places,
        device=device.type,
        backend=backend,
        gemm_n=n,
        gemm_dtype=str(measure.gemm_dtype(device.type)).removeprefix("torch."),
        compute_s=of("compute_s"),
        cpu_share=of("cpu_share"),
        h2d_bytes=h2d_bytes,
        h2d_s=of("h2d_s"),
        allreduce_bytes=nbytes,
        world_s=of("world_s"),
        pairs=pairs,
        transports={p.rank: g["transport"] for p, g in zip(places, gathered)} if backend == "nccl" else None,
        nccl_file=os.environ.get(nccl.DEBUG_FILE_ENV) if backend == "nccl" else None,
    )
    return assemble(figures, config, elapsed_s=d.broadcast_object(time.perf_counter() - t0))
