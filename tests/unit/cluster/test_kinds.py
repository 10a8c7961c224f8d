"""ddpctl.cluster.kinds: the kinds ddpctl creates and reads (their API paths, references and
engines), which ddpctl job an object belongs to, when a workload has finished, and ages."""

from __future__ import annotations

import pytest

from ddpctl.cluster.kinds import (
    BY_TARGET,
    EVENT,
    JOB,
    JOB_OBJECT_KINDS,
    JOBSET,
    NAMESPACE,
    POD,
    PYTORCHJOB,
    RUNTIME,
    SECRET,
    SERVICE,
    TRAINJOB,
    WORKLOADS,
    Kind,
    age,
    c10d_rendezvous,
    finished,
    job_name_of,
    job_selector,
    kind_of,
    rank_notice,
)
from ddpctl.engines import AUTO_PREFERENCE, engine_for
from ddpctl.manifests.render import render
from ddpctl.spec.model import JobSpec


@pytest.mark.parametrize(
    ("kind", "api_version", "resource", "ref"),
    [
        (JOB, "batch/v1", "jobs.batch", "job.batch/x"),
        (PYTORCHJOB, "kubeflow.org/v1", "pytorchjobs.kubeflow.org", "pytorchjob.kubeflow.org/x"),
        (JOBSET, "jobset.x-k8s.io/v1alpha2", "jobsets.jobset.x-k8s.io", "jobset.jobset.x-k8s.io/x"),
        (
            TRAINJOB,
            "trainer.kubeflow.org/v1alpha1",
            "trainjobs.trainer.kubeflow.org",
            "trainjob.trainer.kubeflow.org/x",
        ),
        (SERVICE, "v1", "services", "service/x"),
        (POD, "v1", "pods", "pod/x"),
    ],
)
def test_names_of_a_kind(kind: Kind, api_version: str, resource: str, ref: str) -> None:
    assert (kind.api_version, kind.resource, kind.ref("x")) == (api_version, resource, ref)


@pytest.mark.parametrize(
    ("kind", "args", "path"),
    [
        (JOB, (), "/apis/batch/v1/jobs"),
        (JOB, ("team",), "/apis/batch/v1/namespaces/team/jobs"),
        (JOB, ("team", "w"), "/apis/batch/v1/namespaces/team/jobs/w"),
        (POD, ("team", "w-0", "log"), "/api/v1/namespaces/team/pods/w-0/log"),
        (NAMESPACE, ("team", "team"), "/api/v1/namespaces/team"),  # cluster-scoped: no namespace in it
        (
            RUNTIME,
            ("team", "torch-distributed"),
            "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/torch-distributed",
        ),
        (PYTORCHJOB, ("team", None, "status"), "/apis/kubeflow.org/v1/namespaces/team/pytorchjobs/status"),
        # names are quoted: a path segment is never split or escaped from
        (POD, ("a/b", "x y?"), "/api/v1/namespaces/a%2Fb/pods/x%20y%3F"),
    ],
)
def test_path(kind: Kind, args: tuple, path: str) -> None:
    assert kind.path(*args) == path


def test_each_workload_kind_knows_its_engine() -> None:
    for target, kind in BY_TARGET.items():
        assert kind.engine is engine_for(target) and kind.kind == engine_for(target).workload.kind
    assert [k.target for k in WORKLOADS] == list(AUTO_PREFERENCE)
    assert (*WORKLOADS, SERVICE, SECRET) == JOB_OBJECT_KINDS  # SECRET: a job's workspace
    with pytest.raises(TypeError, match=r"^Service is not the workload of an engine$"):
        _ = SERVICE.engine


@pytest.mark.parametrize("kind", [*JOB_OBJECT_KINDS, POD, RUNTIME, EVENT, NAMESPACE])
def test_kind_of_an_object(kind: Kind) -> None:
    assert kind_of({"apiVersion": kind.api_version, "kind": kind.kind}) is kind


@pytest.mark.parametrize(
    "obj", [{"apiVersion": "batch/v2", "kind": "Job"}, {"apiVersion": "v1", "kind": "ConfigMap"}, {}]
)
def test_kind_of_an_object_ddpctl_does_not_make(obj: dict) -> None:
    with pytest.raises(KeyError):
        kind_of(obj)


@pytest.mark.parametrize("target", sorted(BY_TARGET))
def test_every_rendered_object_is_a_kind_ddpctl_knows(target: str) -> None:
    for obj in render(JobSpec(name="w", target=target)):
        kind = kind_of(obj)
        assert kind in JOB_OBJECT_KINDS or kind is RUNTIME
        if kind in WORKLOADS:
            assert kind.target == target


def test_the_selector_and_the_job_an_object_belongs_to() -> None:
    assert job_selector("w") == "app.kubernetes.io/instance=w,app.kubernetes.io/managed-by=ddpctl"
    groups = JobSpec.from_dict(
        {
            "name": "w",
            "nodeGroups": [
                {"name": "big", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 2},
                {"name": "small", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 1},
            ],
        }
    )
    jobs = [o for o in render(groups) if o["kind"] == "Job"]
    assert [o["metadata"]["name"] for o in jobs] == ["w-big", "w-small"]
    assert {job_name_of(o) for o in jobs} == {"w"}  # one Job per group, one ddpctl job
    assert job_name_of({"metadata": {"name": "theirs"}}) == "theirs"


@pytest.mark.parametrize(
    ("data", "c10d"),
    [
        ({"name": "w"}, False),
        ({"name": "w", "nodes": "1:4"}, True),
        ({"name": "w", "rendezvous": {"mode": "c10d"}}, True),
        ({"name": "w", "target": "pytorchjob", "nodes": "2:4"}, True),  # its elasticPolicy
        ({"name": "w", "target": "pytorchjob"}, False),
    ],
)
def test_c10d_rendezvous_is_read_from_the_rendered_workload(data: dict, c10d: bool) -> None:
    workload = render(JobSpec.from_dict(data))[-1]
    assert c10d_rendezvous(workload) is c10d
    notice = rank_notice(workload, "w", 2)
    assert (notice is not None) is c10d
    if notice:
        assert notice.startswith("ddpctl: w uses c10d rendezvous: --rank 2 picks pod index 2;")


def _conditions(*conditions: tuple[str, str]) -> dict:
    return {"status": {"conditions": [{"type": t, "status": s, "reason": t + "Reason"} for t, s in conditions]}}


@pytest.mark.parametrize(
    ("kind", "job", "result"),
    [
        (JOB, {}, None),
        (JOB, _conditions(("Complete", "True")), "Succeeded"),
        (JOB, _conditions(("Failed", "True")), "Failed"),
        (JOB, _conditions(("Failed", "False"), ("Complete", "True")), "Succeeded"),
        (JOB, _conditions(("Suspended", "True")), None),
        (JOBSET, _conditions(("Completed", "True")), "Succeeded"),
        (PYTORCHJOB, _conditions(("Running", "True"), ("Succeeded", "True")), "Succeeded"),
        (PYTORCHJOB, _conditions(("Complete", "True")), None),  # a Job's word, not a PyTorchJob's
    ],
)
def test_finished(kind: Kind, job: dict, result: str | None) -> None:
    found, condition = finished(kind, job)
    assert found == result
    assert (condition is None) is (result is None)
    if condition:
        assert condition["status"] == "True" and condition["reason"].startswith(condition["type"])


@pytest.mark.parametrize(
    ("timestamp", "shown"),
    [
        ("2024-01-01T00:00:00Z", "45s"),
        ("2023-12-31T23:48:00Z", "12m"),
        ("2023-12-29T00:00:00Z", "3d"),
        ("2024-01-01T00:01:00Z", "0s"),  # a clock ahead of ours
        (None, "<unknown>"),
        ("", "<unknown>"),
        ("yesterday", "<unknown>"),
    ],
)
def test_age(timestamp: str | None, shown: str) -> None:
    now = 1704067245.0  # 2024-01-01T00:00:45Z
    assert age(timestamp, now) == shown
