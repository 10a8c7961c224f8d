"""ddpctl.plan.plan: what a spec and its engine derive (container env, restart rules, names),
held in a Plan with no reference to its engine; table-driven."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ddpctl.engines import ENGINES, plan_for
from ddpctl.engines.base import Engine
from ddpctl.plan import NEVER, Plan, RetryRule
from ddpctl.spec.model import JobSpec


def planned(data: dict[str, Any]) -> Plan:
    return plan_for(JobSpec.from_dict(data))


@pytest.mark.parametrize("target", sorted(ENGINES))
def test_a_plan_holds_values_not_its_engine(target: str) -> None:
    """Render, the runners and the cluster commands read a Plan; none can reach its engine through it."""
    plan = planned({"target": target, "nodes": 3})
    held = [getattr(plan, f.name) for f in dataclasses.fields(plan)]
    assert not any(isinstance(v, Engine) for v in held)
    assert not hasattr(plan, "engine")
    assert plan.rdzv_endpoint == f"{plan.dns_names[0][-1]}:{plan.master_port}"
    assert len(plan.pod_hostnames) == len(plan.dns_names) == len(plan.injected_env) == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.rank0_host = "elsewhere"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("rule", "codes"),
    [
        (RetryRule(), {0: False, 1: True, 2: True, -9: True}),
        (RetryRule(but=(2, 202)), {0: False, 1: True, 2: False, 202: False, 143: True}),
        (RetryRule(only=frozenset({137, 143})), {0: False, 1: False, 137: True, 143: True}),
        (NEVER, {0: False, 1: False, 143: False}),
    ],
)
def test_a_retry_rule(rule: RetryRule, codes: dict[int, bool]) -> None:
    assert {code: rule.retries(code) for code in codes} == codes


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
    env = planned(data).groups[0].env
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
    assert planned(data).groups[0].env.get("DDP_TRAINER_TIMEOUT_S") == expected


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
    from ddpctl.runners.restarts import restart_limit

    assert restart_limit(planned(changes)) == limit


@pytest.mark.parametrize(
    ("changes", "codes"),
    [
        # job and jobset: every failure but a usage error
        ({"target": "job"}, {1: True, 2: False, 137: True, 138: True, 143: True, 200: True, 201: True}),
        ({"target": "jobset"}, {1: True, 2: False, 138: True, 200: True, 201: True}),
        ({"target": "job", "restartPolicy": "OnFailure"}, {1: True, 2: True}),  # the kubelet restarts every code
        # pytorchjob ExitCode: what Kubeflow's operator retries (130, 137, 138, 143), nothing else
        (
            {"target": "pytorchjob"},
            {1: False, 2: False, 130: True, 137: True, 138: True, 143: True, 200: False, 201: False},
        ),
        ({"target": "pytorchjob", "restartPolicy": "OnFailure"}, {1: True, 2: True, 143: True}),
        ({"target": "pytorchjob", "restartPolicy": "Never"}, {1: False, 143: False}),
        ({"target": "trainjob"}, {1: False, 143: False}),  # the runtime's to decide
    ],
)
def test_which_exit_codes_the_engines_retry(changes: dict[str, Any], codes: dict[int, bool]) -> None:
    plan = planned(changes)
    assert {code: plan.retriable(code) for code in codes} == codes


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
    assert planned(changes).pod_restart_policy == policy


@pytest.mark.parametrize(
    ("data", "args", "warned"),
    [
        ({"checkpoints": "s3://bucket/runs/r1"}, ["--checkpoint-dir", "s3://bucket/runs/r1"], False),
        ({"volumes": {"checkpoints": {"claimName": "c", "mountPath": "/ckpt"}}}, ["--checkpoint-dir", "/ckpt"], False),
        ({}, [], True),  # the pod's own file system: a restart starts from scratch
        ({"module": "mypkg.train"}, [], False),  # a user's module keeps its own state
    ],
)
def test_where_the_trainers_checkpoints_go(data: dict[str, Any], args: list[str], warned: bool) -> None:
    """An object store URL reaches the trainer as its --checkpoint-dir, and then no restart starts
    from scratch: the warning is only for checkpoints in the pod's file system."""
    plan = planned(data)
    assert list(plan.trainer_args) == args
    assert (plan.restart_starts_from_scratch is not None) is warned


PRIVILEGED_GPUS = {"gpusPerNode": 4, "podSecurity": "privileged"}


@pytest.mark.parametrize(
    ("data", "env", "downward"),
    [
        ({"stragglers": {"mode": "off"}}, {}, []),  # off, and the straggler detector too: no downward API
        ({}, {}, ["DDP_NODE_NAME", "DDP_POD_NAME"]),  # off, but the straggler detector (warn) names pods too
        (
            {"preflight": {"mode": "warn"}},
            {"DDP_TRAINER_PREFLIGHT": "warn", "DDP_TRAINER_PREFLIGHT_TOLERANCE": "0.6"},
            ["DDP_NODE_NAME", "DDP_POD_NAME"],
        ),
        (
            {"preflight": {"mode": "fail", "tolerance": 0.85, "minTflops": 300, "minBusbw": 12.5}, "fabric": "efa"}
            | PRIVILEGED_GPUS,
            {
                "DDP_TRAINER_PREFLIGHT": "fail",
                "DDP_TRAINER_PREFLIGHT_TOLERANCE": "0.85",
                "DDP_TRAINER_PREFLIGHT_MIN_TFLOPS": "300",
                "DDP_TRAINER_PREFLIGHT_MIN_BUSBW": "12.5",
                "DDP_TRAINER_FABRIC": "efa",
            },
            ["DDP_NODE_NAME", "DDP_POD_NAME"],
        ),
        # the user's env wins, and then no downward-API entry of that name is rendered
        (
            {"preflight": {"mode": "warn"}, "env": {"DDP_POD_NAME": "mine"}},
            {"DDP_TRAINER_PREFLIGHT": "warn", "DDP_TRAINER_PREFLIGHT_TOLERANCE": "0.6"},
            ["DDP_NODE_NAME"],
        ),
    ],
)
def test_the_preflight_reaches_the_trainer_as_its_variables(
    data: dict[str, Any], env: dict[str, str], downward: list[str]
) -> None:
    plan = planned(data)
    assert plan.preflight_env == env
    assert list(plan.downward_env) == downward
    container = plan.group_of(plan.spec.groups[0]).env
    assert {k: container[k] for k in env} == env
    assert "DDP_POD_NAME" not in container or container["DDP_POD_NAME"] == "mine"


_STRAGGLERS_ON = {
    "DDP_TRAINER_STRAGGLERS_TOLERANCE": "0.6",
    "DDP_TRAINER_STRAGGLERS_EVERY": "10",
    "DDP_TRAINER_STRAGGLERS_WINDOWS": "3",
}


@pytest.mark.parametrize(
    ("data", "env", "downward"),
    [
        # the default: warn, with the trainer's defaults spelt out
        ({}, {"DDP_TRAINER_STRAGGLERS": "warn", **_STRAGGLERS_ON}, ["DDP_NODE_NAME", "DDP_POD_NAME"]),
        # off reaches a trainer whose own default is warn; nothing else is set, and no downward API
        ({"stragglers": {"mode": "off", "tolerance": 0.3}}, {"DDP_TRAINER_STRAGGLERS": "off"}, []),
        # off, with the preflight on: its downward-API entries stay
        (
            {"stragglers": {"mode": "off"}, "preflight": {"mode": "warn"}},
            {"DDP_TRAINER_STRAGGLERS": "off"},
            ["DDP_NODE_NAME", "DDP_POD_NAME"],
        ),
        (
            {"stragglers": {"mode": "fail", "tolerance": 0.45, "every": 25, "windows": 2}},
            {
                "DDP_TRAINER_STRAGGLERS": "fail",
                "DDP_TRAINER_STRAGGLERS_TOLERANCE": "0.45",
                "DDP_TRAINER_STRAGGLERS_EVERY": "25",
                "DDP_TRAINER_STRAGGLERS_WINDOWS": "2",
            },
            ["DDP_NODE_NAME", "DDP_POD_NAME"],
        ),
        # a user's own script gets them alike (it opts in with ddpctl_trainer.stragglers)
        (
            {"module": "mine.train"},
            {"DDP_TRAINER_STRAGGLERS": "warn", **_STRAGGLERS_ON},
            ["DDP_NODE_NAME", "DDP_POD_NAME"],
        ),
        (
            {"module": None, "script": "train.py", "stragglers": {"mode": "off"}},
            {"DDP_TRAINER_STRAGGLERS": "off"},
            [],
        ),
        # the user's env wins, and then no downward-API entry of that name is rendered
        (
            {"env": {"DDP_NODE_NAME": "mine", "DDP_TRAINER_STRAGGLERS_EVERY": "5"}},
            {"DDP_TRAINER_STRAGGLERS": "warn", **_STRAGGLERS_ON},
            ["DDP_POD_NAME"],
        ),
    ],
)
def test_the_straggler_settings_reach_the_pods_as_the_trainers_variables(
    data: dict[str, Any], env: dict[str, str], downward: list[str]
) -> None:
    plan = planned(data)
    assert plan.stragglers_env == env
    assert list(plan.downward_env) == downward
    container = plan.group_of(plan.spec.groups[0]).env
    assert {k: container[k] for k in env} == {**env, **{k: v for k, v in plan.spec.env.items() if k in env}}
    assert not any(k.startswith("DDP_TRAINER_STRAGGLERS") for k in set(container) - set(env) - set(plan.spec.env))


@pytest.mark.parametrize(
    ("data", "resource", "env"),
    [
        ({}, None, {}),
        ({"fabric": "infiniband"} | PRIVILEGED_GPUS, "rdma/rdma_shared_device_a", {"NCCL_IB_DISABLE": "0"}),
        (
            {"fabric": "roce", "resources": {"fabricResource": "nvidia.com/hostdev"}} | PRIVILEGED_GPUS,
            "nvidia.com/hostdev",
            {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3"},
        ),
        (
            {"fabric": "efa", "env": {"FI_EFA_USE_DEVICE_RDMA": "0"}} | PRIVILEGED_GPUS,
            "vpc.amazonaws.com/efa",
            {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "0"},  # the user's env wins
        ),
    ],
)
def test_a_fabric_adds_its_device_and_env(data: dict[str, Any], resource: str | None, env: dict[str, str]) -> None:
    plan = planned(data)
    assert plan.fabric_resource == resource
    container = plan.group_of(plan.spec.groups[0]).env
    assert {k: v for k, v in container.items() if k.startswith(("NCCL_IB", "FI_"))} == env


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
AVOID = {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-3", "gpu-7"]}
POOL = {"key": "pool", "operator": "In", "values": ["a"]}


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        ({}, {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchFields": [AVOID]}]}}}),
        (
            {"podAntiAffinity": {"x": 1}, "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
            {
                "podAntiAffinity": {"x": 1},
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [],
                    REQUIRED: {"nodeSelectorTerms": [{"matchFields": [AVOID]}]},
                },
            },
        ),
        # terms are ORed: every one of them gets the anti-affinity, next to what it had
        (
            {
                "nodeAffinity": {
                    REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [POOL]}, {"matchFields": [POOL]}]}
                }
            },
            {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [POOL], "matchFields": [AVOID]},
                            {"matchFields": [POOL, AVOID]},
                        ]
                    }
                }
            },
        ),
    ],
)
def test_avoided_nodes_join_every_required_node_affinity_term(
    affinity: dict[str, Any], expected: dict[str, Any]
) -> None:
    plan = planned({"affinity": affinity, "avoidNodes": ["gpu-3", "gpu-7"]})
    assert plan.affinity == expected
    assert dict(plan.spec.affinity) == affinity  # the spec is left as it was


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob"])
def test_each_pod_carries_its_node_group_for_the_straggler_detector(target: str) -> None:
    """Two groups of as many processes a node (A100 and L4 nodes): each pod gets its group's name,
    so that the detector compares a node with its own group's; not without groups or detector."""
    groups = [{"name": "a100", "nodes": 1, "gpusPerNode": 4}, {"name": "l4", "nodes": 2, "gpusPerNode": 4}]
    plan = planned({"target": target, "nodeGroups": groups})
    assert [plan.group_of(g).env["DDP_NODE_GROUP"] for g in plan.spec.groups] == ["a100", "l4"]
    assert [plan.node_env(n)["DDP_NODE_GROUP"] for n in plan.nodes] == ["a100", "l4", "l4"]  # run --local's too
    off = planned({"target": target, "nodeGroups": groups, "stragglers": {"mode": "off"}})
    assert not any("DDP_NODE_GROUP" in off.group_of(g).env for g in off.spec.groups)
    uniform = planned({"target": target, "nodes": 2})
    assert "DDP_NODE_GROUP" not in uniform.group_of(uniform.spec.groups[0]).env
    mine = planned({"target": target, "nodeGroups": groups, "env": {"DDP_NODE_GROUP": "x"}})
    assert {mine.group_of(g).env["DDP_NODE_GROUP"] for g in mine.spec.groups} == {"x"}  # the user's env wins
