"""ddpctl.cluster.pods: what a job's pods say. Their node ranks and phases, what is wrong with one
(waiting, terminated, disrupted, unschedulable), the status line, the trainer's stall summary in a
termination message, and the explanation a failed job ends with, from pod objects as the kubelet
and scheduler write them and from the API server double (tests/support/kube_api_double)."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.cluster.kinds import JOB, POD, PYTORCHJOB, job_selector
from ddpctl.cluster.operate import job_status
from ddpctl.cluster.pods import (
    MISSING_FIX,
    Outcome,
    counts,
    explain_failure,
    last_log_lines,
    main_status,
    missing_code,
    pair_recoveries,
    pod_problem,
    ranked,
    recovers_pods,
    recovery_text,
    replaced,
    scheduler_event,
    spent_node,
    stalled_node,
    state_of,
    status_line,
    termination_message,
)
from ddpctl_trainer import protocol
from tests.support.api import NAME, NS

LAUNCHER = ["python3", "-m", protocol.LAUNCHER_MODULE, "-m", protocol.TRAINER_MODULE]


def pod(
    name: str = "w-0-x",
    *,
    state: dict[str, Any] | None = None,
    last: dict[str, Any] | None = None,
    phase: str = "Running",
    conditions: list[dict[str, Any]] | None = None,
    command: list[str] | None = None,
    labels: dict[str, str] | None = None,
    **status: Any,
) -> dict[str, Any]:
    """A pod object as the API server returns it, its trainer container in `state`."""
    cs: dict[str, Any] = {"name": "trainer", "state": state or {"running": {}}, "restartCount": 0}
    if last:
        cs["lastState"] = last
    return {
        "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
        "spec": {"containers": [{"name": "trainer", "command": command or LAUNCHER}]},
        "status": {"phase": phase, "conditions": conditions or [], "containerStatuses": [cs], **status},
    }


def terminated(code: int, reason: str = "Error", **more: Any) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason, **more}}


DISRUPTED = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": "preempted"}
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes\nfree"}


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        (pod(), None),
        (pod(state=terminated(0, "Completed"), phase="Succeeded"), None),
        (pod(state={"waiting": {"reason": "ContainerCreating"}}, phase="Pending"), None),  # on its way
        (pod(state={"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling "x"'}}, phase="Pending"),
         ('ImagePullBackOff: Back-off pulling "x"', False)),
        (pod(state={"waiting": {"reason": "CrashLoopBackOff"}}, last=terminated(1)),
         ("CrashLoopBackOff (last exit: Error, exit code 1)", False)),
        # the launcher's exit codes have a meaning; the kubelet's own reason says more than the code
        (pod(state=terminated(2), phase="Failed"), ("Error (exit code 2: usage error)", True)),
        (pod(state=terminated(2), phase="Failed", command=["torchrun", "train.py"]), ("Error (exit code 2)", True)),
        (pod(state=terminated(137, "OOMKilled"), phase="Failed"), ("OOMKilled (exit code 137)", True)),
        (pod(state=terminated(200, message="stalled\nin forward"), phase="Failed"),
         ("Error (exit code 200: stalled): stalled; in forward", True)),
        # a preemption is the cause, not the exit code it led to
        (pod(state=terminated(143), phase="Failed", conditions=[DISRUPTED]),
         ("DisruptionTarget: PreemptionByScheduler: preempted", True)),
        (pod(conditions=[DISRUPTED]), None),  # still running: not over yet
        (pod(state={}, phase="Failed", reason="Evicted", message="The node was low on resource: memory."),
         ("Evicted: The node was low on resource: memory.", True)),
        (pod(state={"waiting": {"reason": "ContainerCreating"}}, phase="Pending", conditions=[UNSCHEDULABLE]),
         ("Unschedulable: 0/3 nodes; free", False)),
    ],
)  # fmt: skip
def test_pod_problem(obj: dict[str, Any], problem: tuple[str, bool] | None) -> None:
    assert pod_problem(JOB, obj) == problem


def test_main_status_is_the_trainer_containers() -> None:
    obj = pod()
    sidecar = {"name": "sidecar", "state": {"running": {}}}
    obj["status"]["containerStatuses"].insert(0, sidecar)
    assert main_status(JOB, obj)["name"] == "trainer"
    assert main_status(PYTORCHJOB, obj) is sidecar  # no container of its name: the first
    assert main_status(JOB, {"status": {}}) == {}


def _indexed(name: str, index: int | None, created: str = "2024-01-01T00:00:00Z") -> dict[str, Any]:
    obj = pod(name, labels={} if index is None else {"batch.kubernetes.io/job-completion-index": str(index)})
    obj["metadata"]["creationTimestamp"] = created
    return obj


def test_pods_are_ranked_by_node_then_age_then_name() -> None:
    pods = [
        _indexed("w-1-b", 1, "2024-01-01T00:00:02Z"),
        _indexed("stray", None),
        _indexed("w-0-a", 0),
        _indexed("w-1-a", 1, "2024-01-01T00:00:01Z"),  # a replacement made earlier
    ]
    assert [(r, p["metadata"]["name"]) for r, p in ranked(JOB, None, pods)] == [
        (0, "w-0-a"),
        (1, "w-1-a"),
        (1, "w-1-b"),
        (None, "stray"),
    ]


def test_counts_state_and_the_status_line_per_replica_type() -> None:
    def replica(kind: str, phase: str) -> tuple[int, dict[str, Any]]:
        obj = pod(phase=phase, labels={"training.kubeflow.org/replica-type": kind})
        return 0, obj

    job = {
        "metadata": {"name": "w", "labels": {}},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}},
    }
    pods = [replica("master", "Running"), replica("worker", "Pending"), replica("worker", "Failed")]
    assert {k: dict(v) for k, v in counts(PYTORCHJOB, pods).items()} == {
        "master": {"Running": 1},
        "worker": {"Pending": 1, "Failed": 1},
    }
    assert status_line(PYTORCHJOB, job, pods, None) == (
        "w Running (3 nodes) - master: 0 pending, 1 running, 0 succeeded, 0 failed; worker: 1 pending, 0 running, "
        "0 succeeded, 1 failed"
    )
    assert status_line(PYTORCHJOB, job, [], "Failed") == (
        "w Failed (3 nodes) - master: 0 pending, 0 running, 0 succeeded, 0 failed"
    )


@pytest.mark.parametrize(
    ("result", "phases", "state"),
    [
        ("Succeeded", ["Pending"], "Succeeded"),  # the workload's word first
        (None, [], "Pending"),
        (None, ["Pending", "Pending"], "Pending"),
        (None, ["Pending", "Running"], "Running"),
        (None, ["Failed"], "Running"),  # a pod ended, the workload has not said so yet
    ],
)
def test_state_of(result: str | None, phases: list[str], state: str) -> None:
    assert state_of(result, [(0, pod(phase=p)) for p in phases]) == state


def test_termination_message_of_the_current_or_last_instance() -> None:
    assert termination_message(JOB, pod(state=terminated(1, message="now"))) == "now"
    assert termination_message(JOB, pod(last=terminated(200, message="before"))) == "before"
    assert termination_message(JOB, pod()) == ""


SUMMARY = (
    "ddpctl-trainer: stalled: no rank made progress for 20 s; stopping (exit code 200)\n"
    "ddpctl-trainer: stalled: rank 2 (node 1, local rank 0, host h) is in forward of step 3:\n"
    "ddpctl-trainer: stalled:   at /opt/ddpctl/user_models.py:61 in hook: threading.Event().wait()\n"
)


class NoRequests:
    def call(self, *args, **kwargs):
        raise AssertionError("a termination message is read from the pod object, without a request")


def _failed_pod(message: str | None, where: str = "state") -> dict:
    terminated = {"exitCode": 200, **({"message": message} if message else {})}
    status = {"name": "node", where: {"terminated": terminated}}
    return {
        "metadata": {"name": "hang-1-x", "namespace": "ns"},
        "status": {"phase": "Failed", "containerStatuses": [status]},
    }


@pytest.mark.parametrize("where", ["state", "lastState"])
def test_a_stall_summary_in_the_termination_message_is_found_without_logs(where: str) -> None:
    found = stalled_node(NoRequests(), JOB, [(1, _failed_pod(SUMMARY, where))])  # type: ignore[arg-type]
    assert found is not None and found[0] == 1
    assert found[1].startswith("rank 2 (node 1, local rank 0, host h) is in forward of step 3 at ")
    assert "/opt/ddpctl/user_models.py:61 in hook" in found[1]


# ------------------------------------------------------------------------------ through the API double


def test_the_last_log_lines_of_the_current_or_previous_instance(submitted) -> None:
    d, cluster = submitted()
    first, second = (cluster.get(POD, n) for n in d.pod_names_for("Job", NAME, NS))
    d.start_container(first["metadata"]["name"], NS)
    d.append_log(first["metadata"]["name"], *(f"line {i}" for i in range(30)), namespace=NS)
    assert last_log_lines(cluster, JOB, first) == [f"line {i}" for i in range(10, 30)]
    assert last_log_lines(cluster, JOB, first, tail=2) == ["line 28", "line 29"]
    d.restart_container(first["metadata"]["name"], NS, exit_code=137, reason="OOMKilled")
    assert last_log_lines(cluster, JOB, first, tail=1) == ["line 29"]  # the new instance wrote nothing: the last one's
    assert last_log_lines(cluster, JOB, second) == []  # never started: no logs, no error


def test_the_schedulers_newest_word_on_a_pod(submitted) -> None:
    d, cluster = submitted()
    name = d.pod_names_for("Job", NAME, NS)[0]
    assert scheduler_event(cluster, NS, name) is None
    d.mark_unschedulable(name, NS, message="0/3 nodes are available: 3 Insufficient cpu.")
    assert scheduler_event(cluster, NS, name) == "0/3 nodes are available: 3 Insufficient cpu."


def _outcome(cluster, d) -> Outcome:
    job = cluster.get(JOB, NAME)
    pods = ranked(JOB, job, cluster.list(POD, NS, job_selector(NAME))["items"])
    return Outcome("Failed", job, pods)


def test_explain_failure_names_the_failing_node_and_shows_its_last_lines(submitted) -> None:
    d, cluster = submitted()
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    d.start_container(p0, NS)
    d.append_log(p0, "[rank 0] epoch 1/1 step 1/4", "ValueError: bad batch", namespace=NS)
    d.terminate_container(p0, NS, exit_code=1)
    d.mark_unschedulable(p1, NS, message="0/3 nodes are available: 3 Insufficient cpu.")
    d.finish("Job", NAME, NS, succeeded=False)
    said: list[str] = []
    error = explain_failure(cluster, JOB, _outcome(cluster, d), said.append)
    assert said[0].startswith(f"ddpctl: job.batch/{NAME} failed: BackoffLimitExceeded")
    assert said[1:] == [
        f"  node 0 (pod {p0}): Error (exit code 1)",
        "  last 2 log lines of node 0:",
        "    | [rank 0] epoch 1/1 step 1/4",
        "    | ValueError: bad batch",
        f"  node 1 (pod {p1}): Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.",
    ]
    assert str(error) == (
        f'job "{NAME}" failed: node 0 (pod {p0}): Error (exit code 1); see `ddpctl logs {NAME} -n {NS} --rank 0`'
    )


def test_explain_failure_of_a_stall_is_the_watchdogs_summary(submitted) -> None:
    d, cluster = submitted()
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    for name in (p0, p1):
        d.start_container(name, NS)
    d.terminate_container(p1, NS, exit_code=200, message=SUMMARY)
    d.terminate_container(p0, NS, exit_code=200)
    d.finish("Job", NAME, NS, succeeded=False)
    said: list[str] = []
    error = explain_failure(cluster, JOB, _outcome(cluster, d), said.append)
    reason = "rank 2 (node 1, local rank 0, host h) is in forward of step 3 at /opt/ddpctl/user_models.py:61 in hook"
    assert f"  node 1 reported a stall: {reason}" in said
    assert str(error) == (
        f'job "{NAME}" failed: node 1 reported a stall: {reason}; see `ddpctl logs {NAME} -n {NS} --rank 1`'
    )


def test_explain_failure_without_a_failing_pod_says_the_workloads_reason(submitted) -> None:
    d, cluster = submitted()
    d.finish("Job", NAME, NS, succeeded=False, reason="DeadlineExceeded", message="Job was active longer")
    said: list[str] = []
    error = explain_failure(cluster, JOB, _outcome(cluster, d), said.append)
    assert said == [f"ddpctl: job.batch/{NAME} failed: DeadlineExceeded: Job was active longer"]
    assert str(error) == (
        f'job "{NAME}" failed: DeadlineExceeded: Job was active longer; see `ddpctl status {NAME} -n {NS}`'
    )


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "[default0]:/usr/bin/python3: can't open file '/srv/train.py': [Errno 2] No such file or directory",
            'the image has no /srv/train.py ("No such file")',
        ),
        (
            "/usr/bin/python3: Error while finding module specification for 'mypkg.train' (ModuleNotFoundError: "
            "No module named 'mypkg')",
            "the image has no module mypkg.train (python -m found nothing)",
        ),
        ("ModuleNotFoundError: No module named 'wandb'", None),  # a missing dependency is not missing code
        ("FileNotFoundError: [Errno 2] No such file or directory: 'data/train.csv'", None),  # the script's own open()
    ],
)
def test_code_missing_from_the_image_is_told_from_the_pods_log(line: str, cause: str | None) -> None:
    found = missing_code(["[rank 0] starting", line])
    assert (found.split(":", 1)[0] if found else None) == cause
    assert found is None or "--workspace ." in found


def test_explain_failure_and_status_name_a_script_the_image_lacks_in_one_line(submitted) -> None:
    d, cluster = submitted()
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    for name in (p0, p1):
        d.start_container(name, NS)
        d.append_log(name, "/usr/bin/python3: can't open file '/app/train.py': [Errno 2] No such file or directory",
                     namespace=NS)  # fmt: skip
        d.terminate_container(name, NS, exit_code=1)
    d.finish("Job", NAME, NS, succeeded=False)
    error = explain_failure(cluster, JOB, _outcome(cluster, d), [].append)
    assert str(error).startswith(f'job "{NAME}" failed: node 0: the image has no /app/train.py ("No such file"): ')
    status = job_status(cluster, NAME)
    assert ("Cause", f'node 0: the image has no /app/train.py ("No such file"): {MISSING_FIX}') in status.lines


def _recovering(name: str, index: str, created: str, **kw: Any) -> dict[str, Any]:
    """A pod of a pod-recovery job (its trainer meets at the coordinator), with index and creation time."""
    obj = pod(name, labels={"batch.kubernetes.io/job-completion-index": index}, **kw)
    obj["metadata"]["creationTimestamp"] = created
    obj["spec"]["nodeName"] = "node-a"
    obj["spec"]["containers"][0]["env"] = [{"name": protocol.COORDINATOR_ENV, "value": "w-coordinator.w:29510"}]
    return obj


def test_under_pod_recovery_a_node_is_its_newest_pod_and_the_older_ones_were_replaced() -> None:
    killed = _recovering("w-1-a", "1", "t01", state=terminated(137, finishedAt="t05"), phase="Failed")
    oom = _recovering("w-1-b", "1", "t06", state=terminated(137, "OOMKilled", finishedAt="t09"), phase="Failed")
    pods = ranked(
        JOB,
        None,
        [
            _recovering("w-0-a", "0", "t01"),
            killed,
            oom,
            _recovering("w-1-c", "1", "t10"),
            _recovering("w-2-a", "2", "t01"),
        ],
    )
    assert recovers_pods(pods)
    current, gone = replaced(pods)
    assert [(r, p["metadata"]["name"]) for r, p in current] == [(0, "w-0-a"), (1, "w-1-c"), (2, "w-2-a")]
    assert [(r, a["metadata"]["name"], b["metadata"]["name"]) for r, a, b in gone] == [
        (1, "w-1-a", "w-1-b"),
        (1, "w-1-b", "w-1-c"),
    ]
    assert not recovers_pods([(0, pod())])  # gang: every pod of every start is shown, as before


def _formed(nodes: str, step: int) -> str:
    return f"[rank 0] ddpctl-trainer: recovery: the group formed again (generation 1, {nodes} joined), at step {step}"


OLD_FORMAT = "[rank 0] ddpctl-trainer: recovery: the group formed again (generation 1), going on at step {}"


@pytest.mark.parametrize(
    ("gone", "said", "paired"),
    [
        # node 2 evicted (its object gone), then node 1 killed: each line goes to its own node
        ([1], [_formed("node 2", 5), _formed("node 1", 7)], [(1, _formed("node 1", 7)), (None, _formed("node 2", 5))]),
        # two nodes lost at once: one line serves both
        ([1, 2], [_formed("nodes 1, 2", 3)], [(1, _formed("nodes 1, 2", 3)), (2, _formed("nodes 1, 2", 3))]),
        # one node twice: in order
        ([1, 1], [_formed("node 1", 3), _formed("node 1", 8)], [(1, _formed("node 1", 3)), (1, _formed("node 1", 8))]),
        # a trainer that named no node: in order, as before
        ([2, 1], [OLD_FORMAT.format(3), OLD_FORMAT.format(8)], [(2, OLD_FORMAT.format(3)), (1, OLD_FORMAT.format(8))]),
        # rank 0 has not said it yet
        ([1], [], [(1, None)]),
    ],
)
def test_each_replaced_pod_gets_rank_0s_line_for_its_node(gone: list[int], said: list[str], paired: list) -> None:
    pods = [(rank, {"metadata": {"name": f"p{i}"}}, {}) for i, rank in enumerate(gone)]
    got = pair_recoveries(pods, said)  # type: ignore[arg-type]
    assert [(rank, line) for rank, _, line in got] == paired


def test_a_gone_pods_line_names_its_node() -> None:
    text = recovery_text(JOB, None, None, _formed("node 2", 5))
    assert text.startswith("node 2: a pod was replaced (its object is gone")


@pytest.mark.parametrize(
    ("obj", "line", "text"),
    [
        (
            _recovering("w-1-a", "1", "t1", state=terminated(137), phase="Failed"),
            "[rank 0] ddpctl-trainer: recovery: the group formed again (generation 1), going on at step 4 after 21.3s",
            "node 1 (pod w-1-a on node-a) exited with code 137: back at step 4 after 21.3 s, no step lost",
        ),
        (
            _recovering("w-1-a", "1", "t1", state=terminated(137, "OOMKilled"), phase="Failed"),
            "[rank 0] ddpctl-trainer: recovery: replaced a lost process: joined the running job at step 9 (gen 2)",
            "node 1 (pod w-1-a on node-a) exited with code 137 (OOMKilled): back at step 9, no step lost",
        ),
        (
            _recovering("w-1-a", "1", "t1", phase="Failed", reason="Evicted"),
            None,  # rank 0 has not said it yet (or its log is gone)
            "node 1 (pod w-1-a on node-a) was lost (Evicted): replaced alone",
        ),
        (
            None,  # an evicted pod: its object is deleted, only rank 0's line is left
            "[rank 0] ddpctl-trainer: recovery: the group formed again (generation 1), going on at step 5 after 8.0s",
            "a pod was replaced (its object is gone, as an evicted pod's is): back at step 5 after 8.0 s, no step lost",
        ),
    ],
)
def test_a_replaced_pod_is_said_in_one_line(obj: dict[str, Any] | None, line: str | None, text: str) -> None:
    if obj is not None and "reason" in obj["status"]:
        obj["status"]["containerStatuses"][0]["state"] = {"running": {}}
    assert recovery_text(JOB, 1, obj, line) == text


def test_a_node_whose_pod_kept_failing_is_named_with_the_resubmit_that_avoids_its_node() -> None:
    def failed(name: str, index: str, created: str, code: int) -> dict[str, Any]:
        return _recovering(name, index, created, state=terminated(code), phase="Failed")

    pods = ranked(JOB, None, [
        _recovering("w-0-a", "0", "t01"), failed("w-1-a", "1", "t01", 137), failed("w-1-b", "1", "t02", 1),
        failed("w-1-c", "1", "t03", 1), _recovering("w-2-a", "2", "t01"),
    ])  # fmt: skip
    current, gone = replaced(pods)
    assert spent_node(JOB, gone, current) == (
        "node 1's pod failed 3 times, last with exit code 1, on node-a; if that node is at fault, submit again "
        "with --avoid-node node-a"
    )
    usage = ranked(JOB, None, [_recovering("w-0-a", "0", "t01"), failed("w-1-a", "1", "t01", 2)])
    assert spent_node(JOB, *reversed(replaced(usage))) is None  # a usage error: the rows say so, no node to avoid
    assert spent_node(JOB, [], [(0, _recovering("w-0-a", "0", "t01"))]) is None
