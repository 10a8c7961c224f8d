"""`ddpctl run --local`: every node of the job as a torchrun agent on this machine, on loopback.

Each node gets the environment its pod gets in the cluster (`cluster_env`: the spec's container env
plus what the chosen engine injects, e.g. PET_NODE_RANK from the completion index), with one
change (`loopback_env`): the rank-0 DNS name becomes 127.0.0.1 and the port a free one when the
spec's default is busy. So a job that runs here is wired exactly as it will be in the cluster.

Agents run in their own sessions (see `ddpctl.procs`); their output is streamed line by line with a
`[rank R]` prefix (torchrun tees each worker's output with a marker we replace) or `[node N]` for
the agent's own lines; a status line tells the job's state; the first failing node stops the job
(like a Job with backoffLimit 0) and its exit code is the job's.

Nothing here imports torch: the agents do.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ddpctl.errors import RuntimeFailure, UsageError, WaitTimeout
from ddpctl.spec import JobSpec

if TYPE_CHECKING:
    from ddpctl.procs import Child

RANK_MARK = "@@ddpctl-rank="
RANK_TEMPLATE = RANK_MARK + "${rank}@@"
_RANK_LINE = re.compile(re.escape(RANK_MARK) + r"(\d+)@@(.*)$")
_TRAINER_PREFIX = re.compile(r"^\[rank (\d+)\] ")
_PROGRESS = re.compile(r"epoch (\d+)/(\d+) step (\d+)/(\d+)")
_FAIL_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_FAIL_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_PEER_FAILURE = "a collective failed"

# Variables that wire torch.distributed: never inherited from the shell that runs ddpctl.
_WIRING_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "JOB_COMPLETION_INDEX",
)
_WIRING_PREFIXES = ("PET_", "TORCHELASTIC_")

# How long the other nodes may go on reporting their own errors after the first node failed,
# before they are stopped (as the Job controller would delete their pods).
PEER_GRACE_S = 5.0
STOP_GRACE_S = 10.0
LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 29500


class JobFailed(RuntimeFailure):
    """The job ran and failed: the exit code is the failing node's."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code if exit_code > 0 else 1


# --------------------------------------------------------------------------------------------
# The env each node gets
# --------------------------------------------------------------------------------------------


def cluster_env(spec: JobSpec, index: int) -> dict[str, str]:
    """The literal env of replica `index`'s training container in the cluster: the spec's env
    plus what the target's engine injects (contracts.md). Secrets are not included."""
    env = dict(spec.container_env())
    node = str(index)
    if spec.target in ("job", "jobset"):
        env["JOB_COMPLETION_INDEX"] = node
        if spec.node_rank_from_index:
            env["PET_NODE_RANK"] = node
    elif spec.target == "pytorchjob":
        env["PET_NPROC_PER_NODE"] = str(spec.nproc_per_node)
        if spec.elastic:
            env.update(PET_RDZV_BACKEND="c10d", PET_RDZV_ENDPOINT=spec.rdzv_endpoint, PET_NNODES=spec.nnodes)
        else:
            port = str(spec.master_port)
            env.update(
                MASTER_ADDR=spec.rank0_host,
                PET_MASTER_ADDR=spec.rank0_host,
                MASTER_PORT=port,
                PET_MASTER_PORT=port,
                WORLD_SIZE=str(spec.world_size),
                RANK=node,
                PET_NODE_RANK=node,
                PET_NNODES=str(spec.nodes),
            )
    elif spec.target == "trainjob":
        env.update(
            PET_NNODES=str(spec.nodes),
            PET_NPROC_PER_NODE=str(spec.nproc_per_node),
            PET_NODE_RANK=node,
            PET_MASTER_ADDR=spec.rank0_host,
            PET_MASTER_PORT=str(spec.master_port),
        )
    env.update(spec.env)  # the user's values win, as in the rendered container
    return dict(sorted(env.items()))


def loopback_env(env: Mapping[str, str], spec: JobSpec, index: int, host: str, port: int) -> dict[str, str]:
    """`env` with the rank-0 address and port replaced by `host:port` (loopback for local runs)."""
    out = dict(env)
    for key in ("PET_MASTER_ADDR", "MASTER_ADDR"):
        if out.get(key) == spec.rank0_host:
            out[key] = host
    for key in ("PET_MASTER_PORT", "MASTER_PORT"):
        if key in out:
            out[key] = str(port)
    if "PET_RDZV_ENDPOINT" in out:
        out["PET_RDZV_ENDPOINT"] = f"{host}:{port}"
        # Every agent here would take 127.0.0.1 for its own address and try to host the store:
        # say which one does, as the first pod does in the cluster.
        conf = [c for c in out.get("PET_RDZV_CONF", "").split(",") if c and not c.startswith("is_host=")]
        conf.append(f"is_host={'true' if index == 0 else 'false'}")
        out["PET_RDZV_CONF"] = ",".join(conf)
    return out


def _loopback_ifname() -> str | None:
    try:
        import socket

        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return None
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return None


def inherited_env(parent: Mapping[str, str]) -> dict[str, str]:
    """The shell's env minus torch.distributed wiring (a ddpctl started inside torchrun must not
    leak its RANK/PET_* into the job)."""
    return {k: v for k, v in parent.items() if k not in _WIRING_VARS and not k.startswith(_WIRING_PREFIXES)}


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

    spec: JobSpec
    run_dir: Path
    port: int
    port_note: str | None
    nodes: tuple[NodePlan, ...]
    checkpoint_dir: Path | None
    cwd: Path
    notes: tuple[str, ...] = ()


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
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def port_asked_for(flags: Mapping[str, object], config: Path | None, environ: Mapping[str, str] | None = None) -> bool:
    """Did the user pick the rendezvous port: --port, DDPCTL_RENDEZVOUS_PORT or ddp.yaml's
    rendezvous.port (any layer above the defaults)? Then a busy port is an error, not a fallback."""
    from ddpctl.config import merged_layers

    rdzv = merged_layers(flags, config, environ).get("rendezvous")
    return isinstance(rdzv, Mapping) and "port" in rdzv


def choose_port(spec: JobSpec, explicit: bool | None = None) -> tuple[int, str | None]:
    """The spec's port if free; a free one when the user did not ask for the busy one; else an
    error. `explicit` None (a spec built in code, no layers to ask): a non-default port was asked for."""
    from ddpctl.procs import free_port, port_is_free

    wanted = spec.master_port
    if explicit is None:
        explicit = spec.rendezvous.port != DEFAULT_PORT
    if port_is_free(wanted):
        return wanted, None
    if explicit:
        raise UsageError(
            f"rendezvous.port: port {wanted} is in use on this machine; stop what listens there or choose another "
            "with --port"
        )
    port = free_port()
    return port, f"port {wanted} is in use here, using {port} instead"


def torchrun_argv(spec: JobSpec, log_dir: Path) -> list[str] | None:
    """The agent's argv: the spec's `torchrun ...` as `python -m torch.distributed.run` of this
    interpreter (no PATH needed), with each worker's output tee'd behind a rank marker."""
    entry = list(spec.entrypoint)
    if entry[0] != "torchrun":
        return None
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--tee",
        "3",
        "--log-dir",
        str(log_dir),
        "--log-line-prefix-template",
        RANK_TEMPLATE,
        *entry[1:],
    ]


def plan_local(
    spec: JobSpec,
    *,
    run_dir: Path | None = None,
    port_explicit: bool | None = None,
    mounts: Mapping[str, Path] | None = None,
    cwd: Path | None = None,
    parent_env: Mapping[str, str] | None = None,
) -> LocalPlan:
    """Compute the agents' commands and env; checks the port. Starts nothing."""
    cwd = (cwd or Path.cwd()).resolve()
    run_dir = (run_dir or cwd / "ddp-runs" / spec.name).resolve()
    dirs = volume_dirs(spec, run_dir, mounts or {})
    port, note = choose_port(spec, port_explicit)
    notes: list[str] = []
    if spec.gpus_per_node:
        notes.append(
            f"gpusPerNode is {spec.gpus_per_node}: every local node would need that many GPUs; use --gpus 0 for CPU "
            "+ gloo"
        )
    missing = [k for k in spec.secret_env if k not in (parent_env or os.environ)]
    if missing:
        notes.append(f"secretEnv {', '.join(missing)} come from Secrets in the cluster; export them to set them here")

    args = remap_paths(spec.trainer_args, {spec.volumes[n].mount_path: d for n, d in dirs.items() if n in spec.volumes})
    base = inherited_env(parent_env if parent_env is not None else os.environ)
    ifname = _loopback_ifname()
    checkpoint_dir: Path | None = None
    nodes = []
    for index, hostname in enumerate(spec.pod_hostnames):
        env = {**base, **loopback_env(cluster_env(spec, index), spec, index, LOOPBACK, port)}
        if ifname and "GLOO_SOCKET_IFNAME" not in spec.env:
            env["GLOO_SOCKET_IFNAME"] = ifname  # gloo would pick the interface of the hostname
        if spec.uses_trainer:
            given = _arg_value(args, "--checkpoint-dir") or env.get("DDP_TRAINER_CHECKPOINT_DIR")
            if given is None:
                given = str(dirs.get("checkpoints", run_dir / "checkpoints"))
                env["DDP_TRAINER_CHECKPOINT_DIR"] = given
            checkpoint_dir = (cwd / given).resolve()
        log_dir = run_dir / "logs" / f"node-{index}"
        argv = torchrun_argv(spec, log_dir) or list(spec.entrypoint)
        nodes.append(NodePlan(index, hostname, tuple(argv + args), dict(sorted(env.items())), log_dir))
    return LocalPlan(spec, run_dir, port, note, tuple(nodes), checkpoint_dir, cwd, tuple(notes))


# --------------------------------------------------------------------------------------------
# Console: prefixes, colours, the status line
# --------------------------------------------------------------------------------------------

_COLOURS = ("36", "33", "35", "32", "34", "91", "96", "93")


@dataclass
class Failure:
    node: int
    rank: int | None
    local_rank: int | None
    code: int


@dataclass
class JobState:
    """What the output tells about the job; drives the status line and the final message."""

    name: str
    nodes: int
    world: int
    started: float = field(default_factory=time.monotonic)
    phase: str = "starting"
    ranks_seen: set[int] = field(default_factory=set)
    progress: tuple[int, int, int, int] | None = None
    nodes_done: int = 0
    failures: list[Failure] = field(default_factory=list)
    peer_failed_ranks: set[int] = field(default_factory=set)
    in_traceback: set[int] = field(default_factory=set)
    _pending: dict[int, tuple[int, int]] = field(default_factory=dict)

    def on_rank_line(self, rank: int, text: str) -> None:
        self.ranks_seen.add(rank)
        if self.phase == "starting":
            self.phase = "training"
        match = _PROGRESS.search(text)
        if match and rank == 0:
            epoch, epochs, step, steps = (int(g) for g in match.groups())
            self.progress = (epoch, epochs, step, steps)
        if _PEER_FAILURE in text:
            self.peer_failed_ranks.add(rank)

    def on_node_line(self, node: int, text: str) -> None:
        """torchrun's failure report: `rank : 3 (local_rank: 1)` then `exitcode : -9 (pid: ...)`."""
        match = _FAIL_RANK.match(text)
        if match:
            self._pending[node] = (int(match.group(1)), int(match.group(2)))
            return
        match = _FAIL_CODE.match(text)
        if match and node in self._pending:
            rank, local = self._pending.pop(node)
            if not any(f.rank == rank for f in self.failures):
                self.failures.append(Failure(node, rank, local, int(match.group(1))))

    def status(self) -> str:
        elapsed = time.monotonic() - self.started
        parts = [
            f"{self.name}: {self.phase}",
            f"{elapsed:.0f}s",
            f"nodes {self.nodes}",
            f"ranks seen {len(self.ranks_seen)}/{self.world}",
        ]
        if self.progress:
            e, ne, s, ns = self.progress
            parts.append(f"epoch {e}/{ne} step {s}/{ns}")
        return " | ".join(parts)


def _signal_name(code: int) -> str:
    import signal

    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def describe_failure(state: JobState, node: int, node_code: int, nproc: int) -> str:
    """One line naming the rank that failed first (not the ranks that stopped because of it).

    torchrun's failure report names ranks; a node that died as a whole (a killed agent or
    container) reports nothing, so then the node and the ranks it ran are named."""

    def secondary(f: Failure) -> bool:
        return f.rank in state.peer_failed_ranks or f.code in (-15, 143)

    primary = next((f for f in state.failures if f.code < 0 and not secondary(f)), None)
    primary = primary or next((f for f in state.failures if not secondary(f)), None)
    if primary is None and not any(f.node == node for f in state.failures):
        first, last = node * nproc, node * nproc + nproc - 1
        ranks = f"rank {first}" if first == last else f"ranks {first}-{last}"
        if node_code > 128:
            how = f"was killed by {_signal_name(128 - node_code)}"
        elif node_code < 0:
            how = f"was killed by {_signal_name(node_code)}"
        else:
            how = f"exited with code {node_code}"
        return f"job {state.name} failed: node {node} ({ranks}) {how}"
    primary = primary or (state.failures[0] if state.failures else None)
    if primary is None or primary.rank is None:
        return f"job {state.name} failed: node {node} exited with code {node_code}"
    how = f"was killed by {_signal_name(primary.code)}" if primary.code < 0 else f"exited with code {primary.code}"
    others = sorted({f.rank for f in state.failures if f.rank is not None and f.rank != primary.rank})
    tail = f"; ranks {', '.join(map(str, others))} stopped after it" if others else ""
    return (
        f"job {state.name} failed: rank {primary.rank} (node {primary.node}, local rank {primary.local_rank}) "
        f"{how}{tail}"
    )


class Console:
    """Writes prefixed log lines to `out` and the status to `err` (a redrawn line on a TTY,
    a line per phase change otherwise)."""

    def __init__(self, out: TextIO, err: TextIO, color: bool, live_status: bool) -> None:
        self.out, self.err = out, err
        self.color = color
        self.live = live_status
        self._shown = False
        self._last_phase: str | None = None

    def _paint(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def _clear(self) -> None:
        if self.live and self._shown:
            self.err.write("\r\x1b[2K")
            self.err.flush()
            self._shown = False

    def line(self, prefix: str, colour: str, text: str) -> None:
        self._clear()
        self.out.write(f"{self._paint(prefix, colour)} {text}\n")
        self.out.flush()

    def rank_line(self, rank: int, text: str) -> None:
        self.line(f"[rank {rank}]", _COLOURS[rank % len(_COLOURS)], text)

    def node_line(self, node: int, text: str) -> None:
        self.line(f"[node {node}]", "2", text)

    def note(self, text: str) -> None:
        self._clear()
        self.err.write(f"ddpctl: {text}\n")
        self.err.flush()

    def status(self, state: JobState) -> None:
        if self.live:
            self._clear()
            self.err.write(self._paint(state.status(), "1"))
            self.err.flush()
            self._shown = True
        elif state.phase != self._last_phase:
            self._last_phase = state.phase
            self.note(state.status())

    def done(self) -> None:
        self._clear()


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def _latest_checkpoint(directory: Path | None) -> Path | None:
    if directory is None or not directory.is_dir():
        return None
    found = sorted(p for p in directory.glob("ckpt-*") if not p.name.startswith("."))
    return found[-1] if found else None


def make_console(out: TextIO | None, err: TextIO | None, color: bool | None) -> Console:
    out = out or sys.stdout
    err = err or sys.stderr
    if color is None:
        color = out.isatty() and "NO_COLOR" not in os.environ
    return Console(out, err, color, live_status=err.isatty())


def start_failure(argv: Sequence[str], exc: OSError, *, user_command: bool, what: str) -> RuntimeFailure | UsageError:
    """One line for a process that could not be started: the user's --command naming a missing or
    non-executable program is their input (exit 2); anything else is a runtime failure."""
    from ddpctl.errors import printable

    program = printable(str(argv[0])) if argv else "?"
    reason = printable(exc.strerror or str(exc))
    if user_command and (
        isinstance(exc, (FileNotFoundError, PermissionError, NotADirectoryError)) or exc.errno == errno.ENOEXEC
    ):
        found = "was not found" if isinstance(exc, (FileNotFoundError, NotADirectoryError)) else "is not executable"
        return UsageError(f"command: {program} {found} ({reason}); give an executable on PATH or its path in --command")
    return RuntimeFailure(f"could not start {what} ({program}): {reason}")


def supervise(
    start: Callable[[], Iterable[Child]],
    state: JobState,
    console: Console,
    *,
    show: Callable[[Child, str], None],
    stop: Callable[[list[Child]], None],
    timeout: float | None,
) -> tuple[Child | None, bool]:
    """Start the children, stream their lines, stop the rest when one fails (after a grace for
    their own reports) or on --timeout, and wait for all. Returns (first failed child, timed out).
    `start` yields each child as soon as it runs, so one that fails to start (or a Ctrl-C while
    starting) leaves none of the earlier ones untracked. On Ctrl-C/SIGTERM every child is stopped
    before KeyboardInterrupt goes on. Whatever happens, no child process (nor a child's child) is
    left running."""
    from ddpctl import procs

    children: list[Child] = []
    reaper = procs.set_child_subreaper(True)
    failed: Child | None = None
    stop_at: float | None = None
    deadline = time.monotonic() + timeout if timeout else None
    timed_out = False
    try:
        with procs.interrupt_on_signals():
            for child in start():
                children.append(child)
            mux = procs.LineMux(children)
            console.status(state)
            while mux.open or any(c.poll() is None for c in children):
                item = mux.get(timeout=0.5)
                if item is not None and item[1] is not None:
                    show(item[0], item[1])
                procs.remember_trees(children)  # at most once a second: it reads all of /proc
                for child in children:
                    code = child.poll()
                    if code is not None and code != 0 and failed is None and not child.stopping:
                        failed = child
                        state.phase = "failing"
                        stop_at = time.monotonic() + PEER_GRACE_S
                now = time.monotonic()
                if stop_at is not None and now >= stop_at:
                    stop_at = None
                    _announce_stop(children, console)
                    stop(children)
                if deadline is not None and now >= deadline and not timed_out:
                    timed_out = True
                    state.phase = "timed out"
                    _announce_stop(children, console)
                    stop(children)
                if all(c.poll() is not None for c in children) and state.phase in ("starting", "training"):
                    state.phase = "finishing"
                console.status(state)
            mux.join(timeout=5)
    except KeyboardInterrupt:
        console.done()
        console.note(f"stopping {state.name}: interrupted")
        for child in children:
            child.stopping = True
        stop(children)
        raise
    finally:
        procs.kill_leftovers(children)
        if reaper:
            procs.set_child_subreaper(False)
        console.done()
    if failed is None:
        failed = next((c for c in children if c.returncode and not c.stopping), None)
    return failed, timed_out


def _announce_stop(children: Sequence[Child], console: Console) -> None:
    running = [c for c in children if c.poll() is None]
    if running:
        console.note(f"stopping {', '.join(c.label for c in running)}")
    for child in running:
        child.stopping = True


def run_local(
    plan: LocalPlan,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    color: bool | None = None,
    timeout: float | None = None,
) -> int:
    """Run the plan to the end; returns 0 or raises JobFailed / WaitTimeout / KeyboardInterrupt."""
    from ddpctl import procs

    console = make_console(out, err, color)
    spec = plan.spec
    state = JobState(spec.name, len(plan.nodes), spec.world_size)
    for note in plan.notes:
        console.note(note)
    if plan.port_note:
        console.note(plan.port_note)
    console.note(
        f"running {spec.name} locally: {spec.nnodes} nodes x {spec.nproc_per_node} processes = world size "
        f"{spec.world_size}, "
        f"{spec.resolved_backend}, rank 0 at {LOOPBACK}:{plan.port} (in the cluster: "
        f"{spec.rank0_host}:{spec.master_port})"
    )
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    if plan.checkpoint_dir is not None:
        plan.checkpoint_dir.mkdir(parents=True, exist_ok=True)

    def start() -> Iterator[Child]:
        for node in plan.nodes:
            try:
                yield procs.start_child(
                    node.index,
                    f"node {node.index}",
                    node.argv,
                    node.env,
                    cwd=plan.cwd,
                    log_path=plan.run_dir / "logs" / f"node-{node.index}.log",
                )
            except OSError as exc:
                raise start_failure(
                    node.argv, exc, user_command=bool(spec.command), what=f"node {node.index}"
                ) from None

    def stop(children: list[Child]) -> None:
        procs.stop_children([c for c in children if c.poll() is None], grace_s=STOP_GRACE_S)

    failed, timed_out = supervise(
        start, state, console, show=lambda c, t: _show(console, state, c, t), stop=stop, timeout=timeout
    )
    logs = relative_path(plan.run_dir / "logs", plan.cwd)
    if timed_out:
        raise WaitTimeout(
            f"job {spec.name} was still running after --timeout {timeout:g}s; stopped it (logs in {logs})"
        )
    if failed is not None:
        code = failed.returncode or 1
        raise JobFailed(
            describe_failure(state, failed.index, code, spec.nproc_per_node) + f" (exit code {code}; logs in {logs})",
            code,
        )
    finish_note(console, state, plan.checkpoint_dir, plan.cwd)
    return 0


def finish_note(console: Console, state: JobState, checkpoint_dir: Path | None, cwd: Path) -> None:
    elapsed = time.monotonic() - state.started
    latest = _latest_checkpoint(checkpoint_dir)
    where = (
        f"; checkpoint {relative_path(latest, cwd)}"
        if latest
        else (f"; checkpoints in {relative_path(checkpoint_dir, cwd)}" if checkpoint_dir else "")
    )
    console.note(f"{state.name} succeeded in {elapsed:.1f}s{where}")


def relative_path(path: Path, base: Path) -> str:
    """`path` as the user would type it from `base` (absolute when it lies elsewhere)."""
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def _show(console: Console, state: JobState, child: Child, text: str) -> None:
    node = getattr(child, "index", 0)
    match = _RANK_LINE.search(text)
    if match:
        rank, rest = int(match.group(1)), match.group(2)
        dup = _TRAINER_PREFIX.match(rest)
        if dup and int(dup.group(1)) == rank:
            rest = rest[dup.end() :]
        state.on_rank_line(rank, rest)
        console.rank_line(rank, rest)
        return
    state.on_node_line(node, text)
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
    return True


# The trainer's own checkpoint names (ddpctl_trainer.checkpoint, which imports torch, so they are
# restated here): `ckpt-<step>.pt` files, `ckpt-<step>/` sharded directories, and the temp files or
# directories they are written as (`.ckpt-<step>.pt.tmp.<pid>`, `.ckpt-<step>.tmp`).
CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{8,})(\.pt)?$")
CHECKPOINT_TEMP = re.compile(r"^\.ckpt-\d{8,}(\.pt)?\.tmp")


def remove_checkpoints(directory: Path | None) -> list[Path]:
    """--fresh: delete the trainer's checkpoints (and their temp files) in `directory`, which the
    trainer would resume from otherwise. Nothing else is touched: not the directory itself, not
    any other file in it (`--checkpoint-dir .` is a user's own directory). Returns what it removed."""
    removed: list[Path] = []
    if directory is None or not directory.is_dir():
        return removed
    for entry in sorted(directory.iterdir()):
        if not (CHECKPOINT_NAME.match(entry.name) or CHECKPOINT_TEMP.match(entry.name)):
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
