"""JobSpec validation and derived values, table-driven."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from ddpctl.errors import SpecError
from ddpctl.spec import JobSpec

VALID = [
    ({}, 2, 2, 4),
    ({"nodes": 1, "gpusPerNode": 8}, 1, 8, 8),
    ({"nodes": 4, "gpusPerNode": 4, "procsPerNode": 2}, 4, 2, 8),
    ({"nodes": 3, "procsPerNode": 5}, 3, 5, 15),
    ({"nodes": "1:4", "gpusPerNode": 2}, 4, 2, 8),
    ({"nodes": 64, "gpusPerNode": 8, "target": "pytorchjob"}, 64, 8, 512),
]


@pytest.mark.parametrize("data,replicas,nproc,world", VALID)
def test_layout_is_derived(data: dict, replicas: int, nproc: int, world: int) -> None:
    spec = JobSpec.from_dict(data)
    assert (spec.replicas, spec.nproc_per_node, spec.world_size) == (replicas, nproc, world)


@pytest.mark.parametrize(
    "data,field",
    [
        ({"nodes": 0}, "nodes"),
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
        ({"volumes": {"data": {"claimName": "pvc"}}}, "volumes.data"),
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
        JobSpec.from_dict(data)
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


@pytest.mark.parametrize(
    "data,backend,mode",
    [
        ({}, "gloo", "static"),
        ({"gpusPerNode": 1}, "nccl", "static"),
        ({"nodes": "1:2"}, "gloo", "c10d"),
        ({"gpusPerNode": 1, "backend": "gloo"}, "gloo", "static"),
    ],
)
def test_backend_and_rendezvous_auto(data: dict, backend: str, mode: str) -> None:
    spec = JobSpec.from_dict(data)
    assert (spec.resolved_backend, spec.rdzv_mode) == (backend, mode)


_FR = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param({}, {}, id="cpu-defaults-nothing"),
        pytest.param({"stallTimeout": 90}, {"DDP_TRAINER_STALL_TIMEOUT": "90"}, id="stall-timeout"),
        pytest.param({"stallTimeout": 0}, {"DDP_TRAINER_STALL_TIMEOUT": "0"}, id="stall-watchdog-off"),
        pytest.param({"gpusPerNode": 2}, _FR, id="gpu-flight-recorder-default-dump-file"),
        pytest.param(
            {"gpusPerNode": 2, "volumes": {"checkpoints": {"claimName": "c", "mountPath": "/ckpt/"}}},
            {**_FR, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/ckpt/nccl_trace_rank_"},
            id="gpu-flight-recorder-dumps-next-to-checkpoints",
        ),
        pytest.param(
            {"gpusPerNode": 2, "env": {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}},
            {**_FR, "TORCH_NCCL_TRACE_BUFFER_SIZE": "0"},
            id="user-env-turns-it-off",
        ),
    ],
)
def test_hang_evidence_env(data: dict, expected: dict) -> None:
    """The stall watchdog's timeout and, on GPUs, the NCCL flight recorder reach the container env."""
    env = JobSpec.from_dict(data).container_env()
    got = {k: v for k, v in env.items() if k == "DDP_TRAINER_STALL_TIMEOUT" or k.startswith("TORCH_NCCL_")}
    assert got == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, None),  # unset: the trainer's own default
        ({"collectiveTimeout": 900}, "900"),
        ({"collectiveTimeout": 60, "stallTimeout": 0}, "60"),  # the watchdog off: any timeout
        ({"collectiveTimeout": 900, "module": None, "script": "train.py"}, None),  # only our trainer reads it
    ],
)
def test_collective_timeout_reaches_the_trainer_as_its_process_group_timeout(data: dict, expected: str | None) -> None:
    assert JobSpec.from_dict(data).container_env().get("DDP_TRAINER_TIMEOUT_S") == expected


def test_the_spec_knows_the_trainers_timeout_defaults() -> None:
    """The spec checks stallTimeout against collectiveTimeout with the trainer's own defaults."""
    from ddpctl.spec import TRAINER_COLLECTIVE_TIMEOUT, TRAINER_STALL_TIMEOUT
    from ddpctl_trainer.config import TrainConfig

    defaults = TrainConfig()
    assert (defaults.timeout_s, defaults.stall_timeout) == (TRAINER_COLLECTIVE_TIMEOUT, TRAINER_STALL_TIMEOUT)


@pytest.mark.parametrize(
    ("changes", "limit"),
    [
        ({"target": "job", "backoffLimit": 3}, 3),
        ({"target": "jobset", "backoffLimit": 2}, 2),
        ({"target": "pytorchjob", "backoffLimit": 3}, 3),  # the trainer: restartPolicy ExitCode
        ({"target": "pytorchjob", "backoffLimit": 3, "restartPolicy": "Never"}, 0),  # the operator retries nothing
        ({"target": "pytorchjob", "backoffLimit": 3, "module": "mypkg.train"}, 0),  # plain torchrun: Never
        ({"target": "pytorchjob", "backoffLimit": 3, "restartPolicy": "OnFailure"}, 3),
        ({"target": "trainjob", "backoffLimit": 3}, 0),  # the training runtime decides
    ],
)
def test_restart_limit_is_the_engines_rule(changes: dict[str, Any], limit: int) -> None:
    """`run --local` restarts a failed group as often as the target's controller would."""
    from ddpctl.restarts import restart_limit

    assert restart_limit(JobSpec.from_dict(changes)) == limit


@pytest.mark.parametrize(
    ("changes", "codes"),
    [
        # job and jobset: every failure but a usage error
        ({"target": "job"}, {1: True, 2: False, 137: True, 138: True, 143: True, 200: True}),
        ({"target": "jobset"}, {1: True, 2: False, 138: True, 200: True}),
        ({"target": "job", "restartPolicy": "OnFailure"}, {1: True, 2: True}),  # the kubelet restarts every code
        # pytorchjob ExitCode: what Kubeflow's operator retries (130, 137, 138, 143), nothing else
        ({"target": "pytorchjob"}, {1: False, 2: False, 130: True, 137: True, 138: True, 143: True, 200: False}),
        ({"target": "pytorchjob", "restartPolicy": "OnFailure"}, {1: True, 2: True, 143: True}),
        ({"target": "pytorchjob", "restartPolicy": "Never"}, {1: False, 143: False}),
        ({"target": "trainjob"}, {1: False, 143: False}),  # the runtime's to decide
    ],
)
def test_which_exit_codes_the_engines_retry(changes: dict[str, Any], codes: dict[int, bool]) -> None:
    spec = JobSpec.from_dict(changes)
    assert {code: spec.engine.retriable(spec, code) for code in codes} == codes


@pytest.mark.parametrize(
    ("changes", "policy"),
    [
        ({"target": "job"}, "Never"),
        ({"target": "jobset"}, "Never"),
        ({"target": "pytorchjob"}, "ExitCode"),
        ({"target": "pytorchjob", "module": "mypkg.train"}, "Never"),
        ({"target": "pytorchjob", "restartPolicy": "OnFailure"}, "OnFailure"),
        ({"target": "job", "restartPolicy": "OnFailure"}, "OnFailure"),
    ],
)
def test_the_pods_restart_policy_is_the_engines_default_unless_given(changes: dict[str, Any], policy: str) -> None:
    spec = JobSpec.from_dict(changes)
    assert spec.engine.pod_restart_policy(spec) == policy


@pytest.mark.parametrize("target", ["job", "jobset"])
def test_exit_code_restart_policy_is_refused_where_no_operator_reads_it(target: str) -> None:
    with pytest.raises(SpecError) as err:
        JobSpec.from_dict({"target": target, "restartPolicy": "ExitCode"})
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
        JobSpec.from_dict(data)
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
