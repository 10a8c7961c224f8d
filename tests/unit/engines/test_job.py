"""The job target's pod recovery (recovery: pod): what it plans, and the one-line refusals where
it cannot run, on this target or another (render, the chart and submit agree: they plan alike)."""

from __future__ import annotations

import pytest

from ddpctl.engines import ENGINES, plan_for
from ddpctl.engines.job import ENGINE
from ddpctl.errors import SpecError
from ddpctl.manifests.explain import recovery_text
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol

UNEVEN = [
    {"name": "a", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 2},
    {"name": "b", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 1},
]


def _plan(**data: object):
    layout = {} if "nodeGroups" in data else {"nodes": 3, "procsPerNode": 1}
    return plan_for(JobSpec.from_dict({"name": "w", **layout, "recovery": "pod", **data}))


def test_on_job_each_group_meets_at_the_coordinator_with_its_own_offsets() -> None:
    plan = _plan(nodeGroups=UNEVEN)
    assert plan.coordinator == "w-coordinator.w:29510" and plan.coordinator_name == "w-coordinator"
    seen = []
    for group in plan.groups:
        env = group.env
        assert (env["PET_NNODES"], env["PET_STANDALONE"], env[protocol.COORDINATOR_ENV]) == ("1", "1", plan.coordinator)
        assert not {"PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_RDZV_ENDPOINT"} & set(env)  # no job-wide rendezvous
        seen.append((env[protocol.NODE_RANK_OFFSET_ENV], env[protocol.RANK_OFFSET_ENV], env["PET_NPROC_PER_NODE"]))
        assert env[protocol.JOB_WORLD_SIZE_ENV] == "4"
    assert seen == [("0", "0", "2"), ("1", "2", "1")]
    assert not plan.node_rank_from_index  # PET_NODE_RANK is torchrun's own (0): the launcher gives DDP_NODE_RANK
    assert "PET_NODE_RANK" not in plan.node_env(plan.nodes[1])


def test_the_coordinator_is_named_by_the_headless_service() -> None:
    plan = _plan()
    assert ENGINE.coordinator_host(plan) == f"{plan.coordinator_name}.{plan.service_name}"
    assert ENGINE.pod_recovery_refused is None


def test_gang_has_no_coordinator() -> None:
    plan = _plan(recovery="gang")
    assert plan.coordinator is None and plan.coordinator_name is None
    assert plan.groups[0].env["PET_MASTER_ADDR"] == "w-0.w"


@pytest.mark.parametrize(
    ("data", "field", "problem"),
    [
        ({"target": "pytorchjob"}, "recovery", "pod on the pytorchjob target:"),
        ({"target": "trainjob"}, "recovery", "pod on the trainjob target:"),
        ({"gpusPerNode": 1}, "recovery", "pod: a nccl group is not formed again"),
        ({"nodes": "1:3"}, "recovery", "pod: an elastic layout"),
        ({"module": None, "script": "train.py"}, "recovery", "pod: only the built-in trainer"),
        ({"args": ["--strategy=fsdp"]}, "recovery", "pod: only DDP is formed again"),
        ({"restartPolicy": "OnFailure"}, "restartPolicy", "OnFailure restarts a failed container in place"),
        (
            {"nodeGroups": [{**UNEVEN[0], "name": "coordinator"}]},
            "nodeGroups",
            "a group named 'coordinator'",
        ),
        ({"name": "n" * 52}, "name", f"'{'n' * 52}' makes the job name '{'n' * 52}-coordinator'"),
    ],
)
def test_where_pod_recovery_cannot_run_it_is_refused_in_one_line(data: dict, field: str, problem: str) -> None:
    with pytest.raises(SpecError) as refused:
        _plan(**data)
    assert refused.value.field == field
    assert refused.value.problem.startswith(problem), refused.value.problem
    assert refused.value.fix


def test_the_refusal_names_the_targets_that_can() -> None:
    with pytest.raises(SpecError) as refused:
        _plan(target="pytorchjob")
    assert refused.value.fix.startswith("use target job or jobset, or leave recovery at gang")


BLOCKED = [
    ({"target": "pytorchjob"}, "the training operator recreates a failed pod"),
    ({"target": "trainjob"}, "the runtime's JobSet template sets its child Jobs' failure limits"),
    ({"gpusPerNode": 1}, "a nccl group is not formed again"),
    ({"nodes": "1:3"}, "an elastic layout"),
    ({"module": None, "script": "train.py"}, "only the built-in trainer"),
    ({"args": ["--strategy=fsdp"]}, "only DDP is formed again"),
    ({"restartPolicy": "OnFailure"}, "OnFailure restarts a failed container in place"),
    ({"nodeGroups": [{**UNEVEN[0], "name": "coordinator"}]}, "a node group is named 'coordinator'"),
]


@pytest.mark.parametrize("target", ["job", "jobset"])
def test_auto_is_pod_where_nothing_blocks_it_and_explain_says_so(target: str) -> None:
    plan = _plan(recovery="auto", target=target)
    assert (
        plan.recovery == "pod" and plan.coordinator and plan.coordinator_name == ENGINES[target].coordinator_name(plan)
    )
    assert plan.spec.recovery == "auto"  # what the user said stays as said
    assert recovery_text(plan).startswith("pod (auto): a lost pod is replaced alone")


@pytest.mark.parametrize(("data", "why"), BLOCKED, ids=[next(iter(d)) for d, _ in BLOCKED])
def test_auto_is_gang_where_pod_recovery_cannot_run_and_explain_says_why(data: dict, why: str) -> None:
    plan = _plan(recovery="auto", **data)
    assert plan.recovery == "gang" and plan.coordinator is None and plan.coordinator_name is None
    text = recovery_text(plan)
    assert text.startswith("gang (auto): a lost pod restarts every pod"), text
    assert f"recovery: pod cannot run here: {why}" in text, text


def test_an_explicit_gang_is_said_without_auto() -> None:
    assert recovery_text(_plan(recovery="gang")).startswith("gang: a lost pod restarts every pod")


@pytest.mark.parametrize(("data", "why"), BLOCKED[:3], ids=["pytorchjob", "trainjob", "gpus"])
def test_replace_under_an_auto_that_resolves_to_gang_is_refused_in_one_line(data: dict, why: str) -> None:
    with pytest.raises(SpecError) as refused:
        _plan(recovery="auto", stragglers={"mode": "replace"}, **data)
    assert refused.value.field == "stragglers.mode"
    assert refused.value.problem.startswith("replace needs recovery: pod, which this target or layout cannot run")
    assert _plan(recovery="auto", stragglers={"mode": "replace"}).recovery == "pod"  # where it can, it runs
