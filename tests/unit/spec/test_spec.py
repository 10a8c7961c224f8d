"""ddpctl.spec: what a JobSpec accepts and refuses, table-driven. A spec is refused when it is made
(its own rules) or when its engine plans it (what the target cannot run): both count as refused,
with the field named."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from ddpctl.engines import plan_for
from ddpctl.errors import SpecError
from ddpctl.spec.model import JobSpec


@pytest.mark.parametrize(
    "data,field",
    [
        ({"nodes": 0}, "nodes"),
        ({"nodes": "0:4"}, "nodes"),  # an elastic bound names the key ddp.yaml has, not minNodes
        ({"checkpoints": "/mnt/ckpt"}, "checkpoints"),  # a path is a volume's, not a URL
        ({"env": {"AWS_SECRET_ACCESS_KEY": "x"}}, "env.AWS_SECRET_ACCESS_KEY"),  # a secret goes in secretEnv
        ({"checkpoints": "ftp://bucket/run"}, "checkpoints"),
        ({"checkpoints": "s3://"}, "checkpoints"),
        ({"checkpoints": "s3://Bucket/run"}, "checkpoints"),
        ({"checkpoints": "s3://bucket/run?versionId=1"}, "checkpoints"),
        ({"checkpoints": "s3://bucket/run", "module": "mypkg.train"}, "checkpoints"),
        (
            {"checkpoints": "s3://b/run", "volumes": {"checkpoints": {"claimName": "c", "mountPath": "/c"}}},
            "checkpoints",
        ),
        ({"checkpoints": "s3://bucket/run", "args": ["--checkpoint-dir=/c"]}, "checkpoints"),
        ({"nodes": "4:2"}, "nodes"),
        ({"nodes": "two"}, "nodes"),
        ({"nodes": True}, "nodes"),
        ({"gpusPerNode": -1}, "gpusPerNode"),
        ({"stallTimeout": -1}, "stallTimeout"),
        ({"stallTimeout": "5m"}, "stallTimeout"),
        ({"gpusPerNode": 2, "procsPerNode": 3}, "procsPerNode"),
        ({"procsPerNode": 0}, "procsPerNode"),
        ({"name": "Resnet"}, "name"),
        ({"name": "1abc"}, "name"),
        ({"name": "abc\n"}, "name"),  # `$` would accept a trailing newline; fullmatch does not
        ({"image": "img:1\n"}, "image"),
        ({"labels": {"team": "a\n"}}, "labels.team"),
        ({"name": "a" * 64}, "name"),
        ({"name": "a" * 54, "target": "pytorchjob", "nodes": 64}, "name"),  # <name>-worker-62 is too long
        ({"name": "x" * 61, "nodes": 100}, "name"),  # <name>-99 is 64 characters
        ({"namespace": "Prod"}, "namespace"),
        ({"target": "slurm"}, "target"),
        ({"image": "bad image"}, "image"),
        ({"image": "img\nkind: Pod"}, "image"),
        ({"backend": "mpi"}, "backend"),
        ({"backend": "nccl"}, "backend"),
        ({"rendezvous": {"port": 70000}}, "rendezvous.port"),
        ({"rendezvous": {"mode": "static"}, "nodes": "1:3"}, "rendezvous.mode"),
        ({"rendezvous": {"bogus": 1}}, "rendezvous.bogus"),
        ({"resources": {"memory": "lots"}}, "resources.memory"),
        ({"resources": {"cpu": "1 000"}}, "resources.cpu"),
        ({"shmSize": "-1Gi"}, "shmSize"),
        ({"env": {"1BAD": "x"}}, "env.1BAD"),
        ({"env": {"FLAG": True}}, "env.FLAG"),
        ({"labels": {"team": "a b"}}, "labels.team"),
        ({"labels": {"bad key!": "a"}}, "labels.bad key!"),
        ({"annotations": {"": "a"}}, "annotations."),
        ({"volumes": {"data": {"claimName": "pvc", "mountPath": "relative"}}}, "volumes.data.mountPath"),
        ({"volumes": {"data": {"claimName": "pvc", "mountPath": "/dev/shm"}}}, "volumes.data.mountPath"),
        ({"volumes": {"Data": {"claimName": "pvc", "mountPath": "/data"}}}, "volumes.Data"),
        ({"volumes": {"data": {"claimName": "pvc"}}}, "volumes.data.mountPath"),
        ({"secretEnv": {"TOKEN": {"secret": "Bad_Name", "key": "k"}}}, "secretEnv.TOKEN.secret"),
        ({"env": {"TOKEN": "x"}, "secretEnv": {"TOKEN": {"secret": "s", "key": "k"}}}, "secretEnv"),
        ({"tolerations": [{"key": "gpu", "operator": "Maybe"}]}, "tolerations[0].operator"),
        ({"tolerations": [{"key": "gpu", "color": "red"}]}, "tolerations[0]"),
        ({"affinity": {"friendship": {}}}, "affinity.friendship"),
        ({"affinity": {"nodeAffinity": {"x": __import__("datetime").date(2024, 1, 1)}}}, "affinity.nodeAffinity.x"),
        (
            {"tolerations": [{"key": "gpu", "operator": "Exists", "tolerationSeconds": "soon"}]},
            "tolerations[0].tolerationSeconds",
        ),
        ({"queue": "has space"}, "queue"),
        ({"restartPolicy": "Always"}, "restartPolicy"),
        ({"backoffLimit": -1}, "backoffLimit"),
        ({"activeDeadlineSeconds": 0}, "activeDeadlineSeconds"),
        ({"collectiveTimeout": 0}, "collectiveTimeout"),
        ({"collectiveTimeout": 300}, "collectiveTimeout"),  # not above the trainer's stall watchdog (300 s)
        ({"collectiveTimeout": 120, "stallTimeout": 120}, "collectiveTimeout"),
        ({"stallTimeout": 600}, "stallTimeout"),  # not below the trainer's default process-group timeout
        ({"gracePeriod": 14}, "gracePeriod"),
        ({"podSecurity": "privileged"}, "podSecurity"),
        ({"target": "trainjob", "priorityClassName": "high"}, "priorityClassName"),
        ({"target": "trainjob", "envFromSecrets": ["hf-token"]}, "envFromSecrets"),
        ({"module": "not a module"}, "module"),
        ({"module": None, "script": "train.py", "command": ["python"]}, "module"),
        ({"args": "--epochs 3"}, "args"),
        ({"bogusKey": 1}, "bogusKey"),
        ({"gpus_per_node": 1}, "gpus_per_node"),
    ],
)
def test_invalid_specs_name_the_field_and_fix(data: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        plan_for(JobSpec.from_dict(data))
    assert info.value.field == field
    message = str(info.value)
    assert message.startswith(f"{field}: ") and "\n" not in message
    assert info.value.fix, "every spec error says how to fix it"


def test_spec_is_frozen_all_the_way_down() -> None:
    spec = JobSpec.from_dict({"env": {"A": "1"}})
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'nodes'"):
        spec.nodes = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'mode'"):
        spec.rendezvous.mode = "c10d"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.env["B"] = "2"  # type: ignore[index]


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"nodes": "2:8", "gpusPerNode": 4, "target": "jobset", "queue": "team-a"},
        {
            "name": "resnet",
            "target": "pytorchjob",
            "env": {"A": "1", "OMP_NUM_THREADS": 4},
            "volumes": {"data": {"claimName": "imagenet", "mountPath": "/data", "readOnly": True}},
            "secretEnv": {"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}},
            "tolerations": [{"key": "x", "operator": "Exists"}],
            "resources": {"cpu": "8", "memory": "32Gi"},
        },
        {"module": None, "script": "train.py", "args": ["--lr", "0.1"]},
        {"secretEnv": None, "volumes": None, "env": None},
    ],
)
def test_to_dict_round_trips(data: dict) -> None:
    spec = JobSpec.from_dict(data)
    assert JobSpec.from_dict(spec.to_dict()) == spec


def test_the_spec_knows_the_trainers_timeout_defaults() -> None:
    """The spec checks stallTimeout against collectiveTimeout with the trainer's own defaults."""
    from ddpctl.spec.schema import TRAINER_COLLECTIVE_TIMEOUT, TRAINER_STALL_TIMEOUT
    from ddpctl_trainer.config import TrainConfig

    defaults = TrainConfig()
    assert (defaults.timeout_s, defaults.stall_timeout) == (TRAINER_COLLECTIVE_TIMEOUT, TRAINER_STALL_TIMEOUT)


@pytest.mark.parametrize("target", ["job", "jobset"])
def test_exit_code_restart_policy_is_refused_where_no_operator_reads_it(target: str) -> None:
    with pytest.raises(SpecError) as err:
        plan_for(JobSpec.from_dict({"target": target, "restartPolicy": "ExitCode"}))
    assert err.value.field == "restartPolicy" and "pytorchjob" in str(err.value)


# --------------------------------------------------------------------------- topology

_RACK = "cloud.ddpctl.io/topology-rack"


@pytest.mark.parametrize(
    "data, field, problem",
    [
        ({"topology": {"required": _RACK, "preferred": _RACK}}, "topology", "sets both required and preferred"),
        ({"topology": {"required": _RACK, "unconstrained": True}}, "topology", "sets both required and unconstrained"),
        ({"topology": {"unconstrained": "yes"}}, "topology.unconstrained", "is not a boolean"),
        ({"topology": {"sliceLevel": _RACK}}, "topology.sliceSize", "is missing (with sliceLevel)"),
        ({"topology": {"sliceSize": 2}}, "topology.sliceLevel", "is missing (with sliceSize)"),
        ({"nodes": 6, "topology": {"sliceLevel": _RACK, "sliceSize": 4}}, "topology.sliceSize", "4 does not divide"),
        ({"nodes": 2, "topology": {"sliceLevel": _RACK, "sliceSize": 0}}, "topology.sliceSize", ""),
        ({"nodes": "1:4", "topology": {"sliceLevel": _RACK, "sliceSize": 1}}, "topology.sliceSize", "elastic"),
        ({"topology": {"preferred": "a/b/c"}}, "topology.preferred", "has an invalid prefix"),
        ({"topology": {"level": _RACK}}, "topology.level", "is not a known key"),
        (
            {
                "nodeGroups": [
                    {"name": "a", "nodes": 3, "gpusPerNode": 1, "topology": {"sliceLevel": _RACK, "sliceSize": 2}}
                ]
            },
            "nodeGroups[0].topology.sliceSize",
            "2 does not divide the group's 3 nodes",
        ),
    ],
)
def test_bad_topology_names_the_key(data: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(SpecError) as info:
        plan_for(JobSpec.from_dict(data))
    assert info.value.field == field and problem in str(info.value), str(info.value)


def test_topology_round_trips_and_a_group_overrides_the_spec() -> None:
    spec = JobSpec.from_dict(
        {
            "topology": {"preferred": _RACK},
            "nodeGroups": [
                {"name": "a", "nodes": 2, "gpusPerNode": 1, "topology": {"sliceLevel": _RACK, "sliceSize": 2}},
                {"name": "b", "nodes": 1, "gpusPerNode": 1},
            ],
        }
    )
    assert JobSpec.from_dict(spec.to_dict()) == spec
    a, b = spec.groups
    assert spec.topology_of(a).annotations() == {
        "kueue.x-k8s.io/podset-slice-required-topology": _RACK,
        "kueue.x-k8s.io/podset-slice-size": "2",
    }
    assert spec.topology_of(b).annotations() == {"kueue.x-k8s.io/podset-preferred-topology": _RACK}
    assert not JobSpec().topology and JobSpec().topology_of(JobSpec().groups[0]).annotations() == {}


@pytest.mark.parametrize(
    ("data", "field", "secret"),
    [
        ({"checkpoints": "s3://AKIAEXAMPLE:s3cr3t-value@bucket/run"}, "checkpoints", "s3cr3t-value"),
        ({"checkpoints": "ftp://AKIAEXAMPLE:s3cr3t-value@host/run"}, "checkpoints", "s3cr3t-value"),
        ({"checkpoints": "https://b.s3.amazonaws.com/r?X-Amz-Signature=s3cr3t-value"}, "checkpoints", "s3cr3t-value"),
        ({"env": {"AWS_SECRET_ACCESS_KEY": "s3cr3t-value"}}, "env.AWS_SECRET_ACCESS_KEY", "s3cr3t-value"),
    ],
)
def test_a_secret_written_where_none_belongs_is_refused_without_being_repeated(
    data: dict[str, Any], field: str, secret: str
) -> None:
    """A key pasted into the checkpoints URL (userinfo, a presigned query) or an object store's
    secret in plain env is refused, and the error line does not print it back (it goes to
    terminals and CI logs): secrets belong in a Secret, referenced by secretEnv."""
    with pytest.raises(SpecError) as refused:
        JobSpec.from_dict(data)
    assert refused.value.field == field and secret not in str(refused.value)
