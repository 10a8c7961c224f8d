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
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator, Mapping, Sequence

PR_SET_CHILD_SUBREAPER = 36


# --------------------------------------------------------------------------------------------
# Ports
# --------------------------------------------------------------------------------------------


def port_is_free(port: int, host: str = "") -> bool:
    """True when nothing listens on `port` (TIME_WAIT leftovers do not count: torchrun's store
    binds with SO_REUSEADDR too)."""
    for family, addr in ((socket.AF_INET, host or "0.0.0.0"),):
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


def _ppid_map() -> dict[int, int]:
    """pid -> parent pid of every process, from /proc (Linux). Empty elsewhere."""
    out: dict[int, int] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # comm may contain spaces and parentheses: the fields after the last ')' are fixed.
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) >= 2:
            out[int(entry.name)] = int(rest[1])
    return out


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children first), or [] where /proc is missing."""
    parents = _ppid_map()
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        current = todo.pop(0)
        found.append(current)
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
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0
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


@dataclass
class Child:
    """One long-lived child: an agent (one node) or a `docker run` client (one container)."""

    index: int
    label: str
    popen: subprocess.Popen[str]
    log: IO[str] | None = None
    stopping: bool = False
    returncode: int | None = None
    exited_at: float | None = None
    known_tree: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        if self.returncode is None:
            code = self.popen.poll()
            if code is not None:
                self.returncode = code
                self.exited_at = time.monotonic()
        return self.returncode

    def remember_tree(self) -> None:
        """Note the child's current descendants: once it is gone they can no longer be found
        through it, and torchrun's workers live in sessions of their own."""
        self.known_tree.update(descendants(self.pid))


def start_child(index: int, label: str, cmd: Sequence[str], env: Mapping[str, str], cwd: str | os.PathLike[str] | None = None, log_path: Path | None = None) -> Child:
    """Start `cmd` in a new session with stdout+stderr merged into one line-buffered pipe."""
    popen = subprocess.Popen(  # noqa: S603 - argv list, no shell
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
    log = None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed by LineMux
    return Child(index, label, popen, log)


class LineMux:
    """Reads every child's output on its own thread and hands lines to one consumer, in order per
    child. `get()` returns (child, line) or (child, None) at a child's EOF, or None on timeout."""

    def __init__(self, children: Sequence[Child]) -> None:
        self._queue: queue.Queue[tuple[Child, str | None]] = queue.Queue()
        self.open = len(children)
        self._threads = [threading.Thread(target=self._pump, args=(c,), daemon=True, name=f"ddpctl-log-{c.index}") for c in children]
        for thread in self._threads:
            thread.start()

    def _pump(self, child: Child) -> None:
        stream = child.popen.stdout
        assert stream is not None
        try:
            for line in iter(stream.readline, ""):
                line = line.rstrip("\r\n")
                if child.log is not None:
                    child.log.write(line + "\n")
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
    for child in children:
        child.remember_tree()
        if child.poll() is None:
            child.stopping = True
            _signal_group(child.pid, sig)
    deadline = time.monotonic() + grace_s
    for child in children:
        while child.poll() is None and time.monotonic() < deadline:
            child.remember_tree()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=0.2)
    kill_leftovers(children)


def kill_leftovers(children: Sequence[Child]) -> list[int]:
    """SIGKILL every child still running and every process that ever was in a child's tree and is
    still alive (an agent's workers outlive a SIGKILLed agent). Returns the pids it killed."""
    killed: list[int] = []
    for child in children:
        if child.poll() is None:
            child.remember_tree()
            _signal_group(child.pid, signal.SIGKILL)
            _signal_pid(child.pid, signal.SIGKILL)
            killed.append(child.pid)
    for child in children:
        for pid in sorted(child.known_tree):
            if alive(pid):
                _signal_group(pid, signal.SIGKILL)
                _signal_pid(pid, signal.SIGKILL)
                killed.append(pid)
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.popen.wait(timeout=5)
        child.poll()
    # Orphans re-parented to us (subreaper) are our children now: collect them.
    reap_zombies(descendants(os.getpid()))
    return killed


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
