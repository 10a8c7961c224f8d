"""ddpctl.cluster.watch, the parts that need no API: which Warning events mean the job's pods cannot
be created (and the line `--wait` says for each, with the engine's hint for a container its
controller added)."""

from __future__ import annotations

import pytest
from ddpctl.cluster.kinds import JOB, JOBSET, PYTORCHJOB
from ddpctl.cluster.watch import refusal

PSA = (
    'pods "{pod}" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
    '(container "{container}" must set securityContext.allowPrivilegeEscalation=false)'
)


def event(kind: str, name: str, reason: str, message: str) -> dict:
    return {
        "type": "Warning",
        "reason": reason,
        "message": f"Error creating: {message}",
        "involvedObject": {"kind": kind, "name": name},
    }


CASES = [
    # kind, event, the line (None: not a refusal of this job's pods), words the hint must hold
    (JOB, event("Job", "train", "FailedCreate", PSA.format(pod="train-0-x", container="node")),
     'job/train cannot create pods: pods "train-0-x" is forbidden: violates PodSecurity', None),
    (JOBSET, event("Job", "train-node-0", "FailedCreate", "exceeded quota: gpus"),
     "job/train-node-0 cannot create pods: exceeded quota: gpus", None),
    (PYTORCHJOB, event("PyTorchJob", "train", "FailedCreatePod", PSA.format(pod="train-worker-0",
                                                                            container="init-pytorch")),
     "pytorchjob/train cannot create pods: ", "--pytorch-init-container-template-file"),
    (PYTORCHJOB, event("PyTorchJob", "train", "FailedCreatePod", PSA.format(pod="w", container="pytorch")),
     "pytorchjob/train cannot create pods: ", None),  # our own container: no operator hint
    (JOB, event("Job", "other", "FailedCreate", "exceeded quota"), None, None),  # another job
    (JOB, event("Job", "trainer", "FailedCreate", "exceeded quota"), None, None),  # a name that only starts alike
    (JOB, event("Pod", "train-0-x", "FailedCreate", "x"), None, None),  # a pod's own event: shown per pod
    (JOB, event("Job", "train", "BackoffLimitExceeded", "x"), None, None),  # a failure, not a refusal
]  # fmt: skip


@pytest.mark.parametrize(("kind", "ev", "line", "hint"), CASES)
def test_refusal(kind, ev, line, hint) -> None:
    text = refusal(kind, "train", ev)
    if line is None:
        assert text is None
        return
    assert text is not None and text.startswith(line), text
    assert "\n" not in text
    if hint:
        assert hint in text and "init-pytorch is the init container the training operator adds" in text
    else:
        assert "training operator" not in text
