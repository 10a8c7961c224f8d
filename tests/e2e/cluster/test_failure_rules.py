"""The failure rules ddpctl renders, played by the real controllers on a failed pod.

kwok fails one running pod the way a node would (tests/e2e/cluster conftest: KEEP_RUNNING keeps the
others running): with an exit code, or with a DisruptionTarget condition as a preemption or an
eviction leaves it. What the Job controller, JobSet and the training operator then do with the
rendered podFailurePolicy / failurePolicy / ExitCode policy is read from their objects, and
`ddpctl status` must say what happened.
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
