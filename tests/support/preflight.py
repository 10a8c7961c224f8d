"""Run the preflight as a multi-node job on loopback, one node optionally slowed by a CPU quota
(tests/support/cpu_quota.py) and behind a slowed link (tests/support/slow_link.py); for the
preflight's tests and its benchmark.

Each node is an agent (torchrun, or ddpctl's launcher) with static rendezvous on 127.0.0.1, as
each pod's is on a cluster (the wiring of ``tests.support.trainer.static_node_command``). The
workers run ``python -m ddpctl_trainer.preflight``, rank 0 writing its report as JSON. Nothing
outlives a run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.cpu_quota import CpuQuota
from tests.support.slow_link import SlowLink
from tests.support.trainer import agent_command, clean_env, free_port, start, wait_all

ENTRY = "ddpctl_trainer.preflight"
SLOW = "tests.support.slow_worker"


@dataclass
class PreflightRun:
    codes: list[int]
    outs: list[tuple[str, str]]  # (stdout, stderr) per node
    reports: list[dict[str, Any]]  # rank 0's report as JSON (none when it did not get that far)
    seconds: float
    throttled_s: float = 0.0  # how long the slowed node's group was held back by its quota

    @property
    def report(self) -> dict[str, Any]:
        assert self.reports, self.explain()
        return self.reports[-1]

    @property
    def stdout(self) -> str:
        return "".join(o for o, _ in self.outs)

    def explain(self) -> str:
        parts = [f"exit codes {self.codes}"]
        for i, (out, err) in enumerate(self.outs):
            parts.append(f"--- node {i} stdout ---\n{out[-3000:]}\n--- node {i} stderr ---\n{err[-3000:]}")
        return "\n".join(parts)


def named_nodes(report: dict[str, Any]) -> set[int]:
    """The nodes that some finding of ``report`` names."""
    return {n for f in report["findings"] for n in f["nodes"]}


def node_figures(report: dict[str, Any]) -> dict[int, float]:
    """Node -> its compute figure as judged on CPU (its best rank)."""
    out: dict[int, float] = {}
    for r in report["ranks"]:
        out[r["node"]] = max(out.get(r["node"], 0.0), r["compute"])
    return out


def run_preflight(
    workdir: Path,
    nnodes: int = 2,
    nproc: int = 2,
    args: Sequence[str] = (),
    slow_node: int | None = None,
    cpus: float = 0.1,
    launcher: str = "torch.distributed.run",
    env: dict[str, str] | None = None,
    timeout: float = 300,
    link_mbit: float | None = None,
) -> PreflightRun:
    """One preflight job; with ``slow_node``, that node's
    agent and workers share ``cpus`` CPUs from the moment its process group is up
    (tests/support/slow_worker.py) until it is torn down, and with ``link_mbit`` too, the node runs
    behind a link of that rate each way."""
    workdir.mkdir(parents=True, exist_ok=True)
    report = workdir / "report.json"
    report.unlink(missing_ok=True)
    port = free_port()
    quota = CpuQuota(cpus) if slow_node is not None else None
    module = [ENTRY]
    flags = [*args, "--preflight-json", str(report)]
    t0 = time.perf_counter()
    throttled = 0.0
    link = SlowLink(link_mbit) if slow_node is not None and link_mbit is not None else None
    procs = []
    if quota is not None:
        quota.__enter__()
    try:
        if link is not None:
            link.__enter__()
        for node in range(nnodes):
            entry = ["-m", *module, *flags]
            if quota is not None and node == slow_node:
                entry = ["-m", SLOW, str(quota.procs_file), *module, *flags]
            if link is None:
                cmd, node_env = agent_command(node, nnodes, nproc, port, entry, launcher), clean_env(env)
            else:
                cmd = agent_command(node, nnodes, nproc, port, entry, launcher, master_addr=link.host_ip)
                behind = node == slow_node
                node_env = clean_env({**(env or {}), **(link.node_env if behind else link.host_env)})
                cmd = link.wrap(cmd) if behind else cmd
            procs.append(start(cmd, workdir, node_env))
        outs = wait_all(procs, timeout=timeout)
        if quota is not None:
            throttled = quota.throttled()[1]
    finally:
        if link is not None:
            link.__exit__(None, None, None)
        if quota is not None:
            quota.__exit__(None, None, None)
    seconds = time.perf_counter() - t0
    reports = [json.loads(report.read_text())] if report.exists() else []
    return PreflightRun([p.returncode for p in procs], outs, reports, seconds, throttled)
