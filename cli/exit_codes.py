"""The exit codes of the ddpctl trainer's launcher (`python -m ddpctl_trainer.launch`), as the
rendered failure rules and the local runners read them. The trainer defines them (ddpctl_trainer.
errors); the CLI never imports the trainer, so they are repeated here and a test keeps both equal.

A pod's exit code is all that Kubernetes failure rules see: the Job's `podFailurePolicy`
(`onExitCodes`), JobSet's rules (through the child Job's failure), PyTorchJob's
`restartPolicy: ExitCode` (which recreates a pod only for 130, 137, 138 and 143).
"""

from __future__ import annotations

TRAINER_LAUNCHER = "ddpctl_trainer.launch"  # `python3 -m ddpctl_trainer.launch`: what gives these codes

USAGE = 2  # bad input, found by every rank: a restart cannot help
PEER_LOST = 138  # a collective failed because another node went away (Kubeflow's "retryable" code)
KILLED = 137  # SIGKILL: the OOM killer, or the grace period ran out
PREEMPTED = 143  # SIGTERM: every rank checkpointed the same step and stopped
STALLED = 200  # the stall watchdog ended a hung job

# Why a pod stopped when the cause was elsewhere: a peer's preemption (every rank stops at the
# same step and exits 143) or a peer's death (138). Only the pod with the cause counts as a failure.
CAUSED_BY_A_PEER: tuple[int, ...] = (PEER_LOST, PREEMPTED)
# What Kubeflow's training operator retries under restartPolicy ExitCode (kubeflow/common
# pkg/util/train IsRetryableExitCode): SIGINT, SIGKILL, SIGUSR1 (its user-defined retryable) and SIGTERM.
KUBEFLOW_RETRYABLE: tuple[int, ...] = (130, KILLED, PEER_LOST, PREEMPTED)

_MEANINGS = {
    USAGE: "usage error",
    KILLED: "killed by SIGKILL",
    PEER_LOST: "lost a peer",
    PREEMPTED: "stopped by SIGTERM",
    STALLED: "stalled",
}


def meaning(code: int) -> str | None:
    """What a pod's exit code says when the ddpctl launcher ran it (None for codes it does not give)."""
    return _MEANINGS.get(code)
