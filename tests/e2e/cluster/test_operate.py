"""The cluster commands against the real API server: dry runs, --target auto, status, list, delete, logs."""

from __future__ import annotations

import json

import pytest

from tests.support.cluster import KEEP_RUNNING, RealCluster, scheduled_pods, wait_until

pytestmark = pytest.mark.cluster

TARGETS = ["job", "jobset", "pytorchjob", "trainjob"]
KINDS = "jobs.batch,services,jobsets.jobset.x-k8s.io,pytorchjobs.kubeflow.org,trainjobs.trainer.kubeflow.org,pods"


def one_error(r, code: int) -> str:
    assert r.code == code, (r.code, r.out, r.err)
    assert "Traceback" not in r.err + r.out
    errors = [line for line in r.err.splitlines() if line.startswith("ddpctl: error: ")]
    assert len(errors) == 1, r.err
    return errors[0]


def left(kube: RealCluster, ns: str) -> list[str]:
    names = kube.kubectl("get", KINDS, "-n", ns, "-o", "name").stdout.split()
    return [n for n in names if not n.endswith("/kubernetes")]


@pytest.mark.parametrize("target", TARGETS)
def test_dry_run_server_passes_every_target_and_creates_nothing(cli, kube: RealCluster, namespace: str, target) -> None:
    r = cli("submit", "-n", namespace, "--target", target, "--layout", "2x4", "--dry-run", "server")
    assert r.code == 0, r.err
    assert all(line.endswith("(server dry run)") for line in r.out.splitlines()) and r.out, r.out
    assert left(kube, namespace) == []


def test_dry_run_server_refusal_names_the_servers_field(cli, kube: RealCluster, namespace: str) -> None:
    """A cluster policy ddpctl cannot know of: a MutatingAdmissionPolicy sets backoffLimit to -1, so
    the API server's own validation refuses the Job with its field path."""
    policy = f"bad-backoff-{namespace}"
    rules = [{"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]}]
    kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
         "metadata": {"name": policy},
         "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never", "matchConstraints": {"resourceRules": rules},
                  "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                      "expression": "Object{spec: Object.spec{backoffLimit: -1}}"}}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": policy},
         "spec": {"policyName": policy, "matchResources": {"namespaceSelector": {"matchLabels": {
             "kubernetes.io/metadata.name": namespace}}}}},
    ]}))  # fmt: skip
    try:

        def refused() -> str | None:  # the policy takes effect once the API server's informer has it
            r = cli("submit", "-n", namespace, "--target", "job", "--dry-run", "server")
            return one_error(r, 1) if r.code else None

        line = wait_until("the policy to make the server refuse the Job", refused, 30)
        assert "spec.backoffLimit: Invalid value: -1" in line, line
        assert left(kube, namespace) == []
    finally:
        kube.kubectl("delete", "mutatingadmissionpolicybinding,mutatingadmissionpolicy", policy, check=False)


def test_target_auto_picks_trainjob_where_its_runtime_is_installed(cli, kube: RealCluster, namespace: str) -> None:
    r = cli("submit", "-n", namespace, "--nodes", "2", "--dry-run", "server")
    assert r.code == 0, r.err
    assert "ddpctl: target trainjob: " in r.err


def test_target_auto_without_the_runtime_picks_the_next_engine(cli, kube: RealCluster, namespace: str) -> None:
    """The TrainJob CRD is served but the torch-distributed runtime is gone: auto must not pick it."""
    saved = kube.kubectl("get", "clustertrainingruntime", "torch-distributed", "-o", "json").stdout
    kube.kubectl("delete", "clustertrainingruntime", "torch-distributed")
    try:
        r = cli("submit", "-n", namespace, "--nodes", "2", "--dry-run", "server")
        assert r.code == 0, r.err
        assert "ddpctl: target pytorchjob: " in r.err
    finally:
        runtime = json.loads(saved)
        for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
            runtime["metadata"].pop(key, None)
        kube.kubectl("create", "-f", "-", input=json.dumps(runtime))


def test_status_wait_list_and_delete_a_node_group_job(cli, kube: RealCluster, namespace: str) -> None:
    r = cli("submit", "-n", namespace, "--target", "job", "--layout", "4+3", "--wait", "--timeout", "60s")
    assert r.code == 0, r.err  # kwok runs each pod to success: --wait sees the job complete
    out = cli("status", "ddp-train", "-n", namespace).out
    assert "Succeeded" in out
    listed = json.loads(cli("list", "-n", namespace, "-o", "json").out)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["ddp-train-g0"]  # one entry per job
    table = cli("list", "-n", namespace).out.splitlines()
    assert len(table) == 2 and table[1].split()[:3] == ["ddp-train", "job", "2"], table
    r = cli("delete", "ddp-train", "-n", namespace, "--wait")
    assert r.code == 0, r.err
    assert left(kube, namespace) == []


@pytest.mark.parametrize("target", ["jobset", "pytorchjob", "trainjob"])
def test_delete_leaves_nothing_behind(cli, kube: RealCluster, namespace: str, target) -> None:
    assert cli("submit", "-n", namespace, "--target", target, "--annotation", KEEP_RUNNING).code == 0
    scheduled_pods(kube, namespace, 2)
    r = cli("delete", "ddp-train", "-n", namespace, "--wait")
    assert r.code == 0, r.err
    wait_until("every object gone", lambda: left(kube, namespace) == [], 60)


def test_status_of_a_running_job_and_logs_where_kwok_keeps_none(cli, kube: RealCluster, namespace: str) -> None:
    assert cli("submit", "-n", namespace, "--target", "job", "--annotation", KEEP_RUNNING).code == 0
    scheduled_pods(kube, namespace, 2)
    wait_until("running", lambda: "2 running" in cli("status", "ddp-train", "-n", namespace).out)
    line = one_error(cli("logs", "ddp-train", "-n", namespace), 1)
    assert "gpu-node-" in line and "kwok" in line, line


def test_a_refused_pod_is_said_while_waiting_not_hidden_as_pending(cli, kube: RealCluster, namespace: str) -> None:
    """Pod Security `restricted` enforced, a job asking for `baseline`: the Job controller cannot
    create its pods (an Event on the Job, none on any pod); `--wait` says so, and its timeout too."""
    kube.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    r = cli("submit", "-n", namespace, "--target", "job", "--pod-security", "baseline", "--wait", "--timeout", "20s")
    assert r.code == 3, r.err  # a wait timeout
    said = [line for line in r.err.splitlines() if line.startswith("ddpctl: job/ddp-train cannot create pods: ")]
    assert said and 'pods "ddp-train-0-' in said[0], r.err
    assert 'violates PodSecurity "restricted:latest"' in said[0] and len(said) == 1, r.err
    assert "cannot create pods" in r.err.splitlines()[-1]  # the timeout's own line names it too


@pytest.mark.parametrize("answer", ["401", "403"])
@pytest.mark.parametrize("command", ["status", "logs"])
def test_an_authorisation_error_is_the_answer_though_a_local_run_has_the_name(
    cli, kube: RealCluster, namespace: str, tmp_path, monkeypatch, answer, command
) -> None:
    """The real API server answers 401 (a token it does not know) or 403 (a ServiceAccount without
    RBAC): `status` and `logs` report that answer and exit 1, though ./ddp-runs/NAME exists, and
    print nothing of the local run."""
    import yaml

    assert cli("submit", "-n", namespace, "--name", "auth", "--target", "job").code == 0
    run = tmp_path / "ddp-runs" / "auth"  # the cli fixture's working directory
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "node-0.log").write_text("[rank 0] a local line\n")
    (run / "run.json").write_text(json.dumps({"name": "auth", "backend": "local", "state": "succeeded", "pid": 1}))
    if answer == "401":
        token = "not-a-token-this-server-knows"  # noqa: S105 - no secret: a token no server issued
    else:
        kube.kubectl("create", "serviceaccount", "nobody", "-n", namespace)
        token = kube.kubectl("create", "token", "nobody", "-n", namespace).stdout.strip()
    config = yaml.safe_load(kube.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    limited = tmp_path / "limited-kubeconfig"
    limited.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(limited))
    r = cli(command, "auth", "-n", namespace)
    error = one_error(r, 1)
    assert ("401 Unauthorized" if answer == "401" else "403 Forbidden") in error, error
    assert "local" not in r.out + r.err.replace(error, ""), r
