"""The failure rules ddpctl renders, played by the real controllers on a failed pod.

kwok fails one running pod the way a node would (tests/e2e/cluster conftest: KEEP_RUNNING keeps the
others running): with an exit code, or with a DisruptionTarget condition as a preemption or an
eviction leaves it. What the Job controller, JobSet and the training operator then do with the
rendered podFailurePolicy / failurePolicy / ExitCode policy is read from their objects, and
`ddpctl status` must say what happened. With `recovery: pod`, the per-index rules replace the failed
pod alone (rank 0's too) while a usage error still fails the job at once.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cluster import KEEP_RUNNING, RealCluster, scheduled_pods, wait_until

pytestmark = pytest.mark.cluster

EXIT = "pod-fail-exit-code.stage.kwok.x-k8s.io/exit-code"
DISRUPT = "pod-disruption-failed.stage.kwok.x-k8s.io/reason"
KIND = {"job": "job", "jobset": "jobset", "pytorchjob": "pytorchjob"}


def fail_pod(kube: RealCluster, ns: str, pod: dict[str, Any], how: str) -> None:
    note = f"{DISRUPT}=PreemptionByScheduler" if how == "disruption" else f"{EXIT}={how}"
    kube.kubectl("annotate", "-n", ns, "pod", pod["metadata"]["name"], note)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def submit_and_fail(cli, kube: RealCluster, ns: str, target: str, how: str) -> dict[str, Any]:
    r = cli("submit", "-n", ns, "--target", target, "--nodes", "2", "--gpus", "4", "--annotation", KEEP_RUNNING)
    assert r.code == 0, r.err
    pods = scheduled_pods(kube, ns, 2)
    wait_until("both pods running", lambda: all(p["status"].get("phase") == "Running" for p in kube.pods(ns)))
    victim = max(pods, key=lambda p: p["metadata"]["name"])  # not the rank-0 pod
    fail_pod(kube, ns, victim, how)
    return victim


def replaced(kube: RealCluster, ns: str, victim: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A new running pod besides the failed one (or in its place): the controller replaced it."""
    pods = kube.pods(ns)
    fresh = [p for p in pods if p["metadata"]["uid"] != victim["metadata"]["uid"] and
             p["metadata"]["creationTimestamp"] >= victim["metadata"]["creationTimestamp"] and
             p["status"].get("phase") in ("Pending", "Running")]  # fmt: skip
    return fresh if len(fresh) >= 2 or (len(fresh) >= 1 and len(pods) >= 3) else None


def status(cli, ns: str) -> str:
    r = cli("status", "ddp-train", "-n", ns)
    assert "Traceback" not in r.err
    return r.out + r.err


# ------------------------------------------------------------------------------------------ Job


def test_job_usage_error_fails_the_job_at_once(cli, kube: RealCluster, namespace: str) -> None:
    victim = submit_and_fail(cli, kube, namespace, "job", "2")
    job = wait_until("the Job failed", lambda: (j := kube.get("job", "ddp-train", "-n", namespace)) and
                     "Failed" in conditions(j) and j)  # fmt: skip
    assert conditions(job)["Failed"]["reason"] == "PodFailurePolicy"
    index = "batch.kubernetes.io/job-completion-index"
    again = [p for p in kube.pods(namespace) if p["metadata"]["uid"] != victim["metadata"]["uid"] and
             p["metadata"]["annotations"][index] == victim["metadata"]["annotations"][index]]  # fmt: skip
    assert again == []  # not retried: no replacement for the failed index
    out = status(cli, namespace)
    assert "Failed" in out and "exit code 2: usage error" in out


@pytest.mark.parametrize("how", ["disruption", "143", "138"])
def test_job_disruption_and_peer_stops_are_replaced_without_counting(cli, kube, namespace, how) -> None:
    victim = submit_and_fail(cli, kube, namespace, "job", how)
    wait_until("a replacement pod", lambda: replaced(kube, namespace, victim))
    job = kube.get("job", "ddp-train", "-n", namespace)
    assert not conditions(job).get("Failed")
    assert not job["status"].get("failed"), job["status"]  # Ignore: not counted against backoffLimit
    out = status(cli, namespace)
    assert victim["metadata"]["name"] in out  # the failed pod is shown with its reason
    said = {"disruption": "DisruptionTarget: PreemptionByScheduler", "143": "exit code 143", "138": "exit code 138"}
    assert said[how] in out, out


def test_job_crash_counts_against_backoff_limit(cli, kube: RealCluster, namespace: str) -> None:
    victim = submit_and_fail(cli, kube, namespace, "job", "1")
    wait_until("a replacement pod", lambda: replaced(kube, namespace, victim))
    job = kube.get("job", "ddp-train", "-n", namespace)
    assert job["status"].get("failed") == 1 and job["spec"]["backoffLimit"] == 3
    assert not conditions(job).get("Failed")
    assert "exit code 1" in status(cli, namespace)


# ------------------------------------------------------------------------------------------ JobSet


def jobset(kube: RealCluster, ns: str) -> dict[str, Any]:
    return dict(kube.get("jobset", "ddp-train", "-n", ns))


def test_jobset_usage_error_fails_the_jobset(cli, kube: RealCluster, namespace: str) -> None:
    submit_and_fail(cli, kube, namespace, "jobset", "2")
    js = wait_until("the JobSet failed", lambda: "Failed" in conditions(j := jobset(kube, namespace)) and j)
    assert js["status"].get("restarts", 0) == 0
    assert "Failed" in status(cli, namespace)


@pytest.mark.parametrize("how", ["disruption", "143"])
def test_jobset_preemption_restarts_without_counting(cli, kube: RealCluster, namespace: str, how) -> None:
    submit_and_fail(cli, kube, namespace, "jobset", how)
    js = wait_until("a JobSet restart", lambda: (j := jobset(kube, namespace))["status"].get("restarts") and j)
    assert js["status"]["restarts"] == 1
    assert js["status"].get("restartsCountTowardsMax", 0) == 0  # RestartJobSetAndIgnoreMaxRestarts
    assert not conditions(js).get("Failed")


def test_jobset_crash_restarts_and_counts(cli, kube: RealCluster, namespace: str) -> None:
    submit_and_fail(cli, kube, namespace, "jobset", "1")
    js = wait_until("a JobSet restart", lambda: (j := jobset(kube, namespace))["status"].get("restarts") and j)
    assert js["status"]["restarts"] == 1
    assert js["status"].get("restartsCountTowardsMax") == 1
    assert not conditions(js).get("Failed")


# ------------------------------------------------------------------------------------------ PyTorchJob


def pytorchjob(kube: RealCluster, ns: str) -> dict[str, Any]:
    return dict(kube.get("pytorchjob", "ddp-train", "-n", ns))


@pytest.mark.parametrize("code", ["2", "1"])
def test_pytorchjob_usage_error_and_crash_are_permanent(cli, kube: RealCluster, namespace: str, code) -> None:
    submit_and_fail(cli, kube, namespace, "pytorchjob", code)
    wait_until("the PyTorchJob failed", lambda: "Failed" in conditions(pytorchjob(kube, namespace)))
    out = status(cli, namespace)
    assert "Failed" in out


@pytest.mark.parametrize("code", ["143", "138"])
def test_pytorchjob_retryable_codes_recreate_the_pod(cli, kube: RealCluster, namespace: str, code) -> None:
    victim = submit_and_fail(cli, kube, namespace, "pytorchjob", code)
    name, uid = victim["metadata"]["name"], victim["metadata"]["uid"]
    again = lambda: any(p["metadata"]["name"] == name and p["metadata"]["uid"] != uid for p in kube.pods(namespace))
    wait_until("the pod recreated", again)
    assert not conditions(pytorchjob(kube, namespace)).get("Failed")


# ------------------------------------------------------------------------------------------ recovery: pod

TRAINERS = "app.kubernetes.io/component=trainer"
INDEX = "batch.kubernetes.io/job-completion-index"


def submit_pod_recovery(cli, kube: RealCluster, ns: str, target: str) -> list[dict[str, Any]]:
    """Three running trainer pods of a `recovery: pod` job (gloo on kwok's nodes), by completion index."""
    r = cli("submit", "-n", ns, "--target", target, "--nodes", "3", "--gpus", "0", "--recovery", "pod",
            "--backoff-limit", "1", "--annotation", KEEP_RUNNING)  # fmt: skip
    assert r.code == 0, r.err

    def running() -> list[dict[str, Any]] | None:
        pods = [p for p in kube.pods(ns, TRAINERS) if p["status"].get("phase") == "Running"]
        return pods if len(pods) == 3 else None

    return sorted(wait_until("three running trainer pods", running), key=lambda p: int(p["metadata"]["labels"][INDEX]))


def child_job(kube: RealCluster, ns: str, target: str) -> dict[str, Any]:
    """The trainers' Job: the Job itself, or the JobSet's child Job of the trainers' group."""
    if target == "job":
        return dict(kube.get("job", "ddp-train", "-n", ns))
    (job,) = kube.get("job", "-n", ns, "-l", "jobset.sigs.k8s.io/jobset-name=ddp-train,"
                      "app.kubernetes.io/component=trainer")["items"]  # fmt: skip
    return dict(job)


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


@pytest.mark.parametrize(
    "target,how,victim", [("job", "137", 0), ("jobset", "137", 0), ("jobset", "1", 1), ("job", "disruption", 2)]
)
def test_pod_recovery_replaces_the_failed_pod_alone(cli, kube: RealCluster, namespace: str, target, how, victim):
    """A lost pod (rank 0's included), a crash, an eviction: the per-index rules make one pod, of that
    index; the others keep their UIDs; only a counted failure uses the index's limit; nothing fails."""
    pods = submit_pod_recovery(cli, kube, namespace, target)
    lost = pods[victim]
    fail_pod(kube, namespace, lost, how)

    def again() -> list[dict[str, Any]] | None:
        now = [p for p in kube.pods(namespace, TRAINERS) if p["status"].get("phase") in ("Pending", "Running")]
        return now if len(now) == 3 and lost["metadata"]["uid"] not in uids(now) else None

    now = wait_until("the lost index's pod replaced", again)
    (new,) = [p for p in now if p["metadata"]["uid"] not in uids(pods)]  # one pod made
    assert new["metadata"]["labels"][INDEX] == str(victim)  # in the lost pod's place
    assert uids(now) - {new["metadata"]["uid"]} == uids(pods) - {lost["metadata"]["uid"]}  # the others kept
    counted = 0 if how == "disruption" else 1  # a disruption does not use the index's limit
    job = wait_until("the Job's count", lambda: (j := child_job(kube, namespace, target))["status"].get("failed", 0)
                     == counted and j)  # fmt: skip
    assert not conditions(job).get("Failed") and not job["status"].get("failedIndexes"), job["status"]
    if target == "jobset":
        js = jobset(kube, namespace)
        assert js["status"].get("restarts", 0) == 0 and not conditions(js).get("Failed"), js["status"]


@pytest.mark.parametrize("target", ["job", "jobset"])
def test_pod_recovery_still_fails_the_job_at_once_on_a_usage_error(cli, kube: RealCluster, namespace: str, target):
    pods = submit_pod_recovery(cli, kube, namespace, target)
    fail_pod(kube, namespace, pods[1], "2")
    failed = wait_until(
        f"the {target} failed",
        lambda: "Failed" in conditions(o := dict(kube.get(target, "ddp-train", "-n", namespace))) and o,
    )
    if target == "job":
        assert conditions(failed)["Failed"]["reason"] == "PodFailurePolicy"
    else:
        assert failed["status"].get("restarts", 0) == 0
    assert [p for p in kube.pods(namespace, TRAINERS) if p["metadata"]["uid"] not in uids(pods)] == []  # none made
    assert "exit code 2: usage error" in status(cli, namespace)
    if target == "job":  # its coordinator is owned by the Job: the garbage collector takes it with it
        # once the Job controller has let go of its pods (deleted earlier, they would keep its finalizer)
        tracked = lambda: [p for p in kube.pods(namespace, TRAINERS) if p["metadata"].get("finalizers")]
        wait_until("the failed Job's pods untracked", lambda: not tracked())
        kube.kubectl("delete", "job", "ddp-train", "-n", namespace, "--cascade=foreground", "--wait=false")
        gone = lambda: not kube.get("job", "-n", namespace, "-l", "app.kubernetes.io/component=coordinator")["items"]
        wait_until("the coordinator's Job collected with the failed Job", gone)
