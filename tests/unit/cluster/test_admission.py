"""ddpctl.cluster.admission: Kueue's word on a queued job, read from its Workload, and what `submit`
can tell about --queue and --workload-priority-class. A cluster without Kueue is the API server
double (tests/support/kube_api_double); the double serves no Kueue API, so Kueue's objects come from
`KueueAnswers`, which answers `get` and `list` as the API server does (its 404s built by the same
translation, ddpctl.cluster.errors.from_status)."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.cluster import errors as E
from ddpctl.cluster.admission import Admission, admission, queue_warnings, short_reason
from ddpctl.cluster.kinds import LOCALQUEUE, PRIORITY, WORKLOAD, Kind
from ddpctl.manifests.render import render
from ddpctl.spec.kueue import JOB_UID_LABEL
from ddpctl.spec.model import JobSpec
from tests.support.api import NAME, NS

UID = "0b5e-uid"


class KueueAnswers:
    """Kueue's objects in one namespace, answered as `config.Cluster.get` and `.list` answer: a
    missing object is the API server's 404 (translated by from_status), a list is `{"items": [...]}`
    filtered by the label selector."""

    def __init__(self, *, queues: dict[str, str] | None = None, priorities: tuple[str, ...] = (),
                 workloads: list[dict[str, Any]] = ()) -> None:  # fmt: skip
        self.queues = queues or {}
        self.priorities = priorities
        self.workloads = list(workloads)
        self.asked: list[tuple[str, str | None]] = []

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.asked.append((kind.kind, name))
        if kind is LOCALQUEUE and name in self.queues:
            return {"metadata": {"name": name}, "spec": {"clusterQueue": self.queues[name]}}
        if kind is PRIORITY and name in self.priorities:
            return {"metadata": {"name": name}, "value": 100}
        body = {"message": f'{kind.resource} "{name}" not found', "details": {"name": name, "kind": kind.plural}}
        raise E.from_status(404, body, E.Op("get", kind, name, namespace), "context c at http://h")

    def list(self, kind: Kind, namespace: str | None, selector: str | None = None) -> dict[str, Any]:
        assert kind is WORKLOAD
        key, _, value = (selector or "").partition("=")
        return {"items": [w for w in self.workloads if w["metadata"]["labels"].get(key) == value]}


def job(queue: str | None = "team-queue", priority: str | None = None) -> dict[str, Any]:
    labels = {**({"kueue.x-k8s.io/queue-name": queue} if queue else {}),
              **({"kueue.x-k8s.io/priority-class": priority} if priority else {})}  # fmt: skip
    return {"metadata": {"name": NAME, "namespace": NS, "uid": UID, "labels": labels}}


def workload(*conditions: dict[str, Any], admitted_by: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if admitted_by:
        status["admission"] = {"clusterQueue": admitted_by}
    return {"metadata": {"name": f"job-{NAME}-1a2b", "labels": {JOB_UID_LABEL: UID}}, "status": status}


def cond(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, **({"reason": reason} if reason else {}),
            **({"message": message} if message else {})}  # fmt: skip


QUOTA = (
    "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor default, "
    "previously considered podsets requests (8) + current podset request (16) > maximum capacity (16)"
)


@pytest.mark.parametrize(
    ("message", "short"),
    [
        (QUOTA, "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor default "
                "(needs 24, maximum capacity 16)"),
        ("waiting\nfor quota", "waiting; for quota"),
        ("", ""),
    ],
)  # fmt: skip
def test_short_reason(message: str, short: str) -> None:
    assert short_reason(message) == short


def test_a_job_without_a_queue_has_no_admission() -> None:
    assert admission(KueueAnswers(), job(queue=None)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("answers", "the_job", "state", "message"),
    [
        (KueueAnswers(), job(), "waiting",
         f'LocalQueue "team-queue" does not exist in namespace "{NS}": Kueue will not admit the job; create it or '
         f"resubmit with another --queue (`kubectl get localqueues -n {NS}`)"),
        (KueueAnswers(queues={"team-queue": "cq"}), job(priority="urgent"), "waiting",
         'WorkloadPriorityClass "urgent" does not exist: Kueue makes no Workload for the job, which then waits with '
         "no word; create it or resubmit with another --workload-priority-class (`kubectl get "
         "workloadpriorityclasses`)"),
        (KueueAnswers(queues={"team-queue": "cq"}, priorities=("urgent",)), job(priority="urgent"), "waiting",
         "no Workload yet for LocalQueue team-queue (ClusterQueue cq): Kueue has not seen it"),
        (KueueAnswers(queues={"team-queue": "cq"}, workloads=[workload(cond("QuotaReserved", "False", "Pending",
                                                                              QUOTA))]),
         job(), "waiting",
         "waiting for admission in ClusterQueue cq: couldn't assign flavors to pod set main: insufficient quota for "
         "nvidia.com/gpu in flavor default (needs 24, maximum capacity 16)"),
        (KueueAnswers(queues={"team-queue": "cq"}, workloads=[workload()]), job(), "waiting",
         "waiting for admission in ClusterQueue cq: not yet considered"),
        (KueueAnswers(queues={"team-queue": "cq"},
                      workloads=[workload(cond("QuotaReserved"), cond("Admitted"), admitted_by="cq-2")]),
         job(), "admitted", "admitted by ClusterQueue cq-2"),
        (KueueAnswers(queues={"team-queue": "cq"},
                      workloads=[workload(cond("Admitted"), cond("Evicted", reason="Preempted",
                                                                 message="Preempted to\naccommodate"))]),
         job(), "evicted", "evicted by Kueue (Preempted): Preempted to; accommodate"),
        (KueueAnswers(queues={"team-queue": "cq"},
                      workloads=[workload(cond("Admitted"), cond("Finished", reason="JobFinished"))]),
         job(), "finished", "finished (JobFinished)"),
    ],
)  # fmt: skip
def test_what_kueue_decided(answers: KueueAnswers, the_job: dict[str, Any], state: str, message: str) -> None:
    found = admission(answers, the_job)  # type: ignore[arg-type]
    assert found is not None and (found.state, found.message) == (state, message)


def test_an_admission_keeps_the_workload_and_its_conditions_in_brief() -> None:
    admitted = {
        "type": "Admitted",
        "status": "True",
        "reason": "Admitted",
        "lastTransitionTime": "2024-01-01T00:00:00Z",
    }
    answers = KueueAnswers(queues={"team-queue": "cq"}, workloads=[workload(admitted)])
    found = admission(answers, job())  # type: ignore[arg-type]
    brief = [{"type": "Admitted", "status": "True", "reason": "Admitted"}]  # what status shows of each
    assert found == Admission("admitted", "admitted by ClusterQueue cq", f"job-{NAME}-1a2b", brief)
    assert found.as_dict() == {
        "state": "admitted",
        "message": "admitted by ClusterQueue cq",
        "workload": f"job-{NAME}-1a2b",
        "conditions": brief,
    }


def test_a_cluster_without_kueue(submitted) -> None:
    _, cluster = submitted()
    found = admission(cluster, job())
    assert found == Admission(
        "not installed", "queue team-queue named, but this cluster runs no Kueue (no Workload API)"
    )
    assert queue_warnings(cluster, "job", job(), "team-queue") == [
        "--queue team-queue: this cluster runs no Kueue (no kueue.x-k8s.io API); the label does nothing"
    ]


def _applied(target: str, suspended: bool) -> dict[str, Any]:
    """The workload as the API server answered its apply: suspended by Kueue's webhook, or not."""
    obj = render(JobSpec(name=NAME, namespace=NS, target=target, queue="team-queue"))[-1]
    engine_field = ("spec", "runPolicy", "suspend") if target == "pytorchjob" else ("spec", "suspend")
    node = obj
    for key in engine_field[:-1]:
        node = node.setdefault(key, {})
    node[engine_field[-1]] = suspended
    return obj


@pytest.mark.parametrize("target", ["job", "pytorchjob", "jobset", "trainjob"])
def test_no_warning_when_kueue_took_the_job(target: str) -> None:
    answers = KueueAnswers(queues={"team-queue": "cq"})
    assert queue_warnings(answers, target, _applied(target, True), "team-queue") == []  # type: ignore[arg-type]


def test_queue_warnings_say_what_is_missing() -> None:
    obj = _applied("pytorchjob", False)
    obj["metadata"].setdefault("labels", {})["kueue.x-k8s.io/priority-class"] = "urgent"
    notes = queue_warnings(KueueAnswers(), "pytorchjob", obj, "team-queue")  # type: ignore[arg-type]
    assert [n.split(": ", 1)[0] for n in notes] == ["--workload-priority-class urgent", "--queue team-queue",
                                                     "--queue team-queue"]  # fmt: skip
    assert 'WorkloadPriorityClass "urgent" does not exist' in notes[0]
    assert 'LocalQueue "team-queue" does not exist' in notes[1]
    assert notes[2] == (
        "--queue team-queue: Kueue did not suspend the PyTorchJob: its integration kubeflow.org/pytorchjob looks off "
        "(integrations.frameworks in Kueue's configuration), so the job runs without waiting for quota"
    )


def test_a_priority_class_without_a_queue_does_nothing() -> None:
    obj = job(queue=None, priority="urgent")
    assert queue_warnings(KueueAnswers(), "job", obj, None) == [  # type: ignore[arg-type]
        "--workload-priority-class urgent: without --queue, Kueue does not manage the job"
    ]
