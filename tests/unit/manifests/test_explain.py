"""`render --explain` says what runs: for a --command, one process per pod, and whether that
process can join the group on the chosen engine (the env each engine's pods get decides)."""

from __future__ import annotations

import pytest

from ddpctl.engines import plan_for
from ddpctl.manifests.explain import explain
from ddpctl.spec import JobSpec

PLAIN = ("python", "train.py")


def _plan(target: str, procs: int, command: tuple[str, ...]):  # type: ignore[no-untyped-def]
    return plan_for(JobSpec(target=target, nodes=2, procs_per_node=procs, module=None, command=command))


@pytest.mark.parametrize(
    "target, procs, command, warned",
    [
        ("job", 1, PLAIN, "not MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE"),  # PET_* only
        ("jobset", 4, PLAIN, "not MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE"),
        ("trainjob", 1, PLAIN, "not MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE"),
        ("pytorchjob", 4, PLAIN, "WORLD_SIZE=8 (4 per node)"),  # the operator counts torchrun's processes
        ("pytorchjob", 1, PLAIN, None),  # MASTER_ADDR, RANK and WORLD_SIZE=2 from the operator: it joins
        ("job", 4, ("torchrun", "train.py"), None),  # torchrun reads PET_*
        ("job", 4, ("python", "-m", "torch.distributed.run", "train.py"), None),
    ],
)
def test_a_plain_command_is_warned_where_it_cannot_join(target, procs, command, warned) -> None:
    plan = _plan(target, procs, command)
    if warned is None:
        assert plan.plain_command_warning is None
        return
    assert plan.plain_command_warning is not None and warned in plan.plain_command_warning
    text = " ".join(explain(plan).split())
    assert "warning: command `" + " ".join(command) + "` runs once per pod" in text


def test_explain_counts_the_commands_one_process_per_pod() -> None:
    text = explain(_plan("job", 4, PLAIN))
    assert "processes per node: 1 (the command, once per pod; the pods are told 4: PET_NPROC_PER_NODE)" in text
    assert "world size:         2 if each pod's one process joins (the pods are told 8 = 2 nodes x 4 processes)" in text
    torchrun = explain(_plan("job", 4, ("torchrun", "train.py")))
    assert "processes per node: 4 (CPU only" in torchrun and "world size:         8 = 2 nodes x 4 processes" in torchrun


@pytest.mark.parametrize(
    "image, pod_security, said",
    [
        ("pytorch/pytorch:2.4.0", "restricted", True),  # a user's image: may run as root
        ("registry.example.com/team/trainer:0123456789ab", "restricted", False),  # ddpctl build's content tag
        ("my-project:ws-0123456789ab-01234567", "restricted", False),  # a project built on the trainer image
        ("ddpctl-trainer:latest", "restricted", False),
        ("pytorch/pytorch:2.4.0", "baseline", False),  # no runAsNonRoot
    ],
)
def test_explain_says_a_users_image_must_not_run_as_root(image: str, pod_security: str, said: bool) -> None:
    text = " ".join(explain(plan_for(JobSpec(image=image, pod_security=pod_security))).split())
    assert ("runs as: a non-root user (Pod Security restricted: runAsNonRoot" in text) == said
    if said:
        assert "add USER 1000 to its Dockerfile" in text and "--pod-security baseline" in text


def _said(data: dict, label: str) -> str:
    """The text of one `--explain` field, its wrapped lines joined."""
    lines = explain(plan_for(JobSpec.from_dict(data))).splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"  {label}:")), None)
    if start is None:
        return ""
    text = [lines[start].split(":", 1)[1].strip()]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 22):
            break
        text.append(line.strip())
    return " ".join(text)


FAST = {"gpusPerNode": 8, "fabric": "efa", "podSecurity": "privileged", "namespace": "ml"}


def test_explain_names_the_fabrics_devices_env_capability_and_the_namespace_label() -> None:
    fabric = _said(FAST, "fabric")
    assert fabric.startswith("efa: AWS EFA") and "1 x vpc.amazonaws.com/efa per pod" in fabric
    assert "env FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1; capability IPC_LOCK" in fabric
    assert "LimitMEMLOCK=infinity" in fabric  # a pod spec has no memlock: the node's runtime must allow it
    security = _said(FAST, "pod security")
    assert "namespace 'ml' needs the label pod-security.kubernetes.io/enforce=privileged" in security
    assert _said({}, "fabric") == "" and _said({}, "pod security") == ""


@pytest.mark.parametrize(
    ("data", "cost", "after"),
    [
        # 2 x 2 CPU: each pod's 2 ranks together, (0.25 + 1) x 0.2 s, + the all-reduce (0.2 s) and 0.2 s
        ({"preflight": {"mode": "warn"}}, "about 0.7 s per start", "findings are reported, training goes on"),
        # 4 nodes of 8 GPUs: GEMMs at once, 8 H2D copies in turn; up to 4 rounds of node pairs
        (
            {"nodes": 4, "preflight": {"mode": "fail"}} | FAST | {"target": "job"},
            "about 2.9 s (3.5 s when a slow node takes every round of node pairs)",
            "exit 201 on a finding: every pod fails, and each counts against backoffLimit 3",
        ),
        ({"preflight": {"mode": "fail"}, "target": "jobset"}, "about 0.7 s", "the whole JobSet restarts"),
        (
            {"preflight": {"mode": "fail"}, "target": "pytorchjob"},
            "about 0.7 s",
            "the job fails: restartPolicy ExitCode recreates pods only for 130, 137, 138, 143",
        ),
        ({"preflight": {"mode": "fail"}, "target": "trainjob"}, "about 0.7 s", "the torch-distributed runtime decides"),
        (
            {"preflight": {"mode": "warn"}, "env": {"DDP_TRAINER_PREFLIGHT_WINDOW": "0.5"}},
            "about 1.3 s",  # 1.25 x 0.5 + 0.5 + 0.2: the trainer's flag, set in env
            "training goes on",
        ),
    ],
)
def test_explain_says_what_the_preflight_costs_and_what_a_failed_one_does(data: dict, cost: str, after: str) -> None:
    said = _said(data, "preflight")
    assert f"costs {cost}" in said and after in said, said
    assert _said({}, "preflight") == ""


RULE = (
    "every rank times its own work per step; every 10 steps rank 0 names a node below 0.6 x the median speed for 3 "
    "windows in a row (30 steps), and again when it recovers"
)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({}, f"warn: {RULE}; training goes on"),  # on by default
        (
            {"stragglers": {"mode": "off"}},
            "off: no node is watched for slowing down during training (--stragglers warn or fail)",
        ),
        (
            {"stragglers": {"mode": "warn", "tolerance": 0.5, "every": 1, "windows": 1}},
            "warn: every rank times its own work per step; every 1 step rank 0 names a node below 0.5 x the median "
            "speed for 1 window in a row (1 step), and again when it recovers; training goes on",
        ),
        (
            {"stragglers": {"mode": "fail"}},
            f"fail: {RULE}; exit 202 on every rank when a node is named: the Job fails at once by its "
            "podFailurePolicy's FailJob rule on 202 (no retry, whatever backoffLimit is left); submit again with "
            "--avoid-node NODE (the Kubernetes node rank 0's straggler line names) to keep the pods off it",
        ),
        ({"stragglers": {"mode": "fail"}, "target": "jobset"}, "the JobSet fails at once (no restart"),
        ({"stragglers": {"mode": "fail"}, "target": "pytorchjob"}, "and 202 is permanent; submit again with"),
        ({"stragglers": {"mode": "fail"}, "target": "trainjob"}, "the torch-distributed runtime decides"),
        (
            {"stragglers": {"mode": "fail"}, "restartPolicy": "OnFailure"},
            "restartPolicy OnFailure: the kubelet restarts the containers in place (any code, 202 too), up to 3 "
            "times, on the same nodes",
        ),
        ({"module": "mypkg.train"}, "(your script opts in with ddpctl_trainer.stragglers; its pods get these"),
    ],
)
def test_explain_says_how_stragglers_are_watched_and_what_a_named_one_does(data: dict, said: str) -> None:
    text = _said(data, "stragglers")
    assert said in text, text
