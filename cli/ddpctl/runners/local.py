"""`ddpctl run --local`: every node of the job as a torchrun agent on this machine, on loopback.

Each node gets the environment its pod gets in the cluster (`cluster_env`: the spec's container env
plus what the chosen engine injects, e.g. PET_NODE_RANK from the completion index), with one
change (`loopback_env`): the rank-0 DNS name becomes 127.0.0.1 and the port a free one (unless the
user chose one), new on every start of the group, with a rendezvous id of its own (`start_env`),
so that jobs side by side on one machine never meet. Otherwise a job that runs here is wired
exactly as it will be in the cluster.

The env comes from `ddpctl.runners.node_env`, the supervision from `ddpctl.runners.supervise`, the terminal
output from `ddpctl.console`. Agents run in their own sessions (see `ddpctl.runners.procs`); their output
is streamed line by line with a `[rank R]` prefix (torchrun tees each worker's output with a
marker we replace) or `[node N]` for the agent's own lines; a status line tells the job's state;
the first failing node stops the job, and the target's restart rules (`supervise.run_with_restarts`,
shared with `run --docker`) either restart the whole group (the trainer resumes from its
checkpoint) or end the run with that node's exit code.

Nothing here imports torch: the agents do.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ddpctl.backend import Where
from ddpctl.console import Console, make_console, relative_path
from ddpctl.engines import plan_for
from ddpctl.engines.base import LAUNCHER_PYTHON, NODE_RANK_LAUNCHER
from ddpctl.errors import RuntimeFailure, UsageError, WaitTimeout
from ddpctl.plan import Plan
from ddpctl.records import record
from ddpctl.runners.common import arg_value, check_trainer_args, remap_paths, remove_checkpoints, volume_dirs
from ddpctl.runners.failures import (
    NodeFailed,
    after_finishing_note,
    died_after_finishing,
    node_failed,
    signal_name,
    start_failure,
)
from ddpctl.runners.node_env import LOOPBACK, cluster_env, inherited_env, loopback_env, loopback_ifname, start_env
from ddpctl.runners.procs import RANK_MARK
from ddpctl.runners.runs import RunRecord, node_log
from ddpctl.runners.state import JobState, layout_phrase
from ddpctl.runners.supervise import STOP_GRACE_S, Launcher, run_job
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.runners.procs import Child

RANK_TEMPLATE = RANK_MARK + "${rank}@@"
DEFAULT_PORT = 29500


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


@record
class NodePlan:
    index: int
    hostname: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    log_dir: Path


@record
class LocalPlan:
    """Everything `run_local` starts, computed up front (and printable)."""

    job: Plan  # the spec's Plan: what its pods would get in the cluster
    run_dir: Path
    port: int
    port_note: str | None
    nodes: tuple[NodePlan, ...]
    checkpoint_dir: Path | str | None  # a directory, or an object store's URL
    cwd: Path
    notes: tuple[str, ...] = ()
    port_explicit: bool = False  # the user chose the port: it is used on every start, never replaced
    coordinator_port: int | None = None  # pod recovery: where the job's coordinator listens (else None)
    spares: int = 0  # pod recovery: node processes started ahead, torch imported, to take a lost node's place

    @property
    def spec(self) -> JobSpec:
        return self.job.spec


def port_asked_for(chosen: Mapping[str, object]) -> bool:
    """Did the user pick the rendezvous port: --port, DDPCTL_RENDEZVOUS_PORT or ddp.yaml's
    rendezvous.port (`chosen`: the layers above the defaults, `SpecInput.chosen()`)? Then a busy
    port is an error, not a fallback."""
    rdzv = chosen.get("rendezvous")
    return isinstance(rdzv, Mapping) and "port" in rdzv


def _explicit(plan: Plan, explicit: bool | None) -> bool:
    return plan.spec.rendezvous.port != DEFAULT_PORT if explicit is None else explicit


def choose_port(plan: Plan, explicit: bool | None = None) -> tuple[int, str | None]:
    """The port the user asked for (an error when it is busy), else a free one the kernel picks:
    not the spec's default, which every other local job on the machine would pick at the same
    moment too. `explicit` None (a spec built in code, no layers to ask): a non-default port was
    asked for. The note says so when the default itself is busy."""
    from ddpctl.runners.procs import free_port, port_is_free

    wanted = plan.master_port
    if _explicit(plan, explicit):
        if port_is_free(wanted):
            return wanted, None
        raise UsageError(
            f"rendezvous.port: port {wanted} is in use on this machine; stop what listens there or choose another "
            "with --port"
        )
    return free_port(), None


def torchrun_argv(plan: Plan, log_dir: Path, index: int = 0) -> list[str] | None:
    """Node `index`'s agent argv: its pod's `torchrun ...` as `python -m torch.distributed.run` of
    this interpreter (no PATH needed), or the pod's `python3 -c <node-rank launcher> ...` with this
    interpreter; each worker's output tee'd behind a rank marker."""
    entry = list(plan.groups[plan.nodes[index].group_index].command)
    tee = ["--tee", "3", "--log-dir", str(log_dir), "--log-line-prefix-template", RANK_TEMPLATE]
    if plan.uses_launcher and tuple(entry[:3]) == plan.launcher:
        # The built-in trainer runs under ddpctl_trainer.launch, as in the pods: torchrun with exit
        # codes that keep the reason (2 usage, 143 preempted), so a node's code says whether a
        # restart can help.
        return [sys.executable, *entry[1:3], *tee, *entry[3:]]
    if entry[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *tee, *entry[1:]]
    if entry[:3] == [LAUNCHER_PYTHON, "-c", NODE_RANK_LAUNCHER]:
        return [sys.executable, "-c", NODE_RANK_LAUNCHER, *tee, *entry[3:]]
    return None


def plan_local(
    spec: JobSpec,
    *,
    run_dir: Path | None = None,
    port_explicit: bool | None = None,
    mounts: Mapping[str, Path] | None = None,
    cwd: Path | None = None,
    parent_env: Mapping[str, str] | None = None,
    spares: int = 0,
) -> LocalPlan:
    """Compute the agents' commands and env; checks what can be checked before anything starts
    (what the target can run, the script, the trainer's flags, the port). Starts nothing.
    The spec's `recovery` pod: a lost node is started again alone and the others keep their state
    (`pod_recovery_env`); gang: the whole group restarts by the target's rules."""
    job = plan_for(spec)
    require_torch()
    cwd = (cwd or Path.cwd()).resolve()
    if spec.script and not (cwd / spec.script).is_file():
        raise UsageError(
            f"script: {spec.script} does not exist in {cwd} (run --local runs it from the current directory); "
            "give the path of your training script"
        )
    run_dir = (run_dir or cwd / "ddp-runs" / spec.name).resolve()
    dirs = volume_dirs(spec, run_dir, mounts or {})
    port, note = choose_port(job, port_explicit)
    notes: list[str] = []
    if spec.gpus_per_node:
        notes.append(
            f"gpusPerNode is {spec.gpus_per_node}: every local node would need that many GPUs; use --gpus 0 for CPU "
            "+ gloo"
        )
    if spec.workspace:
        notes.append(
            "workspace: run --local runs the code where it is; --workspace ships it to pods (submit) and containers "
            "(run --docker)"
        )
    missing = [k for k in spec.secret_env if k not in (parent_env or os.environ)]
    if missing:
        notes.append(f"secretEnv {', '.join(missing)} come from Secrets in the cluster; export them to set them here")

    args = remap_paths(job.trainer_args, {spec.volumes[n].mount_path: d for n, d in dirs.items() if n in spec.volumes})
    coordinator_port = None
    recovery = job.recovery
    if spares and recovery != "pod":
        raise UsageError(
            "--spares: a warm spare takes a lost node's place under --recovery pod; add --recovery pod or auto"
        )
    if spares and len({n.nproc for n in job.nodes}) > 1:
        raise UsageError("--spares: the nodes run different numbers of processes, so one spare cannot stand for any")
    if recovery == "pod":
        from ddpctl.runners.procs import free_port

        coordinator_port = free_port()
    base = inherited_env(parent_env if parent_env is not None else os.environ)
    ifname = loopback_ifname()
    threads = str(omp_threads(job.world_size, protocol.usable_cores()))
    checkpoint_dir: Path | str | None = None
    nodes = []
    for index, hostname in enumerate(job.pod_hostnames):
        env = {**base, **loopback_env(cluster_env(job, index), job, index, LOOPBACK, port)}
        if coordinator_port is not None:
            env = pod_recovery_env(env, job, index, f"{LOOPBACK}:{coordinator_port}")
        if ifname and "GLOO_SOCKET_IFNAME" not in spec.env:
            env["GLOO_SOCKET_IFNAME"] = ifname  # gloo would pick the interface of the hostname
        env.setdefault("OMP_NUM_THREADS", threads)  # unless the shell or the spec's env sets it
        if spec.uses_trainer:
            given = arg_value(args, "--checkpoint-dir") or env.get(protocol.CHECKPOINT_DIR_ENV)
            if given is None:
                given = str(dirs.get("checkpoints", run_dir / "checkpoints"))
                env[protocol.CHECKPOINT_DIR_ENV] = given
            # an object store's URL goes to the trainer as it is; the agents inherit its credentials
            checkpoint_dir = given if protocol.url_scheme(given) else (cwd / given).resolve()
        log_dir = run_dir / "logs" / f"node-{index}"
        argv = torchrun_argv(job, log_dir, index) or list(job.entrypoint)
        nodes.append(NodePlan(index, hostname, tuple(argv + args), dict(sorted(env.items())), log_dir))
    if spec.uses_trainer:
        check_trainer_args(args, nodes[0].env, job.world_size)
    return LocalPlan(
        job,
        run_dir,
        port,
        note,
        tuple(nodes),
        checkpoint_dir,
        cwd,
        tuple(notes),
        _explicit(job, port_explicit),
        coordinator_port,
        spares,
    )


def omp_threads(processes: int, cores: int) -> int:
    """The intra-op threads each process of a local job gets: this machine's cores shared out among
    all of them, at least 1. torchrun sets 1 only where a node runs several processes; one-process
    nodes side by side would each start a thread per core and spin in one another's way (3 nodes x 1
    process on 2 cores trained ~250 samples/s so, ~1,200 with one thread each)."""
    return max(1, cores // processes)


def pod_recovery_env(env: Mapping[str, str], job: Plan, index: int, coordinator: str) -> dict[str, str]:
    """Node `index`'s env when a lost node is started again alone: the plan's (each node's torchrun
    runs that node alone; the trainer forms the job's group through the coordinator), with the
    coordinator on loopback and the node's place given outright (ddpctl_trainer.recovery)."""
    node = job.nodes[index]
    out = dict(env)
    out.update(
        {
            protocol.COORDINATOR_ENV: coordinator,
            protocol.JOB_NODE_RANK_ENV: str(node.rank),
            protocol.NODE_FIRST_RANK_ENV: str(node.first_rank),
        }
    )
    return dict(sorted(out.items()))


def require_torch() -> None:
    """The agents are this interpreter's torchrun: without torch every node would fail at once, be
    restarted, and end on a bare exit code. Found, not imported (that takes seconds)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise RuntimeFailure(
            f"torch is not importable here ({sys.executable}), and run --local starts each node with this "
            "Python's torchrun; install the trainer's extra (pip install 'ddpctl[train]') in this environment, "
            "or use run --docker"
        )


def port_for_start(plan: LocalPlan, attempt: int) -> int:
    """The rendezvous port of one start of the group: the planned one first; on every later start
    a fresh one (the port of a failed start may be taken by now, or still be in TIME_WAIT), unless
    the user chose the port. A free port can still be taken before node 0 binds it: the runner then
    starts the group again without counting (`NodeFailed.again`)."""
    from ddpctl.runners.procs import free_port

    return plan.port if attempt == 0 or plan.port_explicit else free_port()


class LocalLauncher(Launcher):
    """Each node a torchrun agent on this machine, in its own session, on loopback; a new
    rendezvous port and id on every start of the group, so jobs side by side never meet."""

    def __init__(self, plan: LocalPlan, console: Console) -> None:
        self.plan = plan
        self.console = console
        self.nonce = secrets.token_hex(4)
        self.ports: dict[int, int] = {}
        self.logs = relative_path(plan.run_dir / "logs", plan.cwd)
        self.coordinator: Child | None = None
        self.coordinator_starts = 0  # times it was started again after exiting before the training ended
        self.replacements: dict[int, int] = {}  # node -> times it was started again alone
        self.spares: list[tuple[Child, Path]] = []  # warm spares waiting, each with its assignment file
        self.spares_started = 0
        self.spent: set[int] = set()  # nodes that failed again once started again alone as often as allowed

    def setup(self) -> None:
        if self.plan.coordinator_port is not None:
            self.coordinator = start_coordinator(self.plan)
            for _ in range(self.plan.spares):
                self._start_spare(0)

    def teardown(self) -> list[str]:
        from ddpctl.runners import procs

        helpers = [spare for spare, _ in self.spares] + ([self.coordinator] if self.coordinator else [])
        procs.stop_children(helpers, grace_s=STOP_GRACE_S)
        self.spares, self.coordinator = [], None
        return []

    def tend(self, state: JobState) -> None:
        """Start the coordinator again at its port when it exited before the training ended, as its
        Job starts another pod on a cluster, up to backoffLimit times: the nodes reconnect and tell
        the new one what it needs (ddpctl_trainer.recovery). Exit 0 is its end: the training's."""
        lost = self.coordinator
        code = None if lost is None or lost.stopping else lost.poll()
        if code is None or code == 0:
            return
        how = f"was killed by {signal_name(code)}" if code < 0 else f"exited with code {code}"
        limit = self.plan.spec.backoff_limit
        if self.coordinator_starts >= limit:
            self.coordinator = None
            self.console.note(
                f"the job's coordinator {how}; started again {limit} times already (--backoff-limit): not again"
            )
            return
        self.coordinator_starts += 1
        self.console.note(
            f"the job's coordinator {how}; starting it again on port {self.plan.coordinator_port} "
            f"({self.coordinator_starts} of {limit}): the nodes tell it what it knew"
        )
        self.coordinator = start_coordinator(self.plan)

    def _start_spare(self, attempt: int) -> None:
        """A warm spare (pod recovery): node 0's command, torch imported, waiting for the file
        that names the node it takes (`replace_node` writes it)."""
        from ddpctl.runners import procs

        n, self.spares_started = self.spares_started, self.spares_started + 1
        assignment = self.plan.run_dir / "spares" / f"spare-{n}.json"
        assignment.parent.mkdir(parents=True, exist_ok=True)
        assignment.unlink(missing_ok=True)
        env = {**self.plan.nodes[0].env, protocol.SPARE_ENV: str(assignment)}
        env[protocol.RECOVERY_SCOPE_ENV] = f"{self.nonce}-{attempt}"
        log = self.plan.run_dir / "logs" / f"spare-{n}.log"
        child = procs.start_child(-1, f"spare {n}", self.plan.nodes[0].argv, env, cwd=self.plan.cwd, log_path=log)
        self.spares.append((child, assignment))

    def start_node(self, index: int, attempt: int, replacement: str = "") -> Child:
        from ddpctl.runners import procs

        node = self.plan.nodes[index]
        port = self.ports.setdefault(attempt, port_for_start(self.plan, attempt))
        run_id = f"{self.plan.spec.name}-{self.nonce}-{attempt}"
        env = start_env(node.env, port, run_id)
        if self.plan.coordinator_port is not None:  # each start of the whole group keeps records of its own
            env[protocol.RECOVERY_SCOPE_ENV] = f"{self.nonce}-{attempt}"
        log = node_log(self.plan.run_dir, node.index, attempt)
        if replacement:  # the same start's log goes on: nothing of the lost process's output is lost
            with log.open("a", encoding="utf-8") as fh:
                fh.write(f"ddpctl: {replacement}\n")
        try:
            child = procs.start_child(
                node.index,
                f"node {node.index}",
                node.argv,
                env,
                cwd=self.plan.cwd,
                log_path=log,
                append=bool(replacement),
            )
        except OSError as exc:
            raise start_failure(
                node.argv, exc, user_command=bool(self.plan.spec.command), what=f"node {node.index}"
            ) from None
        if self.plan.coordinator_port is not None:  # its torchrun runs this node alone: ranks count from 0
            child.rank_base = self.plan.job.nodes[index].first_rank
        return child

    def stop(self, children: list[Child]) -> None:
        from ddpctl.runners import procs

        procs.stop_children([c for c in children if c.poll() is None], grace_s=STOP_GRACE_S)

    def replace_node(self, failed: Child, state: JobState) -> Child | None:
        """With pod recovery: start the failed node again alone, up to backoffLimit times per
        node, unless its code says a restart cannot help (a usage error, a straggler stop)."""
        code = failed.returncode or 1
        index, limit = failed.index, self.plan.spec.backoff_limit
        # 143: a node whose ranks alone got SIGTERM left after a step (the others go on): replaced
        # alone and not counted, as Kubernetes ignores a disruption; but when the stop vote stopped
        # every rank (rank 0 checkpointed), the whole group restarts from that checkpoint
        left = code == protocol.EXIT_PREEMPTED and bool(state.left_ranks & set(self.plan.job.nodes[index].ranks))
        if self.plan.coordinator_port is None or code in protocol.FAILS_THE_JOB:
            return None
        if code == protocol.EXIT_PREEMPTED and not left:
            return None
        if left:
            state.left_ranks -= set(self.plan.job.nodes[index].ranks)
            state.on_replaced(index, "left alone")
            said = (
                f"node {index} left alone (a SIGTERM to it alone, or --stragglers replace); starting it again alone "
                "(not counted)"
            )
            self.console.note(f"{said}: the others keep training and hand it their state")
            return self.start_node(index, state.attempt, replacement=said)
        done = self.replacements.get(index, 0)
        if done >= limit:
            self.spent.add(index)
            return None
        self.replacements[index] = done + 1
        how = f"was killed by {signal_name(code)}" if code < 0 else f"exited with code {code}"
        state.on_replaced(index, how)
        waiting = [(spare, file) for spare, file in self.spares if spare.poll() is None]
        if waiting:
            return self._assign_spare(index, state, how, f"replacement {done + 1} of {limit}", *waiting[0])
        said = f"node {index} {how}; starting it again alone (replacement {done + 1} of {limit})"
        self.console.note(f"{said}: the others keep training and hand it their state")
        return self.start_node(index, state.attempt, replacement=said)

    def _assign_spare(self, index: int, state: JobState, how: str, count: str, spare: Child, file: Path) -> Child:
        """A warm spare takes node `index`'s place: its env, written to the spare's file at once
        (atomically); a new spare starts behind it."""
        from ddpctl.atomic import write_text_atomic

        self.spares = [(c, f) for c, f in self.spares if c is not spare]
        # only what differs from node 0's env, which the spare has: its place, never a secret
        first, node = self.plan.nodes[0].env, self.plan.nodes[index].env
        env = {k: v for k, v in node.items() if first.get(k) != v}
        env[protocol.RECOVERY_SCOPE_ENV] = f"{self.nonce}-{state.attempt}"
        write_text_atomic(file, json.dumps({"env": env}))
        was = spare.label
        spare.index, spare.label, spare.rank_base = index, f"node {index}", self.plan.job.nodes[index].first_rank
        self.console.note(
            f"node {index} {how}; a warm spare ({was}) takes its place ({count}): the others keep training and "
            "hand it their state; a new spare starts"
        )
        self._start_spare(state.attempt)
        return spare

    def node_failed(self, state: JobState, failed: Child) -> NodeFailed | None:
        finished = died_after_finishing(state)
        if finished:
            self.console.note(after_finishing_note(finished))
            return None
        if state.port_taken and not self.plan.port_explicit:
            again = f"node 0 could not bind rendezvous port {self.ports[state.attempt]}: another process took it first"
            return NodeFailed(0, failed.returncode or 1, "", again=again)
        found = node_failed(state, failed.index, failed.returncode or 1, self.plan.job, f"logs in {self.logs}")
        if failed.index in self.spent:  # pod recovery: not replaced forever, and no whole-group restart either
            limit = self.plan.spec.backoff_limit
            return dataclasses.replace(
                found,
                final=True,
                message=f"{found.message}; node {failed.index} was started again alone {limit} times already "
                "(--backoff-limit, per node): not again",
            )
        return found

    def timed_out(self, timeout: float | None) -> WaitTimeout:
        return WaitTimeout(
            f"job {self.plan.spec.name} was still running after --timeout {timeout or 0:g}s; stopped it "
            f"(logs in {self.logs})"
        )


def coordinator_argv(plan: LocalPlan) -> list[str]:
    """The job's coordinator: a store on loopback, at the port planned for it."""
    return [
        sys.executable,
        "-m",
        "ddpctl_trainer.coordinator",
        "--host",
        LOOPBACK,
        "--port",
        str(plan.coordinator_port),
    ]


def start_coordinator(plan: LocalPlan) -> Child:
    """The job's coordinator on loopback (pod recovery): a store no node hosts, so that losing any
    node leaves the others a place to meet its replacement. Returns once it listens."""
    from ddpctl.runners import procs

    child = procs.start_child(-1, "coordinator", coordinator_argv(plan), plan.nodes[0].env, cwd=plan.cwd)
    assert child.popen.stdout is not None
    said = child.popen.stdout.readline()  # one line once it listens; EOF if it could not
    if "listening" not in said:
        rest = said + child.popen.stdout.read()
        child.popen.wait()
        raise RuntimeFailure(
            f"the job's coordinator did not start on {LOOPBACK}:{plan.coordinator_port} (exit code "
            f"{child.popen.returncode}): {' '.join(rest.split())[-300:]}"
        )
    return child


def run_local(
    plan: LocalPlan,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    color: bool | None = None,
    timeout: float | None = None,
) -> int:
    """Run the plan to the end; returns 0 or raises JobFailed / WaitTimeout / Interrupted."""
    console = make_console(out, err, color)
    spec, job = plan.spec, plan.job
    for note in plan.notes:
        console.note(note)
    if plan.port_note:
        console.note(plan.port_note)
    console.note(
        f"running {spec.name} locally: {layout_phrase(job, 'node')} = world size {job.world_size}, "
        f"{job.backend}, rank 0 at {LOOPBACK}:{plan.port} (in the cluster: "
        f"{job.rank0_host}:{job.master_port})"
    )
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(plan.checkpoint_dir, Path):
        plan.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    launcher = LocalLauncher(plan, console)
    record = RunRecord(plan.run_dir, job, Where.local, layout_phrase(job, "node"), plan.checkpoint_dir)
    return run_job(
        job,
        launcher,
        console,
        record=record,
        checkpoint_dir=plan.checkpoint_dir,
        cwd=plan.cwd,
        logs=plan.run_dir / "logs",
        timeout=timeout,
    )


def clean_run_dir(plan: LocalPlan) -> None:
    """--fresh: forget earlier checkpoints of this job (the trainer would resume from them)."""
    remove_checkpoints(plan.checkpoint_dir)
