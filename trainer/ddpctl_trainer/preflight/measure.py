"""The preflight's timed kernels: a GEMM, a host-to-device copy, an all-reduce in a group.

Every figure is the best of ``repeats`` windows, each at least ``window_s`` long. Best, because
interference (another process, a page fault, a noisy neighbour) only ever slows a window down;
long windows, because a Kubernetes CPU limit is a CFS quota enforced per 100 ms period: a window
shorter than a period can run inside the quota of a throttled pod and look healthy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..protocol import PREFLIGHT_WARMUP_SHARE

WARMUP_SHARE = PREFLIGHT_WARMUP_SHARE  # the warm-up runs for this share of a window, and sizes the windows
MAX_ITERS = 100_000


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Window:
    """One timed window: seconds per operation, and the share of the wall time this process got
    on its CPU threads (1.0: never waited for a core; low under a CPU limit or a busy host)."""

    seconds: float
    cpu_share: float


class Local:
    """A kernel this rank times on its own: a warm-up, then windows. On CPU a window runs until
    ``window_s`` has passed (however little a throttled rank gets done in it: a window sized in
    iterations from a throttled warm-up would hold a few milliseconds of work, which can fit in
    one period's quota); on GPU it runs as many iterations as the warm-up says fill ``window_s``
    (reading the clock there would mean a sync per kernel)."""

    def __init__(self, op: Callable[[], object], device: torch.device, window_s: float) -> None:
        self.op = op
        self.device = device
        self.window_s = window_s
        self.iters = 1
        self.best: Window | None = None

    def warm_up(self) -> None:
        """Run the kernel for a share of a window and size the GPU's windows from its speed."""
        self.op()
        sync(self.device)
        count, t0 = 0, time.perf_counter()
        while True:
            self.op()
            count += 1
            sync(self.device)
            spent = time.perf_counter() - t0
            if spent >= self.window_s * WARMUP_SHARE or count >= MAX_ITERS:
                break
        self.iters = min(MAX_ITERS, max(1, math.ceil(self.window_s / (spent / count))))

    def window(self) -> Window:
        """One timed window; the best so far is kept."""
        threads = max(1, torch.get_num_threads())
        sync(self.device)
        c0, t0 = time.process_time(), time.perf_counter()
        if self.device.type == "cuda":
            count = self.iters
            for _ in range(count):
                self.op()
            sync(self.device)
        else:
            count, deadline = 0, t0 + self.window_s
            while count < MAX_ITERS and (count == 0 or time.perf_counter() < deadline):
                self.op()
                count += 1
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        out = Window(wall / count, min(1.0, cpu / wall / threads) if wall > 0 else 0.0)
        if self.best is None or out.seconds < self.best.seconds:
            self.best = out
        return out


def gemm_dtype(device_type: str) -> torch.dtype:
    """bfloat16 on GPU (what training runs), float32 on CPU (bfloat16 GEMMs are emulated on many CPUs)."""
    return torch.bfloat16 if device_type == "cuda" else torch.float32


def gemm(device: torch.device, n: int) -> tuple[Callable[[], object], str]:
    """An n x n x n matrix product into a preallocated output, in ``gemm_dtype``. Returns (op, dtype name)."""
    dtype = gemm_dtype(device.type)
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)

    def op() -> object:
        return torch.mm(a, b, out=c)

    return op, str(dtype).removeprefix("torch.")


def host_to_device(device: torch.device, nbytes: int) -> Callable[[], object]:
    """A copy from pinned host memory to the GPU (what a data loader's batches do)."""
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)

    def op() -> object:
        return dst.copy_(src, non_blocking=True)

    return op


class AllReduce:
    """An all-reduce of ``nbytes`` (float32 zeros: the sum stays finite) in ``group`` (None: the
    world), timed in windows like ``Local``. Every member calls each method together: the window
    size is agreed on (the largest any member asks for), so all run the same collectives."""

    def __init__(self, group: dist.ProcessGroup | None, nbytes: int, device: torch.device, window_s: float) -> None:
        self.group = group
        self.device = device
        self.window_s = window_s
        self.tensor = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=device)
        self.iters = 1
        self.best = math.inf  # seconds per all-reduce, as this rank timed it

    def _run(self, count: int) -> float:
        sync(self.device)
        t0 = time.perf_counter()
        for _ in range(count):
            dist.all_reduce(self.tensor, group=self.group)
        sync(self.device)
        return time.perf_counter() - t0

    def warm_up(self) -> None:
        """Connect (NCCL sets its channels up lazily), then size the windows from a few runs."""
        self._run(2)
        probe = 3
        per = self._run(probe) / probe
        wanted = min(MAX_ITERS, max(1, math.ceil(self.window_s / max(per, 1e-9))))
        agreed = torch.tensor([wanted], device=self.device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self.group)
        self.iters = int(agreed.item())

    def window(self) -> float:
        """One timed window (the members start it together); the best so far is kept."""
        dist.barrier(group=self.group)
        seconds = self._run(self.iters) / self.iters
        self.best = min(self.best, seconds)
        return seconds
