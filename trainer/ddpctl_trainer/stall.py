"""What a stalled job's summary says, decided from what each rank published (pure functions).

Every rank's watchdog (watchdog.py) publishes a ``Heartbeat``: where its rank is (step, phase and
its count of phase marks, ``seq``). Ranks run in lockstep (every rank marks the same phases in the
same order, since every phase ends in a collective), so ``seq`` is a position comparable across
ranks: when the job stops, the ranks with the smallest one are those the others wait for
(``analyse``), and ``summary_lines`` says so, naming each one's node, phase and innermost frames of
the user's code. ``StallClock`` decides that the job stopped: no rank made progress for
``--stall-timeout`` seconds. Nothing here talks to a store or a thread, so the tests feed it fake
heartbeats.
"""

from __future__ import annotations

import json
import os
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .protocol import EXIT_STALLED, STALL_SUMMARY_FIRST, STALL_SUMMARY_TAG

# The phases the training loop marks on its Beacon (watchdog.py), as the summary names them.
SETUP = "setup"
DATA = "data"
FORWARD = "forward"
BACKWARD = "backward+all-reduce"
OPTIMIZER = "optimizer"
LOGGING = "logging"
CHECKPOINT = "checkpoint"
EVAL = "eval"
DONE = "done"

_USER_FRAMES = 3  # frames of a behind rank's stack shown in the summary


@dataclass(frozen=True)
class Heartbeat:
    """One rank's last published position."""

    rank: int
    node: int
    local_rank: int
    host: str
    step: int
    phase: str
    seq: int
    since: float  # wall time the phase began (comparable across hosts)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Heartbeat:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    source: str = ""


@dataclass(frozen=True)
class Group:
    """Ranks at the same position."""

    ranks: tuple[int, ...]
    step: int
    phase: str
    since: float


@dataclass(frozen=True)
class Analysis:
    """Who the job waits for. ``behind`` empty: every rank is at the same place (a hang inside a
    collective, or the same blocking call everywhere)."""

    behind: tuple[Heartbeat, ...]
    waiting: tuple[Group, ...]
    silent: tuple[int, ...]  # ranks that never published a heartbeat
    reporter: int  # the rank that prints the summary: the lowest one that is not behind
    frames: Mapping[int, tuple[Frame, ...]] = field(default_factory=dict)


def analyse(
    world_size: int, beats: Mapping[int, Heartbeat], stacks: Mapping[int, Sequence[Frame]], answered: Iterable[int]
) -> Analysis:
    """Split the ranks into those behind (the smallest position, when positions differ, plus any
    rank without a heartbeat) and those waiting for them, grouped by position."""
    answered = sorted(set(answered))
    silent = tuple(r for r in range(world_size) if r not in beats)
    seqs = {b.seq for b in beats.values()}
    if world_size == 1:  # one process: it is the one that stopped, nobody waits
        behind = tuple(beats.values())
    elif len(seqs) > 1:
        front = max(seqs)
        behind = tuple(sorted((b for b in beats.values() if b.seq < front), key=lambda b: (b.seq, b.rank)))
    else:
        behind = ()
    behind_ranks = {b.rank for b in behind} | set(silent)
    groups: dict[int, list[Heartbeat]] = {}
    for b in beats.values():
        if b.rank not in behind_ranks:
            groups.setdefault(b.seq, []).append(b)
    waiting = tuple(
        Group(tuple(sorted(b.rank for b in members)), members[0].step, members[0].phase, min(b.since for b in members))
        for _, members in sorted(groups.items())
    )
    healthy = [r for r in answered if r not in behind_ranks]
    reporter = healthy[0] if healthy else (answered[0] if answered else 0)
    return Analysis(behind, waiting, silent, reporter, {r: tuple(f) for r, f in stacks.items()})


def library_roots() -> tuple[str, ...]:
    """Directories whose frames are not the user's code: the standard library and this trainer
    package (installed packages are recognised by their site-packages/dist-packages folder)."""
    roots = {str(Path(__file__).resolve().parent) + os.sep}
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(str(Path(path).resolve()) + os.sep)
    return tuple(sorted(roots))


def is_library(file: str, roots: Sequence[str]) -> bool:
    parts = Path(file).parts
    return file.startswith(("<", *roots)) or "site-packages" in parts or "dist-packages" in parts


def user_frames(frames: Sequence[Frame], roots: Sequence[str], limit: int = _USER_FRAMES) -> list[Frame]:
    """The innermost ``limit`` frames of the user's code (innermost first); if the stack has none,
    the innermost frames of whatever it is (a hang inside a library is still shown)."""
    inner_first = list(reversed(frames))
    mine = [f for f in inner_first if not is_library(f.file, roots)]
    return (mine or inner_first)[:limit]


_IN_STEP = (DATA, FORWARD, BACKWARD, OPTIMIZER)


def position(step: int, phase: str) -> str:
    """Where a rank is, in words: ``step`` counts finished optimizer steps."""
    if phase in _IN_STEP:
        return f"in {phase} of step {step + 1}"
    if phase == SETUP:
        return "in setup (resuming, before the first step)"
    return f"in {phase} after step {step}"


def _ranks_text(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _seconds(now: float, since: float) -> str:
    return f"{max(now - since, 0.0):.0f} s"


def summary_lines(
    analysis: Analysis,
    beats: Mapping[int, Heartbeat],
    now: float,
    timeout: float,
    roots: Sequence[str],
) -> list[str]:
    """The summary, one string per line, each starting with ``STALL_SUMMARY_TAG``."""
    first = f"{STALL_SUMMARY_FIRST} for {timeout:g} s (--stall-timeout {timeout:g}); stopping the job"
    lines = [f"{first} (exit code {EXIT_STALLED})"]

    def where(rank: int, header: str) -> None:
        frames = analysis.frames.get(rank)
        if frames is None:
            lines.append(f"{header}; its stack did not come (the process is frozen or holds the GIL)")
            return
        shown = user_frames(frames, roots)
        lines.append(header + (":" if shown else ""))
        for f in shown:
            lines.append(f"    at {f.file}:{f.line} in {f.function}" + (f": {f.source}" if f.source else ""))

    for b in analysis.behind:
        where(
            b.rank,
            f"rank {b.rank} (node {b.node}, local rank {b.local_rank}, host {b.host}) stopped "
            f"{_seconds(now, b.since)} ago {position(b.step, b.phase)}",
        )
    for r in analysis.silent:
        lines.append(
            f"rank {r} never sent a heartbeat (it stopped before its watchdog started, or cannot reach the store)"
        )
    if analysis.behind or analysis.silent:
        them = "them" if len(analysis.behind) + len(analysis.silent) > 1 else "it"
        for g in analysis.waiting:
            nodes = sorted({beats[r].node for r in g.ranks})
            lines.append(
                f"{_ranks_text(g.ranks)} (node{'s' if len(nodes) > 1 else ''} {', '.join(map(str, nodes))}) "
                f"wait for {them} {position(g.step, g.phase)} (for {_seconds(now, g.since)})"
            )
    else:
        g = analysis.waiting[0]
        where(
            g.ranks[0],
            f"every rank stopped {position(g.step, g.phase)} {_seconds(now, g.since)} ago: a collective that "
            f"never completes, or the same blocking call on every rank; rank {g.ranks[0]}",
        )
    lines.append("every rank's Python stacks are in its log (faulthandler)")
    return [f"{STALL_SUMMARY_TAG} {line}" for line in lines]


# --------------------------------------------------------------------------------------------
# The stall clock (pure: the thread feeds it counter readings and its clock)
# --------------------------------------------------------------------------------------------


class StallClock:
    """Decides "no rank made progress for ``timeout`` seconds" from readings of the job-wide
    progress counter: a reading that differs from the previous one is progress."""

    def __init__(self, timeout: float, now: float) -> None:
        self.timeout = timeout
        self.last_count: int | None = None
        self.last_change = now

    def observe(self, count: int, now: float) -> bool:
        """Feed one reading; True when the job is stalled."""
        if count != self.last_count:
            self.last_count = count
            self.last_change = now
            return False
        return now - self.last_change >= self.timeout


__all__ = [
    "BACKWARD",
    "CHECKPOINT",
    "DATA",
    "DONE",
    "EVAL",
    "FORWARD",
    "LOGGING",
    "OPTIMIZER",
    "SETUP",
    "Analysis",
    "Frame",
    "Group",
    "Heartbeat",
    "StallClock",
    "analyse",
    "position",
    "summary_lines",
    "user_frames",
]
