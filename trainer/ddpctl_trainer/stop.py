"""Stop requests: a SIGTERM during training ends the run at a step boundary, with a checkpoint.

A preempted pod gets SIGTERM, then SIGKILL when its grace period runs out. Raising from the
signal handler would lose every step since the last save, so while the training loop runs
(``deferring``) the first SIGTERM only *records* a request; the loop finishes the optimizer step
it is in, the ranks agree (one tiny all-reduce per step) to stop after the same step, rank 0
writes a checkpoint there and every rank exits with ``EXIT_PREEMPTED``. A second SIGTERM gives up
on that checkpoint at once (the atomic writes leave the previous one loadable). Outside the
loop (start-up, teardown) a SIGTERM still stops the process immediately.
"""

from __future__ import annotations

import threading
import time

_requested = threading.Event()
_deferring = False
_signal_at: float | None = None  # time.monotonic() of the first SIGTERM this process received


def defer(on: bool) -> None:
    """Turn deferral on while the training loop can stop at a step boundary, off otherwise."""
    global _deferring
    _deferring = on


def on_signal() -> bool:
    """Record a SIGTERM. Returns True when the caller should stop at once instead (not deferring,
    or a request was already pending: the second signal)."""
    global _signal_at
    if not _deferring or _requested.is_set():
        return True
    _signal_at = time.monotonic()
    _requested.set()
    return False


def requested() -> bool:
    """Whether this process has been asked to stop (its own SIGTERM)."""
    return _requested.is_set()


def wait(timeout: float) -> bool:
    """Block until a stop is requested or ``timeout`` passes (e.g. a callback that holds a rank at a
    step until it is signalled, as the tests' fault plugin does)."""
    return _requested.wait(timeout)


def seconds_since_signal() -> float | None:
    """Seconds since this process's SIGTERM, or None when it received none."""
    return None if _signal_at is None else time.monotonic() - _signal_at


def reset() -> None:
    """Forget any request (tests that run the trainer in-process several times)."""
    global _deferring, _signal_at
    _requested.clear()
    _deferring = False
    _signal_at = None


# Pod recovery: how many step boundaries in a row some ranks (not all) must be asked to stop before
# they leave alone: a job preempted or deleted as a whole gets its SIGTERMs a little apart, and the
# vote after next must see every rank asked (then all stop together, with a checkpoint).
LEAVE_AFTER_VOTES = 2


def decision(anyone: bool, everyone: bool, recovers_pods: bool, partial_votes: int) -> str:
    """After a step's stop vote: "go" on, "stop" every rank (a checkpoint, 143), or "leave" (the
    ranks asked to stop leave alone, the others form the group again with their replacements)."""
    if not anyone:
        return "go"
    if everyone or not recovers_pods:
        return "stop"
    return "leave" if partial_votes >= LEAVE_AFTER_VOTES else "go"
