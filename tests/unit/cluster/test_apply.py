"""ddpctl.cluster.apply: a job's objects applied (server-side apply), found again by their labels,
and deleted (never a same-named successor), through the real client and the API server double
(tests/support/kube_api_double). `submit`'s conflicts and rollbacks as a user meets them are in
test_submit.py."""

from __future__ import annotations

import json

import pytest

from ddpctl.cluster import apply as A
from ddpctl.cluster import errors as E
from ddpctl.cluster.apply import (
    APPLY_CONTENT_TYPE,
    apply_one,
    delete_job,
    delete_object,
    dropped_per_index,
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


# ------------------------------------------------------------------ recovery: pod's per-index limits

RECOVERY = {"recovery": "pod", "gpusPerNode": 0, "nodes": 3}


def _without_per_index(obj: dict) -> dict:
    out = json.loads(json.dumps(obj))
    for _, spec in A.per_index_specs(out):
        del spec[A.PER_INDEX]
    return out


@pytest.mark.parametrize(
    "target,values,drop,lost",
    [
        ("job", RECOVERY, False, []),
        ("job", RECOVERY, True, ["spec"]),
        ("jobset", RECOVERY, True, ["spec.replicatedJobs[1].template.spec"]),  # after the coordinator's
        ("jobset", RECOVERY, False, []),
        ("job", {}, True, []),  # gang: nothing to lose
    ],
)
def test_dropped_per_index_names_where_the_answer_lost_the_limit(target, values, drop, lost) -> None:
    for obj in objects(target, **values):
        answered = _without_per_index(obj) if drop else obj
        if obj["kind"] in ("Job", "JobSet") and obj["metadata"]["name"] == NAME:
            assert dropped_per_index(obj, answered) == lost
        else:
            assert dropped_per_index(obj, answered) == []


def test_a_recovery_pod_submit_asks_a_server_dry_run_first(submitted) -> None:
    d, _cluster = submitted("--target", "job", "--recovery", "pod", "--gpus", "0", "--nodes", "3")
    patches = d.requests_to("PATCH", rf"/jobs/{NAME}$")
    assert [p.query.get("dryRun") for p in patches] == [["All"], None]  # checked, then created
    assert d.get("job", NAME, NS)["spec"][A.PER_INDEX] == 3


def test_a_cluster_that_drops_the_limit_gets_no_job(cli, make_cluster, monkeypatch) -> None:
    """Stands in for a cluster that drops backoffLimitPerIndex (Kubernetes 1.28, the feature gate off,
    or an older JobSet CRD): the test cluster runs 1.36, which cannot be made to. The double's answer
    to the dry run loses the field; nothing may be created and the error names the way out."""
    c = make_cluster(())
    real = A.apply_one

    def older(cluster, obj, *, dry_run=False):
        applied = real(cluster, obj, dry_run=dry_run)
        return A.Applied(applied.kind, _without_per_index(applied.obj), applied.created) if dry_run else applied

    monkeypatch.setattr(A, "apply_one", older)
    r = cli("submit", *c.args, "-n", NS, "--target", "job", "--recovery", "pod", "--gpus", "0", "--nodes", "3")
    assert r.code == 1 and "Traceback" not in r.err
    assert (
        "this cluster dropped spec.backoffLimitPerIndex from job.batch/ddp-train" in r.err
        and "--recovery gang" in r.err
    ), r.err
    assert c.double.objects("jobs", NS) == [] and c.double.objects("services", NS) == []


def test_a_recovery_pod_jobs_coordinator_is_owned_by_the_job(submitted) -> None:
    """The garbage collector then deletes it with the job's workload (its TTL, a kubectl delete):
    a failed job's coordinator does not run on until `ddpctl delete`."""
    d, _cluster = submitted("--target", "job", "--recovery", "pod", "--gpus", "0", "--nodes", "3")
    job, coordinator = d.get("job", NAME, NS), d.get("job", f"{NAME}-coordinator", NS)
    (ref,) = coordinator["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("Job", NAME, job["metadata"]["uid"])
    assert "ownerReferences" not in job["metadata"]
