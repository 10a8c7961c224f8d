"""Process-tree helpers the tests use to check that nothing outlives a run (ddpctl itself needs
only `ddpctl.procs.subtree` over one /proc scan)."""

from __future__ import annotations

from ddpctl.procs import stat_map, subtree


def descendant_starts(pid: int) -> dict[int, int]:
    """pid -> start time of every live descendant of `pid` (children first; see `kill_if_same`)."""
    return subtree(pid, stat_map())


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children first), or [] where /proc is missing."""
    return list(descendant_starts(pid))
