"""A local job's run directory (`./ddp-runs/NAME`): its record, kept by the run while it runs, and
what `ddpctl status`, `logs`, `list`, `delete` and `status --wait` read from it afterwards.

`run.json` holds the job's state (running, succeeded, failed, interrupted, timed out), the pid of
the ddpctl that runs it, its layout, each node's state, and rank 0's newest progress line; each
node's output is `logs/node-N.log` (`node-N.restart-K.log` for the Kth restart of the group).
`run --local` and `run --docker` write the same files, so a job reads the same wherever it ran.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpctl.backend import JobStatus, JobSummary, Listing, LogOptions, NodeRow, Where
from ddpctl.console import age_text, relative_path
from ddpctl.errors import NotFound, RuntimeFailure, UsageError, WaitTimeout
from ddpctl.runners.procs import alive, log_line
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.plan import Plan
    from ddpctl.runners.procs import Child
    from ddpctl.runners.state import JobState

RUN_RECORD = "run.json"
RUNS_DIR = "ddp-runs"
TICK_S = 1.0  # the record is rewritten at most this often while the job runs
POLL_S = 0.5  # how often `logs -f` and `status --wait` look at a run directory
_ATTEMPT_LOG = re.compile(r"^node-(\d+)(?:\.restart-(\d+))?\.log$")
# the record's states, as `status` shows them (the cluster's words where there are some)
STATES = {
    "running": "Running",
    "succeeded": "Succeeded",
    "failed": "Failed",
    "interrupted": "Interrupted",
    "timed out": "TimedOut",
}


def node_log(run_dir: Path, index: int, attempt: int) -> Path:
    """Node `index`'s output for start `attempt` of the group (0 the first, N the Nth restart)."""
    suffix = f".restart-{attempt}" if attempt else ""
    return run_dir / "logs" / f"node-{index}{suffix}.log"


class RunRecord:
    """Writes `run.json` as the job runs: at each change of state, and on `tick` when rank 0's
    progress or a node's state changed (at most once a second). It keeps the newest progress and
    node states, so the last record of a run still says where it got to."""

    def __init__(self, run_dir: Path, plan: Plan, backend: Where, layout: str, checkpoint_dir: Path | str | None):
        self.run_dir = run_dir
        self.plan = plan
        self.backend = backend
        self.layout = layout
        self.checkpoint_dir = checkpoint_dir
        self.started = time.time()
        self.job: JobState | None = None
        self.nodes: dict[int, int | None] = {}  # node -> its exit code (None: running)
        self.preflight: list[str] = []  # the newest start's preflight report (or the one before, until it prints)
        self.stragglers: list[str] = []  # the newest start's straggler lines (or the one before's, until it prints)
        self._last: tuple[object, ...] = ()
        self._written = 0.0

    def write(self, state: str, message: str = "") -> None:
        from ddpctl.atomic import write_text_atomic

        record: dict[str, Any] = {
            "name": self.plan.spec.name,
            "backend": self.backend.value,
            "target": self.plan.spec.target,
            "state": state,
            "message": message,
            "pid": os.getpid(),
            "layout": self.layout,
            "world_size": self.plan.world_size,
            "nodes": len(self.plan.nodes),
            "checkpoint_dir": str(self.checkpoint_dir) if self.checkpoint_dir else None,  # or a URL
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        if self.job is not None:
            record["attempt"] = self.job.attempt
            if self.job.progress is not None:
                record["progress"] = {"line": self.job.progress.text(), "at": self.job.progress_at}
            if self.job.preflight:
                self.preflight = list(self.job.preflight)
            if self.job.stragglers:
                self.stragglers = list(self.job.stragglers)
        if self.job is not None and self.job.recoveries:
            record["recoveries"] = [{k: v for k, v in r.items() if not k.startswith("_")} for r in self.job.recoveries]
        if self.preflight:
            record["preflight"] = self.preflight
        if self.stragglers:
            record["stragglers"] = self.stragglers
        if self.nodes:
            record["nodeStates"] = [
                {
                    "node": index,
                    "name": self.plan.pod_hostnames[index],
                    "phase": "Running" if code is None else ("Succeeded" if code == 0 else "Failed"),
                    **({"exitCode": code} if code is not None else {}),
                }
                for index, code in sorted(self.nodes.items())
            ]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.run_dir / RUN_RECORD, json.dumps(record, indent=2) + "\n")
        self._written = time.monotonic()

    def tick(self, job: JobState, children: list[Child]) -> None:
        """While a start of the group runs: its nodes and rank 0's progress."""
        self.job = job
        self.nodes = {c.index: c.poll() for c in children}
        nodes = sorted(self.nodes.items(), key=lambda kv: kv[0])
        recovered = [r.get("step") for r in job.recoveries]
        now = (job.attempt, job.progress, len(job.preflight), len(job.stragglers), recovered, nodes)
        if now == self._last or time.monotonic() - self._written < TICK_S:
            return
        self._last = now
        self.write("running")

    def ended(self, job: JobState) -> None:
        """After a start of the group: each node's exit code as the supervisor saw it."""
        self.job = job
        self.nodes = {**self.nodes, **job.node_codes}


# --------------------------------------------------------------------------------------------
# Reading a run directory
# --------------------------------------------------------------------------------------------


def runs_root(cwd: Path | None = None) -> Path:
    return (cwd or Path.cwd()) / RUNS_DIR


def find_run(name: str, cwd: Path | None = None) -> Path | None:
    """`./ddp-runs/NAME` when a local run of that name left its record or logs here."""
    run_dir = runs_root(cwd) / name
    return run_dir if (run_dir / RUN_RECORD).is_file() or (run_dir / "logs").is_dir() else None


def not_found(name: str, cwd: Path | None = None, *, hint: str = "") -> NotFound:
    where = relative_path(runs_root(cwd) / name, cwd or Path.cwd())
    return NotFound(f'no local run "{name}" here (no {where}){hint}; see `ddpctl list --on local`')


def require_run(name: str, cwd: Path | None = None, *, hint: str = "") -> Path:
    run_dir = find_run(name, cwd)
    if run_dir is None:
        raise not_found(name, cwd, hint=hint)
    return run_dir


def read_record(run_dir: Path) -> dict[str, Any]:
    try:
        record = json.loads((run_dir / RUN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _running(record: Mapping[str, Any]) -> bool:
    """Whether the run is going on: its record says so and its ddpctl still lives."""
    pid = record.get("pid")
    return record.get("state") == "running" and isinstance(pid, int) and alive(pid)


def node_logs(run_dir: Path) -> dict[int, dict[int, Path]]:
    """node -> attempt -> its log file (attempt 0: the first start, N: the Nth restart)."""
    found: dict[int, dict[int, Path]] = {}
    logs = run_dir / "logs"
    for path in sorted(logs.iterdir()) if logs.is_dir() else []:
        match = _ATTEMPT_LOG.match(path.name)
        if match:
            found.setdefault(int(match.group(1)), {})[int(match.group(2) or 0)] = path
    return found


def _age(record: Mapping[str, Any], now: float | None = None) -> str:
    started = record.get("started") or record.get("updated")
    try:
        t = time.mktime(time.strptime(str(started), "%Y-%m-%dT%H:%M:%S%z"))
    except (TypeError, ValueError, OverflowError):
        return "<unknown>"
    return age_text((now if now is not None else time.time()) - t)


def state_of(record: Mapping[str, Any]) -> str:
    state = str(record.get("state") or "")
    if state == "running" and not _running(record):
        return f"Unknown (its ddpctl, pid {record.get('pid')}, ended without saying how)"
    if not state:
        return "Unknown (no run record)"
    return STATES.get(state, state)


def run_status(run_dir: Path, cwd: Path | None = None) -> JobStatus:
    """What `ddpctl status NAME` says of a local run: the fields a cluster job's status has."""
    from ddpctl.runners.restarts import latest_step

    cwd = cwd or Path.cwd()
    record = read_record(run_dir)
    name = str(record.get("name") or run_dir.name)
    state = state_of(record)
    if record.get("message") and record.get("state") != "running":
        state += f" ({record['message']})"
    starts = max((max(a) for a in node_logs(run_dir).values()), default=0)
    lines = [("Starts", f"{starts + 1} ({plural_restarts(starts)})")]
    recorded = str(record.get("checkpoint_dir") or "")
    if protocol.url_scheme(recorded):
        lines.append(("Checkpoints", recorded))
    else:
        checkpoints = Path(recorded) if recorded else run_dir / "checkpoints"
        step = latest_step(checkpoints)
        if step is not None:
            lines.append(("Checkpoint", f"step {step} in {relative_path(checkpoints, cwd)}"))
    recoveries = record.get("recoveries") or []
    if recoveries:
        lines.append(("Recoveries", "; ".join(recovery_text(r) for r in recoveries)))
    lines.append(("Logs", f"{relative_path(run_dir / 'logs', cwd)} (ddpctl logs {name})"))
    lines.append(("Age", _age(record)))
    progress = record.get("progress") or {}
    parsed = protocol.parse_progress(str(progress.get("line") or ""))
    at = progress.get("at")
    backend = Where(record.get("backend") or "local")
    pid = f", ddpctl pid {record['pid']}" if _running(record) else ""
    rows = [
        NodeRow(n.get("node"), str(n.get("name", "")), str(n.get("phase", "")), starts, _exit_reason(n))
        for n in record.get("nodeStates") or []
    ]
    layout = f"{record.get('layout')} = world size {record.get('world_size')}" if record.get("layout") else "?"
    return JobStatus(
        name=name,
        backend=backend,
        where=f"{relative_path(run_dir, cwd)}{pid}",
        state=state,
        nodes=layout,
        progress=parsed,
        progress_age_s=max(time.time() - float(at), 0.0) if parsed and isinstance(at, (int, float)) else None,
        lines=lines,
        rows=rows,
        preflight=tuple(str(line) for line in record.get("preflight") or ()),
        stragglers=tuple(str(line) for line in record.get("stragglers") or ()),
        name_column="HOST",
        no_rows="No node has started yet." if _running(record) else "",
        data={**record, "state": state},
    )


def recovery_text(recovery: Mapping[str, Any]) -> str:
    """One node started again alone: `node 1 was killed by SIGKILL: back at step 4 after 4.4 s`."""
    text = f"node {recovery.get('node')} {recovery.get('reason')}"
    if recovery.get("step") is None:
        return f"{text}: being replaced"
    return f"{text}: back at step {recovery['step']} after {recovery.get('seconds')} s, no step lost"


def _exit_reason(node: Mapping[str, Any]) -> str:
    code = node.get("exitCode")
    if code in (None, 0):
        return ""
    said = protocol.meaning(int(code)) if isinstance(code, int) else None
    return f"exit code {code}" + (f": {said}" if said else "")


def plural_restarts(n: int) -> str:
    return "no restart" if n == 0 else f"{n} restart{'s' if n > 1 else ''}"


def run_logs(run_dir: Path, options: LogOptions, out: Callable[[str], None], say: Callable[[str], None]) -> None:
    """What `ddpctl logs NAME` prints of a local run: each node's log of the latest start of the
    group (the one before it with --previous), `[node N] ` before each line unless --rank; with
    --follow, new lines as the run writes them, until it ends."""
    logs = node_logs(run_dir)
    node = options.rank
    if node is not None and node not in logs:
        known = ", ".join(map(str, sorted(logs))) or "none"
        raise UsageError(f"--rank: the local run in {run_dir} has no node {node}; its nodes: {known}")
    latest = max((max(a) for a in logs.values()), default=0)
    attempt = latest - 1 if options.previous else latest
    if attempt < 0:
        raise UsageError("--previous: this local run was started once, without restarts; drop --previous")
    if options.follow:
        if options.previous:
            raise UsageError("--previous cannot be combined with --follow; drop one of them")
        _follow(run_dir, options, out)
        return
    for index in sorted(logs):
        if node is not None and index != node:
            continue
        path = logs[index].get(attempt)
        if path is None:
            continue
        text = [log_line(line) for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
        if options.tail is not None:
            text = text[-options.tail :] if options.tail > 0 else []
        for line in text:
            out(f"[node {index}] {line}" if options.with_prefix else line)


def _follow(run_dir: Path, options: LogOptions, out: Callable[[str], None]) -> None:
    """Print each node's new lines while the run goes on (a restart's files too), then what is left."""
    offsets: dict[Path, int] = {}
    partial: dict[Path, str] = {}

    def read_new(final: bool) -> None:
        for index, attempts in sorted(node_logs(run_dir).items()):
            if options.rank is not None and index != options.rank:
                continue
            for attempt in sorted(attempts):
                path = attempts[attempt]
                with path.open("rb") as fh:
                    fh.seek(offsets.get(path, 0))
                    data = fh.read()
                offsets[path] = offsets.get(path, 0) + len(data)
                text = partial.pop(path, "") + data.decode("utf-8", errors="replace")
                lines = text.split("\n")
                rest = lines.pop()
                if rest and not final:
                    partial[path] = rest
                elif rest:
                    lines.append(rest)
                for line in lines:
                    shown = log_line(line)
                    out(f"[node {index}] {shown}" if options.with_prefix else shown)

    if options.tail is not None:  # start at the end of what is there, less `tail` lines
        run_logs(run_dir, LogOptions(rank=options.rank, tail=options.tail, prefix=options.prefix), out, out)
        for attempts in node_logs(run_dir).values():
            for path in attempts.values():
                offsets[path] = path.stat().st_size
    while True:
        running = _running(read_record(run_dir))
        read_new(final=not running)
        if not running:
            return
        time.sleep(POLL_S)  # a poll of files another process writes, not a synchronisation


def wait_run(run_dir: Path, timeout: float | None, say: Callable[[str], None]) -> None:
    """`status --wait` of a local run: until its record says it ended; exit 0 when it succeeded."""
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        record = read_record(run_dir)
        if not _running(record):
            break
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimeout(f"local run {run_dir.name} was still running after --timeout {timeout:g}s")
        time.sleep(POLL_S)  # a poll of the record another process writes
    state = state_of(record)
    if record.get("state") != "succeeded":
        message = f": {record['message']}" if record.get("message") else ""
        raise RuntimeFailure(f"local run {run_dir.name} ended {state.split(' (')[0]}{message}")
    say(f"ddpctl: local run {run_dir.name} succeeded")


def list_runs(cwd: Path | None = None) -> Listing:
    """The local runs in ./ddp-runs, by name."""
    root = runs_root(cwd)
    jobs = []
    for run_dir in sorted(root.iterdir()) if root.is_dir() else []:
        if find_run(run_dir.name, cwd) is None:
            continue
        record = read_record(run_dir)
        jobs.append(
            JobSummary(
                name=str(record.get("name") or run_dir.name),
                target=str(record.get("target") or ""),
                nodes=str(record.get("nodes") or "?"),
                state=state_of(record).split(" (")[0],
                age=_age(record),
                ref=f"{RUNS_DIR}/{run_dir.name}",
                image=str(record.get("backend") or "local"),
                recoveries=len(record.get("recoveries") or []),
                raw={"apiVersion": "ddpctl.io/v1", "kind": "LocalRun", "metadata": {"name": run_dir.name}, **record},
            )
        )
    return Listing(jobs, f"./{RUNS_DIR}")


def delete_run(run_dir: Path, *, wait: bool, timeout: float | None, out: Callable[[str], None]) -> None:
    """Delete a local run: stop it when it still runs (SIGTERM to its ddpctl, which stops its
    nodes as a Ctrl-C would), then remove its record and logs. Its checkpoints and volumes stay:
    they are the training's results, not the run's bookkeeping."""
    import shutil

    record = read_record(run_dir)
    if _running(record):
        pid = int(record["pid"])
        os.kill(pid, signal.SIGTERM)
        out(f"stopping local run {run_dir.name} (ddpctl pid {pid})")
        deadline = time.monotonic() + (timeout or 60.0)
        while wait and alive(pid):
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"local run {run_dir.name}: its ddpctl (pid {pid}) did not stop in time")
            time.sleep(POLL_S)  # waiting for another process to end
    shutil.rmtree(run_dir / "logs", ignore_errors=True)
    (run_dir / RUN_RECORD).unlink(missing_ok=True)
    kept = sorted(p.name for p in run_dir.iterdir()) if run_dir.is_dir() else []
    if not kept:
        run_dir.rmdir()
    out(f"local run {run_dir.name} deleted" + (f" (kept {', '.join(kept)} in {run_dir})" if kept else ""))
