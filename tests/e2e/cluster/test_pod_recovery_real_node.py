"""Pod recovery on the real node (`recovery: pod`, target job): a lost pod is replaced alone.

Three pods of one process each train float64 on gloo, with a coordinator pod of their own; the
trainer of node 1 SIGKILLs itself after step 4 (the tests' fault plugin in the user image, as the
OOM killer or a lost node would end it). The Job's per-index backoff replaces that pod alone,
keeping its index; the other two pods run on (one pod each, never restarted), form the group again
with the replacement through the coordinator and hand it their state, so the job ends with an
uninterrupted run's weights and no checkpoint read. The uninterrupted run is the same job without
the fault, on the same node at the same time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster.test_real_node import JOB_TIMEOUT, ON_NODE
from tests.support.cluster import RealCluster
from tests.support.models.faults import env_flags, kill_at, plugin_env

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

KILLED_AT = 4
# 72 samples / global batch 12 = 6 steps an epoch, 2 epochs: 12 steps; float64, the final weights saved
ARGS = [
    "--synthetic-samples", "72", "--eval-samples", "12", "--global-batch-size", "12", "--epochs", "2",
    "--dtype", "float64", "--strategy", "ddp", "--save-final", "/checkpoints/final.pt",
]  # fmt: skip
ATOL = 1e-12


def _job(ns: str, name: str, image: str, claim: str, *extra: str) -> list[str]:
    return ["submit", "-n", ns, "--target", "job", "--name", name, "--nodes", "3", "--procs", "1", "--gpus", "0",
            "--image", image, *ON_NODE, "--volume", f"checkpoints={claim}:/checkpoints", "--recovery", "pod",
            "--backoff-limit", "2", *extra, "--", *ARGS]  # fmt: skip


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ddpctl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ},
    )  # fmt: skip


def _weights(folder: Path) -> dict[str, Any]:
    import torch

    return torch.load(folder / "final.pt", weights_only=True)["model"]


def _by_index(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        index = pod["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index")
        out.setdefault(index, []).append(pod)
    return out


def test_a_killed_pod_is_replaced_alone_and_the_others_keep_their_state(
    cli, kube: RealCluster, restricted: str, node_image: str, local_volume
) -> None:
    ns = restricted
    ref_folder, folder = local_volume(ns, "ref"), local_volume(ns, "ckpt")
    kill = env_flags(plugin_env(kill_at(KILLED_AT, rank=1), image=True))
    reference = _start(*_job(ns, "ref", node_image, "ref", "--wait"))
    faulted = _start(*_job(ns, "pr", node_image, "ckpt", *kill, "--follow"))
    try:
        out, err = faulted.communicate(timeout=JOB_TIMEOUT)
        ref_out, ref_err = reference.communicate(timeout=JOB_TIMEOUT)
    finally:
        for proc in (reference, faulted):
            if proc.poll() is None:
                proc.kill()
    assert reference.returncode == 0, ref_err[-3000:] + ref_out[-3000:]
    assert faulted.returncode == 0, err[-4000:] + out[-4000:]
    assert f"killing rank 1 at step {KILLED_AT}" in out + err, (out + err)[-4000:]
    assert f"at step {KILLED_AT}" in out and "recovery: " in out, out[-4000:]
    assert "resumed from" not in out  # the state came from the survivors' memory, not a checkpoint

    pods = _by_index(kube.pods(ns, "job-name=pr"))
    assert sorted(pods) == ["0", "1", "2"], pods.keys()
    for index in ("0", "2"):  # the survivors: the same pod from start to end, never restarted
        assert len(pods[index]) == 1, [p["metadata"]["name"] for p in pods[index]]
        survivor = pods[index][0]
        assert survivor["status"]["phase"] == "Succeeded"
        assert survivor["status"]["containerStatuses"][0]["restartCount"] == 0
    phases = sorted(p["status"]["phase"] for p in pods["1"])
    assert phases == ["Failed", "Succeeded"], phases  # node 1's pod, and its replacement alone
    job = kube.get("job", "pr", "-n", ns)
    assert job["status"].get("failed") == 1 and job["status"].get("succeeded") == 3, job["status"]
    coordinator = kube.get("job", "pr-coordinator", "-n", ns)
    assert coordinator["status"].get("succeeded") == 1, coordinator["status"]  # it ended with the training

    import torch

    ours, theirs = _weights(folder), _weights(ref_folder)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.allclose(ours[key], theirs[key], rtol=0, atol=ATOL), key
