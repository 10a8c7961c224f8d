"""What a failed node does to a local run, following the target's limits: the whole group restarts
(torchrun's static rendezvous cannot admit a lone replacement) up to the target's limit, unless the
failure is a usage error (exit 2: retrying cannot help), and the trainer resumes from its checkpoint.
The rendered manifests do not yet fail a usage error at once (no podFailurePolicy / failurePolicy
rules, and torchrun in the pod exits 1 for it): locally it is already never retried.

The limits follow the rendered objects: `backoffLimit` on job (the Job's retries) and jobset
(`failurePolicy.maxRestarts`); pytorchjob restarts only with `restartPolicy: OnFailure`; trainjob
leaves it to its runtime, so nothing is retried here. Nothing here imports torch.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpctl.spec import JobSpec

EXIT_USAGE = 2
_CHECKPOINT = re.compile(r"^ckpt-(\d{8,})(\.pt)?$")


def restart_limit(spec: JobSpec) -> int:
    """How many times the target restarts the whole group after a node fails (the engine's rule)."""
    return spec.engine.restart_limit(spec)


def retriable(code: int) -> bool:
    """Every failure but a usage error may succeed when run again (preemption, a lost node, ...)."""
    return code not in (0, EXIT_USAGE)


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
    """`node 1 was preempted (SIGTERM)`, `node 0 was killed (SIGKILL)`, `node 1 failed (exit code 1)`."""
    sig = signal_of(code)
    if preempted or sig == "SIGTERM":
        return f"node {node} was preempted (SIGTERM)"
    if sig is not None:
        return f"node {node} was killed ({sig})"
    return f"node {node} failed (exit code {code})"


def latest_step(directory: Path | None) -> int | None:
    """The step of the newest trainer checkpoint in `directory` (by name), None when there is none."""
    if directory is None or not directory.is_dir():
        return None
    steps = [int(m.group(1)) for p in directory.iterdir() if (m := _CHECKPOINT.match(p.name))]
    return max(steps) if steps else None
