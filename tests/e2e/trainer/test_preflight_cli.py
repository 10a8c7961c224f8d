"""The preflight as a job: torchrun agents as nodes on loopback (gloo), one node slowed by a CPU
quota in a cgroup (tests/support/cpu_quota.py, joined once the process group is up), and, to be slow
on the network too, put behind a rate-limited link (tests/support/slow_link.py): a CPU quota alone
leaves a node's gloo transfers at 0.6-0.7 x its peers' (measured here), not below the tolerance.

The slowed node gets 0.05 CPU for its agent and workers together (a CFS quota of 5 ms per 100 ms);
a healthy rank, running alone, gets whatever this shared machine leaves it (20-100 % of a core
here, with other work on it). Repeated runs, healthy and slowed, are `ddpctl check --local`'s
(tests/e2e/test_check_local.py) and the benchmark's (bench/bench_preflight.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import skip_unless, slow_link
from tests.support.cpu_quota import unavailable
from tests.support.preflight import named_nodes, node_figures, run_preflight
from tests.support.trainer import PROG_PREFIX

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SLOW_CPUS = 0.05
SLOW_LINK_MBIT = 400  # healthy pairs here reach 7-11 Gbit/s of bus bandwidth


def _need_cgroups() -> None:
    reason = unavailable()
    skip_unless(reason is None, f"slowing a node needs a CPU quota: {reason}")


def _spread(reports: list[dict]) -> str:  # type: ignore[type-arg]
    """Each round's node figures and the slower node's share of the faster, for the test's output."""
    rows = []
    for r in reports:
        f = node_figures(r)
        rows.append(f"{', '.join(f'{v:.1f}' for v in f.values())} GFLOP/s: {min(f.values()) / max(f.values()):.2f}")
    return "; ".join(rows)


def test_two_nodes_pass_and_print_the_table(tmp_path: Path) -> None:
    """2 nodes x 2 processes, the standalone entry (--preflight fail by default): it passes, and rank
    0 prints the table (ranks grouped by node), the bus bandwidth, the 2-node caveat and the
    verdict, and writes the JSON; no other rank prints."""
    run = run_preflight(tmp_path)
    assert run.codes == [0, 0], run.explain()
    out0, out1 = run.outs[0][0], run.outs[1][0]
    lines = [line for line in out0.splitlines() if line.startswith("[rank 0] ddpctl-trainer: preflight")]
    assert lines == out0.splitlines(), out0  # the report is all rank 0 says
    assert out1 == "" and PROG_PREFIX not in run.outs[0][1] + run.outs[1][1]
    assert lines[0].startswith("[rank 0] ddpctl-trainer: preflight: 4 ranks on 2 nodes (gloo, cpu); GEMM 512 float32")
    table = [line.removeprefix("[rank 0] ddpctl-trainer: preflight: ") for line in lines[1:6]]
    assert table[0].split() == ["node", "rank", "local", "pod", "GFLOP/s", "cpu"], table
    # ranks grouped by node; a node's number and pod on its first row only
    patterns = [
        r"0 +0 +0 +\S+ +[\d.]+ +\d+%",
        r" +1 +1 +[\d.]+ +\d+%",
        r"1 +2 +0 +\S+ +[\d.]+ +\d+%",
        r" +3 +1 +[\d.]+ +\d+%",
    ]
    for pattern, row in zip(patterns, table[1:]):
        assert re.match(pattern, row), table
    text = "\n".join(lines)
    assert re.search(
        r"all-reduce 4 MiB over 4 ranks: bus bandwidth \d[\d.]* GB/s \(algbw [\d.]+ GB/s x 2\(n-1\)/n", text
    )
    assert "with 2 nodes a slow link and a slow node look the same from both ends" in text
    assert re.fullmatch(
        r"\[rank 0\] ddpctl-trainer: preflight verdict: passed: 4 ranks on 2 nodes, in [\d.]+ s", lines[-1]
    )
    ranks = run.report["ranks"]
    assert [(r["rank"], r["node"], r["local_rank"]) for r in ranks] == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
    assert all(r["compute"] > 0 for r in ranks) and run.report["allreduce"]["busbw_gbps"] > 0
    print(f"\ncompute {_spread(run.reports)}; took {run.report['elapsed_s']:.1f} s")


def test_a_slow_node_fails_the_job_with_the_preflight_exit_code(tmp_path: Path) -> None:
    """--preflight fail under ddpctl's launcher: every node exits 201, rank 0 names node 1."""
    _need_cgroups()
    run = run_preflight(
        tmp_path, args=["--preflight", "fail"], slow_node=1, cpus=SLOW_CPUS, launcher="ddpctl_trainer.launch"
    )
    assert run.codes == [201, 201], run.explain()
    assert run.throttled_s > 0, "the quota never held the slow node back: nothing was tested"
    assert named_nodes(run.report) == {1}, run.explain()
    finding = next(line for line in run.outs[0][0].splitlines() if "preflight finding:" in line)
    assert finding.startswith("[rank 0] ddpctl-trainer: preflight finding: slow node: node 1 (pod "), finding
    assert re.search(r"compute [\d.]+ GFLOP/s, 0\.\d\d x the median [\d.]+ GFLOP/s \(tolerance 0\.6\)", finding)
    errors = [line for line in run.outs[0][1].splitlines() if line.startswith(PROG_PREFIX)]
    assert len(errors) == 1 and errors[0].startswith(f"{PROG_PREFIX} [rank 0] preflight failed: slow node: node 1")
    assert "ddpctl-trainer.launch: workers failed; exit 201" in run.outs[1][1]


def test_four_nodes_pair_and_re_pair_to_find_the_slow_one(tmp_path: Path) -> None:
    """4 nodes x 1 process, node 2 slowed: named for its compute and, through the node pairs
    (sub-groups), for its network behind a slowed link: re-paired with fast nodes, it stays slow.
    (Healthy pairs on one shared host are noisy: only the slow node is asserted.)"""
    _need_cgroups()
    reason = slow_link.unavailable()
    skip_unless(reason is None, f"slowing a node's network needs a namespace and tc: {reason}")
    run = run_preflight(
        tmp_path,
        nnodes=4,
        nproc=1,
        args=["--preflight", "warn"],
        slow_node=2,
        cpus=SLOW_CPUS,
        link_mbit=SLOW_LINK_MBIT,
    )
    assert run.codes == [0, 0, 0, 0], run.explain()
    findings = run.report["findings"]
    assert [f["nodes"] for f in findings if f["kind"] == "slow node"] == [[2]], run.explain()
    assert [2] in [f["nodes"] for f in findings if f["kind"] == "slow node network"], run.explain()
    pairs = run.report["pairs"]
    assert [(p["a"], p["b"]) for p in pairs if p["round"] == 1] == [(0, 1), (2, 3)]
    partners = {p["b"] if p["a"] == 2 else p["a"] for p in pairs if 2 in (p["a"], p["b"])}
    assert len(partners) >= 2, pairs  # re-paired with fast nodes, not only its first partner
    assert "re-paired (round 2)" in run.outs[0][0]
