"""Every rendered object validates offline: core kinds strictly against Kubernetes 1.29 and 1.33
(kubernetes-validate), custom kinds strictly against the upstream CRDs' openAPIV3Schema."""

from __future__ import annotations

import copy

import pytest

from ddpctl.manifests.render import render
from ddpctl.spec.model import JobSpec
from ddpctl.spec.schema import FABRICS, TARGETS
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
        for fabric in FABRICS:
            cases.append((target, {**full, **FABRIC_JOB, "fabric": fabric}))
    # pod recovery (job, jobset): the coordinator and the per-index limits validate too
    for target in ("job", "jobset"):
        cases.append((target, {**FULL, "gpusPerNode": 0, "restartPolicy": None, "recovery": "pod"}))
    return cases


# a fast fabric, the preflight and avoidNodes: what they add to the pods must validate on every engine
FABRIC_JOB = {
    "podSecurity": "privileged",
    "preflight": {"mode": "fail", "tolerance": 0.8, "minTflops": 300, "minBusbw": 12.5},
    "avoidNodes": ["gpu-3", "ip-10-0-0-7.ec2.internal"],
    "resources": {"cpu": "16", "cpuLimit": "32", "memory": "64Gi", "fabricDevices": 4},
}


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


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    ("fabric", "resource", "env", "capabilities"),
    [
        ("socket", None, {}, None),
        ("infiniband", "rdma/rdma_shared_device_a", {"NCCL_IB_DISABLE": "0"}, ["IPC_LOCK"]),
        ("roce", "rdma/rdma_shared_device_a", {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3"}, ["IPC_LOCK"]),
        ("efa", "vpc.amazonaws.com/efa", {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}, ["IPC_LOCK"]),
    ],
)
def test_each_fabric_profile_renders_its_devices_env_and_capabilities_on_every_engine(
    target: str, fabric: str, resource: str | None, env: dict[str, str], capabilities: list[str] | None
) -> None:
    """What a fabric needs lands in the training container whatever the engine puts it in (a pod
    template, a PyTorchJob replica, a TrainJob's trainer and runtime patch): the device plugin's
    resource (4 of them), NCCL's and libfabric's env and the capability, under podSecurity privileged;
    socket adds nothing (the pods are those of podSecurity privileged alone)."""
    spec = JobSpec.from_dict(
        {"target": target, "gpusPerNode": 8, "fabric": fabric, "podSecurity": "privileged", **_devices(4)}
    )
    text = repr(render(spec))
    if resource is None:
        assert "rdma/" not in text and "vpc.amazonaws.com" not in text and "IPC_LOCK" not in text
    else:
        assert f"'{resource}': 4" in text
    for name, value in env.items():
        assert f"{{'name': '{name}', 'value': '{value}'}}" in text
    assert ("'capabilities': {'add': ['IPC_LOCK']}" in text) == (capabilities is not None)


def _devices(count: int) -> dict[str, dict[str, int]]:
    return {"resources": {"fabricDevices": count}}
