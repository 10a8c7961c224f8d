"""ddpctl.engines.jobset: the JobSet engine. Its replicatedJob and pod names, with and without node
groups; the failurePolicy it derives from its child Jobs' podFailurePolicy (usage error first, so a
JobSet that drops message patterns fails rather than restarts for free); the failure handling said in
words per entrypoint; the node count read back from a live JobSet. Plans are made from real JobSpecs;
the controller's own decisions are played in test_failure_rules.py and on the test cluster."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.engines import engine_for, plan_for
from ddpctl.manifests.render import render_plan
from ddpctl.plan import Plan
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol

ENGINE = engine_for("jobset")
UNEVEN = [
    {"name": "big", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 4},
    {"name": "small", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 3},
]
SCRIPT = {"module": None, "script": "train.py"}  # plain torchrun: no launcher to map exit codes


def planned(**data: Any) -> Plan:
    return plan_for(JobSpec.from_dict({"name": "w", "target": "jobset", **data}))


@pytest.mark.parametrize(
    ("data", "replicated", "hostnames"),
    [
        ({"nodes": 2}, ["node"], ["w-node-0-0", "w-node-0-1"]),
        ({"nodeGroups": UNEVEN}, ["big", "small"], ["w-big-0-0", "w-small-0-0", "w-small-0-1"]),
    ],
)
def test_replicated_jobs_and_pod_names(data: dict[str, Any], replicated: list[str], hostnames: list[str]) -> None:
    plan = planned(**data)
    assert [ENGINE.replicated_job_name(plan, g) for g in plan.spec.groups] == replicated
    assert list(plan.pod_hostnames) == hostnames
    assert [ENGINE.dns_names(plan, node) for node in plan.nodes] == [(h, f"{h}.w") for h in hostnames]
    assert plan.rank0_host == f"{hostnames[0]}.w"  # rank 0 by the headless Service's subdomain


@pytest.mark.parametrize(
    ("data", "first_rule"),
    [
        ({}, "UsageErrorOrStraggler"),  # the launcher maps a straggler stop to 202: failed like exit 2
        ({"stragglers": {"mode": "off"}}, "UsageErrorOrStraggler"),  # the rule's codes do not depend on the mode
        (SCRIPT, None),  # plain torchrun exits 1 for everything: no rule can tell a usage error
    ],
)
def test_the_usage_rule_comes_before_the_free_restart(data: dict[str, Any], first_rule: str | None) -> None:
    plan = planned(backoffLimit=4, **data)
    policy = ENGINE.failure_policy(plan)
    assert policy["maxRestarts"] == 4
    names = [rule["name"] for rule in policy.get("rules", [])]
    if first_rule is None:
        assert "UsageError" not in names and "UsageErrorOrStraggler" not in names
    else:
        assert names == [first_rule, "Preempted"]
        usage, preempted = policy["rules"]
        assert (usage["action"], preempted["action"]) == ("FailJobSet", "RestartJobSetAndIgnoreMaxRestarts")
        # each pattern names the child rules' indexes: the usage rule's and the others', never both
        child = ENGINE.pod_failure_policy(plan)
        assert child is not None
        usage_indexes = {i for i, r in enumerate(child["rules"]) if protocol.EXIT_USAGE in _codes(r)}
        assert usage["onJobFailureMessagePatterns"] == [
            f"matching FailJob rule at index ({'|'.join(map(str, sorted(usage_indexes)))})$"
        ]
        assert all(str(i) not in preempted["onJobFailureMessagePatterns"][0] for i in usage_indexes)


def test_the_rendered_jobset_carries_the_policy_the_engine_derives() -> None:
    plan = planned(nodes=2)
    (jobset,) = [o for o in render_plan(plan) if o["kind"] == "JobSet"]
    assert jobset["spec"]["failurePolicy"] == ENGINE.failure_policy(plan)
    child = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert child["template"]["spec"]["restartPolicy"] == "Never"
    assert child.get("podFailurePolicy") == ENGINE.pod_failure_policy(plan)


@pytest.mark.parametrize(
    ("data", "starts", "says"),
    [
        ({}, "a usage error (exit 2) or a straggler", "restart the whole set without counting"),
        (SCRIPT, "a preempted or evicted pod (DisruptionTarget) restart", "up to failurePolicy.maxRestarts 3"),
        ({"restartPolicy": "OnFailure"}, "restartPolicy OnFailure: containers restart in place",
         "restarts the whole set"),
    ],
)  # fmt: skip
def test_failure_handling_in_words(data: dict[str, Any], starts: str, says: str) -> None:
    text = planned(backoffLimit=3, **data).failure_handling
    assert text.startswith(starts) and says in text


def test_a_straggler_stop_fails_the_set_at_once_only_where_the_launcher_maps_it() -> None:
    assert "the JobSet fails at once" in ENGINE.straggler_failure(planned())
    assert "the JobSet fails at once" not in ENGINE.straggler_failure(planned(**SCRIPT))


def _codes(rule: dict[str, Any]) -> list[int]:
    return list((rule.get("onExitCodes") or {}).get("values", []))
