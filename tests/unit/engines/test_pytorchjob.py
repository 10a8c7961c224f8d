"""ddpctl.engines.pytorchjob: the Kubeflow PyTorchJob engine. Its restart policies and what they
retry, the layouts its two templates can express, the Master/Worker replicas, pod names, the env
the training operator injects, the node rank read back from a pod's labels. Plans are made from
real JobSpecs (ddpctl.engines.plan_for); the operator's own decisions are played in
test_failure_rules.py and on the test cluster."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.engines import engine_for, plan_for
from ddpctl.errors import SpecError
from ddpctl.manifests.render import render_plan
from ddpctl.plan import Plan
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol

ENGINE = engine_for("pytorchjob")
MASTER_AND_WORKERS = [
    {"name": "m", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 2},
    {"name": "w", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 1},
]


def planned(**data: Any) -> Plan:
    return plan_for(JobSpec.from_dict({"name": "w", "target": "pytorchjob", **data}))


@pytest.mark.parametrize(
    ("data", "policy", "limit"),
    [
        ({}, "ExitCode", 3),  # the trainer's launcher: its exit codes say what a restart can cure
        ({"module": None, "script": "train.py"}, "Never", 0),  # plain torchrun exits 1 for everything
        ({"restartPolicy": "OnFailure"}, "OnFailure", 3),
        ({"restartPolicy": "Never"}, "Never", 0),
    ],
)
def test_the_restart_policy_and_its_limit(data: dict[str, Any], policy: str, limit: int) -> None:
    plan = planned(backoffLimit=3, **data)
    assert (plan.pod_restart_policy, plan.restart_limit) == (policy, limit)


@pytest.mark.parametrize(
    ("data", "retried"),
    [
        ({}, set(protocol.KUBEFLOW_RETRYABLE)),  # ExitCode: 130, 137, 138, 143 only
        ({"restartPolicy": "OnFailure"}, {1, 2, 130, 137, 138, 143, 200, 202}),
        ({"restartPolicy": "Never"}, set()),
    ],
)
def test_what_is_retried(data: dict[str, Any], retried: set[int]) -> None:
    plan = planned(**data)
    assert {code for code in (0, 1, 2, 130, 137, 138, 143, 200, 202) if plan.retriable(code)} == retried


@pytest.mark.parametrize(
    ("data", "start", "bound"),
    [
        ({}, "restartPolicy ExitCode: the operator recreates a pod that was preempted (143",
         "set activeDeadlineSeconds"),
        ({"activeDeadlineSeconds": 3600}, "restartPolicy ExitCode:", "activeDeadlineSeconds 3600 bounds them"),
        ({"restartPolicy": "OnFailure", "backoffLimit": 5},
         "restartPolicy OnFailure: the kubelet restarts a failed container in place", "up to runPolicy.backoffLimit 5"),
        ({"restartPolicy": "Never"}, "restartPolicy Never: a failed pod fails the job", "set restartPolicy OnFailure"),
    ],
)  # fmt: skip
def test_failure_handling_in_words(data: dict[str, Any], start: str, bound: str) -> None:
    text = planned(**data).failure_handling
    assert text.startswith(start) and bound in text


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"nodeGroups": [*MASTER_AND_WORKERS, {"name": "x", "nodes": 1, "gpusPerNode": 0}]}, "nodeGroups"),
        ({"nodeGroups": [MASTER_AND_WORKERS[1], MASTER_AND_WORKERS[0]]}, "nodeGroups"),  # a first group of 2 nodes
        ({"queue": "q", "topology": {"sliceLevel": "rack", "sliceSize": 2}}, "topology.sliceLevel"),
    ],
)
def test_layouts_its_two_templates_cannot_express(data: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as refused:
        planned(**data)
    assert refused.value.field == field


def test_exit_code_is_its_own_policy() -> None:
    assert planned(restartPolicy="ExitCode").pod_restart_policy == "ExitCode"
    assert not ENGINE.can("groups") and ENGINE.can("elastic")


@pytest.mark.parametrize(
    ("data", "replicas", "hostnames"),
    [
        ({"nodes": 1}, [("Master", 1)], ["w-master-0"]),
        ({"nodes": 3}, [("Master", 1), ("Worker", 2)], ["w-master-0", "w-worker-0", "w-worker-1"]),
        ({"nodes": "2:3"}, [("Worker", 3)], ["w-worker-0", "w-worker-1", "w-worker-2"]),  # elastic: no Master
        ({"nodeGroups": MASTER_AND_WORKERS}, [("Master", 1), ("Worker", 2)],
         ["w-master-0", "w-worker-0", "w-worker-1"]),
    ],
)  # fmt: skip
def test_replicas_and_pod_names(data: dict[str, Any], replicas: list[tuple[str, int]], hostnames: list[str]) -> None:
    plan = planned(**data)
    assert [(t, n) for t, n, _ in ENGINE.replica_specs(plan)] == replicas  # type: ignore[attr-defined]
    assert list(plan.pod_hostnames) == hostnames
    assert [ENGINE.dns_names(plan, node) for node in plan.nodes] == [(h,) for h in hostnames]


def test_the_env_the_operator_injects() -> None:
    plan = planned(nodes=3, procsPerNode=2)
    assert ENGINE.injected_env(plan, plan.nodes[2]) == {
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "2",
        "MASTER_ADDR": "w-master-0",
        "PET_MASTER_ADDR": "w-master-0",
        "MASTER_PORT": "29500",
        "PET_MASTER_PORT": "29500",
        "WORLD_SIZE": "6",
        "RANK": "2",
        "PET_NODE_RANK": "2",
        "PET_NNODES": "3",
    }
    assert ENGINE.torchrun_env(plan, plan.spec.groups[0]) == {"PET_MAX_RESTARTS": "0"}


def test_the_env_of_an_elastic_job() -> None:
    plan = planned(nodes="1:3", procsPerNode=1)
    assert ENGINE.injected_env(plan, plan.nodes[1]) == {
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "1",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "w-worker-0:29500",
        "PET_NNODES": "1:3",
    }
    assert ENGINE.torchrun_env(plan, plan.spec.groups[0]) == {}  # the operator sets PET_MAX_RESTARTS itself
    assert ENGINE.node_rank_source(plan) == "the c10d rendezvous, in the order nodes join"


@pytest.mark.parametrize(
    ("data", "entry"),
    [
        ({}, ("python3", "-m", protocol.LAUNCHER_MODULE, "--nproc-per-node", "1", "-m", protocol.TRAINER_MODULE)),
        ({"module": None, "script": "t.py"}, ("torchrun", "--nproc-per-node", "1", "t.py")),
        ({"module": None, "command": ["python3", "t.py"]}, ("python3", "t.py")),  # not torchrun: left alone
    ],
)
def test_each_template_gives_its_process_count_on_the_command_line(data: dict[str, Any], entry: tuple) -> None:
    """PET_NPROC_PER_NODE is injected job-wide (the first group's): the Worker's own count goes on
    torchrun's command line, which beats the env."""
    plan = planned(nodeGroups=MASTER_AND_WORKERS, **data)
    assert ENGINE.entrypoint(plan, plan.spec.groups[1]) == entry
    assert ENGINE.injected_env(plan, plan.nodes[1])["PET_NPROC_PER_NODE"] == "2"


def test_uniform_layouts_keep_the_plain_command() -> None:
    plan = planned()
    assert ENGINE.entrypoint(plan, plan.spec.groups[0]) == plan.entrypoint


@pytest.mark.parametrize(
    ("data", "group"),
    [
        ({"nodeGroups": MASTER_AND_WORKERS, "queue": "q", "topology": {"required": "rack"}}, "w"),
        ({"nodes": 3, "queue": "q", "topology": {"preferred": "rack"}}, "w"),
        ({"nodeGroups": MASTER_AND_WORKERS}, None),  # no topology asked for
        ({"nodes": 1, "queue": "q", "topology": {"required": "rack"}}, None),  # one PodSet
    ],
)
def test_master_and_worker_are_placed_as_one(data: dict[str, Any], group: str | None) -> None:
    plan = planned(**data)
    assert ENGINE.podset_group(plan) == group
    workload = render_plan(plan)[-1]
    annotations = [
        spec["template"]["metadata"].get("annotations", {}) for spec in workload["spec"]["pytorchReplicaSpecs"].values()
    ]
    assert {a.get("kueue.x-k8s.io/podset-group-name") for a in annotations} == {group}


def test_the_operators_init_container_gets_a_hint() -> None:
    hint = ENGINE.added_container_hint("init-pytorch")
    assert hint is not None and "--pytorch-init-container-template-file" in hint
    assert ENGINE.added_container_hint("pytorch") is None
