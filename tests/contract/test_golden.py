"""Golden files: the exact YAML each target renders for a few specs.

A change to the templates shows up here as a readable diff. After an intended change, regenerate
with `pytest tests/contract/test_golden.py --update-golden` and review the diff before committing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.manifests.output import to_yaml_documents
from ddpctl.manifests.render import render
from ddpctl.spec.model import JobSpec
from ddpctl.spec.schema import TARGETS

GOLDEN = Path(__file__).parent / "golden"
SPECS = {
    "cpu-2x2": {},
    "gpu-4x8": {
        "name": "resnet50",
        "namespace": "vision",
        "nodes": 4,
        "gpusPerNode": 8,
        "image": "registry.example.com/vision/trainer:1.4.0",
        "args": ["--model", "resnet50", "--epochs", "90"],
        "resources": {"cpu": "32", "memory": "256Gi"},
        "shmSize": "32Gi",
        "env": {"NCCL_DEBUG": "WARN"},
        "secretEnv": {"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}},
        "volumes": {
            "data": {"claimName": "imagenet", "mountPath": "/data", "readOnly": True},
            "checkpoints": {"claimName": "resnet-ckpt", "mountPath": "/checkpoints"},
        },
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "queue": "vision-team",
        "topology": {"preferred": "cloud.google.com/gce-topology-block"},
        "labels": {"team": "vision"},
    },
    "elastic-1to4": {"name": "elastic", "nodes": "1:4", "gpusPerNode": 2},
    # pod recovery: a coordinator, per-index limits, each pod's torchrun alone (targets job and jobset)
    "recover-3x1": {"name": "recover", "nodes": 3, "procsPerNode": 1, "recovery": "pod", "backoffLimit": 2},
}


def _cases():
    for spec_name, data in SPECS.items():
        for target in TARGETS:
            if target == "trainjob" and ":" in str(data.get("nodes", "")):
                continue
            if data.get("recovery") == "pod" and target not in ("job", "jobset"):
                continue
            yield spec_name, target, data


@pytest.mark.parametrize("spec_name,target,data", list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_golden(spec_name: str, target: str, data: dict, request: pytest.FixtureRequest) -> None:
    path = GOLDEN / f"{spec_name}.{target}.yaml"
    text = to_yaml_documents(render(JobSpec.from_dict({**data, "target": target})))
    if request.config.getoption("--update-golden"):
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing {path}: run pytest {__file__} --update-golden"
    assert text == path.read_text(encoding="utf-8"), (
        f"{path.name} changed: review, then regenerate with --update-golden"
    )
