"""Process-tree helpers the tests use to check that nothing outlives a run (ddpctl itself needs
only `ddpctl.procs.subtree` over one /proc scan)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ddpctl.procs import stat_map, subtree


def descendant_starts(pid: int) -> dict[int, int]:
    """pid -> start time of every live descendant of `pid` (children first; see `kill_if_same`)."""
    return subtree(pid, stat_map())


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children first), or [] where /proc is missing."""
    return list(descendant_starts(pid))


def with_env(pids: Iterable[int], name: str, value: str) -> int:
    """The first of `pids` whose environment has NAME=value (RANK=3: that rank's process;
    PET_NODE_RANK=1: node 1's agent). Processes that ended meanwhile are skipped."""
    wanted = f"{name}={value}".encode()
    pids = list(pids)
    for pid in pids:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in env:
            return pid
    raise AssertionError(f"no process with {name}={value} among {pids}")
