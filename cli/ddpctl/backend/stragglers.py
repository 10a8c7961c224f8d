"""What rank 0's straggler lines say, the same for every backend: which nodes are named now and
which recovered (`ddpctl status`, its `-o json`), and the explanation of a job that --stragglers
fail stopped with exit 202 (a local run's failure, a cluster job's). The lines are the straggler
detector's (`protocol.STRAGGLER_TAG`, `STRAGGLER_RECOVERED_TAG`), with or without `[rank 0] `.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from ddpctl_trainer import protocol
from ddpctl_trainer.protocol import (
    StragglerNote,
    current_stragglers,
    latest_stragglers,
    parse_rank_line,
    straggler_line,
    straggler_note,
)

RESUBMIT = "ddpctl submit ..."  # the user's own command line, which no object keeps
_AVOID_HINT = re.compile(r";\s*(?:avoid it: |resubmit with )--avoid-node \S+\s*$")
_K8S_NODE = re.compile(r"\bk8s node ([^\s,;)]+)")
# The trainer's error line under --stragglers fail, after its tag and `[rank R] `: `straggler: node 1
# (pod P, k8s node K) below ...; stopping (exit 202, --stragglers fail)[; resubmit with --avoid-node K]`
_STOPPED = f"{protocol.ERROR_TAG}straggler: "


def notes(lines: Iterable[str]) -> list[StragglerNote]:
    """Every straggler line's note, in the order printed."""
    return [n for n in map(straggler_line, lines) if n is not None]


def recovered(lines: Sequence[str]) -> list[StragglerNote]:
    """The nodes whose latest line says they recovered, in the order they did."""
    return [n for n in latest_stragglers(lines) if n.kind == "recovered"]


def straggler_data(lines: Sequence[str]) -> dict[str, Any]:
    """The machine-readable form (`status -o json`): the nodes named now, those that recovered, and
    the lines (without `[rank 0] `)."""

    def entry(note: StragglerNote) -> dict[str, Any]:
        return {"node": note.node, "text": note.text, "avoid": note.avoid}

    return {
        "current": [entry(n) for n in current_stragglers(lines)],
        "recovered": [entry(n) for n in recovered(lines)],
        "lines": [(parse_rank_line(line) or (0, line))[1] for line in lines],
    }


def stopping_note(lines: Sequence[str], errors: Iterable[str] = ()) -> StragglerNote | None:
    """The straggler that stopped a job under --stragglers fail: the last node rank 0 named and that
    has not recovered (else the last it named), else the one a rank's error line names; None when
    neither says."""
    current = current_stragglers(lines)
    if current:
        return current[-1]
    named = [n for n in notes(lines) if n.kind == "straggler"]
    if named:
        return named[-1]
    for error in errors:
        body = (parse_rank_line(error) or (0, error))[1]
        if body.startswith(_STOPPED):
            return straggler_note("straggler", body[len(_STOPPED) :])
    return None


def resubmit_hint(note: StragglerNote, command: str = RESUBMIT) -> str:
    """What to do about the node: resubmit away from its Kubernetes node (when the other pods ran
    elsewhere: the trainer's avoid hint), else say that they ran on the same one."""
    if note.avoid:
        return f"resubmit away from it: {command} --avoid-node {note.avoid}"
    k8s = _K8S_NODE.search(note.text)
    if k8s:
        return (
            f"the other pods ran on k8s node {k8s.group(1)} too, so --avoid-node {k8s.group(1)} would move the whole "
            "job, not the straggler alone"
        )
    return "its Kubernetes node is not known (the pods had no DDP_NODE_NAME), so there is no node to avoid"


def stopped_for(note: StragglerNote, command: str = RESUBMIT) -> str:
    """`stopped for a straggler (exit 202): node 1 (pod P, k8s node K): ...; resubmit away from it:
    ddpctl submit ... --avoid-node K`."""
    text = _AVOID_HINT.sub("", note.text)
    return f"stopped for a straggler (exit {protocol.EXIT_STRAGGLER}): {text}; {resubmit_hint(note, command)}"
