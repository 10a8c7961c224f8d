"""What a failed node does to a local or Docker run (`supervise.run_with_restarts`), following the
target's rules as its rendered objects apply them (the engine answers both questions): the whole
group restarts (torchrun's static rendezvous cannot admit a lone replacement) up to the target's
limit when the engine would retry the node's exit code (never a usage error, exit 2: retrying
cannot help), and the trainer resumes from its checkpoint. Nothing here imports torch.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.plan import Plan


def restart_limit(plan: Plan) -> int:
    """How many times the target restarts the whole group after a node fails (the engine's rule)."""
    return plan.restart_limit


def retriable(plan: Plan, code: int) -> bool:
    """Whether the target retries a node that ended with `code` (the engine's rule: on job and jobset
    every failure but a usage error; Kubeflow's ExitCode policy only 130, 137, 138 and 143). A node
    killed by signal N (-N from Popen) counts as 128 + N, as its pod's exit code would."""
    return plan.retriable(128 - code if code < 0 else code)


def signal_of(code: int) -> str | None:
    """The signal a node's exit code stands for (-N from Popen, 128 + N from a shell or launcher)."""
    number = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else None
    if number is None:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def what_happened(node: int, code: int, preempted: bool) -> str:
    """`node 1 was preempted (SIGTERM)`, `node 0 was killed (SIGKILL)`, `node 0 lost a peer (exit code
    138)`, `node 1 failed (exit code 1)`."""
    sig = signal_of(code)
    if preempted or sig == "SIGTERM":
        return f"node {node} was preempted (SIGTERM)"
    if code == protocol.EXIT_PEER_LOST:  # the launcher's code, not SIGUSR1 (128 + 10)
        return f"node {node} lost a peer (exit code {code})"
    if sig is not None:
        return f"node {node} was killed ({sig})"
    return f"node {node} failed (exit code {code})"


def latest_step(directory: Path | str | None) -> int | None:
    """The step of the newest trainer checkpoint in `directory` (by name), None when there is none or
    the checkpoints are in an object store (a URL: the CLI does not read the store)."""
    if not isinstance(directory, Path) or not directory.is_dir():
        return None
    steps = [step for p in directory.iterdir() if (step := protocol.checkpoint_step(p.name)) is not None]
    return max(steps) if steps else None
