"""ddpctl.spec.checkjob: `ddpctl check`'s job keeps what decides where and how the job runs, and
runs the ddpctl trainer's checks alone (--preflight-only), never restarted."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.engines import plan_for
from ddpctl.spec.checkjob import check_job
from ddpctl.spec.model import JobSpec

PLACED = {
    "target": "jobset",
    "gpusPerNode": 8,
    "nodes": 4,
    "fabric": "infiniband",
    "podSecurity": "privileged",
    "nodeSelector": {"pool": "h100"},
    "tolerations": [{"key": "gpu", "operator": "Exists"}],
    "avoidNodes": ["gpu-3"],
    "queue": "team-a",
    "resources": {"cpu": "32", "cpuLimit": "64", "fabricDevices": 4},
    "env": {"NCCL_DEBUG_SUBSYS": "INIT"},
}


@pytest.mark.parametrize(
    ("data", "mode"),
    [
        ({}, "fail"),
        ({"preflight": {"mode": "warn", "tolerance": 0.8}}, "warn"),
        ({"preflight": {"mode": "fail", "minBusbw": 20}}, "fail"),
        ({"module": "mine.train", "args": ["--epochs", "3"]}, "fail"),  # the trainer, whatever the job runs
        ({"module": None, "command": ["bash", "-c", "train"]}, "fail"),
        ({"recovery": "pod"}, "fail"),  # a check is not retried: no pod is replaced, no coordinator made
        ({"recovery": "auto"}, "fail"),
    ],
)
def test_the_check_runs_the_trainers_checks_alone(data: dict[str, Any], mode: str) -> None:
    spec = JobSpec.from_dict(data)
    check = check_job(spec)
    assert check.name == "ddp-train-check" and check.uses_trainer and not check.command and check.script is None
    assert check.args == ("--preflight-only", "--preflight-window", "0.25", "--preflight-repeats", "3")
    assert check.preflight.mode == mode and check.backoff_limit == 0 and check.recovery == "gang"
    assert plan_for(check).coordinator_name is None
    assert (check.preflight.tolerance, check.preflight.floors()) == (spec.preflight.tolerance, spec.preflight.floors())


def test_the_check_keeps_the_jobs_layout_engine_and_placement_and_drops_its_storage() -> None:
    spec = JobSpec.from_dict(
        {**PLACED, "volumes": {"data": {"claimName": "d", "mountPath": "/data"}}, "checkpoints": None,
         "workspace": {"dir": ".", "store": "s3://b/ws"}}
    )  # fmt: skip
    check = check_job(spec)
    kept = [k for k in PLACED if getattr(check, _field(k)) == getattr(spec, _field(k))]
    assert kept == list(PLACED) and check.volumes == {}
    assert not check.workspace, "the checks are the trainer's: the user's code is not shipped"
    plan = plan_for(check)
    assert plan.replicas == 4 and plan.world_size == 32 and plan.restart_starts_from_scratch is None


def _field(key: str) -> str:
    return {"gpusPerNode": "gpus_per_node", "podSecurity": "pod_security", "nodeSelector": "node_selector",
            "avoidNodes": "avoid_nodes"}.get(key, key)  # fmt: skip
