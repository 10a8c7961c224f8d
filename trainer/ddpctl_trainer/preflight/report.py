"""The preflight report: what was measured, the table (ranks grouped by node), the findings and
the verdict, as lines rank 0 prints and as JSON. Pure (no torch).

Every line starts with the preflight tag (``protocol.PREFLIGHT_TAG``); a finding's with
``PREFLIGHT_FINDING_TAG`` and the last line, the verdict, with ``PREFLIGHT_VERDICT_TAG``, so
``ddpctl status`` and the runners find them in the logs of rank 0 (printed after `[rank 0] `).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..protocol import (
    EXIT_OK,
    EXIT_PREFLIGHT,
    PREFLIGHT_FINDING_TAG,
    PREFLIGHT_TAG,
    PREFLIGHT_VERDICT_TAG,
    rank_prefix,
)
from .config import PreflightConfig
from .judge import (
    TWO_NODE_CAVEAT,
    Finding,
    Judged,
    PairFigure,
    Place,
    busbw,
    fmt,
    gemm_rate,
    judge_compute,
    judge_h2d,
    judge_pairs,
    judge_transport,
    judge_world,
    nodes_of,
)
from .nccl import DEBUG_FILE_ENV, Transport


@dataclass(frozen=True)
class WorldFigure:
    """The all-reduce over every rank."""

    nbytes: int
    ranks: int
    seconds: float
    algbw: float  # GB/s
    busbw: float  # GB/s


@dataclass
class Report:
    """Everything the checks found; the same on every rank (built from gathered figures)."""

    mode: str
    tolerance: float
    fabric: str
    device: str  # cpu | cuda
    backend: str
    places: list[Place]
    gemm_n: int
    gemm_dtype: str
    compute_unit: str  # GFLOP/s | TFLOP/s
    per_node: bool  # CPU: compute judged per node
    compute: dict[int, float]
    compute_ref: float
    window_s: float
    repeats: int
    cpu_share: dict[int, float] = field(default_factory=dict)
    h2d: dict[int, float] = field(default_factory=dict)
    h2d_ref: float = 0.0
    world: WorldFigure | None = None
    pairs: list[PairFigure] = field(default_factory=list)
    pair_ref: float = 0.0
    transports: dict[int, Transport | None] | None = None  # None: not NCCL
    nccl_file: str | None = None  # where a rank's NCCL lines were read from (the pattern)
    findings: list[Finding] = field(default_factory=list)
    marks: dict[int, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def failed(self) -> bool:
        """A finding under ``--preflight fail``: the job ends with ``EXIT_PREFLIGHT``."""
        return bool(self.findings) and self.mode == "fail"

    @property
    def exit_code(self) -> int:
        return EXIT_PREFLIGHT if self.failed else EXIT_OK

    # ------------------------------------------------------------------------------- text

    def header(self) -> str:
        nodes = nodes_of(self.places)
        gemm = f"GEMM {self.gemm_n} {self.gemm_dtype}"
        out = f"{_count(len(self.places), 'rank')} on {_count(len(nodes), 'node')} ({self.backend}, {self.device}); "
        if self.world is not None:
            out += f"{gemm}, all-reduce {_mib(self.world.nbytes)}"
        else:
            out += gemm
        windows = f"best of {self.repeats} windows" if self.repeats > 1 else "one window"
        out += f"; {windows} of {self.window_s:g} s; named below {self.tolerance:g} x the median"
        return out

    def table(self) -> list[str]:
        """Ranks grouped by node; a node's pod, Kubernetes node and best pair on its first row."""
        k8s = any(p.k8s_node for p in self.places)
        headers = ["node", "rank", "local", "pod"] + (["k8s node"] if k8s else []) + [self.compute_unit]
        if self.cpu_share:
            headers.append("cpu")
        if self.h2d:
            headers.append("H2D GB/s")
        if self.pairs:
            headers.append("pair GB/s")
        if self.transports is not None:
            headers.append("NCCL")
        headers.append("")
        best_pair: dict[int, float] = {}
        for f in self.pairs:
            for n in (f.a, f.b):
                best_pair[n] = max(best_pair.get(n, 0.0), f.busbw)
        rows: list[list[str]] = []
        for node, ps in nodes_of(self.places).items():
            for i, p in enumerate(ps):
                first = i == 0
                row = [str(node) if first else "", str(p.rank), str(p.local_rank), p.pod if first else ""]
                if k8s:
                    row.append((p.k8s_node or "-") if first else "")
                row.append(fmt(self.compute[p.rank]) if p.rank in self.compute else "-")
                if self.cpu_share:
                    share = self.cpu_share.get(p.rank)
                    row.append(f"{share:.0%}" if share is not None else "-")
                if self.h2d:
                    row.append(fmt(self.h2d[p.rank]) if p.rank in self.h2d else "-")
                if self.pairs:
                    row.append(fmt(best_pair[node]) if first and node in best_pair else "")
                if self.transports is not None:
                    t = self.transports.get(p.rank)
                    row.append(t.label if t is not None else "?")
                marks = self.marks.get(p.rank, [])
                row.append("SLOW " + ", ".join(marks) if marks else "")
                rows.append(row)
        return _columns([headers, *rows])

    def figures(self) -> list[str]:
        """The lines under the table: the reference values, the collective, the pairs, NCCL."""
        nodes = nodes_of(self.places)
        unit = "node (its best rank)" if self.per_node else "rank"
        out = [f"compute: median {fmt(self.compute_ref)} {self.compute_unit} per {unit}"]
        if self.h2d:
            out.append(f"host-to-device copy: median {fmt(self.h2d_ref)} GB/s per rank (pinned memory)")
        if self.world is not None:
            w = self.world
            out.append(
                f"all-reduce {_mib(w.nbytes)} over {w.ranks} ranks: bus bandwidth {fmt(w.busbw)} GB/s "
                f"(algbw {fmt(w.algbw)} GB/s x 2(n-1)/n, {w.seconds * 1e3:.3g} ms each)"
            )
        if len(nodes) == 2:
            out.append(TWO_NODE_CAVEAT)
        if self.pairs:
            rounds = sorted({f.round for f in self.pairs})
            for r in rounds:
                items = ", ".join(f"{f.a}-{f.b} {fmt(f.busbw)}" for f in self.pairs if f.round == r)
                what = "node pairs" if r == 1 else "re-paired"
                out.append(f"{what} (round {r}), bus bandwidth GB/s: {items}")
            out.append(f"node network: median {fmt(self.pair_ref)} GB/s (each node's best pair)")
        if self.transports is not None:
            labels = sorted({t.label if t is not None else "unknown" for t in self.transports.values()})
            out.append(f"NCCL transport: {', '.join(labels)} (fabric asked: {self.fabric})")
        out.extend(self.notes)
        return out

    def verdict(self) -> str:
        took = f"in {self.elapsed_s:.1f} s"
        if not self.findings:
            return f"passed: {_count(len(self.places), 'rank')} on {_count(len(nodes_of(self.places)), 'node')}, {took}"
        kinds = "; ".join(f.text.split(":", 1)[0] + _subject(f) for f in self.findings[:3])
        more = f" and {len(self.findings) - 3} more" if len(self.findings) > 3 else ""
        count = _count(len(self.findings), "finding")
        if self.mode == "fail":
            return f"failed: {count} ({kinds}{more}) {took}; exit {EXIT_PREFLIGHT} (--preflight fail)"
        return f"{count} ({kinds}{more}) {took}; going on (--preflight warn)"

    def lines(self) -> list[str]:
        """The whole report, each line with its tag (without the rank prefix)."""
        out = [PREFLIGHT_TAG + self.header()]
        out += [PREFLIGHT_TAG + line for line in self.table()]
        out += [PREFLIGHT_TAG + line for line in self.figures()]
        out += [PREFLIGHT_FINDING_TAG + f.text for f in self.findings]
        out.append(PREFLIGHT_VERDICT_TAG + self.verdict())
        return out

    def print(self, rank: int, stream: Any = None) -> None:
        """Rank ``rank``'s copy of the report, in one write (ranks sharing a log do not interleave)."""
        stream = sys.stdout if stream is None else stream
        prefix = rank_prefix(rank)
        stream.write("".join(f"{prefix}{line}\n" for line in self.lines()))
        stream.flush()

    # ------------------------------------------------------------------------------- JSON

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": "passed" if not self.findings else ("failed" if self.failed else "warned"),
            "exit_code": self.exit_code,
            "mode": self.mode,
            "tolerance": self.tolerance,
            "fabric": self.fabric,
            "device": self.device,
            "backend": self.backend,
            "elapsed_s": self.elapsed_s,
            "gemm": {"n": self.gemm_n, "dtype": self.gemm_dtype, "unit": self.compute_unit, "median": self.compute_ref},
            "ranks": [
                {
                    "rank": p.rank,
                    "local_rank": p.local_rank,
                    "node": p.node,
                    "pod": p.pod,
                    "k8s_node": p.k8s_node,
                    "compute": self.compute.get(p.rank),
                    "cpu_share": self.cpu_share.get(p.rank),
                    "h2d_gbps": self.h2d.get(p.rank),
                    "nccl": (t.to_dict() if (t := (self.transports or {}).get(p.rank)) is not None else None),
                    "slow": self.marks.get(p.rank, []),
                }
                for p in sorted(self.places, key=lambda p: p.rank)
            ],
            "allreduce": None
            if self.world is None
            else {
                "bytes": self.world.nbytes,
                "ranks": self.world.ranks,
                "seconds": self.world.seconds,
                "algbw_gbps": self.world.algbw,
                "busbw_gbps": self.world.busbw,
            },
            "pairs": [{"a": f.a, "b": f.b, "round": f.round, "busbw_gbps": f.busbw} for f in self.pairs],
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
        }

    def write_json(self, path: str) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(target)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:g} MiB"


def _subject(f: Finding) -> str:
    """`: node 1`, `: rank 5`, `: nodes 0-1`: what the verdict names of a finding."""
    if f.kind.startswith("slow link"):
        return f": nodes {f.nodes[0]}-{f.nodes[1]}"
    if f.kind in ("slow rank", "slow host-to-device copy"):
        return f": rank {f.ranks[0]}"
    if len(f.nodes) == 1:
        return f": node {f.nodes[0]}"
    return ""


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart, without trailing blanks."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


@dataclass
class Figures:
    """What the ranks measured, gathered: each rank's best seconds per operation (a rank that did
    not measure one is absent), the pairs' bus bandwidths, NCCL's transport per rank."""

    places: list[Place]
    device: str  # cpu | cuda
    backend: str
    gemm_n: int
    gemm_dtype: str
    compute_s: dict[int, float]
    cpu_share: dict[int, float] = field(default_factory=dict)
    h2d_bytes: int = 0
    h2d_s: dict[int, float] = field(default_factory=dict)
    allreduce_bytes: int = 0
    world_s: dict[int, float] = field(default_factory=dict)
    pairs: list[PairFigure] = field(default_factory=list)
    transports: dict[int, Transport | None] | None = None  # None: not NCCL
    nccl_file: str | None = None  # NCCL_DEBUG_FILE, where the transports were read from


def assemble(figures: Figures, config: PreflightConfig, elapsed_s: float = 0.0) -> Report:
    """Judge the figures (``judge``) into the report: compute per node on CPU and per rank on GPU,
    the H2D copy per rank, the world's bus bandwidth against its floor, the node pairs, NCCL's
    transport against the fabric asked for."""
    f = figures
    on_gpu = f.device == "cuda"
    scale, unit = (1e12, "TFLOP/s") if on_gpu else (1e9, "GFLOP/s")
    judged = Judged()
    rates = {r: gemm_rate(f.gemm_n, s, scale) for r, s in f.compute_s.items() if s > 0}
    floor_flag = "--preflight-min-tflops" if on_gpu else "--preflight-min-gflops"
    compute_ref = judge_compute(
        judged, f.places, rates, not on_gpu, config.tolerance, config.compute_floor(f.device), unit, floor_flag
    )
    h2d = {r: f.h2d_bytes / s / 1e9 for r, s in f.h2d_s.items() if s > 0}
    h2d_ref = judge_h2d(judged, f.places, h2d, config.tolerance, config.min_h2d) if h2d else 0.0
    world = None
    if f.world_s:
        slowest = max(f.world_s.values())  # the collective ends when its last rank does
        n, nbytes = len(f.places), f.allreduce_bytes
        world = WorldFigure(nbytes, n, slowest, nbytes / slowest / 1e9, busbw(nbytes, slowest, n))
        judge_world(judged, f.places, world.busbw, config.min_busbw)
    pair_ref = judge_pairs(judged, f.places, f.pairs, config.tolerance, config.min_busbw) if f.pairs else 0.0
    notes: list[str] = []
    if f.transports is not None:
        judge_transport(judged, f.places, f.transports, config.fabric)
        unknown = sorted(r for r, t in f.transports.items() if t is None)
        if unknown:
            where = f"in {f.nccl_file}" if f.nccl_file else f"({DEBUG_FILE_ENV} is not set: NCCL wrote them to stdout)"
            notes.append(f"NCCL's transport is unknown on {len(unknown)} rank(s): no NCCL INFO lines {where}")
    return Report(
        mode=config.mode,
        tolerance=config.tolerance,
        fabric=config.fabric,
        device=f.device,
        backend=f.backend,
        places=f.places,
        gemm_n=f.gemm_n,
        gemm_dtype=f.gemm_dtype,
        compute_unit=unit,
        per_node=not on_gpu,
        compute=rates,
        compute_ref=compute_ref,
        window_s=config.window_s,
        repeats=config.repeats,
        cpu_share=dict(f.cpu_share),
        h2d=h2d,
        h2d_ref=h2d_ref,
        world=world,
        pairs=list(f.pairs),
        pair_ref=pair_ref,
        transports=f.transports,
        nccl_file=f.nccl_file,
        findings=judged.findings,
        marks=judged.marks,
        notes=notes,
        elapsed_s=elapsed_s,
    )
