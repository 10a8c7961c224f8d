"""Process helpers for `ddpctl run`: children in their own sessions, line streaming, no orphans.

A job is a handful of long-lived children (torchrun agents, or `docker run` clients), each started
in its own session so that a Ctrl-C on the terminal reaches only ddpctl, which then stops every
child on purpose (SIGTERM, a grace period, then SIGKILL of the child's whole process tree). The
tree is read from /proc, because torchrun starts each worker in a session of its own: killing the
agent's process group alone would leave the workers running.

Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import queue
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ddpctl_trainer import protocol

PR_SET_CHILD_SUBREAPER = 36
# The marker a local run has torchrun put before each worker's line (its --log-line-prefix-template),
# so that the runner can tell the rank; in the node's log file it is written as `[rank R] `.
RANK_MARK = "@@ddpctl-rank="
RANK_LINE = re.compile(re.escape(RANK_MARK) + r"(\d+)@@(.*)$")
_ANY_MARK = re.compile(re.escape(RANK_MARK) + r"\d+@@")


def split_rank_line(text: str, rank_base: int = 0) -> tuple[int, str] | None:
    """(rank, the rank's text) of a worker's marked line, without the trainer's own `[rank R] ` when
    it says the same rank; None for the agent's own lines. `rank_base`: the global rank of the
    node's local rank 0, where its torchrun numbers ranks from 0 (a node run alone: pod recovery)."""
    match = RANK_LINE.search(text)
    if not match:
        return None
    # torchrun may join a line's prefix to the end of the one before (a line written in two parts):
    # a marker is never the worker's own text
    rank, rest = rank_base + int(match.group(1)), _ANY_MARK.sub("", match.group(2))
    rest = rest.removeprefix(protocol.rank_prefix(rank))
    return rank, rest


def log_line(text: str, rank_base: int = 0) -> str:
    """A line as the node's log file keeps it: a worker's marker replaced by `[rank R] `."""
    found = split_rank_line(text, rank_base)
    return text if found is None else protocol.rank_prefix(found[0]) + found[1]


# --------------------------------------------------------------------------------------------
# Ports
# --------------------------------------------------------------------------------------------


def port_is_free(port: int, host: str = "") -> bool:
    """True when nothing listens on `port` (TIME_WAIT leftovers do not count: torchrun's store
    binds with SO_REUSEADDR too)."""
    for family, addr in ((socket.AF_INET, host or "0.0.0.0"),):  # noqa: S104 - probes where torchrun's store binds
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((addr, port))
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    return False
                raise
    return True


def free_port() -> int:
    """A port the kernel considers free right now (there is a small race until it is used)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------------------------
# Process trees
# --------------------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of `pid` from /proc/<pid>/stat, or None when it is gone. The start
    time (field 22, clock ticks since boot) tells a process from a later one given the same pid."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: the fields after the last ')' are fixed.
    rest = stat[stat.rfind(")") + 2 :].split()
    if len(rest) < 20:
        return None
    return int(rest[1]), int(rest[19])  # fields 4 (ppid) and 22 (starttime)


def start_time(pid: int) -> int | None:
    """The start time of `pid` (see `_stat`), or None when there is no such process."""
    found = _stat(pid)
    return found[1] if found else None


def stat_map() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time) of every process, from /proc (Linux). Empty elsewhere."""
    out: dict[int, tuple[int, int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if entry.name.isdigit():
            found = _stat(int(entry.name))
            if found is not None:
                out[int(entry.name)] = found
    return out


def subtree(pid: int, stats: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """pid -> start time of every descendant of `pid` in `stats` (children first)."""
    children: dict[int, list[int]] = {}
    for child, (parent, _) in stats.items():
        children.setdefault(parent, []).append(child)
    found: dict[int, int] = {}
    todo = list(children.get(pid, []))
    while todo:
        current = todo.pop(0)
        if current in found:
            continue
        found[current] = stats[current][1]
        todo.extend(children.get(current, []))
    return found


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def kill_if_same(pid: int, started: int, sig: int = signal.SIGKILL) -> bool:
    """Send `sig` to `pid` (and the process group it leads, if any) only while `pid` is still the
    process that started at `started`: a pid that was reused by an unrelated process is left
    alone. Where the kernel has pidfds the check and the signal cannot race. Returns whether it
    signalled."""
    pidfd = -1
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(pid)
    try:
        if start_time(pid) != started or not alive(pid):
            return False
        # A pid stays reserved while it names a live process group, so the group whose id is this
        # verified pid can only be the one this process leads.
        _signal_group(pid, sig)
        if pidfd >= 0:
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                signal.pidfd_send_signal(pidfd, sig)
        else:
            _signal_pid(pid, sig)
        return True
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def set_child_subreaper(on: bool) -> bool:
    """Make orphaned grandchildren (workers whose agent died) re-parent to us, so the final sweep
    can find and reap them. Linux only; returns whether it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        status: int = libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0)
        return status == 0
    except (OSError, AttributeError):
        return False


def reap_zombies(pids: Sequence[int]) -> None:
    """Collect exit statuses of re-parented children so they do not linger as zombies."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


# --------------------------------------------------------------------------------------------
# Children with streamed output
# --------------------------------------------------------------------------------------------


# How often a running job's process trees are read from /proc: a scan reads every process's
# stat file, which must not compete with training for CPU on every output line.
SCAN_INTERVAL_S = 1.0


@dataclass
class Child:
    """One long-lived child: an agent (one node) or a `docker run` client (one container)."""

    index: int
    label: str
    popen: subprocess.Popen[str]
    log: IO[str] | None = None
    stopping: bool = False
    returncode: int | None = None
    # pid -> start time of every process seen in the child's tree: only a pid whose start time
    # still matches is the same process (pids are reused).
    known_tree: dict[int, int] = field(default_factory=dict)
    scanned_at: float = float("-inf")
    started: int | None = None  # the child's own start time, read while it cannot be reaped yet
    rank_base: int = 0  # what its torchrun's rank 0 is in the job (a node run alone: its first rank)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.popen.poll()
        return self.returncode

    def remember_tree(self, stats: Mapping[int, tuple[int, int]] | None = None) -> None:
        """Note the child's current descendants: once it is gone they can no longer be found
        through it, and torchrun's workers live in sessions of their own."""
        self.known_tree.update(subtree(self.pid, stat_map() if stats is None else stats))
        self.scanned_at = time.monotonic()


def workers_done(child: Child) -> bool:
    """Whether every process seen under a still-running child has ended: a torchrun agent whose
    workers all exited 0 waits in its exit barrier for the other agents (a worker that failed
    would have made it report and exit). False when no process was ever seen under it."""
    remember_trees([child], force=True)
    return bool(child.known_tree) and all(start_time(pid) != started for pid, started in child.known_tree.items())


def remember_trees(children: Sequence[Child], *, force: bool = False, interval: float = SCAN_INTERVAL_S) -> bool:
    """`remember_tree` of every running child, with one /proc scan for all of them and at most
    one scan per `interval` unless `force`. Returns whether it scanned."""
    now = time.monotonic()
    due = [c for c in children if c.poll() is None and (force or now - c.scanned_at >= interval)]
    if not due:
        return False
    stats = stat_map()
    for child in due:
        child.remember_tree(stats)
    return True


def start_child(
    index: int,
    label: str,
    cmd: Sequence[str],
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] | None = None,
    log_path: Path | None = None,
    append: bool = False,
) -> Child:
    """Start `cmd` in a new session with stdout+stderr merged into one line-buffered pipe. The log
    file is opened first, so a failure leaves no process running; OSError (no such executable, no
    permission) comes from Popen with nothing started."""
    log = None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115 - closed by LineMux
    try:
        popen = subprocess.Popen(  # an argv list, no shell
            list(cmd),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
    except BaseException:
        if log is not None:
            log.close()
        raise
    return Child(index, label, popen, log, started=start_time(popen.pid))


class LineMux:
    """Reads every child's output on its own thread and hands lines to one consumer, in order per
    child. `get()` returns (child, line) or (child, None) at a child's EOF, or None on timeout."""

    def __init__(self, children: Sequence[Child]) -> None:
        self._queue: queue.Queue[tuple[Child, str | None]] = queue.Queue()
        self.open = len(children)
        self._threads = [
            threading.Thread(target=self._pump, args=(c,), daemon=True, name=f"ddpctl-log-{c.index}") for c in children
        ]
        for thread in self._threads:
            thread.start()

    def _pump(self, child: Child) -> None:
        stream = child.popen.stdout
        assert stream is not None
        try:
            for line in iter(stream.readline, ""):
                line = line.rstrip("\r\n")
                if child.log is not None:
                    child.log.write(log_line(line, child.rank_base) + "\n")
                    child.log.flush()
                self._queue.put((child, line))
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError, ValueError):
                stream.close()
            if child.log is not None:
                with contextlib.suppress(OSError, ValueError):
                    child.log.close()
            self._queue.put((child, None))

    def add(self, child: Child) -> None:
        """Read one more child (a node started again alone) as the others are read."""
        thread = threading.Thread(target=self._pump, args=(child,), daemon=True, name=f"ddpctl-log-{child.index}")
        self._threads.append(thread)
        self.open += 1
        thread.start()

    def get(self, timeout: float) -> tuple[Child, str | None] | None:
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item[1] is None:
            self.open -= 1
        return item

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def stop_children(children: Sequence[Child], grace_s: float = 10.0, sig: int = signal.SIGTERM) -> None:
    """Ask every running child to stop (`sig` to its process group), wait up to `grace_s` for them
    to exit, then SIGKILL what is left of every child's tree, workers included."""
    remember_trees(children, force=True)
    for child in children:
        if child.poll() is None:
            child.stopping = True
            _signal_group(child.pid, sig)
    deadline = time.monotonic() + grace_s
    for child in children:
        while child.poll() is None and time.monotonic() < deadline:
            remember_trees(children, interval=0.2)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=0.2)
    kill_leftovers(children)


def kill_leftovers(children: Sequence[Child]) -> list[int]:
    """SIGKILL every child still running and every process that was in a child's tree and is
    still that same process (an agent's workers outlive a SIGKILLed agent; a pid that now names
    another process is left alone). With the subreaper on, workers orphaned before a scan saw
    them were re-parented to us: they are killed too. Returns the pids it killed."""
    killed: list[int] = []
    remember_trees(children, force=True)
    for child in children:
        if child.poll() is None:
            # Not yet reaped by us, so the pid (and the group it leads) is still the child's.
            _signal_group(child.pid, signal.SIGKILL)
            _signal_pid(child.pid, signal.SIGKILL)
            killed.append(child.pid)
    tree: dict[int, int] = {}
    for child in children:
        tree.update(child.known_tree)
    tree.update(_adopted(children))
    for pid, started in tree.items():
        if kill_if_same(pid, started):
            killed.append(pid)
    await_gone([pid for pid in killed if pid in tree])
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.popen.wait(timeout=5)
        child.poll()
    # Orphans re-parented to us (subreaper) are our children now: collect them (only them: a
    # child some other code of this process started is that code's to wait for).
    reap_zombies(sorted(_orphans(children, stat_map())))
    return killed


def await_gone(pids: Sequence[int], timeout_s: float = 5.0) -> None:
    """Return once every pid in `pids` has ended (a zombie counts as ended), or after `timeout_s`:
    a SIGKILL is delivered asynchronously, and a stop that returns while a worker still runs leaves
    it holding its port and GPU. Waits on each process's pidfd where the kernel has them."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        pidfd = -1
        if hasattr(os, "pidfd_open"):
            with contextlib.suppress(OSError):
                pidfd = os.pidfd_open(pid)
        try:
            while alive(pid) and (left := deadline - time.monotonic()) > 0:
                if pidfd >= 0:
                    select.select([pidfd], [], [], left)  # readable once the process has exited
                else:
                    time.sleep(min(0.01, left))
        finally:
            if pidfd >= 0:
                os.close(pidfd)


def _orphans(children: Sequence[Child], stats: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """Processes re-parented to this one (the subreaper) from a child's tree, zombies included:
    our children now, in a session of their own (as the agents and their workers are), started no
    earlier than the first child, and none of the children. A process this one started some other
    way (subprocess in our session) is never taken for one. pid -> start time."""
    starts = [c.started for c in children if c.started is not None]
    if not starts:
        return {}
    first, me, my_session = min(starts), os.getpid(), os.getsid(0)
    ours = {c.pid for c in children}
    found: dict[int, int] = {}
    for pid, (parent, started) in stats.items():
        if parent != me or pid in ours or started < first:
            continue
        with contextlib.suppress(OSError):
            if os.getsid(pid) != my_session:
                found[pid] = started
    return found


def _adopted(children: Sequence[Child]) -> dict[int, int]:
    """The orphans (see `_orphans`) and their trees: workers no scan saw before their agent died."""
    stats = stat_map()
    found: dict[int, int] = {}
    for pid, started in _orphans(children, stats).items():
        found[pid] = started
        found.update(subtree(pid, stats))
    return found


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into KeyboardInterrupt while a job runs, so every way of stopping
    ddpctl goes through the same cleanup. Only possible on the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
