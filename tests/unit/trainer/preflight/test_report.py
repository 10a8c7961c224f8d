"""ddpctl_trainer.preflight.report: the findings assembled (NCCL's transport against the fabric
asked for included), the table's text, its JSON, and the exit code of a failed preflight."""

from __future__ import annotations

import json

import pytest
import torch

from ddpctl_trainer.dist import DistContext
from ddpctl_trainer.preflight import PreflightConfig, PreflightFailed, failure_message, nccl
from ddpctl_trainer.preflight.judge import (
    PairFigure,
)
from ddpctl_trainer.preflight.report import Figures, assemble
from ddpctl_trainer.protocol import (
    EXIT_PREFLIGHT,
    PREFLIGHT_FINDING_TAG,
    PREFLIGHT_TAG,
    PREFLIGHT_VERDICT_TAG,
    meaning,
    parse_rank_line,
)
from tests.unit.trainer.preflight.made_up import IB, SOCKET, cpu_report, gpu_figures, places, seconds_for

# ------------------------------------------------------------------------------------ NCCL


def test_a_socket_fallback_is_one_finding_per_node_quoting_nccl() -> None:
    transports = {0: nccl.parse(IB), 1: nccl.parse(IB), 2: nccl.parse(SOCKET), 3: nccl.parse(SOCKET)}
    report = assemble(gpu_figures(transports), PreflightConfig(fabric="infiniband"))
    (finding,) = report.findings
    assert finding.kind == "socket fallback" and finding.ranks == (2, 3) and finding.nodes == (1,)
    assert finding.text == (
        "socket fallback: ranks 2-3 on node 1 (pod ddp-1, k8s node w-1): NCCL fell back to sockets (NCCL found no "
        "InfiniBand/RoCE device), not infiniband; NCCL on rank 2: NCCL INFO Channel 00/0 : 2[0] -> 0[0] [send] "
        "via NET/Socket/0"
    )
    assert assemble(gpu_figures(transports), PreflightConfig(fabric="socket")).findings == []


def test_an_unknown_transport_is_a_note_not_a_finding() -> None:
    report = assemble(
        gpu_figures({0: nccl.parse(IB), 1: None, 2: None, 3: nccl.parse(IB)}), PreflightConfig(fabric="roce")
    )
    assert report.findings == []
    assert report.notes == [
        "NCCL's transport is unknown on 2 rank(s): no NCCL INFO lines in /tmp/ddpctl-nccl.%h.%p.log"
    ]


# ------------------------------------------------------------------------------------ the report


def test_the_report_text() -> None:
    figures = Figures(
        places(2, 2), "cpu", "gloo", 512, "float32", seconds_for({0: 61.0, 1: 59.5, 2: 20.0, 3: 18.2}),
        cpu_share={0: 0.98, 1: 0.97, 2: 0.31, 3: 0.3}, allreduce_bytes=4 * 2**20,
        world_s={0: 0.0102, 1: 0.0101, 2: 0.0105, 3: 0.0104},
    )  # fmt: skip
    report = assemble(figures, PreflightConfig(), elapsed_s=3.24)
    assert report.lines() == [
        "ddpctl-trainer: preflight: 4 ranks on 2 nodes (gloo, cpu); GEMM 512 float32, all-reduce 4 MiB; "
        "best of 3 windows of 0.25 s; named below 0.6 x the median",
        "ddpctl-trainer: preflight: node  rank  local  pod    k8s node  GFLOP/s  cpu",
        "ddpctl-trainer: preflight: 0     0     0      ddp-0  w-0       61       98%",
        "ddpctl-trainer: preflight:       1     1                       59.5     97%",
        "ddpctl-trainer: preflight: 1     2     0      ddp-1  w-1       20       31%  SLOW compute",
        "ddpctl-trainer: preflight:       3     1                       18.2     30%  SLOW compute",
        "ddpctl-trainer: preflight: compute: median 61 GFLOP/s per node (its best rank)",
        "ddpctl-trainer: preflight: all-reduce 4 MiB over 4 ranks: bus bandwidth 0.599 GB/s "
        "(algbw 0.399 GB/s x 2(n-1)/n, 10.5 ms each)",
        "ddpctl-trainer: preflight: with 2 nodes a slow link and a slow node look the same from both ends "
        "(telling them apart takes 3 nodes or more)",
        "ddpctl-trainer: preflight finding: slow node: node 1 (pod ddp-1, k8s node w-1): compute 20 GFLOP/s, "
        "0.33 x the median 61 GFLOP/s (tolerance 0.6); avoid it: --avoid-node w-1",
        "ddpctl-trainer: preflight verdict: failed: 1 finding (slow node: node 1) in 3.2 s; exit 201 "
        "(--preflight fail)",
    ]


def test_the_report_under_warn_goes_on() -> None:
    report = cpu_report({0: 61.0, 1: 59.0, 2: 20.0, 3: 18.0}, mode="warn")
    assert not report.failed and report.exit_code == 0
    assert report.verdict() == "1 finding (slow node: node 1) in 0.0 s; going on (--preflight warn)"
    assert report.to_dict()["verdict"] == "warned"


def test_a_passing_report() -> None:
    report = cpu_report({0: 61.0, 1: 59.0, 2: 58.0, 3: 60.0})
    assert report.lines()[-1] == "ddpctl-trainer: preflight verdict: passed: 4 ranks on 2 nodes, in 0.0 s"
    assert report.to_dict()["verdict"] == "passed"


def test_a_gpu_report_shows_h2d_pairs_and_nccl() -> None:
    ps = places(3, 2)
    figures = Figures(
        ps, "cuda", "nccl", 8192, "bfloat16", seconds_for(dict.fromkeys(range(6), 700.0), 8192, 1e12),
        h2d_bytes=2**28, h2d_s=dict.fromkeys(range(6), 2 ** 28 / 50000000000.0),
        pairs=[PairFigure(0, 1, 1, 90.0), PairFigure(0, 2, 2, 92.0), PairFigure(1, 2, 3, 91.0)],
        transports={r: nccl.parse(IB) for r in range(6)},
    )  # fmt: skip
    report = assemble(figures, PreflightConfig(fabric="infiniband"))
    table = report.table()
    assert table[0].split() == [
        "node",
        "rank",
        "local",
        "pod",
        "k8s",
        "node",
        "TFLOP/s",
        "H2D",
        "GB/s",
        "pair",
        "GB/s",
        "NCCL",
    ]
    assert table[1].split() == ["0", "0", "0", "ddp-0", "w-0", "700", "50", "92", "IB", "GDR"]
    assert table[2].split() == ["1", "1", "700", "50", "IB", "GDR"]  # a node's cells on its first row only
    text = "\n".join(report.figures())
    assert "node pairs (round 1), bus bandwidth GB/s: 0-1 90" in text
    assert "re-paired (round 3), bus bandwidth GB/s: 1-2 91" in text
    assert "NCCL transport: IB GDR (fabric asked: infiniband)" in text
    assert report.findings == []


def test_report_lines_parse_back_as_rank_0s_tagged_lines() -> None:
    import io

    report = cpu_report({0: 61.0, 1: 59.0, 2: 20.0, 3: 18.0})
    out = io.StringIO()
    report.print(0, out)
    parsed = [parse_rank_line(line) for line in out.getvalue().splitlines()]
    assert all(p is not None and p[0] == 0 for p in parsed)
    texts = [p[1] for p in parsed if p is not None]
    assert all(t.startswith(PREFLIGHT_TAG.rstrip(": ")) for t in texts)
    assert [t for t in texts if t.startswith(PREFLIGHT_FINDING_TAG)] == [
        PREFLIGHT_FINDING_TAG + report.findings[0].text
    ]
    assert texts[-1].startswith(PREFLIGHT_VERDICT_TAG + "failed: ")


def test_the_json_report() -> None:
    report = cpu_report({0: 61.0, 1: 59.0, 2: 20.0, 3: 18.0})
    data = json.loads(json.dumps(report.to_dict()))
    assert data["verdict"] == "failed" and data["exit_code"] == 201
    assert [r["slow"] for r in data["ranks"]] == [[], [], ["compute"], ["compute"]]
    assert data["findings"][0]["nodes"] == [1] and data["findings"][0]["avoid"] == "w-1"


def test_a_failed_preflight_is_its_own_exit_code() -> None:
    report = cpu_report({0: 61.0, 1: 59.0, 2: 20.0, 3: 18.0})
    error = PreflightFailed(failure_message(report))
    assert error.exit_code == EXIT_PREFLIGHT and meaning(EXIT_PREFLIGHT) == "failed its preflight checks"
    assert str(error).startswith("preflight failed: slow node: node 1 (pod ddp-1, k8s node w-1): compute 20 GFLOP/s")
    assert EXIT_PREFLIGHT not in (2, 138, 143, 200) and EXIT_PREFLIGHT > 128 + 64


@pytest.mark.parametrize(("rank", "printed"), [(0, True), (1, False)])
def test_a_failed_preflight_leaves_only_after_rank_0s_report_is_out(
    rank: int, printed: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every rank raises together; torchrun stops a node's other workers at the first exit, so no
    rank may leave before rank 0 has printed: a barrier after the print, before the raise."""
    import ddpctl_trainer.dist
    import ddpctl_trainer.preflight as preflight

    report = cpu_report({0: 61.0, 1: 59.0, 2: 20.0, 3: 18.0})
    assert report.failed
    events: list[str] = []
    monkeypatch.setattr(preflight, "run_checks", lambda *a: report)
    monkeypatch.setattr(
        ddpctl_trainer.dist, "barrier", lambda: events.append(f"barrier after {capsys.readouterr().out!r}")
    )
    ctx = DistContext(rank=rank, local_rank=rank, world_size=4, local_world_size=2, node_rank=0, restart_count=0,
                      launcher="torchrun")  # fmt: skip
    with pytest.raises(PreflightFailed):
        preflight.run_and_report(ctx, torch.device("cpu"), "gloo", PreflightConfig())
    (event,) = events
    assert (PREFLIGHT_VERDICT_TAG in event) is printed  # rank 0 printed its report before the barrier
