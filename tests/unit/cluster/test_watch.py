"""ddpctl.cluster.watch, the parts that need no API: which Warning events mean the job's pods cannot
be created (and the line `--wait` says for each, with the engine's hint for a container its
controller added); and `JobMonitor` keeping a job and its pods current from two watches of the API
server double (tests/support/kube_api_double), node groups included."""

from __future__ import annotations

import time

import pytest

from ddpctl.cluster import errors as E
from ddpctl.cluster.kinds import JOB, JOBSET, PYTORCHJOB, finished
from ddpctl.cluster.watch import JobMonitor, refusal, stall_summary
from ddpctl.errors import ClusterError
from tests.support.api import NAME, NS
from tests.support.kube_api_double.scripted import BOUND

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


# ------------------------------------------------------------------------------ JobMonitor on the API double


def _until(mon: JobMonitor, done) -> None:
    """Apply watch events until `done()`: each `next` blocks on the watch, bounded by BOUND."""
    deadline = time.monotonic() + BOUND
    while not done():
        left = deadline - time.monotonic()
        assert left > 0, "the watch never brought the change"
        mon.next(left)


def test_the_monitor_follows_the_job_and_its_pods_to_the_end(submitted) -> None:
    d, cluster = submitted()
    with JobMonitor(cluster, JOB, cluster.get(JOB, NAME)) as mon:
        assert mon.wait_synced(time.monotonic() + BOUND)
        assert [rank for rank, _ in mon.ranked_pods()] == [0, 1] and mon.result is None
        p0 = d.pod_names_for("Job", NAME, NS)[0]
        d.start_container(p0, NS)
        _until(mon, lambda: mon.pods[p0]["status"].get("phase") == "Running")
        d.finish("Job", NAME, NS, succeeded=True)
        _until(mon, lambda: mon.result is not None)
        assert mon.result == "Succeeded"


def test_the_failed_node_groups_job_decides(submitted) -> None:
    d, cluster = submitted("--layout", "1x2+1x1")
    first = cluster.get(JOB, f"{NAME}-g0")
    with JobMonitor(cluster, JOB, first) as mon:
        assert mon.wait_synced(time.monotonic() + BOUND)
        assert mon.grouped and sorted(mon.jobs) == [f"{NAME}-g0", f"{NAME}-g1"]
        assert len(mon.pods) == 2  # every group's pods
        d.finish("Job", f"{NAME}-g0", NS, succeeded=True)
        _until(mon, lambda: finished(JOB, mon.jobs[f"{NAME}-g0"])[0] is not None)
        assert mon.result is None  # one group still runs
        d.finish("Job", f"{NAME}-g1", NS, succeeded=False)
        _until(mon, lambda: mon.result is not None)
        assert mon.result == "Failed" and mon.decisive_job["metadata"]["name"] == f"{NAME}-g1"


def test_a_job_deleted_while_watched_is_an_error(submitted) -> None:
    _d, cluster = submitted()
    with JobMonitor(cluster, JOB, cluster.get(JOB, NAME)) as mon:
        assert mon.wait_synced(time.monotonic() + BOUND)
        cluster.call("DELETE", JOB.path(NS, NAME), E.Op("delete", JOB, NAME, NS))
        with pytest.raises(ClusterError, match=rf'^job.batch/{NAME} in namespace "{NS}" was deleted while ddpctl'):
            _until(mon, lambda: False)


def test_the_stall_summary_names_what_holds_each_node(submitted) -> None:
    d, cluster = submitted()
    p0, _p1 = d.pod_names_for("Job", NAME, NS)
    d.set_container_waiting(p0, NS, reason="ImagePullBackOff", message="Back-off pulling image")
    with JobMonitor(cluster, JOB, cluster.get(JOB, NAME)) as mon:
        assert mon.wait_synced(time.monotonic() + BOUND)
        text = stall_summary(mon, mon.ranked_pods())
        assert text.startswith("node 0 ImagePullBackOff: Back-off pulling image")
        assert "node 1" not in text  # nothing wrong with it yet
        assert stall_summary(mon, []) == "no pods yet"
