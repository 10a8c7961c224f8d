"""The trainer image on the real node (testcluster/node/): pods that really run, not kwok's.

Everything the rendered pod relies on is real here: Pod Security `restricted` enforced on the
namespace, the image's numeric user, the memory-backed /dev/shm, the downward-API completion
index, the headless Service's DNS name (CoreDNS) as the rank-0 address, gloo across two pods on a
bridge, the Eviction API with a real grace period ending in SIGTERM, and each controller's
failure rules acting on the trainer's real exit codes. The image is a user's image as users build
one: the trainer image (`ddpctl build` on the local CPU base) plus their model code and the tests'
fault plugin (tests/e2e/cluster/user-image.Dockerfile), loaded into the node's containerd
(`python -m testcluster load`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testcluster.node.layout import DIR as NODE_DIR
from tests.support.cluster import RealCluster, ddpctl_together, restricted_namespace, wait_until
from tests.support.models.faults import env_flags, hold_at, plugin_env
from tests.support.node_images import NodeImages

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NODE = "ddpctl-real-node"
ON_NODE = ["--node-selector", "node.ddpctl.io/real=true", "--toleration", "node.ddpctl.io/real=true:NoSchedule"]
TINY = ["--synthetic-samples", "64", "--eval-samples", "16", "--global-batch-size", "16", "--epochs", "1"]
# The restart tests' job, as in tests/e2e/test_run_docker.py: 8 steps per epoch, 2 epochs, a checkpoint
# every 3 steps, float64, the final weights on the checkpoints volume.
RESTART_ARGS = [
    "--synthetic-samples", "128", "--eval-samples", "32", "--global-batch-size", "16", "--epochs", "2",
    "--save-every", "3", "--dtype", "float64", "--save-final", "/checkpoints/final.pt",
]  # fmt: skip
JOB_TIMEOUT = 600


# --------------------------------------------------------------------------------------------
# Training on every engine
# --------------------------------------------------------------------------------------------


TARGETS = ["job", "jobset", "pytorchjob", "trainjob"]


def _engine_job(ns: str, target: str, image: str) -> list[str]:
    return ["submit", "-n", ns, "--target", target, "--name", f"rn-{target}", "--nodes", "2", "--procs", "2",
            "--gpus", "0", "--image", image, *ON_NODE, "--follow", "--timeout", "10m", "--", *TINY]  # fmt: skip


@pytest.fixture(scope="module")
def engine_runs(
    real_cluster: RealCluster, node_images: NodeImages, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[str, Any]]]:
    """Each engine's 2 x 2 job, `submit --follow`, each in a namespace of its own enforcing
    "restricted", two at a time (one after another they took 33-47 s each, most of it their pods'
    start): target -> (namespace, the finished submit)."""
    namespaces = {target: restricted_namespace(real_cluster) for target in TARGETS}
    runs = {target: (_engine_job(namespaces[target], target, node_images.user), tmp_path_factory.mktemp(target))
            for target in TARGETS}  # fmt: skip
    try:
        done = ddpctl_together(runs, real_cluster, tmp_path_factory.mktemp("home"))
        yield {target: (namespaces[target], done[target]) for target in TARGETS}
    finally:
        for ns in namespaces.values():
            real_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.mark.parametrize("target", TARGETS)
def test_two_pods_train_over_gloo_under_restricted(cli, kube: RealCluster, engine_runs, target: str) -> None:
    """submit --follow streams both pods' lines and exits 0; the pods ran on the real node as the
    image's non-root user, found rank 0 by the Service's DNS name, and `logs` shows them again."""
    (ns, r), name = engine_runs[target], f"rn-{target}"
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    assert "[node 0] [rank 0] world size 4 (ddp, gloo, cpu)" in r.stdout, r.stdout[-3000:]
    assert "[node 0] [rank 0] done: 4 steps" in r.stdout
    assert "[node 1] " in r.stdout  # node 1's torchrun lines, streamed too
    pods = kube.pods(ns)
    # The master's success ends a PyTorchJob, and the operator's cleanPodPolicy Running then deletes
    # a worker whose pod is still exiting: only there may one pod be gone.
    assert len(pods) == 2 or (target == "pytorchjob" and len(pods) == 1), pods
    assert {p["spec"]["nodeName"] for p in pods} == {NODE}
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}
        master = env.get("MASTER_ADDR") or env.get("PET_MASTER_ADDR")
        assert master and not master[0].isdigit(), env  # a DNS name, not an IP the test wired
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    logs = cli("logs", name, "-n", ns)
    assert logs.code == 0, logs.err
    assert "[node 0] [rank 0] done: 4 steps" in logs.out, logs.out[-3000:]
    assert "[node 1] " in logs.out or len(pods) == 1, logs.out[-3000:]


# --------------------------------------------------------------------------------------------
# Eviction: a disruption, resumed from the SIGTERM checkpoint
# --------------------------------------------------------------------------------------------


def _restart_job(ns: str, name: str, image: str, claim: str, *extra: str) -> list[str]:
    return ["submit", "-n", ns, "--target", "job", "--name", name, "--nodes", "2", "--procs", "1", "--gpus", "0",
            "--image", image, *ON_NODE, "--volume", f"checkpoints={claim}:/checkpoints", "--backoff-limit", "3",
            *extra, "--", *RESTART_ARGS]  # fmt: skip


def _final_weights(folder: Path) -> dict[str, Any]:
    import torch

    return torch.load(folder / "final.pt", weights_only=True)["model"]


@pytest.fixture
def uninterrupted(cli, restricted: str, node_image: str, local_volume) -> dict[str, Any]:
    folder = local_volume(restricted, "ref")
    r = cli(*_restart_job(restricted, "ref", node_image, "ref", "--wait"))
    assert r.code == 0, r.err[-3000:]
    return _final_weights(folder)


def _ddpctl_popen(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ddpctl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ},
    )  # fmt: skip


def test_an_evicted_pod_is_a_disruption_and_the_job_resumes_bit_identical(
    cli, kube: RealCluster, restricted: str, node_image: str, local_volume, uninterrupted: dict[str, Any]
) -> None:
    """Evicting node 1's pod after step 5 (the Eviction API, as `kubectl drain` calls it): the
    kubelet's SIGTERM makes the trainer write its stop checkpoint inside the grace period, the
    Job's rules ignore the disruption (and the peer's lost-peer exit), both pods run again, resume
    at step 5 (0 steps lost) and end with the uninterrupted run's float64 weights."""
    ns = restricted
    folder = local_volume(ns, "ckpt")
    # the tests' fault plugin (in the user image): rank 1 writes /checkpoints/held after step 5 and waits
    hold = env_flags(plugin_env(hold_at(5, rank=1, file="/checkpoints/held"), image=True))
    proc = _ddpctl_popen(*_restart_job(ns, "ev", node_image, "ckpt", *hold, "--follow"))
    try:
        wait_until("rank 1 holding after step 5", lambda: (folder / "held").exists() or proc.poll() is not None,
                   JOB_TIMEOUT)  # fmt: skip
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        victim = kube.pods(ns, "batch.kubernetes.io/job-completion-index=1,job-name=ev")[0]["metadata"]["name"]
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim, "namespace": ns}}
        kube.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/{victim}/eviction", "-f", "-",
                     input=json.dumps(eviction))  # fmt: skip
        out, err = proc.communicate(timeout=JOB_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:] + out[-3000:]
    assert "resumed from /checkpoints/ckpt-00000005.pt (epoch 1, step 5)" in out, out[-4000:]
    job = kube.get("job", "ev", "-n", ns)
    assert not job["status"].get("failed"), job["status"]  # the disruption is not counted against backoffLimit
    _assert_same_weights(_final_weights(folder), uninterrupted)


def _assert_same_weights(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    import torch

    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key


# --------------------------------------------------------------------------------------------
# Failures the product must explain
# --------------------------------------------------------------------------------------------


def test_a_usage_error_fails_the_job_at_once_and_status_names_it(cli, kube: RealCluster, restricted: str,
                                                                 node_image: str) -> None:  # fmt: skip
    """A model that does not exist: every rank exits 2, the Job's FailJob rule ends the job with no
    restart (backoffLimit 3 notwithstanding), and `status` gives the reason in one line."""
    ns = restricted
    r = cli("submit", "-n", ns, "--target", "job", "--name", "bad", "--nodes", "2", "--procs", "1", "--gpus", "0",
            "--image", node_image, *ON_NODE, "--backoff-limit", "3", "--wait",
            "--", "--model", "nosuchmod:f")  # fmt: skip
    assert r.code == 1, r.err[-3000:]
    job = kube.get("job", "bad", "-n", ns)
    failed = [c for c in job["status"].get("conditions") or [] if c["type"] == "Failed" and c["status"] == "True"]
    assert failed and failed[0]["reason"] == "PodFailurePolicy", job["status"]
    assert len(kube.pods(ns)) <= 2  # no pod was made again
    status = cli("status", "bad", "-n", ns)
    assert "State:       Failed (PodFailurePolicy" in status.out and "exit code 2" in status.out, status.out
    assert "nosuchmod" in r.err, r.err[-3000:]


def test_a_rank_that_hangs_is_named_in_status(cli, kube: RealCluster, restricted: str, node_image: str) -> None:
    """rank 2 (node 1) blocks forever in its forward of step 3: the watchdog ends the job after
    --stall-timeout and `status` names the rank, the phase and the user's file and line."""
    ns = restricted
    r = cli("submit", "-n", ns, "--target", "job", "--name", "hang", "--nodes", "2", "--procs", "2", "--gpus", "0",
            "--image", node_image, *ON_NODE, "--backoff-limit", "0", "-e", "STALL_RANK=2", "-e", "STALL_AT_STEP=3",
            "--wait", "--", "--model", "user_models:blocking", "--stall-timeout", "20", "--image-size", "8",
            "--synthetic-samples", "256", "--eval-samples", "32", "--epochs", "3")  # fmt: skip
    assert r.code != 0, r.err[-3000:]
    status = cli("status", "hang", "-n", ns)
    stalled = [line for line in status.out.splitlines() if line.startswith("Stalled:")]
    assert stalled, status.out
    assert "rank 2 (node 1, local rank 0" in stalled[0] and "in forward of step 3" in stalled[0], stalled[0]
    assert "/opt/ddpctl/user_models.py:" in stalled[0], stalled[0]


# --------------------------------------------------------------------------------------------
# What `status` says of a job that trains
# --------------------------------------------------------------------------------------------


def test_status_of_a_job_training_shows_rank_0s_step_and_eta(
    cli, kube: RealCluster, restricted: str, node_image: str, local_volume
) -> None:
    """Rank 0 holds after step 5 of 16 (the tests' fault plugin), its progress line printed: the job
    is Running, and `status` shows where rank 0 is (epoch, step, percent of the run) and the time
    left, in text and in -o json, read from the pod's own log. Meanwhile the node keeps its pods'
    network namespaces in its own folder: under the host's /run/netns, a test's `ip netns add`
    (tests/support/slow_link.py) hid them, and their pods never finished terminating. The mount
    table is the host's, so only those under /run/netns count against it."""
    ns = restricted
    folder = local_volume(ns, "prog")
    hold = env_flags(plugin_env(hold_at(5, rank=0, file="/checkpoints/held"), image=True))
    proc = _ddpctl_popen(
        "submit", "-n", ns, "--target", "job", "--name", "prog", "--nodes", "2", "--procs", "1", "--gpus", "0",
        "--image", node_image, *ON_NODE, "--volume", "checkpoints=prog:/checkpoints", *hold, "--follow",
        "--", *RESTART_ARGS, "--log-every", "1",
    )  # fmt: skip
    try:
        wait_until("rank 0 holding after step 5", lambda: (folder / "held").exists() or proc.poll() is not None,
                   JOB_TIMEOUT)  # fmt: skip
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        netns = _pod_netns_mounts()  # the host's: another cluster on it may hold some too
        assert sum(Path(m).is_relative_to(NODE_DIR) for m in netns) >= 2, netns
        assert not [m for m in netns if Path(m).is_relative_to("/run/netns")], netns
        r = cli("status", "prog", "-n", ns)
        assert r.code == 0, r.err
        assert "State:       Running" in r.out, r.out
        progress = next((x for x in r.out.splitlines() if x.startswith("Progress:")), "")
        assert progress.startswith("Progress:    epoch 1/2 step 5/8 (31%), loss "), r.out
        assert " samples/s, ETA " in progress and progress.endswith(" ago)"), progress
        doc = json.loads(cli("status", "prog", "-n", ns, "-o", "json").out)
        assert (doc["progress"]["epoch"], doc["progress"]["step"], doc["progress"]["steps"]) == (1, 5, 8)
        assert doc["progress"]["etaSeconds"] is not None and doc["progress"]["samplesPerSecond"] > 0
    finally:
        cli("delete", "prog", "-n", ns)
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _pod_netns_mounts() -> list[str]:
    """Where the network namespaces of pod sandboxes (containerd names them cni-*) are mounted."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype == "nsfs" and Path(fields[4]).name.startswith("cni-"):
            out.append(fields[4])
    return out


def test_an_image_that_cannot_be_pulled_ends_the_wait_naming_the_registrys_answer(
    cli, kube: RealCluster, restricted: str
) -> None:
    """The real kubelet cannot resolve the registry's host: `submit --wait` ends with exit 1 and the
    kubelet's own words, long before its --timeout (a wait that timed out would exit 3)."""
    r = cli("submit", "-n", restricted, "--target", "job", "--name", "nopull", "--nodes", "2", "--procs", "1",
            "--gpus", "0", "--image", "registry.invalid/ddpctl-nope:1", *ON_NODE,
            "--wait", "--timeout", "10m")  # fmt: skip
    assert r.code == 1, r.err[-3000:]
    errors = [line for line in r.err.splitlines() if line.startswith("ddpctl: error: ")]
    assert len(errors) == 1 and "cannot pull the image on 1 node ddpctl-real-node" in errors[0], r.err
    assert "registry.invalid" in errors[0] and "ddpctl delete nopull" in errors[0], errors[0]
