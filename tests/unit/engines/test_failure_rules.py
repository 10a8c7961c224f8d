"""The rendered failure rules, read the way each controller documents it reads them: a usage
error fails the job at once, a preemption restarts it without using up its retries, and any other
failure restarts the whole group, counted.

The real controllers play single failed pods in tests/e2e/cluster/test_failure_rules.py. This file
keeps what the test cluster cannot show: every order in which several pods of one group end (real
ranks end together, kwok fails one pod at a time), a JobSet older than v0.10 (the cluster runs
v0.12), and the parity of `run --local` retries with the rendered rules. Each controller's
documented decision is written out below as a small function over the rendered object (not over
our engine code), and the scenarios are played through it. Every pod of a scenario ends as the
trainer's launcher ends it (exit codes in ddpctl_trainer.protocol): a preempted node's pod has the
DisruptionTarget condition and exits 143, and its peers stop at the same step and exit 143 too; a
node whose worker was killed exits 137 and its peers 138 (lost a peer); a usage error is exit 2 on
every node; a crash is exit 1 on one node, 138 on the others; a stall is 200 everywhere, and a
straggler under --stragglers fail is 202 everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from ddpctl.engines import engine_for, plan_for
from ddpctl.manifests.render import render
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol


@dataclass(frozen=True)
class PodEnd:
    exit_code: int
    disrupted: bool = False  # the pod has condition DisruptionTarget=True (preempted, evicted, node lost)


NODES = 3
SCENARIOS: dict[str, list[PodEnd]] = {
    "usage error": [PodEnd(protocol.EXIT_USAGE)] * NODES,
    "preempted": [PodEnd(protocol.EXIT_PREEMPTED), PodEnd(protocol.EXIT_PREEMPTED, disrupted=True), PodEnd(143)],
    "worker killed": [PodEnd(protocol.EXIT_PEER_LOST), PodEnd(protocol.EXIT_KILLED), PodEnd(protocol.EXIT_PEER_LOST)],
    "crash": [PodEnd(1), PodEnd(protocol.EXIT_PEER_LOST), PodEnd(protocol.EXIT_PEER_LOST)],
    "stall": [PodEnd(protocol.EXIT_STALLED)] * NODES,
    "straggler": [PodEnd(protocol.EXIT_STRAGGLER)] * NODES,  # --stragglers fail: every rank, after the same step
}
FAILS, FREE_RESTART, COUNTED_RESTART = "fails at once", "restarts, not counted", "restarts, counted"


# ------------------------------------------------------------------------------- Kubernetes Job
def pod_failure_verdict(policy: dict[str, Any] | None, container: str, end: PodEnd) -> tuple[str, int | None]:
    """Kubernetes' Job controller: the first podFailurePolicy rule that matches the failed pod
    decides (FailJob, Ignore, Count); no rule matching counts the pod against backoffLimit. Returns
    the action and the matching rule's index.
    https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy"""
    for index, rule in enumerate((policy or {}).get("rules", [])):
        on_codes = rule.get("onExitCodes")
        if on_codes is not None:
            if on_codes.get("containerName", container) != container:
                continue
            inside = end.exit_code in on_codes["values"]
            if inside == (on_codes["operator"] == "In"):
                return rule["action"], index
        for condition in rule.get("onPodConditions", []):
            if condition["type"] == "DisruptionTarget" and condition.get("status", "True") == "True" and end.disrupted:
                return rule["action"], index
    return "Count", None


def job_outcome(jobs: list[dict[str, Any]], ends: list[PodEnd]) -> str:
    """Every pod of every Job fails in the scenario; FailJob anywhere fails the job, counted pods
    use up backoffLimit (each Job's own), ignored ones are replaced for free."""
    verdicts = []
    for job in jobs:
        spec = job["spec"]
        container = spec["template"]["spec"]["containers"][0]["name"]
        assert spec["template"]["spec"]["restartPolicy"] == "Never", "podFailurePolicy needs restartPolicy Never"
        verdicts += [pod_failure_verdict(spec.get("podFailurePolicy"), container, end)[0] for end in ends]
    if "FailJob" in verdicts:
        return FAILS
    return COUNTED_RESTART if "Count" in verdicts else FREE_RESTART


# ------------------------------------------------------------------------------- JobSet
def child_job_failure(child: dict[str, Any], first: PodEnd) -> tuple[str, str] | None:
    """How a child Job with backoffLimit 0 fails at its first failed pod: the Job controller's
    reason and message (PodFailurePolicy: `... matching FailJob rule at index N`), or None when a
    rule ignores the pod (it is replaced and the Job goes on)."""
    container = child["template"]["spec"]["containers"][0]["name"]
    action, index = pod_failure_verdict(child.get("podFailurePolicy"), container, first)
    if action == "Ignore":
        return None
    if action == "FailJob":
        by_condition = "onPodConditions" in child["podFailurePolicy"]["rules"][index]
        what = (
            "Pod ns/p has condition DisruptionTarget"
            if by_condition
            else f"Container {container} for pod ns/p failed with exit code {first.exit_code}"
        )
        return "PodFailurePolicy", f"{what} matching FailJob rule at index {index}"
    assert child["backoffLimit"] == 0
    return "BackoffLimitExceeded", "Job has reached the specified backoff limit"


def jobset_action(failure_policy: dict[str, Any], reason: str, message: str) -> str:
    """JobSet: the first failurePolicy rule whose reasons and message patterns (regex) both match
    the failed child Job's decides; no rule matching restarts the JobSet (RestartJobSet, counted).
    https://jobset.sigs.k8s.io/docs/concepts/#failure-policy"""
    for rule in failure_policy.get("rules", []):
        reasons = rule.get("onJobFailureReasons") or []
        patterns = rule.get("onJobFailureMessagePatterns") or []
        if reasons and reason not in reasons:
            continue
        if patterns and not any(re.search(p, message) for p in patterns):
            continue
        return str(rule["action"])
    return "RestartJobSet"


JOBSET_OUTCOME = {
    "FailJobSet": FAILS,
    "RestartJobSetAndIgnoreMaxRestarts": FREE_RESTART,
    "RestartJobSet": COUNTED_RESTART,
}


def jobset_outcomes(jobset: dict[str, Any], ends: list[PodEnd]) -> set[str]:
    """Which pod fails first is a race: the outcome for every order (they should agree)."""
    child = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    outcomes = set()
    for first in set(ends):
        failure = child_job_failure(child, first)
        if failure is not None:
            outcomes.add(JOBSET_OUTCOME[jobset_action(jobset["spec"]["failurePolicy"], *failure)])
    return outcomes


# ------------------------------------------------------------------------------- PyTorchJob
def kubeflow_retryable(code: int) -> bool:
    """kubeflow/common pkg/util/train IsRetryableExitCode, as documented there: 130, 137 and 143
    (signals from transient trouble) and 138 (the code for a user's retryable error) are
    retryable; everything else (1, 2, 126-128, 139, ...) is permanent."""
    return code in (130, 137, 138, 143)


def pytorchjob_outcome(job: dict[str, Any], ends: list[PodEnd]) -> str:
    """restartPolicy ExitCode: a failed pod with a retryable code is recreated, any other fails the job."""
    policies = {r["restartPolicy"] for r in job["spec"]["pytorchReplicaSpecs"].values()}
    assert policies == {"ExitCode"}, policies
    if all(kubeflow_retryable(e.exit_code) for e in ends):
        return COUNTED_RESTART  # not counted by the operator (kubeflow/trainer#2045): --explain says so
    return FAILS


def _objects(target: str, **changes: Any) -> list[dict[str, Any]]:
    layout = {} if "nodeGroups" in changes else {"nodes": NODES}
    return render(JobSpec.from_dict({"target": target, "name": "fr", **layout, **changes}))


EXPECTED_JOB = {
    "usage error": FAILS,
    "preempted": FREE_RESTART,
    "worker killed": COUNTED_RESTART,
    "crash": COUNTED_RESTART,
    "stall": COUNTED_RESTART,
    "straggler": FAILS,
}


GROUPS = {
    "nodeGroups": [{"name": "big", "nodes": 1, "gpusPerNode": 2}, {"name": "small", "nodes": 2, "gpusPerNode": 1}]
}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("layout", [{}, GROUPS], ids=["one group", "node groups"])
def test_indexed_job_fails_usage_errors_and_does_not_count_preemption(scenario: str, layout: dict[str, Any]) -> None:
    jobs = [o for o in _objects("job", **layout) if o["kind"] == "Job"]
    assert job_outcome(jobs, SCENARIOS[scenario]) == EXPECTED_JOB[scenario]
    # Only the pod with the cause counts: a lost worker uses up one retry, not one per node.
    counted = [
        pod_failure_verdict(jobs[0]["spec"]["podFailurePolicy"], "trainer", e)[0] for e in SCENARIOS["worker killed"]
    ]
    assert counted.count("Count") == 1


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_jobset_fails_usage_errors_and_restarts_preemption_for_free_whichever_pod_fails_first(scenario: str) -> None:
    (jobset,) = [o for o in _objects("jobset") if o["kind"] == "JobSet"]
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] == JobSpec().backoff_limit > 0
    assert jobset_outcomes(jobset, SCENARIOS[scenario]) == {EXPECTED_JOB[scenario]}


def test_a_jobset_that_drops_message_patterns_fails_a_usage_error_rather_than_restart_it_forever() -> None:
    """JobSet before v0.10 has no onJobFailureMessagePatterns: the API server drops the field, and
    then the first PodFailurePolicy rule takes every child failure. It must be the one that fails."""
    (jobset,) = [o for o in _objects("jobset") if o["kind"] == "JobSet"]
    for rule in jobset["spec"]["failurePolicy"]["rules"]:
        rule.pop("onJobFailureMessagePatterns", None)
    assert jobset_outcomes(jobset, SCENARIOS["usage error"]) == {FAILS}
    assert jobset_outcomes(jobset, SCENARIOS["preempted"]) == {FAILS}  # safe: no free restarts at all


EXPECTED_PYTORCHJOB = dict(EXPECTED_JOB, preempted=COUNTED_RESTART, crash=FAILS, stall=FAILS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pytorchjob_exit_code_policy_retries_what_a_restart_can_cure(scenario: str) -> None:
    (job,) = [o for o in _objects("pytorchjob") if o["kind"] == "PyTorchJob"]
    assert job["spec"]["runPolicy"]["backoffLimit"] == JobSpec().backoff_limit
    assert pytorchjob_outcome(job, SCENARIOS[scenario]) == EXPECTED_PYTORCHJOB[scenario]


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob"])
def test_local_runs_retry_the_codes_the_rendered_rules_retry(target: str) -> None:
    """`run --local/--docker` ask the plan (plan.retriable, the engine's rule); it must agree with the
    controller reading the rendered object about each node's own exit code."""
    spec = JobSpec.from_dict({"target": target, "nodes": NODES, "name": "fr"})
    objects = render(spec)
    for code in (1, 2, 137, 138, 143, 200, 201, 202):
        end = PodEnd(code)
        if target == "job":
            (job,) = [o for o in objects if o["kind"] == "Job"]
            rendered = job_outcome([job], [end]) != FAILS
        elif target == "jobset":
            (jobset,) = [o for o in objects if o["kind"] == "JobSet"]
            rendered = jobset_outcomes(jobset, [end]) != {FAILS}
        else:
            rendered = kubeflow_retryable(code)
        assert plan_for(spec).retriable(code) == rendered, (target, code)


@pytest.mark.parametrize("target", ["job", "jobset"])
def test_a_user_script_gets_only_the_disruption_rule(target: str) -> None:
    """Plain torchrun exits 1 for every failure, so no exit-code rule can tell a usage error from
    a lost peer: only preemption is recognised (by the pod's condition)."""
    objects = _objects(target, module="mypkg.train")
    workload = next(o for o in objects if o["kind"] in ("Job", "JobSet"))
    spec = workload["spec"] if target == "job" else workload["spec"]["replicatedJobs"][0]["template"]["spec"]
    rules = spec["podFailurePolicy"]["rules"]
    assert [sorted(r) for r in rules] == [["action", "onPodConditions"]]
    assert spec["template"]["spec"]["containers"][0]["command"][0] == "torchrun"


@pytest.mark.parametrize("target", ["job", "jobset"])
def test_on_failure_restart_policy_renders_no_pod_failure_policy(target: str) -> None:
    """Kubernetes accepts podFailurePolicy only with restartPolicy Never."""
    text = str(_objects(target, restartPolicy="OnFailure"))
    assert "podFailurePolicy" not in text and "'restartPolicy': 'OnFailure'" in text


@pytest.mark.parametrize(
    ("target", "changes", "codes", "name"),
    [
        ("job", {}, [protocol.EXIT_USAGE, protocol.EXIT_STRAGGLER], None),
        ("jobset", {}, [protocol.EXIT_USAGE, protocol.EXIT_STRAGGLER], "UsageErrorOrStraggler"),
        # a user's script under plain torchrun, with a workspace: only an unpackable workspace exits 2 itself
        ("job", {"module": "mypkg.train", "workspace": {"dir": "."}}, [protocol.EXIT_USAGE], None),
        ("jobset", {"module": "mypkg.train", "workspace": {"dir": "."}}, [protocol.EXIT_USAGE], "UsageError"),
    ],
)
def test_one_fail_job_rule_takes_every_code_that_fails_the_job_where_the_launcher_runs(
    target: str, changes: dict[str, Any], codes: list[int], name: str | None
) -> None:
    """The launcher's codes that end the job at once (`protocol.FAILS_THE_JOB`) are one FailJob rule,
    the first: the JobSet rule that fails the set matches the child Job's message by that rule's index."""
    plan = plan_for(JobSpec.from_dict({"target": target, "name": "fr", **changes}))
    policy = engine_for(plan.target).pod_failure_policy(plan)  # type: ignore[attr-defined]
    first = policy["rules"][0]
    assert (first["action"], first["onExitCodes"]["values"]) == ("FailJob", codes)
    codes_of = [set(r.get("onExitCodes", {}).get("values", [])) for r in policy["rules"]]
    fails_the_job = [r for r, of in zip(policy["rules"], codes_of) if of & set(protocol.FAILS_THE_JOB)]
    assert fails_the_job == [first]
    if target == "jobset":
        rules = engine_for(plan.target).failure_policy(plan)["rules"]  # type: ignore[attr-defined]
        assert (rules[0]["name"], rules[0]["action"]) == (name, "FailJobSet")
        assert rules[0]["onJobFailureMessagePatterns"] == ["matching FailJob rule at index (0)$"]
        for code in codes:
            message = f"Container trainer for pod ns/p failed with exit code {code} matching FailJob rule at index 0"
            assert (
                jobset_action(engine_for(plan.target).failure_policy(plan), "PodFailurePolicy", message) == "FailJobSet"
            )  # type: ignore[attr-defined]
