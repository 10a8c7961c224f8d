"""A slow node for tests: a cgroup whose processes together get at most a fraction of one CPU.

The kernel's CFS bandwidth control (what a Kubernetes CPU limit is): a quota of run time per
period (cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` under /sys/fs/cgroup/cpu; v2 `cpu.max`).
A node's workers and its torchrun agent join the group once the process group is up
(tests/support/slow_worker.py), so the node is slow for everything the checks time but starts
as fast as the others (under a quota of a tenth of a CPU, importing torch alone would take a
minute). Needs root (or a delegated cgroup); ``unavailable`` says why not.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType

V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")
PERIOD_US = 100_000  # the kernel's default period, and Kubernetes'


def _root() -> tuple[Path, int] | None:
    """(the hierarchy to create groups in, its version), or None."""
    if (V1 / "cpu.cfs_quota_us").exists():
        return V1, 1
    controllers = V2 / "cgroup.subtree_control"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return V2, 2
    return None


def unavailable() -> str | None:
    """Why a CPU quota cannot be set here; None when it can."""
    found = _root()
    if found is None:
        return "no cgroup CPU controller (cgroup v1 cpu, or v2 with cpu in subtree_control)"
    if not os.access(found[0], os.W_OK):
        return f"{found[0]} is not writable (needs root or a delegated cgroup)"
    return None


def write_limit(group: Path, cpus: float | None) -> None:
    """Give the cgroup `group` (v1 or v2) `cpus` of a CPU now, on the processes already in it too
    (None: no limit). Also run inside a slowed node's worker (tests/support/slow_node), which
    loads this file by its path: it imports nothing from the test packages."""
    quota = -1 if cpus is None else max(1000, int(cpus * PERIOD_US))
    if (group / "cpu.max").exists():
        (group / "cpu.max").write_text(f"{'max' if quota < 0 else quota} {PERIOD_US}")
    else:
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(quota))


class CpuQuota:
    """``with CpuQuota(0.25) as q:`` the processes in the group share a quarter of a CPU (None: no
    limit until ``q.limit(cpus)``).
    On exit, what still runs in it moves back to the parent group, and the group is removed."""

    def __init__(self, cpus: float | None, name: str | None = None) -> None:
        found = _root()
        if found is None:
            raise RuntimeError(unavailable())
        self.root, self.version = found
        self.cpus = cpus
        self.path = self.root / (name or f"ddpctl-test-{os.getpid()}-{id(self):x}")

    def __enter__(self) -> CpuQuota:
        self.path.mkdir()
        self.limit(self.cpus)
        return self

    def limit(self, cpus: float | None) -> None:
        """Set the group's share of a CPU now (None: no limit), on the processes already in it too:
        a node slowed mid-run, from outside, as a lowered pod CPU limit slows a pod."""
        self.cpus = cpus
        write_limit(self.path, cpus)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for _ in range(100):  # a process may fork, or still be exiting, while we look
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    (self.root / "cgroup.procs").write_text(str(pid))
                except OSError:  # gone meanwhile
                    pass
            time.sleep(0.05)
        self.path.rmdir()

    def pids(self) -> list[int]:
        """The processes in the group now."""
        return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]

    def throttled(self) -> tuple[int, float]:
        """(periods in which the group was throttled, seconds it was held back) so far."""
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        if self.version == 1:
            return int(stat["nr_throttled"]), int(stat["throttled_time"]) / 1e9
        return int(stat["nr_throttled"]), int(stat["throttled_usec"]) / 1e6

    @property
    def procs_file(self) -> Path:
        """Write a pid here to move that process into the group."""
        return self.path / "cgroup.procs"
