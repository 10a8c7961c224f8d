"""What a job's pods say: their node ranks, phases, why one fails or waits (termination and
waiting reasons, the scheduler's events, the last log lines, the trainer's stall summary in the
termination message), and the explanation a failed job ends with."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ddpctl.backend.stragglers import stopped_for, stopping_note
from ddpctl.cluster import errors as E
from ddpctl.cluster import workloads
from ddpctl.cluster.config import Cluster
from ddpctl.cluster.kinds import EVENT, POD, Kind, finished, job_name_of
from ddpctl.console import plural
from ddpctl.errors import DdpctlError, RuntimeFailure
from ddpctl.runners.stall import stall_reason
from ddpctl_trainer import protocol
from ddpctl_trainer.protocol import LAUNCHER_MODULE as TRAINER_LAUNCHER
from ddpctl_trainer.protocol import StragglerNote, preflight_line

LOG_TAIL = 20
WAIT_PROBLEMS = (
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "ErrImageNeverPull",
)


@dataclass
class Outcome:
    result: str  # Succeeded | Failed
    job: dict[str, Any]
    pods: list[tuple[int | None, dict[str, Any]]]


def ranked(kind: Kind, job: dict[str, Any] | None, pods: Any) -> list[tuple[int | None, dict[str, Any]]]:
    out = [(workloads.rank_of(kind, job, p), p) for p in pods]
    out.sort(
        key=lambda rp: (
            rp[0] is None,
            rp[0] if rp[0] is not None else 0,
            rp[1]["metadata"].get("creationTimestamp") or "",
            rp[1]["metadata"]["name"],
        )
    )
    return out


def recovers_pods(pods: list[tuple[int | None, dict[str, Any]]]) -> bool:
    """Whether the job's pods meet at a coordinator (recovery: pod): a failed pod is replaced alone."""
    return any(protocol.COORDINATOR_ENV in workloads.container_env(p) for _, p in pods)


def replaced(
    pods: list[tuple[int | None, dict[str, Any]]],
) -> tuple[list[tuple[int | None, dict[str, Any]]], list[tuple[int, dict[str, Any], dict[str, Any]]]]:
    """Under pod recovery: each node's current pod (its newest), and every pod that was replaced
    alone (node rank, the pod, its replacement), in the order they were replaced."""
    current: dict[int, dict[str, Any]] = {}
    gone: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    for rank, pod in pods:  # ranked: each node's pods oldest first
        if rank is None:
            continue
        if rank in current:
            gone.append((rank, current[rank], pod))
        current[rank] = pod
    gone.sort(key=lambda r: finished_at(r[1]))
    out: list[tuple[int | None, dict[str, Any]]] = list(current.items())
    return out + [(r, p) for r, p in pods if r is None], gone


def finished_at(pod: dict[str, Any]) -> str:
    """When the pod's main container ended (RFC 3339; empty while it runs)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        ended = ((cs.get("state") or {}).get("terminated") or {}).get("finishedAt")
        if ended:
            return str(ended)
    return ""


def recovery_text(kind: Kind, rank: int | None, pod: dict[str, Any] | None, line: str | None) -> str:
    """One replaced pod, said as `ddpctl status` says a local recovery: the node, the pod and where
    it ran, why it ended (the kubelet's reason, the exit code), and, from rank 0's recovery line,
    the step training went on from and how long the others waited. Without the pod (evicted and
    deleted: its object is gone), what rank 0 said."""
    if pod is None:
        nodes = protocol.recovery_nodes(line) if line else None
        text = "a pod was replaced (its object is gone, as an evicted pod's is)"
        if nodes:
            text = f"{protocol.recovery_nodes_text(nodes)}: {text}"
    else:
        cs = main_status(kind, pod)
        ended = (cs.get("state") or {}).get("terminated") or {}
        where = (pod.get("spec") or {}).get("nodeName")
        code, reason = ended.get("exitCode"), ended.get("reason") or (pod.get("status") or {}).get("reason")
        why = f"exited with code {code}" if code is not None else "was lost"
        if reason and reason not in ("Error", "Completed"):
            why += f" ({reason})"
        text = f"node {rank} (pod {pod['metadata']['name']}" + (f" on {where}" if where else "") + f") {why}"
    step = protocol.recovery_step(line) if line else None
    if step is None:
        return f"{text}: replaced alone"
    waited = _RECOVERY_WAIT.search(line or "")
    return f"{text}: back at step {step}" + (f" after {waited.group(1)} s" if waited else "") + ", no step lost"


def pair_recoveries(
    gone: list[tuple[int, dict[str, Any], dict[str, Any]]], said: list[str]
) -> list[tuple[int | None, dict[str, Any] | None, str | None]]:
    """Each replaced pod with rank 0's recovery line for it: the oldest unused line that names its
    node (a line naming two nodes serves both), else, from a trainer that named none, the oldest
    such line; then the lines left over, for replaced pods whose objects are gone (evicted). Two
    recoveries of one node pair in order."""
    left: list[set[int] | None] = [None if (n := protocol.recovery_nodes(line)) is None else set(n) for line in said]
    taken = [False] * len(said)
    out: list[tuple[int | None, dict[str, Any] | None, str | None]] = []
    for rank, pod, _ in gone:
        match = next((i for i, nodes in enumerate(left) if nodes and rank in nodes), None)
        if match is None:
            match = next((i for i, nodes in enumerate(left) if nodes is None and not taken[i]), None)
        if match is not None:
            nodes = left[match]
            if nodes is not None:
                nodes.discard(rank)
            taken[match] = True
        out.append((rank, pod, said[match] if match is not None else None))
    out += [(None, None, line) for i, line in enumerate(said) if not taken[i]]
    return out


def spent_node(kind: Kind, gone: list[tuple[int, dict[str, Any], dict[str, Any]]],
               current: list[tuple[int | None, dict[str, Any]]]) -> str | None:  # fmt: skip
    """Under pod recovery, once the job failed: the node whose pod kept failing (the most failed
    pods, its last included), where they ran, and the resubmit that keeps the pods off that node
    (a running job's pod template cannot change). None when no node's pod failed."""
    failed: dict[int, list[dict[str, Any]]] = {}
    for rank, pod, _ in gone:
        failed.setdefault(rank, []).append(pod)
    for node, pod in current:
        if node is not None and pod_phase(pod) == "Failed":
            failed.setdefault(node, []).append(pod)
    if not failed:
        return None
    rank, pods = max(failed.items(), key=lambda rp: (len(rp[1]), -rp[0]))
    where = sorted({str((p.get("spec") or {}).get("nodeName")) for p in pods if (p.get("spec") or {}).get("nodeName")})
    last = main_status(kind, pods[-1])
    code = ((last.get("state") or {}).get("terminated") or {}).get("exitCode")
    if code in protocol.FAILS_THE_JOB:  # a usage error or a straggler stop: the pod rows say why
        return None
    text = f"node {rank}'s pod failed {plural(len(pods), 'time')}" + (f", last with exit code {code}" if code else "")
    if where:
        text += f", on {', '.join(where)}; if that node is at fault, submit again with --avoid-node {where[-1]}"
    return text


_RECOVERY_WAIT = re.compile(r"\bafter (\d+(?:\.\d+)?)s\b")


def scheduler_event(cluster: Cluster, namespace: str, pod: str) -> str | None:
    try:
        items = (
            cluster.list(EVENT, namespace, field_selector=f"involvedObject.name={pod},involvedObject.kind=Pod").get(
                "items"
            )
            or []
        )
    except E.ApiError:
        return None
    sched = [e for e in items if e.get("reason") == "FailedScheduling"]
    sched.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return E.one_line(sched[-1].get("message", "")) if sched else None


# ------------------------------------------------------------------------------ what pods say


def main_status(kind: Kind, pod: dict[str, Any]) -> dict[str, Any]:
    """The status of the pod's trainer container (the first container's when it has no such name)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    want = kind.engine.container_name
    return next((s for s in statuses if s.get("name") == want), statuses[0] if statuses else {})


def _runs_launcher(pod: dict[str, Any]) -> bool:
    """Whether a container of the pod runs ddpctl's launcher, whose exit codes have a meaning."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return any(TRAINER_LAUNCHER in (c.get("command") or []) for c in containers)


def pod_problem(kind: Kind, pod: dict[str, Any]) -> tuple[str, bool] | None:
    """(what is wrong, whether it is final) for one pod, or None when nothing is."""
    st = pod.get("status") or {}
    launched = _runs_launcher(pod)
    disrupted = next(
        (c for c in st.get("conditions") or [] if c.get("type") == "DisruptionTarget" and c.get("status") == "True"),
        None,
    )
    finished = st.get("phase") in ("Failed", "Succeeded") or bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    if disrupted and finished:
        # a preemption, an eviction or a taint: the cause, not the SIGKILL/SIGTERM exit code it led to
        text = f"DisruptionTarget: {disrupted.get('reason') or 'disrupted'}"
        return text + (f": {E.one_line(disrupted['message'])[:300]}" if disrupted.get("message") else ""), True
    for cs in st.get("containerStatuses") or []:
        state = cs.get("state") or {}
        waiting, term = state.get("waiting"), state.get("terminated")
        if waiting and waiting.get("reason") in WAIT_PROBLEMS:
            text = waiting["reason"]
            last = ((cs.get("lastState") or {}).get("terminated")) or {}
            if waiting["reason"] == "CrashLoopBackOff" and last:
                text += f" (last exit: {last.get('reason', 'Error')}, exit code {last.get('exitCode')})"
            elif waiting.get("message"):
                text += f": {E.one_line(waiting['message'])}"
            return text, False
        if term and term.get("exitCode", 0) != 0:
            code, reason = term.get("exitCode"), term.get("reason") or "Error"
            # the kubelet's own reason (OOMKilled, ...) says more than the code; else what the launcher meant
            said = protocol.meaning(code) if launched and reason == "Error" and isinstance(code, int) else None
            text = f"{reason} (exit code {code}{': ' + said if said else ''})"
            if term.get("message"):
                text += f": {E.one_line(term['message'])[:300]}"
            return text, True
    if st.get("phase") == "Failed":
        return f"{st.get('reason') or 'Failed'}" + (f": {E.one_line(st['message'])}" if st.get("message") else ""), True
    for cond in st.get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return f"Unschedulable: {E.one_line(cond.get('message') or '')}", False
    return None


# A pull that waiting cannot mend: the registry's answer names a missing image or tag, a refusal,
# or a host that does not resolve. Checked in the kubelet's message (ErrImagePull, and the
# ImagePullBackOff that follows it names the same cause on current kubelets).
_PULL_FINAL = re.compile(
    r"not found|manifest unknown|no such host|unauthorized|authentication required|access denied|denied:|"
    r"\b40[13]\b|forbidden|repository does not exist|invalid reference format",
    re.IGNORECASE,
)
_PULL_WAITING = ("ErrImagePull", "ImagePullBackOff")
_PULL_NEVER = ("InvalidImageName", "ErrImageNeverPull")  # final whatever the message


def pull_failure(pod: dict[str, Any]) -> str | None:
    """The registry's answer when the pod's image cannot be pulled and waiting will not change it;
    None when it pulls, or may still (a timeout, a 5xx, a back-off that names no cause)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason, message = waiting.get("reason"), E.one_line(str(waiting.get("message") or ""))
        if reason in _PULL_NEVER or (reason in _PULL_WAITING and _PULL_FINAL.search(message)):
            return f"{reason}: {message[:400]}" if message else str(reason)
    return None


def pod_phase(pod: dict[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def counts(kind: Kind, pods: list[tuple[int | None, dict[str, Any]]]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for _, pod in pods:
        out.setdefault(workloads.replica_type(kind, pod), Counter())[pod_phase(pod)] += 1
    return out


def state_of(monitor_result: str | None, pods: list[tuple[int | None, dict[str, Any]]]) -> str:
    if monitor_result:
        return monitor_result
    phases = {pod_phase(p) for _, p in pods}
    return "Running" if "Running" in phases or "Succeeded" in phases or "Failed" in phases else "Pending"


def status_line(
    kind: Kind, job: dict[str, Any], pods: list[tuple[int | None, dict[str, Any]]], result: str | None
) -> str:
    nodes = workloads.expected_nodes(kind, job)
    groups = counts(kind, pods)
    if not groups:
        groups = {kind.engine.replica_types[0]: Counter()}
    parts = []
    for replica in sorted(groups, key=lambda r: (r != "master", r)):
        c = groups[replica]
        parts.append(
            f"{replica}: {c['Pending']} pending, {c['Running']} running, {c['Succeeded']} succeeded, {c['Failed']} "
            "failed"
        )
    name = job_name_of(job)  # the job's, also when each node group has a Job of its own
    return (
        f"{name} {state_of(result, pods)} ({plural(nodes, 'node') if nodes is not None else '? nodes'}) - "
        + "; ".join(parts)
    )


def last_log_lines(cluster: Cluster, kind: Kind, pod: dict[str, Any], tail: int = LOG_TAIL) -> list[str]:
    """The last lines the pod's trainer container wrote: the current instance, else the previous."""
    name, ns = pod["metadata"]["name"], pod["metadata"].get("namespace")
    container = main_status(kind, pod).get("name") or kind.engine.container_name
    for previous in (False, True):
        query = [("container", container), ("tailLines", str(tail))] + ([("previous", "true")] if previous else [])
        try:
            _, text = cluster.call("GET", POD.path(ns, name, "log"), E.Op("logs", POD, name, ns), query=query)
        except DdpctlError:
            continue
        lines = (text or "").splitlines() if isinstance(text, str) else []
        if lines:
            return lines
    return []


def stalled_node(
    cluster: Cluster, kind: Kind, failing: list[tuple[int | None, dict[str, Any]]]
) -> tuple[int | None, str] | None:
    """The first failed pod whose last log lines hold the trainer watchdog's summary: (node, summary).
    Reads the logs of at most three failed pods (as the failure explanation does), so a healthy job
    costs no extra request and a failed 1000-node job three."""
    for rank, pod in failing:  # the pods' termination messages first: no request, and they outlive logs
        reason = stall_reason(termination_message(kind, pod).splitlines())
        if reason is not None:
            return rank, reason
    for rank, pod in failing[:3]:
        reason = stall_reason(last_log_lines(cluster, kind, pod))
        if reason is not None:
            return rank, reason
    return None


# What Python says when the pod's command names code the image does not have: a script
# (`python3 train.py`, torchrun's workers) or a module (`python3 -m pkg.train`).
_NO_SCRIPT = re.compile(r"can't open file '(?P<path>[^']+)': \[Errno 2\] No such file or directory")
_NO_MODULE = re.compile(r"Error while finding module specification for '(?P<module>[^']+)'")
MISSING_FIX = (
    "COPY it in the image's Dockerfile, pass the path it has in the image, or ship the folder with --workspace ."
)


def missing_code(lines: list[str]) -> str | None:
    """The one-line cause when a pod's log says its script or module is not in the image; else None."""
    for line in lines:
        if found := _NO_SCRIPT.search(line):
            return f'the image has no {found.group("path")} ("No such file"): {MISSING_FIX}'
        if found := _NO_MODULE.search(line):
            return f"the image has no module {found.group('module')} (python -m found nothing): {MISSING_FIX}"
    return None


def missing_code_node(
    cluster: Cluster, kind: Kind, failing: list[tuple[int | None, dict[str, Any]]]
) -> tuple[int | None, str] | None:
    """The first of at most three failed pods whose last log lines say its code is not in the image."""
    for rank, pod in failing[:3]:
        cause = missing_code(last_log_lines(cluster, kind, pod))
        if cause is not None:
            return rank, cause
    return None


def termination_message(kind: Kind, pod: dict[str, Any]) -> str:
    """What the trainer container wrote to its termination log (its current or last instance)."""
    status = main_status(kind, pod)
    for state in (status.get("state") or {}, status.get("lastState") or {}):
        message = (state.get("terminated") or {}).get("message")
        if message:
            return str(message)
    return ""


class FailedJob(RuntimeFailure):
    """The error a failed job ends with: what failed, then where to read more; `what` alone for a
    caller that deletes the job (`ddpctl check`)."""

    def __init__(self, what: str, see: str) -> None:
        super().__init__(f"{what}; see {see}")
        self.what = what


def _preflight_finding(
    cluster: Cluster, kind: Kind, pods: list[tuple[int | None, dict[str, Any]]], say: Callable[[str], None]
) -> tuple[int | None, str] | None:
    """A pod exited EXIT_PREFLIGHT: rank 0's findings, from the head of node 0's log (the report comes
    before torchrun's failure report, which fills the last lines), each said; (0, the first) or None."""
    from ddpctl.cluster.logs import rank0_preflight

    parsed = [f for f in map(preflight_line, rank0_preflight(cluster, kind, pods)) if f is not None]
    findings = [body for what, body in parsed if what == "finding"]
    for finding in findings:
        say(f"  node 0's preflight finding: {finding}")
    return (0, findings[0]) if findings else None


def _straggler_stop(
    cluster: Cluster, kind: Kind, pods: list[tuple[int | None, dict[str, Any]]], lines: list[str]
) -> StragglerNote | None:
    """A pod exited EXIT_STRAGGLER: the node rank 0 named, from the tail of node 0's log (else
    from the failed pod's error line among its last log lines)."""
    from ddpctl.cluster.logs import rank0_stragglers

    return stopping_note(rank0_stragglers(cluster, kind, pods), lines)


def explain_failure(cluster: Cluster, kind: Kind, outcome: Outcome, say: Callable[[str], None]) -> RuntimeFailure:
    """Print why the job failed (the failing pods, their termination reasons, their last log lines)
    and return the one-line error to exit with."""
    job = outcome.job
    name, ns = job_name_of(job), job["metadata"].get("namespace") or cluster.namespace
    _, cond = finished(kind, job)
    headline = (
        f"{kind.ref(job['metadata']['name'])} failed"
        + (f": {cond.get('reason')}" if cond and cond.get("reason") else "")
        + (f": {E.one_line(cond.get('message', ''))}" if cond and cond.get("message") else "")
    )
    say(f"ddpctl: {headline}")
    failing = [(r, p, pp) for r, p in outcome.pods if (pp := pod_problem(kind, p))]
    failing.sort(key=lambda t: (not t[2][1],))  # final failures first
    first = None
    stalled: tuple[int | None, str] | None = None  # the trainer watchdog's summary, when a pod has it
    preflight: tuple[int | None, str] | None = None  # the preflight's first finding, when a pod printed one
    straggler: StragglerNote | None = None  # the node --stragglers fail stopped the job for
    missing: tuple[int | None, str] | None = None  # the pods' code is not in the image ("No such file")
    for rank, pod, (text, _) in failing[:3]:
        if text.startswith("Unschedulable"):
            msg = scheduler_event(cluster, ns, pod["metadata"]["name"])
            text = f"Unschedulable: {msg}" if msg else text
        say(f"  node {rank} (pod {pod['metadata']['name']}): {text}")
        first = first or (rank, pod, text)
        lines = last_log_lines(cluster, kind, pod)
        reason = stall_reason(termination_message(kind, pod).splitlines()) or stall_reason(lines)
        if reason is not None and stalled is None:
            stalled = (rank, reason)
            say(f"  node {rank} reported a stall: {reason}")
        exited = ((main_status(kind, pod).get("state") or {}).get("terminated") or {}).get("exitCode")
        if exited == protocol.EXIT_PREFLIGHT and preflight is None:
            preflight = _preflight_finding(cluster, kind, outcome.pods, say)
        if exited == protocol.EXIT_STRAGGLER and straggler is None:
            straggler = _straggler_stop(cluster, kind, outcome.pods, lines)
            if straggler is not None:
                say(f"  rank 0 named a straggler: {straggler.text}")
        if missing is None and (cause := missing_code(lines)) is not None:
            missing = (rank, cause)
        if lines:
            say(f"  last {len(lines)} log lines of node {rank}:")
            for line in lines:
                say(f"    | {line}")
    if stalled:
        rank, reason = stalled
        return FailedJob(
            f'job "{name}" failed: node {rank} reported a stall: {reason}',
            f"`ddpctl logs {name} -n {ns} --rank {rank}`",
        )
    if preflight:
        rank, finding = preflight
        return FailedJob(
            f'job "{name}" failed its preflight checks (exit {protocol.EXIT_PREFLIGHT}): {finding}',
            f"`ddpctl logs {name} -n {ns} --rank {rank}` for the report",
        )
    if straggler:
        return FailedJob(
            f'job "{name}" {stopped_for(straggler)}', f"`ddpctl logs {name} -n {ns} --rank 0` for rank 0's lines"
        )
    if missing:
        rank, cause = missing
        return FailedJob(f'job "{name}" failed: node {rank}: {cause}', f"`ddpctl logs {name} -n {ns} --rank {rank}`")
    if first:
        rank, pod, text = first
        return FailedJob(
            f'job "{name}" failed: node {rank} (pod {pod["metadata"]["name"]}): {text}',
            f"`ddpctl logs {name} -n {ns} --rank {rank}`",
        )
    reason = (cond or {}).get("reason") or "Failed"
    return RuntimeFailure(
        f'job "{name}" failed: {reason}'
        + (f": {E.one_line(cond.get('message', ''))}" if cond and cond.get("message") else "")
        + f"; see `ddpctl status {name} -n {ns}`"
    )
