"""A local job with a node slowed mid-run, from outside: `ddpctl run --local` (3 nodes x 1 process,
the ddpctl trainer) whose node 1 joins a cgroup with no limit when its process group comes up, and
tightens the group's CPU quota after its own step `slow_from` (tests/support/slow_node/
sitecustomize.py; as a lowered pod CPU limit slows a pod); the test lifts it again once the node
is named (if asked). The quota is a fixed share of a CPU (`cpus`), or a share of what the node was
measured to use before (`share`: 0.5 halves the node's speed however many cores the machine has
and whatever else runs on it). It acts on the job's own steps and lines only, never on sleeps.
Shared by tests/e2e/test_stragglers_local.py and bench/bench_stragglers.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ddpctl_trainer import protocol
from tests.support import REPO
from tests.support.cpu_quota import CpuQuota
from tests.support.procs import ddpctl_env, stop_like_a_user

HOOK = REPO / "tests" / "support" / "slow_node"
PROGRESS = re.compile(r"^\[rank 0\] epoch (\d+)/\d+ step (\d+)/(\d+)")


@dataclass
class SlowedRun:
    code: int
    lines: list[str]  # rank 0's straggler lines, as printed
    stderr: str
    acted: dict[str, int] = field(default_factory=dict)  # `slowed` / `lifted`: the step at which the quota changed
    last_step: int = 0
    used: float | None = None  # with `share`: the CPUs node 1 used before it was slowed (CPU seconds a second)
    cpus: float | None = None  # the quota it was slowed to

    def figures(self) -> list[float]:
        """The figure each line naming a node reports (its share of the median, or of its pace)."""
        return [float(m.group(1)) for m in (re.search(r"\), (\d+\.\d+) x ", line) for line in self.lines) if m]

    def notes(self) -> list[protocol.StragglerNote]:
        return [n for n in map(protocol.straggler_line, self.lines) if n is not None]

    def named(self) -> list[int | None]:
        return [n.node for n in self.notes() if n.kind == "straggler"]


def since(line: str) -> int:
    found = re.search(r"since step (\d+)", line)
    assert found, line
    return int(found.group(1))


def run_job(
    cwd: Path,
    quota: CpuQuota | None,
    mode: str,
    *,
    cpus: float = 0.08,
    share: float | None = None,
    measure_from: int = 10,
    slow_from: int = 30,
    lift: bool = False,
    epochs: int = 12,
    name: str = "st",
    timeout: float = 300,
    recovery: str = "gang",
) -> SlowedRun:
    """Run the job (node 1 slowed to `cpus` after its step `slow_from` when `quota` is given, or to
    `share` of the CPU it used from step `measure_from` to `slow_from`; lifted once named when `lift`)."""
    cwd.mkdir(parents=True, exist_ok=True)
    # libgomp's threads spin while they wait: on a machine with fewer cores than the job's threads
    # that spinning is most of a node's CPU use (measured: steps 4-5x slower, and a quota of half the
    # measured use left node 1 at ~0.6 of the median speed, not half); passive waiting makes the CPU
    # a node uses the work it does, for the slowed and the healthy runs alike
    env = {**ddpctl_env(), "OMP_WAIT_POLICY": "PASSIVE"}
    report = cwd / "slowed.json"
    if quota is not None:
        env.update(
            {
                "PYTHONPATH": f"{HOOK}{os.pathsep}{REPO}",
                "DDPTEST_SLOW_NODE": "1",
                "DDPTEST_SLOW_PROCS": str(quota.procs_file),
                "DDPTEST_SLOW_AT": str(slow_from),
                "DDPTEST_SLOW_REPORT": str(report),
            }
        )
        if share is not None:
            env.update(DDPTEST_SLOW_SHARE=str(share), DDPTEST_SLOW_MEASURE_FROM=str(measure_from))
        else:
            env["DDPTEST_SLOW_CPUS"] = str(cpus)
    args = ["run", "--local", "--nodes", "3", "--gpus", "0", "--procs", "1", "--name", name, "--fresh"]
    args += ["--color", "never", "--stragglers", mode, "--recovery", recovery]
    args += ["--", "--epochs", str(epochs), "--log-every", "5"]
    err = cwd / "stderr.txt"
    out = SlowedRun(0, [], "")
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ddpctl", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                found = PROGRESS.match(line)
                if found:
                    epoch, in_epoch, per_epoch = (int(g) for g in found.groups())
                    out.last_step = (epoch - 1) * per_epoch + in_epoch
                note = protocol.straggler_line(line.rstrip("\n"))
                if note is not None and line.startswith(protocol.rank_prefix(0)):
                    out.lines.append(line.rstrip("\n"))
                    if quota is not None and lift and note.kind == "straggler" and "lifted" not in out.acted:
                        quota.limit(None)
                        out.acted["lifted"] = out.last_step
            out.code = proc.wait(timeout=timeout)
        finally:
            stop_like_a_user(proc, pipes_read_elsewhere=True)
    out.stderr = err.read_text()
    if report.exists():  # what node 1 did to itself
        slowed = json.loads(report.read_text())
        out.acted["slowed"], out.used, out.cpus = slowed["step"], slowed["used"], slowed["cpus"]
    return out
