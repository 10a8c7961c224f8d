"""Stall watchdog: when the job stops making progress, say which rank stopped, where, and end it.

A hang in DDP looks the same on every rank: one rank stops (a dead data loader, a deadlock, a
``time.sleep`` in the wrong place) and all others wait inside a collective until the process-group
timeout, with nothing in the logs that says who. The watchdog turns that into one summary and a
distinct exit code (``EXIT_STALLED``) after ``--stall-timeout`` seconds.

How it works, and why it is cheap:

* The training loop marks phase changes on a ``Beacon`` (a few attribute writes, no I/O, no lock):
  data, forward, backward+all-reduce, optimizer, logging, checkpoint, eval.
* A background thread per rank wakes every ``interval`` seconds and talks to the c10d store the
  job already has (torchrun's agent store at MASTER_ADDR:MASTER_PORT, over a connection of its
  own): when its rank moved since the last wake-up it publishes a small heartbeat and adds 1 to a
  job-wide progress counter; otherwise it only reads the counter. So a healthy job costs two store
  operations per rank per interval, and nothing grows with the world size.
* When the counter has not moved for ``timeout`` seconds, no rank has made progress: every rank
  dumps its Python stacks (``faulthandler``) to its log and publishes its main thread's stack; the
  lowest rank that answered decides who is behind, the lowest rank that is not behind prints the
  summary (what it says is decided in stall.py), and every rank exits with ``EXIT_STALLED``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol, TypeVar

from .errors import keep_as_termination_message
from .protocol import (
    EXIT_STALLED,
    PROG,
    RECOVERY_SCOPE_ENV,
    STALL_SUMMARY_FIRST,
    STALL_SUMMARY_TAG,
    WARNING_TAG,
    rank_prefix,
)
from .stall import (
    BACKWARD,
    CHECKPOINT,
    DATA,
    DONE,
    EVAL,
    FORWARD,
    LOGGING,
    OPTIMIZER,
    SETUP,
    Frame,
    Heartbeat,
    StallClock,
    analyse,
    library_roots,
    position,
    summary_lines,
)

STORE_PREFIX = "ddpctl_watchdog"

T = TypeVar("T")

_stalling = threading.Event()  # set once this process's watchdog has declared a stall
_waiting = threading.Event()  # set while this rank waits for a lost peer's replacement (pod recovery)


@contextlib.contextmanager
def waiting_for_a_replacement() -> Iterator[None]:
    """While the group forms again with a lost peer's replacement (pod recovery), no progress is
    expected: the watchdog's clock starts over when the wait ends, however long the new pod took."""
    _waiting.set()
    try:
        yield
    finally:
        _waiting.clear()


def stalling() -> bool:
    """True once the watchdog is ending this process: a SIGTERM from the launcher (which stops a
    node's other workers as soon as one exits) must then not add an error line after the summary."""
    return _stalling.is_set()


class Beacon:
    """The main thread's side: where this rank is. Written by the training loop, read by the
    watchdog thread; plain attribute writes, so a phase change costs well under a microsecond."""

    __slots__ = ("phase", "seq", "since", "step")

    def __init__(self) -> None:
        self.phase = SETUP
        self.seq = 0  # phase marks so far: a position comparable across ranks (see module doc)
        self.since = time.monotonic()
        self.step = 0

    def mark(self, phase: str) -> None:
        self.phase = phase
        self.seq += 1
        self.since = time.monotonic()

    def step_done(self, step: int) -> None:
        """An optimizer step finished; what follows it (metrics all-reduce) is the logging phase."""
        self.step = step
        self.mark(LOGGING)

    def batches(self, loader: Iterable[T], phase: str = DATA) -> Iterator[T]:
        """Iterate ``loader`` with ``phase`` marked before each fetch, so a loader that never
        returns a batch is caught in the data phase (or eval) with its own stack."""
        self.mark(phase)
        it = iter(loader)
        while True:
            try:
                item = next(it)
            except StopIteration:
                return
            yield item
            self.mark(phase)


# --------------------------------------------------------------------------------------------
# The thread
# --------------------------------------------------------------------------------------------


class Store(Protocol):
    """The part of ``torch.distributed.Store`` the watchdog uses."""

    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def add(self, key: str, amount: int) -> int: ...
    def check(self, keys: list[str]) -> bool: ...
    def compare_set(self, key: str, expected: str, desired: str) -> bytes: ...


def interval_for(timeout: float) -> float:
    """Wake-ups: often enough to decide within ~10 % of the timeout, at most every 5 s."""
    return min(max(timeout / 10.0, 0.2), 5.0)


def capture_stack(thread_id: int | None) -> list[Frame]:
    """The stack of another thread of this process (outermost first), from its live frames."""
    import linecache

    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    out: list[Frame] = []
    while frame is not None:
        code = frame.f_code
        source = linecache.getline(code.co_filename, frame.f_lineno).strip()
        out.append(Frame(code.co_filename, frame.f_lineno, code.co_name, source[:160]))
        frame = frame.f_back
    out.reverse()
    return out


FR_DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"  # noqa: S108 - PyTorch's own default, kept as PyTorch writes it


def flight_recorder_prefix(env: Mapping[str, str]) -> str | None:
    """Where this rank's NCCL flight-recorder trace goes (PyTorch's variables, new names first),
    or None when the recorder is off (no ring buffer)."""
    size = env.get("TORCH_FR_BUFFER_SIZE") or env.get("TORCH_NCCL_TRACE_BUFFER_SIZE") or "0"
    if not size.strip().isdigit() or int(size) == 0:
        return None
    return env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or FR_DEFAULT_PREFIX


def dump_flight_recorder(rank: int, backend: str | None, env: Mapping[str, str]) -> Path | None:
    """Write the NCCL flight recorder's ring buffer (recent collectives, with their state) where
    PyTorch writes it on a collective timeout: the watchdog ends a hung job before that timeout,
    so without this a hang inside NCCL would leave no trace. Only on NCCL jobs with the recorder
    on; any failure just means no file (the summary still comes)."""
    prefix = flight_recorder_prefix(env)
    if prefix is None or backend != "nccl":
        return None
    try:
        from torch._C._distributed_c10d import _dump_nccl_trace  # type: ignore[attr-defined]

        data = _dump_nccl_trace()
        path = Path(f"{prefix}{rank}")
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - evidence is best effort; the summary matters more
        return None
    return path


class Watchdog:
    """The per-rank background thread. ``exit`` and ``clock`` are injectable for tests."""

    def __init__(
        self,
        beacon: Beacon,
        store: Store,
        *,
        rank: int,
        world_size: int,
        node: int,
        local_rank: int,
        timeout: float,
        interval: float | None = None,
        host: str | None = None,
        out: Any = None,
        exit: Callable[[int], None] = os._exit,
        clock: Callable[[], float] = time.monotonic,
        backend: str | None = None,
        reconnect: Callable[[], Store] | None = None,
    ) -> None:
        self.beacon = beacon
        self.store = store
        self._reconnect = reconnect  # pod recovery: a new connection when the coordinator was replaced
        self.rank, self.world_size, self.node, self.local_rank = rank, world_size, node, local_rank
        self.timeout = timeout
        self.interval = interval if interval is not None else interval_for(timeout)
        self.host = host or socket.gethostname()
        self.out = out
        self._exit = exit
        self.backend = backend
        self._clock = clock
        self._main_id = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddpctl-stall-watchdog", daemon=True)
        self._published_seq = -1
        self.stalled = False

    # -- lifecycle
    def start(self) -> Watchdog:
        self._publish()  # every rank has a heartbeat before anyone can look for one
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.interval + 5)

    # -- the loop
    def _run(self) -> None:
        clock = StallClock(self.timeout, self._clock())
        while not self._stop.wait(self.interval):
            if _waiting.is_set():
                clock = StallClock(self.timeout, self._clock())
                continue
            try:
                moved = self.beacon.seq != self._published_seq
                if moved:
                    self._publish()
                count = self.store.add("progress", 1 if moved else 0)
            except Exception:  # noqa: BLE001 - the store went away: the job is ending, or (pod recovery) its coordinator was replaced
                if not self._store_again():
                    return  # stop watching
                clock = StallClock(self.timeout, self._clock())  # a new store's counter starts again
                continue
            if clock.observe(count, self._clock()) and not self._stop.is_set():
                with contextlib.suppress(Exception):  # it says what it can itself; a store gone mid-way ends the watch
                    self._on_stall()
                return

    def _store_again(self) -> bool:
        """Connect to the coordinator that replaced a lost one (pod recovery); False when there is
        none to reach, or no coordinator at all (the store went away with the job)."""
        if self._reconnect is None or self._stop.is_set():
            return False
        try:
            self.store = self._reconnect()
        except Exception:  # noqa: BLE001 - none listens: the job is ending
            return False
        self._published_seq = -1  # the new store has no heartbeat of this rank yet
        return True

    def _publish(self) -> None:
        b = self.beacon
        seq, phase, step, since = b.seq, b.phase, b.step, b.since  # one consistent-enough snapshot
        wall = time.time() - (time.monotonic() - since)
        beat = Heartbeat(self.rank, self.node, self.local_rank, self.host, step, phase, seq, wall)
        self.store.set(f"hb/{self.rank}", beat.to_json())
        self._published_seq = seq

    # -- the stall
    def _on_stall(self) -> None:
        """Dump, publish, gather, let one rank print, exit: every rank runs this, and every rank
        exits with ``EXIT_STALLED`` whatever fails on the way (a store that went away included)."""
        self.stalled = True
        _stalling.set()
        out = self.out or sys.stderr
        printed = False
        try:
            frames = capture_stack(self._main_id)
            try:
                out.flush()
                faulthandler.dump_traceback(file=out, all_threads=True)
            except (AttributeError, ValueError, OSError):  # no real file descriptor (tests)
                pass
            trace = dump_flight_recorder(self.rank, self.backend, os.environ)
            if trace is not None:
                print(f"{PROG}: rank {self.rank}: NCCL flight recorder trace written to {trace}", file=out, flush=True)
            printed = self._agree(frames, out)
        except Exception as exc:  # noqa: BLE001 - the store failed mid-way: say what this rank knows
            self._say_alone(out, f"the watchdogs could not agree ({type(exc).__name__}: {exc})")
            printed = True
        finally:
            if not printed:
                self._say_alone(out, "no rank printed the job's summary in time")
            try:
                sys.stdout.flush()
                out.flush()
            finally:
                self._exit(EXIT_STALLED)

    def _agree(self, frames: list[Frame], out: Any) -> bool:
        """The store protocol: publish, wait for the others, decide, print once. Returns True when
        a summary was printed (by any rank)."""
        self._publish()
        self.store.set(f"stack/{self.rank}", json.dumps([asdict(f) for f in frames]))
        self.store.add("answered", 1)
        deadline = self._clock() + 3 * self.interval + 1.0
        while self.store.add("answered", 0) < self.world_size and self._clock() < deadline:
            time.sleep(self.interval / 4)
        # The lowest rank that answered decides (normally rank 0: every other rank checks one key).
        lowest = next((r for r in range(self.rank) if self.store.check([f"stack/{r}"])), self.rank)
        if lowest == self.rank:
            self._decide([r for r in range(self.world_size) if self.store.check([f"stack/{r}"])])
        deadline = self._clock() + 2 * self.interval + 5.0
        summary = self._wait_for("summary", deadline)
        if summary is None:
            return self._wait_for("printed", deadline) is not None
        keep_as_termination_message(summary["lines"])
        if summary["reporter"] == self.rank:
            # a moment for log shippers (torchrun's tee) to pass on the other ranks' dumps first
            self._stop.wait(min(self.interval, 1.0))
            print("\n".join(summary["lines"]), file=out, flush=True)
            self.store.set("printed", "1")
        try:
            printed = self._wait_for("printed", deadline) is not None
            self._hold_until_all_know(deadline)
        except Exception:  # noqa: BLE001 - the store went away after the summary was decided: it is printed
            return True
        return printed

    def _hold_until_all_know(self, deadline: float) -> None:
        """Wait (bounded) until every rank that answered has seen the summary printed. The store
        lives in node 0's agent, which exits as soon as its last worker does: without this, node
        0's ranks could take the store away from a rank still waiting for "printed", and that rank
        would print its own line without the summary's location (a runner reads the last one).
        Only node 0 (the store's host) waits: a rank elsewhere that touched the store after that could
        find it gone, and torch would log the lost connection after the summary."""
        self.store.add("knew", 1)
        if self.node != 0:
            return
        answered = self.store.add("answered", 0)
        while self.store.add("knew", 0) < answered and self._clock() < deadline:
            time.sleep(self.interval / 4)

    def _say_alone(self, out: Any, why: str) -> None:
        """This rank's own line when no job summary comes."""
        b = self.beacon
        print(
            f"{STALL_SUMMARY_TAG} {STALL_SUMMARY_FIRST} for {self.timeout:g} s; {why}. This is rank {self.rank} "
            f"(node {self.node}, local rank {self.local_rank}, host {self.host}), {position(b.step, b.phase)}; "
            f"stopping (exit code {EXIT_STALLED})",
            file=out,
            flush=True,
        )

    def _decide(self, answered: list[int]) -> None:
        beats = {
            r: Heartbeat.from_json(self.store.get(f"hb/{r}"))
            for r in range(self.world_size)
            if self.store.check([f"hb/{r}"])
        }
        stacks = {r: [Frame(**f) for f in json.loads(self.store.get(f"stack/{r}"))] for r in answered}
        analysis = analyse(self.world_size, beats, stacks, answered)
        lines = summary_lines(analysis, beats, time.time(), self.timeout, library_roots())
        # compare_set: a rank that answers after the gather window must not replace the summary
        self.store.compare_set("summary", "", json.dumps({"reporter": analysis.reporter, "lines": lines}))

    def _wait_for(self, key: str, deadline: float) -> Any:
        while self._clock() < deadline:
            if self.store.check([key]):
                raw = self.store.get(key)
                return json.loads(raw) if raw.startswith(b"{") else raw
            time.sleep(self.interval / 4)
        return None


def connect_store(
    world_size: int, restart_count: int, env: Mapping[str, str] | None = None, coordinator: str | None = None
) -> Store:
    """A store every rank of this attempt shares: its own client connection to the store the job
    already runs (torchrun's agent store, or rank 0's env:// store, at MASTER_ADDR:MASTER_PORT; with
    pod recovery the job's coordinator, as each node's torchrun store is its own), so the watchdog
    thread never shares a socket with the process group. One process: an in-memory store."""
    import datetime

    import torch.distributed as dist

    env = os.environ if env is None else env
    if coordinator is not None:
        host, _, port = coordinator.rpartition(":")
        client = dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=60))
        scope = env.get(RECOVERY_SCOPE_ENV, "")
        return dist.PrefixStore(f"{STORE_PREFIX}/coordinated/{scope}", client)
    if world_size == 1 or not env.get("MASTER_ADDR"):
        base: Any = dist.HashStore()
    else:
        base = dist.TCPStore(
            env["MASTER_ADDR"],
            int(env["MASTER_PORT"]),
            is_master=False,
            timeout=datetime.timedelta(seconds=60),
            wait_for_workers=False,
        )
    return dist.PrefixStore(f"{STORE_PREFIX}/attempt_{restart_count}", base)


def start(beacon: Beacon, timeout: float, ctx: Any) -> Watchdog | None:
    """Start watching this rank (``ctx``: the trainer's DistContext); None when turned off."""
    if timeout <= 0:
        return None
    import torch.distributed as dist

    def connect() -> Store:
        return connect_store(ctx.world_size, ctx.restart_count, coordinator=ctx.coordinator)

    try:
        store = connect()
    except Exception as exc:  # noqa: BLE001 - training goes on without the watchdog
        print(
            f"{WARNING_TAG}{rank_prefix(ctx.rank)}stall watchdog off: cannot reach the job's store ({exc})",
            file=sys.stderr,
        )
        return None
    backend = str(dist.get_backend()) if dist.is_initialized() else None
    return Watchdog(
        beacon,
        store,
        rank=ctx.rank,
        world_size=ctx.world_size,
        node=ctx.node_rank,
        local_rank=ctx.local_rank,
        timeout=timeout,
        backend=backend,
        reconnect=connect if ctx.coordinator else None,
    ).start()


__all__ = [
    "BACKWARD",
    "CHECKPOINT",
    "DATA",
    "DONE",
    "EVAL",
    "FORWARD",
    "LOGGING",
    "OPTIMIZER",
    "SETUP",
    "Beacon",
    "Watchdog",
    "connect_store",
    "stalling",
    "start",
]
