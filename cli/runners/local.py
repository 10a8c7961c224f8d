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

import os
import re
import secrets
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ddpctl.console import Console, make_console, relative_path
from ddpctl.engines import plan_for
from ddpctl.engines.base import LAUNCHER_PYTHON, NODE_RANK_LAUNCHER
from ddpctl.errors import Interrupted, UsageError, WaitTimeout
from ddpctl.plan import Plan
from ddpctl.runners.node_env import LOOPBACK, cluster_env, inherited_env, loopback_env, loopback_ifname, start_env
from ddpctl.runners.procs import RANK_MARK, log_line, split_rank_line
from ddpctl.runners.supervise import (
    STOP_GRACE_S,
    JobFailed,
    JobState,
    NodeFailed,
    after_finishing_note,
    attempt_log,
    died_after_finishing,
    finish_note,
    interrupted_note,
    layout_phrase,
    node_failed,
    run_with_restarts,
    start_failure,
    supervise,
)
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.runners.procs import Child

RANK_TEMPLATE = RANK_MARK + "${rank}@@"
DEFAULT_PORT = 29500


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodePlan:
    index: int
    hostname: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    log_dir: Path


@dataclass(frozen=True)
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

    @property
    def spec(self) -> JobSpec:
        return self.job.spec


def parse_mounts(items: Sequence[str]) -> dict[str, Path]:
    """--mount NAME=DIR: the host directory that stands in for the spec's volume NAME."""
    mounts: dict[str, Path] = {}
    for item in items:
        name, found, path = item.partition("=")
        if not found or not name or not path:
            raise UsageError(f"--mount: {item!r} is not NAME=DIR; e.g. --mount data=./data")
        mounts[name] = Path(path).expanduser().resolve()
    return mounts


def volume_dirs(spec: JobSpec, run_dir: Path, mounts: Mapping[str, Path]) -> dict[str, Path]:
    """Host directory per spec volume: --mount's, else <run-dir>/<volume name>."""
    unknown = sorted(set(mounts) - set(spec.volumes) - {"checkpoints"})
    if unknown:
        known = ", ".join(sorted(set(spec.volumes) | {"checkpoints"}))
        raise UsageError(f"--mount: the spec has no volume {unknown[0]!r}; mount one of {known}")
    dirs = {name: mounts.get(name, run_dir / name) for name in spec.volumes}
    if "checkpoints" in mounts:
        dirs.setdefault("checkpoints", mounts["checkpoints"])
    return dirs


def remap_paths(args: Sequence[str], mapping: Mapping[str, Path]) -> list[str]:
    """Replace container mount paths in arguments (`/ckpt`, `/data/x`, `--data-dir=/data`)."""
    out = []
    for arg in args:
        key, eq, value = arg.partition("=") if arg.startswith("--") and "=" in arg else ("", "", arg)
        for mount, host in sorted(mapping.items(), key=lambda kv: -len(kv[0])):
            if value == mount or value.startswith(mount.rstrip("/") + "/"):
                value = str(host) + value[len(mount.rstrip("/")) :]
                break
        out.append(f"{key}{eq}{value}" if eq else value)
    return out


def _arg_value(args: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in `args`: the last one given, as argparse takes it."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def port_asked_for(flags: Mapping[str, object], config: Path | None, environ: Mapping[str, str] | None = None) -> bool:
    """Did the user pick the rendezvous port: --port, DDPCTL_RENDEZVOUS_PORT or ddp.yaml's
    rendezvous.port (any layer above the defaults)? Then a busy port is an error, not a fallback."""
    from ddpctl.spec.sources import merged_layers

    rdzv = merged_layers(flags, config, environ).get("rendezvous")
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


def check_trainer_args(args: Sequence[str], env: Mapping[str, str], world_size: int) -> None:
    """The built-in trainer's flags (and DDP_TRAINER_* env), checked with the trainer's own parser
    before any process starts (ddpctl_trainer.config imports no torch): a bad flag is one line and
    exit 2 here, not a usage error from every rank after the job started. `--help` is left to the
    trainer."""
    if any(arg in ("-h", "--help") for arg in args):
        return
    from ddpctl_trainer.config import parse_args, validate_for_world
    from ddpctl_trainer.errors import UsageError as TrainerUsageError

    try:
        validate_for_world(parse_args(list(args), env), world_size)
    except TrainerUsageError as exc:
        raise UsageError(
            f"trainer: {exc}; fix the trainer's arguments after -- (python -m ddpctl_trainer --help lists them)"
        ) from None


def is_trainer_flag(option: str) -> bool:
    """Whether the built-in trainer has the flag `option` (`--epochs`), asked of its torch-free parser."""
    from ddpctl_trainer.config import build_parser

    return option.split("=", 1)[0] in build_parser()._option_string_actions  # argparse's own index


def plan_local(
    spec: JobSpec,
    *,
    run_dir: Path | None = None,
    port_explicit: bool | None = None,
    mounts: Mapping[str, Path] | None = None,
    cwd: Path | None = None,
    parent_env: Mapping[str, str] | None = None,
) -> LocalPlan:
    """Compute the agents' commands and env; checks what can be checked before anything starts
    (what the target can run, the script, the trainer's flags, the port). Starts nothing."""
    job = plan_for(spec)
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
    missing = [k for k in spec.secret_env if k not in (parent_env or os.environ)]
    if missing:
        notes.append(f"secretEnv {', '.join(missing)} come from Secrets in the cluster; export them to set them here")

    args = remap_paths(job.trainer_args, {spec.volumes[n].mount_path: d for n, d in dirs.items() if n in spec.volumes})
    base = inherited_env(parent_env if parent_env is not None else os.environ)
    ifname = loopback_ifname()
    checkpoint_dir: Path | str | None = None
    nodes = []
    for index, hostname in enumerate(job.pod_hostnames):
        env = {**base, **loopback_env(cluster_env(job, index), job, index, LOOPBACK, port)}
        if ifname and "GLOO_SOCKET_IFNAME" not in spec.env:
            env["GLOO_SOCKET_IFNAME"] = ifname  # gloo would pick the interface of the hostname
        if spec.uses_trainer:
            given = _arg_value(args, "--checkpoint-dir") or env.get(protocol.CHECKPOINT_DIR_ENV)
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
        job, run_dir, port, note, tuple(nodes), checkpoint_dir, cwd, tuple(notes), _explicit(job, port_explicit)
    )


def port_for_start(plan: LocalPlan, attempt: int) -> int:
    """The rendezvous port of one start of the group: the planned one first; on every later start
    a fresh one (the port of a failed start may be taken by now, or still be in TIME_WAIT), unless
    the user chose the port. A free port can still be taken before node 0 binds it: the runner then
    starts the group again without counting (`NodeFailed.again`)."""
    from ddpctl.runners.procs import free_port

    return plan.port if attempt == 0 or plan.port_explicit else free_port()


RUN_RECORD = "run.json"  # in the run directory: what `ddpctl status` and `logs` know of a local run


def record_run(plan: LocalPlan, state: str, message: str = "") -> None:
    """Write the run's record: its state (running, succeeded, failed, interrupted, timed out), the
    pid of the ddpctl that runs it and the last line it said, for `status`/`logs` without a cluster."""
    import json
    import time

    from ddpctl.atomic import write_text_atomic

    record = {
        "name": plan.spec.name,
        "state": state,
        "message": message,
        "pid": os.getpid(),
        "layout": layout_phrase(plan.job, "node"),
        "world_size": plan.job.world_size,
        "nodes": len(plan.nodes),
        "checkpoint_dir": str(plan.checkpoint_dir) if plan.checkpoint_dir else None,  # or a URL
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_text_atomic(plan.run_dir / RUN_RECORD, json.dumps(record, indent=2) + "\n")


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
    record_run(plan, "running")
    try:
        return _run_local(plan, console, timeout)
    except JobFailed as exc:
        record_run(plan, "failed", str(exc))
        raise
    except WaitTimeout as exc:
        record_run(plan, "timed out", str(exc))
        raise
    except Interrupted as exc:
        record_run(plan, "interrupted", exc.message)
        raise
    except BaseException as exc:
        record_run(plan, "failed", str(exc) or type(exc).__name__)
        raise


def _run_local(plan: LocalPlan, console: Console, timeout: float | None) -> int:
    from ddpctl.runners import procs

    spec = plan.spec

    nonce = secrets.token_hex(4)
    ports: dict[int, int] = {}

    def start(attempt: int) -> Iterator[Child]:
        port = ports.setdefault(attempt, port_for_start(plan, attempt))
        run_id = f"{spec.name}-{nonce}-{attempt}"
        for node in plan.nodes:
            try:
                yield procs.start_child(
                    node.index,
                    f"node {node.index}",
                    node.argv,
                    start_env(node.env, port, run_id),
                    cwd=plan.cwd,
                    log_path=attempt_log(plan.run_dir / "logs" / f"node-{node.index}.log", attempt),
                )
            except OSError as exc:
                raise start_failure(
                    node.argv, exc, user_command=bool(spec.command), what=f"node {node.index}"
                ) from None

    def stop(children: list[Child]) -> None:
        procs.stop_children([c for c in children if c.poll() is None], grace_s=STOP_GRACE_S)

    logs = relative_path(plan.run_dir / "logs", plan.cwd)

    def start_group(state: JobState, left: float | None) -> NodeFailed | None:
        def show(child: Child, text: str) -> None:
            _show(console, state, child, text)

        failed, timed_out = supervise(lambda: start(state.attempt), state, console, show=show, stop=stop, timeout=left)
        if timed_out:
            raise WaitTimeout(
                f"job {spec.name} was still running after --timeout {timeout:g}s; stopped it (logs in {logs})"
            )
        if failed is None:
            return None
        finished = died_after_finishing(state)
        if finished:
            console.note(after_finishing_note(finished))
            return None
        port = ports[state.attempt]
        if state.port_taken and not plan.port_explicit:
            again = f"node 0 could not bind rendezvous port {port}: another process took it first"
            return NodeFailed(0, failed.returncode or 1, "", again=again)
        return node_failed(state, failed.index, failed.returncode or 1, plan.job, f"logs in {logs}")

    try:
        state = run_with_restarts(
            plan.job, console, start_group, nodes=len(plan.nodes), checkpoint_dir=plan.checkpoint_dir, timeout=timeout
        )
    except KeyboardInterrupt as exc:
        raise Interrupted(interrupted_note(spec.name, str(exc), plan.checkpoint_dir, plan.cwd)) from None
    finish_note(console, state, plan.checkpoint_dir, plan.cwd, plan.run_dir / "logs")
    record_run(plan, "succeeded")
    return 0


def _show(console: Console, state: JobState, child: Child, text: str) -> None:
    node = getattr(child, "index", 0)
    found = split_rank_line(text)
    if found:
        rank, rest = found
        state.on_rank_line(rank, rest)
        console.rank_line(rank, rest, progress=state.is_progress(rank, rest))
        return
    if not state.on_node_line(node, text):
        return
    if _agent_traceback(state, node, text):
        return
    if getattr(child, "stopping", False) and not text.strip():
        return
    console.node_line(node, text)


def _agent_traceback(state: JobState, node: int, text: str) -> bool:
    """True for the lines of an agent's own Python traceback (torchrun's ChildFailedError, or the
    SignalException of an agent we stopped): they say nothing the failure summary does not, and
    they stay in the node's log file. Tracebacks of the training code come tee'd, as rank lines."""
    if text.startswith("Traceback (most recent call last):"):
        state.in_traceback.add(node)
        return True
    if node not in state.in_traceback:
        return False
    if text.startswith((" ", "\t")):
        return True
    state.in_traceback.discard(node)  # the exception line ends the traceback
    if not text.startswith(
        (
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
            "torch.distributed.elastic.multiprocessing.api.SignalException",
        )
    ):
        state.agent_errors[node] = text  # why an agent died before its workers could fail
    return True


def remove_checkpoints(directory: Path | str | None) -> list[Path]:
    """--fresh: delete the trainer's checkpoints (and their temp files) in `directory`, which the
    trainer would resume from otherwise. Nothing else is touched: not the directory itself, not
    any other file in it (`--checkpoint-dir .` is a user's own directory). Returns what it removed.
    Checkpoints in an object store (a URL) are the store's to delete, not ddpctl's: they may be
    another run's, and the bucket's rules may keep them; --fresh then says how to start over."""
    if isinstance(directory, str):
        raise UsageError(
            f"--fresh: the checkpoints are in {directory}, an object store that ddpctl does not delete from; "
            "give a new prefix (--checkpoints s3://BUCKET/NEW-PREFIX) to start over"
        )
    removed: list[Path] = []
    if directory is None or not directory.is_dir():
        return removed
    for entry in sorted(directory.iterdir()):
        if not (protocol.CHECKPOINT_NAME.match(entry.name) or protocol.CHECKPOINT_TEMP.match(entry.name)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def clean_run_dir(plan: LocalPlan) -> None:
    """--fresh: forget earlier checkpoints of this job (the trainer would resume from them)."""
    remove_checkpoints(plan.checkpoint_dir)


# --------------------------------------------------------------------------------------------
# A local run as `ddpctl status` and `ddpctl logs` see it (no cluster, or a name only run here)
# --------------------------------------------------------------------------------------------

_ATTEMPT_LOG = re.compile(r"^node-(\d+)(?:\.restart-(\d+))?\.log$")


def job_name(name: str | None) -> str:
    """NAME not given: DDPCTL_NAME or ./ddp.yaml's name, else the default job name, as `run` and
    `submit` choose it."""
    if name:
        return name
    from ddpctl.spec.sources import merged_layers

    chosen = merged_layers({}).get("name")
    return str(chosen) if chosen else JobSpec().name


def find_local_run(name: str, cwd: Path | None = None) -> Path | None:
    """`./ddp-runs/NAME` when a local run of that name left its record or logs here."""
    run_dir = (cwd or Path.cwd()) / "ddp-runs" / name
    return run_dir if (run_dir / RUN_RECORD).is_file() or (run_dir / "logs").is_dir() else None


def read_run_record(run_dir: Path) -> dict[str, object]:
    import json

    try:
        record = json.loads((run_dir / RUN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _node_logs(run_dir: Path) -> dict[int, dict[int, Path]]:
    """node -> attempt -> its log file (attempt 0: the first start, N: the Nth restart)."""
    found: dict[int, dict[int, Path]] = {}
    logs = run_dir / "logs"
    for path in sorted(logs.iterdir()) if logs.is_dir() else []:
        match = _ATTEMPT_LOG.match(path.name)
        if match:
            found.setdefault(int(match.group(1)), {})[int(match.group(2) or 0)] = path
    return found


def local_status(run_dir: Path, cwd: Path | None = None) -> list[str]:
    """What `ddpctl status NAME` says of a local run: its state, layout, newest checkpoint, logs."""
    from ddpctl.runners.procs import alive
    from ddpctl.runners.restarts import latest_step

    cwd = cwd or Path.cwd()
    record = read_run_record(run_dir)
    name = str(record.get("name") or run_dir.name)
    state = str(record.get("state") or "unknown (no run record: a ddpctl older than this one ran it)")
    pid = record.get("pid")
    if state == "running":
        if isinstance(pid, int) and alive(pid):
            state = f"running (ddpctl pid {pid})"
        else:
            state = f"ended without saying how (its ddpctl, pid {pid}, is gone)"
    lines = [f"{name}: a local run in {relative_path(run_dir, cwd)} (not in a cluster)", f"  state: {state}"]
    if record.get("message") and not str(record.get("state")).startswith("running"):
        lines.append(f"  last line: {record['message']}")
    if record.get("layout"):
        lines.append(f"  layout: {record['layout']} = world size {record.get('world_size')}")
    starts = max((max(a) for a in _node_logs(run_dir).values()), default=0)
    lines.append(f"  starts: {starts + 1} ({plural_restarts(starts)})")
    recorded = str(record.get("checkpoint_dir") or "")
    if protocol.url_scheme(recorded):
        lines.append(f"  checkpoints: {recorded}")
    else:
        checkpoints = Path(recorded) if recorded else run_dir / "checkpoints"
        step = latest_step(checkpoints)
        if step is not None:
            lines.append(f"  checkpoint: step {step} in {relative_path(checkpoints, cwd)}")
    lines.append(f"  logs: {relative_path(run_dir / 'logs', cwd)} (ddpctl logs {name})")
    return lines


def plural_restarts(n: int) -> str:
    return "no restart" if n == 0 else f"{n} restart{'s' if n > 1 else ''}"


def local_logs(run_dir: Path, *, node: int | None, tail: int | None, previous: bool, prefix: bool | None) -> list[str]:
    """What `ddpctl logs NAME` prints of a local run: each node's log of the latest start of the
    group (the one before it with --previous), `[node N]` before each line unless --rank."""
    logs = _node_logs(run_dir)
    if node is not None and node not in logs:
        known = ", ".join(map(str, sorted(logs))) or "none"
        raise UsageError(f"--rank: the local run in {run_dir} has no node {node}; its nodes: {known}")
    latest = max((max(a) for a in logs.values()), default=0)
    attempt = latest - 1 if previous else latest
    if attempt < 0:
        raise UsageError("--previous: this local run was started once, without restarts; drop --previous")
    with_prefix = node is None if prefix is None else prefix
    out: list[str] = []
    for index in sorted(logs):
        if node is not None and index != node:
            continue
        path = logs[index].get(attempt)
        if path is None:
            continue
        text = [log_line(line) for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
        if tail is not None:
            text = text[-tail:] if tail > 0 else []
        out += [f"[node {index}] {line}" if with_prefix else line for line in text]
    return out
