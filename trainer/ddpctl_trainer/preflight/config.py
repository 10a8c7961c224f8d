"""The preflight's settings: flags, ``DDP_TRAINER_<FLAG>`` env, a frozen ``PreflightConfig``.

Torch-free, like the trainer's own flag parser: the flags are checked on every rank alike before
any process group exists. ``add_flags`` adds them to any parser (the trainer's, the standalone
entry's), so the names and the env variables are the same wherever the checks run.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..protocol import (
    FABRICS,
    PREFLIGHT_CHECK_REPEATS,
    PREFLIGHT_CHECK_WINDOW_S,
    PREFLIGHT_JOB_REPEATS,
    PREFLIGHT_JOB_WINDOW_S,
    PREFLIGHT_MODES,
    PREFLIGHT_TOLERANCE,
)

MODES = PREFLIGHT_MODES

# Below this share of the median (judge.reference) a node, rank or link is named. 0.6: a node
# under a CPU limit or a failing GPU shows at a third to a half of its peers, while healthy peers
# measured best-of-3 agreed within 0.74-1.00 on a 2-core host shared with other work
# (docs/preflight.md); on GPUs, whose figures agree within a few per cent, 0.8 catches milder
# stragglers.
DEFAULT_TOLERANCE = PREFLIGHT_TOLERANCE
DEFAULT_REPEATS = PREFLIGHT_CHECK_REPEATS
# Each timed window spans several of the kernel's CFS periods (100 ms, what a Kubernetes CPU limit
# is enforced in): a shorter one can run entirely inside a throttled pod's quota and look healthy.
DEFAULT_WINDOW_S = PREFLIGHT_CHECK_WINDOW_S
CPU_GEMM_N = 512  # float32, one GEMM ~3-8 ms on a core: a window holds tens of them
GPU_GEMM_N = 8192  # bfloat16, ~1 TFLOP a GEMM: a few ms on a current GPU
CPU_ALLREDUCE_MIB = 4.0  # gloo over TCP: a few ms per all-reduce
GPU_ALLREDUCE_MIB = 256.0  # NCCL reaches its bus bandwidth plateau from ~100 MiB on
H2D_MIB = 256.0


@dataclass(frozen=True)
class PreflightConfig:
    """What the checks measure and how they judge; 0 for a size means the device's default."""

    mode: str = "fail"  # warn: report and go on; fail: exit EXIT_PREFLIGHT on a finding
    tolerance: float = DEFAULT_TOLERANCE
    min_gflops: float = 0.0  # absolute floors (0: none): CPU GEMM GFLOP/s
    min_tflops: float = 0.0  # GPU bf16 GEMM TFLOP/s
    min_busbw: float = 0.0  # all-reduce bus bandwidth, GB/s
    min_h2d: float = 0.0  # host-to-device copy, GB/s
    fabric: str = "socket"  # what the job asked for: socket, infiniband, roce, efa
    gemm_n: int = 0
    allreduce_mib: float = 0.0
    h2d_mib: float = H2D_MIB
    repeats: int = DEFAULT_REPEATS
    window_s: float = DEFAULT_WINDOW_S
    json_path: str | None = None  # rank 0 writes the report as JSON here

    def gemm_size(self, device_type: str) -> int:
        return self.gemm_n or (GPU_GEMM_N if device_type == "cuda" else CPU_GEMM_N)

    def allreduce_bytes(self, device_type: str) -> int:
        mib = self.allreduce_mib or (GPU_ALLREDUCE_MIB if device_type == "cuda" else CPU_ALLREDUCE_MIB)
        return max(4, int(mib * 2**20) // 4 * 4)  # whole float32 elements

    def compute_floor(self, device_type: str) -> float:
        return self.min_tflops if device_type == "cuda" else self.min_gflops


def add_flags(parser: argparse.ArgumentParser | Any, mode_default: str = "off", in_job: bool = False) -> None:
    """The preflight flags, on ``parser`` or an argument group of it. ``mode_default``: the
    trainer's is off (the spec turns it on), the standalone check's is fail. ``in_job``: the
    trainer's timing defaults (``protocol.PREFLIGHT_JOB_WINDOW_S`` and ``PREFLIGHT_JOB_REPEATS``:
    every start of a job pays for the checks), else the standalone check's."""
    repeats = PREFLIGHT_JOB_REPEATS if in_job else DEFAULT_REPEATS
    window = PREFLIGHT_JOB_WINDOW_S if in_job else DEFAULT_WINDOW_S
    parser.add_argument(
        "--preflight",
        default=mode_default,
        choices=MODES,
        help="check every node before training (GEMM, all-reduce bus bandwidth, NCCL transport, H2D copy): "
        "warn reports and goes on; fail ends the job with exit code 201 when a node, rank or link is slow or "
        "NCCL fell back to sockets",
    )
    parser.add_argument(
        "--preflight-tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="name a node, rank or link below this fraction of the median (0 < t <= 1)",
    )
    parser.add_argument("--preflight-min-gflops", type=float, default=0.0, help="CPU GEMM floor, GFLOP/s (0: none)")
    parser.add_argument(
        "--preflight-min-tflops", type=float, default=0.0, help="GPU bf16 GEMM floor, TFLOP/s (0: none)"
    )
    parser.add_argument(
        "--preflight-min-busbw", type=float, default=0.0, help="all-reduce bus bandwidth floor, GB/s (0: none)"
    )
    parser.add_argument(
        "--preflight-min-h2d", type=float, default=0.0, help="host-to-device copy floor, GB/s (0: none)"
    )
    parser.add_argument(
        "--fabric",
        default="socket",
        choices=FABRICS,
        help="the network the job asked for; with NCCL, the preflight checks that NCCL did not fall back to sockets",
    )
    parser.add_argument(
        "--preflight-gemm-n", type=int, default=0, help="GEMM side (0: 512 float32 on CPU, 8192 bf16 on GPU)"
    )
    parser.add_argument(
        "--preflight-allreduce-mib", type=float, default=0.0, help="all-reduce size in MiB (0: 4 on CPU, 256 on GPU)"
    )
    parser.add_argument("--preflight-h2d-mib", type=float, default=H2D_MIB, help="host-to-device copy size in MiB")
    parser.add_argument(
        "--preflight-repeats", type=int, default=repeats, help="timed windows per figure; the best counts"
    )
    parser.add_argument(
        "--preflight-window",
        type=float,
        default=window,
        help="seconds per timed window (keep it above 0.2: a CPU limit is enforced per 100 ms)",
    )
    parser.add_argument("--preflight-json", default=None, metavar="FILE", help="rank 0 writes the report as JSON here")


def from_values(values: Mapping[str, Any]) -> PreflightConfig:
    """A checked ``PreflightConfig`` from parsed flags (``vars(namespace)``, other keys ignored)."""
    cfg = PreflightConfig(
        mode=values["preflight"],
        tolerance=values["preflight_tolerance"],
        min_gflops=values["preflight_min_gflops"],
        min_tflops=values["preflight_min_tflops"],
        min_busbw=values["preflight_min_busbw"],
        min_h2d=values["preflight_min_h2d"],
        fabric=values["fabric"],
        gemm_n=values["preflight_gemm_n"],
        allreduce_mib=values["preflight_allreduce_mib"],
        h2d_mib=values["preflight_h2d_mib"],
        repeats=values["preflight_repeats"],
        window_s=values["preflight_window"],
        json_path=values["preflight_json"],
    )
    validate(cfg)
    return cfg


def validate(cfg: PreflightConfig) -> None:
    """One-line usage errors naming the flag and the fix."""
    if cfg.mode not in MODES:
        raise UsageError(f"--preflight must be one of {', '.join(MODES)}, got {cfg.mode!r}")
    if cfg.fabric not in FABRICS:
        raise UsageError(f"--fabric must be one of {', '.join(FABRICS)}, got {cfg.fabric!r}")
    if not (0 < cfg.tolerance <= 1):  # also NaN
        raise UsageError(
            f"--preflight-tolerance must be above 0 and at most 1 (a fraction of the median), got {cfg.tolerance:g}"
        )
    floors = {
        "--preflight-min-gflops": cfg.min_gflops,
        "--preflight-min-tflops": cfg.min_tflops,
        "--preflight-min-busbw": cfg.min_busbw,
        "--preflight-min-h2d": cfg.min_h2d,
    }
    for flag, value in floors.items():
        if not (value >= 0 and math.isfinite(value)):
            raise UsageError(f"{flag} must be 0 (no floor) or a positive number, got {value:g}")
    if not 0 <= cfg.gemm_n <= 65536:
        raise UsageError(f"--preflight-gemm-n must be 0 (the device's default) or 1..65536, got {cfg.gemm_n}")
    for flag, mib in {"--preflight-allreduce-mib": cfg.allreduce_mib, "--preflight-h2d-mib": cfg.h2d_mib}.items():
        if not (0 <= mib <= 65536):
            raise UsageError(f"{flag} must be between 0 and 65536 MiB, got {mib:g}")
    if cfg.h2d_mib == 0:
        raise UsageError("--preflight-h2d-mib must be above 0, e.g. 256")
    if not 1 <= cfg.repeats <= 100:
        raise UsageError(f"--preflight-repeats must be 1..100, got {cfg.repeats}")
    if not (0 < cfg.window_s <= 60):
        raise UsageError(f"--preflight-window must be above 0 and at most 60 seconds, got {cfg.window_s:g}")
