"""ddpctl.cluster.apply: a job's objects applied (server-side apply), found again by their labels,
and deleted (never a same-named successor), through the real client and the API server double
(tests/support/kube_api_double). `submit`'s conflicts and rollbacks as a user meets them are in
test_submit.py."""

from __future__ import annotations

import json

import pytest

from ddpctl.cluster import errors as E
from ddpctl.cluster.apply import (
    APPLY_CONTENT_TYPE,
    apply_one,
    delete_job,
    delete_object,
    find_job,
    find_objects,
    propagation_of,
    submit,
)
from ddpctl.cluster.kinds import JOB, JOBSET, POD, PYTORCHJOB, SERVICE, TRAINJOB, job_selector
from ddpctl.errors import ClusterError, NotFound
from ddpctl.manifests.render import render
from ddpctl.spec.model import JobSpec
from tests.support.api import NAME, NS

GROUPS = [
    {"name": "big", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 2},
    {"name": "small", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 1},
]


def objects(target: str = "job", **data: object) -> list[dict]:
    return render(JobSpec.from_dict({"name": NAME, "namespace": NS, "target": target, **data}))


def test_apply_creates_then_finds_the_same_object(submitted) -> None:
    d, cluster = submitted()
    service = objects()[0]
    applied = apply_one(cluster, {**service, "metadata": {**service["metadata"], "name": "other"}})
    assert applied.kind is SERVICE and applied.created and applied.obj["metadata"]["name"] == "other"
    again = apply_one(cluster, {**service, "metadata": {**service["metadata"], "name": "other"}})
    assert not again.created and again.obj["metadata"]["uid"] == applied.obj["metadata"]["uid"]
    request = d.requests_to("PATCH", r"/services/other$")[0]
    assert request.content_type == APPLY_CONTENT_TYPE and request.query["fieldManager"] == ["ddpctl"]


def test_a_dry_run_apply_stores_nothing(submitted) -> None:
    d, cluster = submitted()
    service = objects()[0]
    applied = apply_one(cluster, {**service, "metadata": {**service["metadata"], "name": "dry"}}, dry_run=True)
    assert applied.obj["metadata"]["name"] == "dry"
    assert d.requests_to("PATCH", r"/services/dry$")[0].query["dryRun"] == ["All"]
    assert cluster.get_or_none(SERVICE, "dry") is None


def test_find_objects_finds_the_jobs_top_level_objects_by_label(submitted) -> None:
    _d, cluster = submitted("--target", "jobset", engines=("jobset",))
    found = find_objects(cluster, NAME, NS)
    assert [(k.kind, o["metadata"]["name"]) for k, o in found] == [("JobSet", NAME)]
    # the JobSet's own Jobs (and its Service) carry the labels too, but belong to it: the garbage
    # collector's to delete
    assert cluster.list(JOB, NS, job_selector(NAME))["items"]
    assert find_objects(cluster, "other", NS) == []


def test_kinds_the_cluster_does_not_serve_are_skipped(submitted) -> None:
    _, cluster = submitted()
    assert [k for k, _ in find_objects(cluster, NAME, NS, (PYTORCHJOB, TRAINJOB, JOB))] == [JOB]


def test_find_job_is_the_workload_that_runs_rank_0(submitted) -> None:
    _, cluster = submitted("--layout", "1x2+1x1")
    jobs = [o["metadata"]["name"] for k, o in find_objects(cluster, NAME, NS) if k is JOB]
    assert sorted(jobs) == [f"{NAME}-g0", f"{NAME}-g1"]  # one Job per node group
    kind, job = find_job(cluster, NAME, NS)
    assert kind is JOB and job["metadata"]["name"] == f"{NAME}-g0"


def test_find_job_of_a_job_that_is_not_there(submitted) -> None:
    _, cluster = submitted()
    with pytest.raises(NotFound) as missing:
        find_job(cluster, "other", NS)
    assert str(missing.value) == (
        f'no job "other" in namespace "{NS}" (no Job, PyTorchJob, JobSet or TrainJob labelled '
        f"{job_selector('other')}); see `ddpctl list -n {NS}`"
    )
    with pytest.raises(NotFound, match=r'^namespace "ghost" does not exist \(context double at http'):
        find_job(cluster, NAME, "ghost")


def test_a_deletion_never_takes_a_same_named_successor(submitted) -> None:
    _d, cluster = submitted()
    stale = cluster.get(SERVICE, NAME)
    delete_object(cluster, SERVICE, stale)
    assert cluster.get_or_none(SERVICE, NAME) is None
    delete_object(cluster, SERVICE, stale)  # already gone: nothing to do
    successor = apply_one(cluster, objects()[0]).obj
    with pytest.raises(E.ApiError) as conflict:
        delete_object(cluster, SERVICE, stale)  # the old uid: not the object there now
    assert conflict.value.code == 409
    assert cluster.get(SERVICE, NAME)["metadata"]["uid"] == successor["metadata"]["uid"]


@pytest.mark.parametrize(("kind", "propagation"), [(JOB, "Foreground"), (JOBSET, "Foreground"),
                                                    (TRAINJOB, "Background"), (SERVICE, "Foreground")])  # fmt: skip
def test_propagation_of(kind, propagation: str) -> None:
    assert propagation_of(kind) == propagation


def test_delete_job_removes_the_workload_first_then_waits_for_its_pods(submitted) -> None:
    d, cluster = submitted()
    assert cluster.list(POD, NS, job_selector(NAME))["items"]
    deleted: list[str] = []
    items = delete_job(
        cluster, NAME, NS, on_deleted=lambda kind, obj: deleted.append(kind.ref(obj["metadata"]["name"]))
    )
    assert deleted == [f"job.batch/{NAME}", f"service/{NAME}"] and len(items) == 2
    assert find_objects(cluster, NAME, NS) == [] and cluster.list(POD, NS, job_selector(NAME))["items"] == []
    body = json.loads(d.requests_to("DELETE", rf"/jobs/{NAME}$")[0].body)
    assert body["propagationPolicy"] == "Foreground" and body["preconditions"]["uid"] == items[0][1]["metadata"]["uid"]
    assert delete_job(cluster, NAME, NS) == []


def test_submit_rolls_back_what_it_created_and_keeps_the_error(submitted) -> None:
    d, cluster = submitted()
    delete_job(cluster, NAME, NS)
    d.fail_next("PATCH", r"/jobs/", status=422, message="injected: invalid")
    with pytest.raises(E.ApiError) as failed:
        submit(cluster, objects(), name=NAME, namespace=NS)
    assert failed.value.code == 422 and failed.value.exit_code == 1
    assert failed.value.message.endswith(f"(rolled back: deleted service/{NAME})")
    assert find_objects(cluster, NAME, NS) == []


def test_submit_refuses_an_existing_job_unless_replaced(submitted) -> None:
    _d, cluster = submitted()
    first = {k.kind: o["metadata"]["uid"] for k, o in find_objects(cluster, NAME, NS)}
    with pytest.raises(ClusterError, match=rf'^job "{NAME}" already exists in namespace "{NS}" \(job.batch/{NAME}'):
        submit(cluster, objects(), name=NAME, namespace=NS)
    said: list[str] = []
    done = submit(cluster, objects(), name=NAME, namespace=NS, replace=True, say=said.append)
    assert said == [f"job.batch/{NAME} deleted (--replace)", f"service/{NAME} deleted (--replace)"]
    assert [a.created for a in done] == [True, True]
    again = {k.kind: o["metadata"]["uid"] for k, o in find_objects(cluster, NAME, NS)}
    assert set(again) == set(first) and not set(again.values()) & set(first.values())
