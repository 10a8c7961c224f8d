"""Figures made up for the preflight's judging and report tests: ranks placed on nodes, GEMM
seconds that give chosen rates, NCCL lines of each transport."""

from __future__ import annotations

from ddpctl_trainer.preflight import PreflightConfig, nccl
from ddpctl_trainer.preflight.judge import (
    Place,
)
from ddpctl_trainer.preflight.report import Figures, Report, assemble

GFLOP = 1e9


def places(nodes: int, per_node: int, k8s: bool = True, machine: str | None = None) -> list[Place]:
    """`nodes` x `per_node` ranks; node N's pod `ddp-N`, Kubernetes node `w-N` (or one host)."""
    return [
        Place(
            rank=n * per_node + i,
            local_rank=i,
            node=n,
            pod=f"ddp-{n}",
            k8s_node=(machine or f"w-{n}") if k8s else None,
            host=machine or f"ddp-{n}",
        )
        for n in range(nodes)
        for i in range(per_node)
    ]


def seconds_for(rates: dict[int, float], n: int = 512, scale: float = GFLOP) -> dict[int, float]:
    """The GEMM seconds that give these rates (the inverse of gemm_rate)."""
    return {r: 2.0 * n**3 / (rate * scale) for r, rate in rates.items()}


def cpu_report(rates: dict[int, float], nodes: int = 2, per_node: int = 2, **cfg: object) -> Report:
    config = PreflightConfig(**cfg)  # type: ignore[arg-type]
    figures = Figures(places(nodes, per_node), "cpu", "gloo", 512, "float32", seconds_for(rates))
    return assemble(figures, config)


SOCKET = [
    "x:1:1 [0] NCCL INFO NET/IB : No device found.",
    "x:1:2 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [send] via NET/Socket/0",
]
IB = [
    "y:1:1 [0] NCCL INFO Using network IB",
    "y:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA",
]


def gpu_figures(transports: dict[int, nccl.Transport | None]) -> Figures:
    return Figures(
        places(2, 2), "cuda", "nccl", 8192, "bfloat16", seconds_for(dict.fromkeys(range(4), 700.0), 8192, 1e12),
        transports=transports, nccl_file="/tmp/ddpctl-nccl.%h.%p.log",
    )  # fmt: skip
