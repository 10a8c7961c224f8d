"""The trainer's stall summary, read back from a job's output: one line that says who stopped and where.

When no rank makes progress for ``--stall-timeout`` seconds, the trainer's watchdog prints a summary
whose every line starts with ``protocol.STALL_SUMMARY_TAG`` and the ranks exit with
``protocol.EXIT_STALLED``. Runners (`run --local/--docker`) and cluster commands (`status`, `logs`,
`submit --follow`) read logs, not the trainer, so this module condenses those lines into a failure
reason. Of the trainer it imports only the protocol module, where both sides find the tag.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ddpctl_trainer import protocol

SUMMARY_TAG = protocol.STALL_SUMMARY_TAG
_FIRST = protocol.STALL_SUMMARY_FIRST
_FRAME = re.compile(r"^at (?P<where>\S+:\d+ in [^\s:]+)")


def summary_lines(lines: Iterable[str]) -> list[str]:
    """The last summary in ``lines`` (any ``[rank R]``-style prefix removed), tag stripped: the
    last full one (the job's, several lines) over a rank's own one-line report, which a rank
    prints when it cannot get the job's summary (its store went away) and may come after it."""
    blocks: list[list[str]] = []
    for raw in lines:
        _, tag, rest = raw.rstrip("\n").partition(SUMMARY_TAG)
        if not tag:
            continue
        text = rest.strip()
        if text.startswith(_FIRST) or not blocks:
            blocks.append([])  # a later summary (another attempt) replaces an earlier one
        blocks[-1].append(text)
    full = [block for block in blocks if len(block) > 1]
    return (full or blocks or [[]])[-1]


def stall_reason(lines: Iterable[str]) -> str | None:
    """One line from the last summary: the ranks behind with their innermost frame, then who waits;
    None when ``lines`` hold no summary."""
    block = summary_lines(lines)
    if not block:
        return None
    parts: list[str] = []
    for i, line in enumerate(block[1:], 1):
        if _FRAME.match(line) or line.startswith("every rank's Python stacks"):
            continue
        text = line.rstrip(":")
        following = block[i + 1] if i + 1 < len(block) else ""
        frame = _FRAME.match(following)
        if frame and line.endswith(":"):
            text += f" at {frame['where']}"
        parts.append(text)
    return "; ".join(parts) if parts else block[0]


__all__ = ["stall_reason", "summary_lines"]
