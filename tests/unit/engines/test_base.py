"""ddpctl.engines.base: what every engine shares (what it refuses, its restart rules, how a pod's
node rank is read back) and the wiring of the engines that run Indexed Jobs we wire ourselves (job,
jobset): torchrun's env, the node-rank launcher of node groups, the injected env, the pod failure
policy. Plans are made from real JobSpecs (ddpctl.engines.plan_for)."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.engines import ENGINES, engine_for, plan_for
from ddpctl.engines.base import NODE_RANK_LAUNCHER, NODE_RANK_OFFSET, Engine
from ddpctl.errors import SpecError
from ddpctl.plan import Plan
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol

GROUPS = [
    {"name": "a", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 2},
    {"name": "b", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 1},
]


def planned(**data: Any) -> Plan:
    return plan_for(JobSpec.from_dict({"name": "w", **data}))


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"restartPolicy": "ExitCode"}, "restartPolicy", "ExitCode is the PyTorchJob operator's policy"),
        ({"target": "jobset", "restartPolicy": "ExitCode"}, "restartPolicy", "the jobset target's pods take Never"),
        ({"nodeGroups": GROUPS, "rendezvous": {"mode": "c10d"}}, "rendezvous.mode", "node groups need static"),
        ({"target": "jobset", "nodeGroups": GROUPS, "rendezvous": {"mode": "c10d"}}, "rendezvous.mode",
         "node groups need static"),
    ],
)  # fmt: skip
def test_what_an_engine_refuses(data: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        planned(**data)
    assert refused.value.field == field and words in str(refused.value)


def test_the_alternatives_name_the_engines_that_can() -> None:
    assert Engine.alternatives("elastic") == "job, pytorchjob or jobset"
    assert Engine.alternatives("groups") == "job, jobset or trainjob"
    assert [t for t, e in ENGINES.items() if not e.can("elastic")] == ["trainjob"]


@pytest.mark.parametrize(
    ("data", "code", "retried"),
    [
        ({}, 1, True),
        ({}, 137, True),
        ({}, protocol.EXIT_USAGE, False),  # a usage error fails the job at once
        ({}, 0, False),
        ({"restartPolicy": "OnFailure"}, protocol.EXIT_USAGE, True),  # the kubelet restarts every failed container
        ({"target": "jobset"}, protocol.EXIT_STALLED, True),
        ({}, protocol.EXIT_STRAGGLER, False),  # --stragglers fail ends the job at once, like a usage error
        ({"target": "jobset"}, protocol.EXIT_STRAGGLER, False),
        ({"target": "trainjob"}, protocol.EXIT_STRAGGLER, False),
        ({"restartPolicy": "OnFailure"}, protocol.EXIT_STRAGGLER, True),  # the kubelet restarts it in place
        ({"target": "jobset"}, protocol.EXIT_PREFLIGHT, True),  # unlike a failed preflight: a new pod may help
    ],
)
def test_retriable(data: dict[str, Any], code: int, retried: bool) -> None:
    assert planned(**data).retriable(code) is retried


@pytest.mark.parametrize(("data", "policy"), [({}, "Never"), ({"restartPolicy": "OnFailure"}, "OnFailure")])
def test_the_pods_restart_policy(data: dict[str, Any], policy: str) -> None:
    plan = planned(backoffLimit=4, **data)
    assert (plan.pod_restart_policy, plan.restart_limit) == (policy, 4)


@pytest.mark.parametrize("target", sorted(ENGINES))
def test_every_engine_has_a_template(target: str) -> None:
    assert engine_for(target).template == f"{target}.yaml.j2"


# ------------------------------------------------------------------------------ wiring of Indexed Jobs


@pytest.mark.parametrize("target", ["job", "jobset"])
def test_static_rendezvous_env(target: str) -> None:
    plan = planned(target=target, nodes=3, procsPerNode=2)
    env = engine_for(plan.target).torchrun_env(plan, plan.spec.groups[0])
    assert env == {
        "PET_NNODES": "3",
        "PET_NPROC_PER_NODE": "2",
        "PET_MASTER_ADDR": plan.rank0_host,
        "PET_MASTER_PORT": "29500",
        "PET_MAX_RESTARTS": "0",
    }
    assert plan.injected_env[2] == {"JOB_COMPLETION_INDEX": "2", "PET_NODE_RANK": "2"}
    assert plan.node_rank_source.startswith("the pod's job-completion-index annotation")


def test_c10d_rendezvous_env() -> None:
    plan = planned(nodes="1:4", procsPerNode=1)
    env = engine_for(plan.target).torchrun_env(plan, plan.spec.groups[0])
    assert env == {
        "PET_NNODES": "1:4",
        "PET_NPROC_PER_NODE": "1",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": plan.rdzv_endpoint,
        "PET_RDZV_ID": "w",
        "PET_RDZV_CONF": "join_timeout=600,last_call_timeout=30",
        "PET_MAX_RESTARTS": "0",
    }
    # torchrun numbers the nodes itself: no node rank from the index
    assert plan.injected_env[1] == {"JOB_COMPLETION_INDEX": "1"}
    assert plan.node_rank_source == "the c10d rendezvous, in the order nodes join"


@pytest.mark.parametrize(
    ("data", "entry", "adder"),
    [
        ({}, ("python3", "-m", protocol.LAUNCHER_MODULE, "-m", protocol.TRAINER_MODULE),
         f"python3 -m {protocol.LAUNCHER_MODULE}"),
        ({"module": None, "script": "train.py"}, ("python3", "-c", NODE_RANK_LAUNCHER, "train.py"),
         "a python3 -c launcher"),
    ],
)  # fmt: skip
def test_node_groups_add_their_offset_to_the_completion_index(data: dict[str, Any], entry: tuple, adder: str) -> None:
    plan = planned(nodeGroups=GROUPS, **data)
    second = plan.spec.groups[1]
    env = engine_for(plan.target).torchrun_env(plan, second)
    assert (env[NODE_RANK_OFFSET], env["PET_NPROC_PER_NODE"], env["PET_NNODES"]) == ("2", "1", "3")
    assert plan.group_of(second).command == entry
    node = plan.nodes[2]  # the second group's first pod: completion index 0, node rank 2
    assert (node.rank, node.index) == (2, 0)
    assert plan.injected_env[node.rank] == {"JOB_COMPLETION_INDEX": "0"}  # the launcher adds the rank
    assert plan.node_rank_source.endswith(f"added by {adder})")


@pytest.mark.parametrize(
    ("data", "rules"),
    [
        ({}, [("FailJob", [2, 202]), ("Ignore", "DisruptionTarget"), ("Ignore", [138, 143])]),
        ({"module": None, "script": "train.py"}, [("Ignore", "DisruptionTarget")]),  # plain torchrun: exit 1 for all
        ({"target": "jobset"}, [("FailJob", [2, 202]), ("FailJob", "DisruptionTarget"), ("FailJob", [143])]),
        ({"restartPolicy": "OnFailure"}, None),  # Kubernetes allows podFailurePolicy with Never only
    ],
)
def test_the_pod_failure_policy(data: dict[str, Any], rules: list[tuple[str, Any]] | None) -> None:
    plan = planned(**data)
    policy = engine_for(plan.target).pod_failure_policy(plan)  # type: ignore[attr-defined]
    if rules is None:
        assert policy is None
        return
    seen = []
    for rule in policy["rules"]:
        if "onExitCodes" in rule:
            codes = rule["onExitCodes"]
            assert (codes["containerName"], codes["operator"]) == (engine_for(plan.target).container_name, "In")
            seen.append((rule["action"], codes["values"]))
        else:
            seen.append((rule["action"], rule["onPodConditions"][0]["type"]))
    assert seen == rules


def test_an_exit_code_rule_sorts_its_codes() -> None:
    rule = engine_for("job").exit_code_rule("Ignore", (143, 2, 138))  # type: ignore[attr-defined]
    assert rule == {
        "action": "Ignore",
        "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [2, 138, 143]},
    }


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({}, "the Job fails at once by its podFailurePolicy's FailJob rule on 202"),
        ({"target": "jobset"}, "the child Job fails by its FailJob rule on 202, and the JobSet fails at once"),
        ({"target": "pytorchjob"}, "restartPolicy ExitCode recreates pods only for 130, 137, 138, 143"),
        ({"target": "trainjob"}, "the torch-distributed runtime decides"),
        ({"restartPolicy": "OnFailure"}, "the kubelet restarts the containers in place (any code, 202 too)"),
        ({"target": "pytorchjob", "restartPolicy": "OnFailure"}, "the kubelet restarts the containers in place"),
        ({"target": "pytorchjob", "restartPolicy": "Never"}, "the job fails at once; submit again with --avoid-node"),
        ({"module": "mypkg.train"}, "plain torchrun exits 1 for it, not 202"),
    ],
)
def test_what_each_engine_does_with_a_straggler_exit(data: dict[str, Any], words: str) -> None:
    plan = planned(**data)
    said = engine_for(plan.target).straggler_failure(plan)
    assert words in said, said
    if plan.uses_launcher and plan.pod_restart_policy != "OnFailure" and plan.spec.target != "trainjob":
        assert "--avoid-node NODE" in said
