"""`ddpctl check --local` as a user runs it: the preflight as a job of its own, 2 nodes x 2
processes on loopback (gloo), its report printed, the run's record read by `ddpctl status`.

A slow node: node 1's agent and workers share a CPU quota (a cgroup, tests/support/cpu_quota.py)
from the moment their process group is up to its end (tests/support/slow_node/sitecustomize.py, on
the job's PYTHONPATH): a tenth of a CPU for the four processes of one node, a fraction of what the
healthy node's rank gets running alone on this 2-core machine. Each run is a job of its own (the
quota starts afresh, as a throttled pod's does).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support import REPO, skip_unless
from tests.support.cpu_quota import CpuQuota, unavailable
from tests.support.procs import run_ddpctl

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

HOOK = REPO / "tests" / "support" / "slow_node"
SLOW_CPUS = 0.1
TAG = "[rank 0] ddpctl-trainer: preflight"


def _check(cwd: Path, *flags: str, quota: CpuQuota | None = None) -> tuple[int, str, list[str]]:
    """`ddpctl check --local` (node 1 slowed under `quota`): exit code, stderr, rank 0's report."""
    cwd.mkdir(parents=True, exist_ok=True)
    env: dict[str, str] = {}
    if quota is not None:
        env = {"PYTHONPATH": f"{HOOK}:{REPO}", "DDPTEST_SLOW_NODE": "1", "DDPTEST_SLOW_PROCS": str(quota.procs_file)}
    r = run_ddpctl("check", "--local", *flags, cwd=cwd, timeout=300, extra_env=env)
    report = [line for line in r.stdout.splitlines() if line.startswith(TAG)]
    return r.returncode, r.stderr, report


def _named(report: list[str]) -> list[str]:
    return [line.split("finding: ", 1)[1] for line in report if "preflight finding: " in line]


def _table_and_status(cwd: Path, report: list[str]) -> None:
    """A passing 2x2 check's report (the table, ranks grouped by node, the verdict) and what
    `ddpctl status` then says of the run."""
    assert report[0].startswith(f"{TAG}: 4 ranks on 2 nodes (gloo, cpu); GEMM 512 float32, all-reduce 4 MiB; best of 3")
    table = [line.removeprefix(f"{TAG}: ") for line in report[1:6]]
    assert table[0].split() == ["node", "rank", "local", "pod", "k8s", "node", "GFLOP/s", "cpu"], table
    # ranks grouped by node: a node's number, pod (its hostname in the cluster) and machine on its first row
    assert re.match(r"0 +0 +0 +ddp-train-check-0 +\S+ +[\d.]+ +\d+%$", table[1]), table
    assert re.match(r" +1 +1 +[\d.]+ +\d+%$", table[2]), table
    assert re.match(r"1 +2 +0 +ddp-train-check-1 +\S+ +[\d.]+ +\d+%$", table[3]), table
    assert re.match(r" +3 +1 +[\d.]+ +\d+%$", table[4]), table
    assert re.fullmatch(rf"{re.escape(TAG)} verdict: passed: 4 ranks on 2 nodes, in [\d.]+ s", report[-1])
    status = run_ddpctl("status", "ddp-train-check", "--on", "local", cwd=cwd, timeout=60)
    assert status.returncode == 0, status.stderr
    assert re.search(r"^Preflight: +passed: 4 ranks on 2 nodes", status.stdout, re.M), status.stdout
    assert re.search(r"^ +1 +2 +0 +ddp-train-check-1 ", status.stdout, re.M), status.stdout
    doc = json.loads(run_ddpctl("status", "ddp-train-check", "--on", "local", "-o", "json", cwd=cwd).stdout)
    assert doc["preflight"]["verdict"].startswith("passed") and doc["preflight"]["findings"] == []


def test_ten_healthy_checks_name_nothing_and_status_shows_one(tmp_path: Path) -> None:
    """Ten checks on a healthy machine: none names anything (false alarms), each exits 0; the first
    one's report and `ddpctl status` are read in full."""
    verdicts = []
    for i in range(10):
        code, err, report = _check(tmp_path / str(i))
        assert code == 0, err[-3000:]
        assert _named(report) == [], report
        if i == 0:
            _table_and_status(tmp_path / str(i), report)
        verdicts.append(report[-1].split("verdict: ", 1)[1])
    print("\n" + "\n".join(verdicts))
    assert all(v.startswith("passed") for v in verdicts), verdicts


def test_a_slowed_node_is_named_in_each_of_3_checks_and_fails_them_with_201(tmp_path: Path) -> None:
    reason = unavailable()
    skip_unless(reason is None, f"slowing a node needs a CPU quota: {reason}")
    for i in range(3):
        with CpuQuota(SLOW_CPUS) as quota:
            code, err, report = _check(tmp_path / str(i), quota=quota)
            held = quota.throttled()[1]
        assert held > 0, "the quota never held node 1 back: nothing was tested"
        assert code == 201, err[-3000:]
        named = _named(report)
        print(f"\ncheck {i}: {named}")
        assert len(named) == 1 and named[0].startswith("slow node: node 1 (pod ddp-train-check-1"), report
        assert re.search(r"compute [\d.]+ GFLOP/s, 0\.\d\d x the median [\d.]+ GFLOP/s \(tolerance 0\.6\)", named[0])
        error = err.strip().splitlines()[-1]
        assert error.startswith("ddpctl: error: job ddp-train-check failed: rank 0 (node 0, local rank 0) exited "
                                "with code 201: preflight failed: slow node: node 1"), error  # fmt: skip
