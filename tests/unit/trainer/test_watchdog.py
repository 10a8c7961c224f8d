"""ddpctl_trainer.watchdog, in process: the beacon the training loop marks, the watchdog's wake-ups,
the stacks it reads, the NCCL flight recorder it dumps, and the whole protocol of several ranks'
watchdog threads over one in-memory c10d store (exit injected, nothing exits). What the summary
says is decided in stall.py (test_stall.py)."""

from __future__ import annotations

import io
import json
import threading

import pytest
import torch.distributed as dist

from ddpctl_trainer import watchdog
from ddpctl_trainer.protocol import EXIT_STALLED, STALL_SUMMARY_TAG
from ddpctl_trainer.stall import BACKWARD, DATA, EVAL, FORWARD, LOGGING, SETUP
from ddpctl_trainer.watchdog import Beacon, Watchdog, capture_stack, dump_flight_recorder, interval_for


@pytest.fixture(autouse=True)
def _process_not_left_stalling():
    """The watchdogs here run in the test process: its "stalling" flag must not outlive a test."""
    yield
    watchdog._stalling.clear()


# --------------------------------------------------------------------------------------------
# The beacon: where this rank is, marked by the training loop
# --------------------------------------------------------------------------------------------


def test_the_beacon_marks_each_phase_and_each_fetch_of_a_batch() -> None:
    beacon = Beacon()
    assert (beacon.phase, beacon.seq, beacon.step) == (SETUP, 0, 0)
    phases: list[tuple[int, str, int]] = []
    for item in beacon.batches([10, 20], EVAL):
        phases.append((item, beacon.phase, beacon.seq))
        beacon.mark(FORWARD)
    assert phases == [(10, EVAL, 1), (20, EVAL, 3)]  # marked before each fetch: a loader that hangs is in eval
    assert (beacon.phase, beacon.seq) == (EVAL, 5)  # the fetch that found the end
    beacon.step_done(7)
    assert (beacon.phase, beacon.step, beacon.seq) == (LOGGING, 7, 6)


@pytest.mark.parametrize(("timeout", "interval"), [(0.5, 0.2), (10.0, 1.0), (30.0, 3.0), (300.0, 5.0)])
def test_the_watchdog_wakes_often_enough_to_decide_within_a_tenth_of_the_timeout(
    timeout: float, interval: float
) -> None:
    assert interval_for(timeout) == interval


def test_a_timeout_of_0_starts_no_watchdog() -> None:
    assert watchdog.start(Beacon(), 0, ctx=None) is None


# --------------------------------------------------------------------------------------------
# The protocol: three ranks' watchdog threads over one store
# --------------------------------------------------------------------------------------------


def _block(event: threading.Event) -> None:
    event.wait()  # the "user code" frame that must show up in the summary


def test_stacks_are_read_from_another_thread() -> None:
    release = threading.Event()
    t = threading.Thread(target=_block, args=(release,))
    t.start()
    try:
        frames = capture_stack(t.ident)
        while frames[-1].function != "wait":  # until the thread is inside Event.wait (bounded by the join below)
            frames = capture_stack(t.ident)
    finally:
        release.set()
        t.join()
    mine = [f for f in frames if f.file == __file__]
    assert mine and mine[-1].function == "_block" and mine[-1].source.startswith("event.wait()")


def test_three_ranks_agree_on_one_summary_printed_once_and_all_exit() -> None:
    store = dist.PrefixStore("test", dist.HashStore())
    outs = [io.StringIO() for _ in range(3)]
    exits: list[int] = []
    done = threading.Barrier(4)

    def exit_(code: int) -> None:
        exits.append(code)
        done.wait(timeout=60)

    beacons = [Beacon() for _ in range(3)]
    for rank, b in enumerate(beacons):  # ranks 0 and 2 reached the all-reduce, rank 1 did not
        b.step = 4
        for _ in range(6):
            b.mark(DATA)
        b.mark(FORWARD if rank == 1 else BACKWARD)
        if rank != 1:
            b.mark(BACKWARD)
    dogs = [
        Watchdog(
            b, store, rank=r, world_size=3, node=r, local_rank=0, timeout=0.3, interval=0.05, out=outs[r], exit=exit_
        )
        for r, b in enumerate(beacons)
    ]
    for d in dogs:
        d.start()
    done.wait(timeout=60)  # every watchdog called exit
    assert exits == [EXIT_STALLED] * 3
    printed = [o.getvalue() for o in outs]
    reporters = [r for r, text in enumerate(printed) if STALL_SUMMARY_TAG in text]
    assert reporters == [0], printed
    summary = [line for line in printed[0].splitlines() if line.startswith(STALL_SUMMARY_TAG)]
    assert "rank 1 (node 1, local rank 0, host " in summary[1] and "in forward of step 5" in summary[1]
    assert "ranks 0, 2 (nodes 0, 2) wait for it in backward+all-reduce of step 5" in summary[-2]
    assert json.loads(store.get("summary"))["reporter"] == 0
    assert watchdog.stalling()  # main's SIGTERM handler now lets the process end quietly


# --------------------------------------------------------------------------------------------
# The NCCL flight recorder, dumped by the watchdog (it ends the job before NCCL's own timeout)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "env", "written"),
    [
        pytest.param("nccl", {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}, True, id="legacy-names"),
        pytest.param("nccl", {"TORCH_FR_BUFFER_SIZE": "100"}, True, id="new-names"),
        pytest.param("nccl", {}, False, id="recorder-off"),
        pytest.param("nccl", {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}, False, id="recorder-size-0"),
        pytest.param("gloo", {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}, False, id="not-nccl"),
    ],
)
def test_flight_recorder_dump(tmp_path, backend: str, env: dict[str, str], written: bool) -> None:
    import pickle

    names = ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE")
    prefix_var = names[1] if "TORCH_FR_BUFFER_SIZE" in env else names[0]
    env = {**env, prefix_var: f"{tmp_path}/nccl_trace_rank_"}
    path = dump_flight_recorder(3, backend, env)
    if not written:
        assert path is None and list(tmp_path.iterdir()) == []
        return
    assert path == tmp_path / "nccl_trace_rank_3"
    trace = pickle.loads(path.read_bytes())  # noqa: S301 - the file this test just had written
    assert "entries" in trace  # PyTorch's trace format (empty here: no NCCL)
    assert [p.name for p in tmp_path.iterdir()] == ["nccl_trace_rank_3"]  # no temp file left


class _StoreThatDiesAtTheStall:
    """A store that works until the first stack is published, then fails like a lost connection."""

    def __init__(self) -> None:
        self.inner = dist.HashStore()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def set(self, key: str, value: str) -> None:
        if key.startswith("stack/"):
            raise RuntimeError("Connection reset by peer")
        self.inner.set(key, value)


def test_a_store_lost_at_the_stall_still_ends_the_rank_with_its_own_line() -> None:
    out = io.StringIO()
    exited = threading.Event()
    codes: list[int] = []

    def exit_(code: int) -> None:
        codes.append(code)
        exited.set()

    beacon = Beacon()
    beacon.step = 9
    beacon.mark(FORWARD)
    dog = Watchdog(
        beacon,
        _StoreThatDiesAtTheStall(),
        rank=5,
        world_size=8,
        node=2,
        local_rank=1,
        timeout=0.3,
        interval=0.05,
        host="pod-2",
        out=out,
        exit=exit_,
    )
    dog.start()
    assert exited.wait(timeout=60)
    assert codes == [EXIT_STALLED]
    line = [x for x in out.getvalue().splitlines() if x.startswith(STALL_SUMMARY_TAG)]
    assert len(line) == 1 and "the watchdogs could not agree (RuntimeError: Connection reset by peer)" in line[0]
    assert (
        "This is rank 5 (node 2, local rank 1, host pod-2), in forward of step 10; stopping (exit code 200)" in line[0]
    )


class _StoreGoneAfterPrinted:
    """A store that fails like a lost connection once the summary is printed: the store's host
    (node 0's agent) exited with its workers while other ranks still read it. A double because a
    real TCPStore's host cannot be made to go at exactly that moment."""

    def __init__(self) -> None:
        self.inner = dist.HashStore()
        self.gone = False

    def __getattr__(self, name: str):
        def call(*args):
            if self.gone:
                raise RuntimeError("Connection reset by peer")
            return getattr(self.inner, name)(*args)

        return call

    def set(self, key: str, value: str) -> None:
        if self.gone:
            raise RuntimeError("Connection reset by peer")
        self.inner.set(key, value)
        self.gone = key == "printed"


def test_a_store_gone_after_the_summary_leaves_the_summary_the_last_word() -> None:
    store = _StoreGoneAfterPrinted()
    outs = [io.StringIO() for _ in range(3)]
    exits: list[int] = []
    done = threading.Barrier(4)

    def exit_(code: int) -> None:
        exits.append(code)
        done.wait(timeout=60)

    beacons = [Beacon() for _ in range(3)]
    for rank, b in enumerate(beacons):
        b.step = 4
        b.mark(FORWARD if rank == 1 else BACKWARD)
    dogs = [
        Watchdog(
            b, store, rank=r, world_size=3, node=r, local_rank=0, timeout=0.3, interval=0.05, out=outs[r], exit=exit_
        )
        for r, b in enumerate(beacons)
    ]
    for d in dogs:
        d.start()
    done.wait(timeout=60)
    assert exits == [EXIT_STALLED] * 3
    printed = [o.getvalue() for o in outs]
    assert STALL_SUMMARY_TAG in printed[0] and "could not agree" not in "".join(printed), printed
    assert not any(STALL_SUMMARY_TAG in text for text in printed[1:]), printed


def test_no_stall_is_declared_while_a_rank_waits_for_a_replacement() -> None:
    """Pod recovery: a survivor makes no progress while the lost peer's replacement starts (a new pod
    can take minutes); the watchdog's clock starts over when the wait ends."""
    store = dist.PrefixStore("waiting", dist.HashStore())
    exited = threading.Event()
    beacon = Beacon()
    dog = Watchdog(
        beacon,
        store,
        rank=0,
        world_size=1,
        node=0,
        local_rank=0,
        timeout=0.2,
        interval=0.02,
        out=io.StringIO(),
        exit=lambda code: exited.set(),
    )
    with watchdog.waiting_for_a_replacement():
        dog.start()
        assert not exited.wait(1.0)  # five timeouts without progress, none of them a stall
    assert exited.wait(30)  # the wait is over: no progress now is a stall


class _StoreLost:
    """A store whose connection broke (its coordinator's pod was lost): every operation fails."""

    def __getattr__(self, name: str):
        def fail(*args: object) -> None:
            raise dist.DistNetworkError("Connection reset by peer")

        return fail


@pytest.mark.parametrize("replaced", [True, False])
def test_a_replaced_coordinator_is_watched_through_again(replaced: bool) -> None:
    """Pod recovery: the watchdog's store is the coordinator's. When a new coordinator replaces a
    lost one, the watchdog connects to it and goes on (its heartbeat there, a stall still found);
    with nothing to connect to it stops watching, and the training goes on without it."""
    new = dist.PrefixStore("new", dist.HashStore())
    exited = threading.Event()
    reconnects: list[int] = []

    def reconnect() -> object:
        reconnects.append(1)
        if not replaced:
            raise dist.DistNetworkError("no coordinator listens")
        return new

    dog = Watchdog(
        Beacon(),
        _StoreLost(),  # type: ignore[arg-type]
        rank=0,
        world_size=1,
        node=0,
        local_rank=0,
        timeout=0.3,
        interval=0.02,
        out=io.StringIO(),
        exit=lambda code: exited.set(),
        reconnect=reconnect,  # type: ignore[arg-type]
    )
    dog._published_seq = 0  # as after start()'s first heartbeat, which went to the lost store
    dog._thread.start()
    if replaced:
        assert exited.wait(30)  # no progress on the new store either: a stall, found through it
        assert new.check(["hb/0"]) and reconnects == [1]
    else:
        dog._thread.join(30)
        assert not dog._thread.is_alive() and not exited.is_set() and reconnects == [1]
