"""Every rendered object validates offline: core kinds strictly against Kubernetes 1.29 and 1.33
(kubernetes-validate), custom kinds strictly against the upstream CRDs' openAPIV3Schema."""

from __future__ import annotations

import copy

import pytest
from ddpctl.manifests.render import render
from ddpctl.spec.model import JobSpec
from ddpctl.spec.schema import TARGETS

from tests.support.k8s_schemas import require_crds, validate_object

LAYOUTS = [
    {"nodes": 1},
    {"nodes": 2, "gpusPerNode": 0, "procsPerNode": 4},
    {"nodes": 4, "gpusPerNode": 1},
    {"nodes": 16, "gpusPerNode": 8},
    {"nodes": 64, "gpusPerNode": 8, "procsPerNode": 4},
    {"nodes": "1:4", "gpusPerNode": 2},
    {"nodes": "8:64", "gpusPerNode": 8},
]
FULL = {
    "name": "full",
    "namespace": "research",
    "nodes": 3,
    "gpusPerNode": 4,
    "image": "registry.example.com/team/trainer@sha256:" + "a" * 64,
    "imagePullPolicy": "Always",
    "imagePullSecrets": ["regcred"],
    "args": ["--epochs", "3"],
    "resources": {"cpu": "16", "memory": "64Gi", "gpuResource": "amd.com/gpu"},
    "shmSize": "16Gi",
    "env": {"NCCL_DEBUG": "INFO"},
    "envFromSecrets": ["hf-token"],
    "secretEnv": {"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}},
    "volumes": {
        "data": {"claimName": "imagenet", "mountPath": "/data", "readOnly": True},
        "checkpoints": {"claimName": "ckpt", "mountPath": "/ckpt"},
    },
    "nodeSelector": {"nvidia.com/gpu.product": "H100"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
            }
        }
    },
    "serviceAccountName": "trainer",
    "labels": {"team": "vision"},
    "annotations": {"example.com/owner": "alice"},
    "queue": "team-a",
    "restartPolicy": "OnFailure",
    "backoffLimit": 2,
    "ttlSecondsAfterFinished": 600,
    "activeDeadlineSeconds": 7200,
}


def _cases() -> list[tuple[str, dict]]:
    cases = []
    for target in TARGETS:
        for layout in LAYOUTS:
            if target == "trainjob" and ":" in str(layout["nodes"]):
                continue
            cases.append((target, layout))
        full = {**FULL, "envFromSecrets": []} if target == "trainjob" else FULL  # TrainJob has no envFrom
        cases.append((target, full))
        cases.append(
            (target, {**full, "podSecurity": "baseline", "priorityClassName": None if target == "trainjob" else "high"})
        )
    return cases


@pytest.mark.parametrize("target,data", _cases(), ids=lambda v: v if isinstance(v, str) else str(v.get("nodes")))
def test_rendered_objects_validate_strictly(target: str, data: dict) -> None:
    require_crds()
    objects = render(JobSpec.from_dict({**data, "target": target}))
    assert objects
    for obj in objects:
        assert validate_object(obj) == [], f"{obj['kind']} is invalid"


@pytest.mark.parametrize("target", TARGETS)
def test_validator_catches_an_unknown_field(target: str) -> None:
    """Guard the guard: the same objects with one unknown field must fail validation."""
    require_crds()
    workload = render(JobSpec(target=target))[-1]
    broken = copy.deepcopy(workload)
    broken["spec"]["notAField"] = 1
    assert any("notAField" in e for e in validate_object(broken))


@pytest.mark.parametrize("target", TARGETS)
def test_pods_meet_restricted_pod_security(target: str) -> None:
    """The fields the Pod Security 'restricted' profile checks, wherever the pod template sits."""
    objects = render(JobSpec(target=target, gpus_per_node=2))
    pod_specs = list(_pod_specs(objects[-1]))
    assert pod_specs
    for pod in pod_specs:
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for container in pod["containers"]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert "add" not in sc["capabilities"]
        for volume in pod["volumes"]:
            assert set(volume) - {"name"} <= {
                "emptyDir",
                "persistentVolumeClaim",
                "configMap",
                "secret",
                "projected",
                "downwardAPI",
            }
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod["volumes"]
        assert any(t.get("key") == "nvidia.com/gpu" for t in pod["tolerations"])


def _pod_specs(obj: dict):
    """Find every pod spec in an object (a dict with 'containers' and 'volumes')."""
    if isinstance(obj, dict):
        if "containers" in obj and "volumes" in obj:
            yield obj
        for value in obj.values():
            yield from _pod_specs(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _pod_specs(value)
