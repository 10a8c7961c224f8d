"""Pod recovery on the real node (`recovery: pod`, targets job and jobset): a lost pod is replaced alone.

Three pods of one process each train float64 on gloo, with a coordinator pod of their own; the
trainer of node 1 SIGKILLs itself after step 4 (the tests' fault plugin in the user image, as the
OOM killer or a lost node would end it), or its pod is evicted after step 4 (it leaves alone after
step 5, 143, and the disruption is not counted; its coordinator's pod deleted just before, so the
survivors tell the coordinator's replacement the generations). The (child) Job's per-index backoff replaces that
pod alone, keeping its index; the other two pods run on (one pod each, never restarted), form the
group again with the replacement through the coordinator and hand it their state, so the job ends
with an uninterrupted run's weights and no checkpoint read: the three recovered jobs end with the
same weights (the same three ranks, the same sums), and those of one process with the same global
batch, run here beside them, which three DDP ranks train like (tests/e2e/trainer/
test_trainer_equivalence.py: to float64's summation order, not bit for bit). Beside them, a job
whose node 1 fails on every attempt ends once that pod has used its limit, `status` naming the
node to avoid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster.test_real_node import JOB_TIMEOUT, ON_NODE
from tests.support.cluster import RealCluster, wait_until
from tests.support.models.faults import crash_from, env_flags, hold_at, kill_at, plugin_env
from tests.support.trainer import clean_env, start

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

KILLED_AT = 4
# 72 samples / global batch 12 = 6 steps an epoch, 2 epochs: 12 steps; float64, the final weights saved
ARGS = [
    "--synthetic-samples", "72", "--eval-samples", "12", "--global-batch-size", "12", "--epochs", "2",
    "--dtype", "float64", "--strategy", "ddp", "--save-final", "/checkpoints/final.pt",
]  # fmt: skip
ATOL = 1e-12  # between the recovered jobs: three ranks each, summing in the same order
ATOL_ONE_PROCESS = 1e-9  # against one process: another summation order (a wrong step moves weights ~1e-2)


def _job(ns: str, target: str, name: str, image: str, claim: str, *extra: str, limit: int = 2) -> list[str]:
    return ["submit", "-n", ns, "--target", target, "--name", name, "--nodes", "3", "--procs", "1", "--gpus", "0",
            "--image", image, *ON_NODE, "--volume", f"checkpoints={claim}:/checkpoints", "--recovery", "pod",
            "--backoff-limit", str(limit), *extra, "--", *ARGS]  # fmt: skip


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ddpctl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ},
    )  # fmt: skip


def _weights(folder: Path) -> dict[str, Any]:
    import torch

    return torch.load(folder / "final.pt", weights_only=True)["model"]


def _pods(kube: RealCluster, ns: str, name: str, component: str) -> list[dict[str, Any]]:
    return kube.pods(ns, f"app.kubernetes.io/instance={name},app.kubernetes.io/component={component}")


def _by_index(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        index = pod["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index")
        out.setdefault(index, []).append(pod)
    return out


TARGETS = ("job", "jobset")


def _evict(kube: RealCluster, ns: str, pod: str) -> None:
    """The Eviction API, as `kubectl drain` calls it: the kubelet's SIGTERM, a DisruptionTarget condition."""
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}}
    kube.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", "-f", "-",
                 input=json.dumps(eviction))  # fmt: skip


def test_a_lost_pod_is_replaced_alone_and_the_others_keep_their_state(
    cli, kube: RealCluster, restricted: str, node_image: str, local_volume, tmp_path: Path
) -> None:
    """Side by side with the reference (one uninterrupted process, here): node 1 SIGKILLed after step 4 on job
    and on jobset; then node 1's pod evicted after step 4 on job (it leaves alone after step 5) right
    after the coordinator's pod was deleted, beside a job whose node 1 keeps failing."""
    ns = restricted
    kill = env_flags(plugin_env(kill_at(KILLED_AT, rank=1), image=True))
    hold = env_flags(plugin_env(hold_at(KILLED_AT, rank=1, file="/checkpoints/held"), image=True))
    folders = {name: local_volume(ns, name) for name in (*TARGETS, "evict", "keep")}
    folders["ref"] = tmp_path / "one-process"
    # two rounds of two jobs (six trainer pods): the node's two cores are shared with the rest of
    # the suite, whose timing checks more pods at once would starve
    runs = {"ref": start([sys.executable, "-m", "ddpctl_trainer", "--checkpoint-dir", str(folders["ref"] / "ckpt"),
                          *ARGS[:-1], str(folders["ref"] / "final.pt")], tmp_path, clean_env())}  # fmt: skip
    for target in TARGETS:
        runs[target] = _start(*_job(ns, target, f"pr-{target}", node_image, target, *kill, "--follow"))
    outputs = {}
    try:
        for name, proc in runs.items():
            outputs[name] = proc.communicate(timeout=JOB_TIMEOUT)
        runs["evict"] = _start(*_job(ns, "job", "pr-evict", node_image, "evict", *hold, "--follow"))
        # a pod that keeps failing: node 1 fails after step 2 on every attempt; --backoff-limit 1 per pod
        crash = env_flags(plugin_env(crash_from(2, rank=1), image=True))
        runs["keep"] = _start(*_job(ns, "job", "pr-keep", node_image, "keep", *crash, "--wait", limit=1))
        wait_until("node 1 of pr-evict held after step 4",
                   lambda: (folders["evict"] / "held").exists() or runs["evict"].poll() is not None,
                   JOB_TIMEOUT)  # fmt: skip
        assert runs["evict"].poll() is None, runs["evict"].communicate()[1][-3000:]
        # its coordinator's pod lost first (deleted, as with its node): the Job starts a new, empty one
        (lost,) = _pods(kube, ns, "pr-evict", "coordinator")
        kube.kubectl("delete", "pod", "-n", ns, lost["metadata"]["name"], "--wait=false")
        (victim,) = _by_index(_pods(kube, ns, "pr-evict", "trainer"))["1"]
        _evict(kube, ns, victim["metadata"]["name"])
        for name in ("evict", "keep"):
            outputs[name] = runs[name].communicate(timeout=JOB_TIMEOUT)
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
    for name, proc in runs.items():
        out, err = outputs[name]
        assert proc.returncode == (1 if name == "keep" else 0), f"{name}: " + err[-3000:] + out[-3000:]
    # the pod that kept failing: replaced once (its limit), then the Job failed; status names its node
    keep = _by_index(_pods(kube, ns, "pr-keep", "trainer"))
    assert sorted(p["status"]["phase"] for p in keep["1"]) == ["Failed", "Failed"], keep["1"]
    # the others were never replaced (once the Job failed, it deleted their pods: they may be gone)
    assert all(len(pods) == 1 for index, pods in keep.items() if index != "1"), keep
    status = cli("status", "pr-keep", "-n", ns).out
    assert "node 1's pod failed 2 times, last with exit code 1, on ddpctl-real-node" in status, status
    assert "submit again with --avoid-node ddpctl-real-node" in status, status

    import torch

    reference, recovered = _weights(folders["ref"]), _weights(folders["job"])
    for run in ("job", "jobset", "evict"):
        name, (out, err) = f"pr-{run}", outputs[run]
        back = KILLED_AT + 1 if run == "evict" else KILLED_AT  # an evicted pod leaves after the next step
        if run == "evict":
            assert f"after step {back}; left alone" in out + err, (out + err)[-4000:]
            # the survivors told the new coordinator the generations: the replacement still found them
            assert "the coordinator was replaced" in out, out[-4000:]
        else:
            assert f"killing rank 1 at step {KILLED_AT}" in out + err, (out + err)[-4000:]
        assert f"at step {back}" in out and "recovery: " in out, out[-4000:]
        assert "resumed from" not in out  # the state came from the survivors' memory, not a checkpoint

        pods = _by_index(_pods(kube, ns, name, "trainer"))
        assert sorted(pods) == ["0", "1", "2"], (run, pods.keys())
        for index in ("0", "2"):  # the survivors: the same pod from start to end, never restarted
            assert len(pods[index]) == 1, (run, [p["metadata"]["name"] for p in pods[index]])
            survivor = pods[index][0]
            assert survivor["status"]["phase"] == "Succeeded", run
            assert survivor["status"]["containerStatuses"][0]["restartCount"] == 0, run
        phases = sorted(p["status"]["phase"] for p in pods["1"])
        status = cli("status", name, "-n", ns)  # each recovery said: the pod, why, the step reached
        recoveries = [line for line in status.out.splitlines() if line.startswith("Recoveries:")]
        assert recoveries and f": back at step {back} after " in recoveries[0], status.out
        if run == "evict":  # the Eviction API deletes the pod: its replacement alone is left
            assert phases == ["Succeeded"] and pods["1"][0]["metadata"]["name"] != victim["metadata"]["name"]
            assert "a pod was replaced (its object is gone" in recoveries[0], recoveries
        else:
            assert phases == ["Failed", "Succeeded"], (run, phases)  # node 1's pod, and its replacement alone
            assert "node 1 (pod " in recoveries[0] and "exited with code 137" in recoveries[0], recoveries
        coordinator = _pods(kube, ns, name, "coordinator")
        assert [p["status"]["phase"] for p in coordinator] == ["Succeeded"], run  # it ended with the training
        if run == "evict":  # the one that ended is the replacement of the pod deleted
            assert coordinator[0]["metadata"]["uid"] != lost["metadata"]["uid"], coordinator

        ours = _weights(folders[run])
        assert ours.keys() == reference.keys()
        for key in ours:
            assert torch.allclose(ours[key], recovered[key], rtol=0, atol=ATOL), (run, key)
            assert torch.allclose(ours[key], reference[key], rtol=0, atol=ATOL_ONE_PROCESS), (run, key)
    evicted = kube.get("job", "pr-evict", "-n", ns)
    assert not evicted["status"].get("failed"), evicted["status"]  # a disruption is not counted
