"""The stall watchdog's decisions, in process: the stall clock with an injected clock, who is behind
from fake heartbeats, the summary's wording, the frames it shows, and the whole protocol of several
ranks' watchdog threads over one in-memory c10d store (exit injected, nothing exits)."""

from __future__ import annotations

import io
import json
import threading

import pytest
import torch.distributed as dist
from ddpctl_trainer import watchdog
from ddpctl_trainer.config import parse_args
from ddpctl_trainer.errors import UsageError
from ddpctl_trainer.protocol import EXIT_STALLED, STALL_SUMMARY_TAG
from ddpctl_trainer.stall import (
    BACKWARD,
    DATA,
    EVAL,
    FORWARD,
    LOGGING,
    SETUP,
    Frame,
    Heartbeat,
    StallClock,
    analyse,
    position,
    summary_lines,
    user_frames,
)
from ddpctl_trainer.watchdog import Beacon, Watchdog, capture_stack, dump_flight_recorder


@pytest.fixture(autouse=True)
def _process_not_left_stalling():
    """The watchdogs here run in the test process: its "stalling" flag must not outlive a test."""
    yield
    watchdog._stalling.clear()


ROOTS = ("/usr/lib/python3.11/", "/opt/ddpctl_trainer/")
USER_FRAME = Frame("/work/model.py", 88, "forward", "self.lock.acquire()")
STACK = [
    Frame("/opt/ddpctl_trainer/trainer.py", 300, "_run_batch", "out = self.model(x)"),
    Frame("/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 1794, "_call_impl", ""),
    USER_FRAME,
    Frame("/usr/lib/python3.11/threading.py", 320, "wait", "waiter.acquire()"),
]


def beat(rank: int, seq: int, phase: str, step: int = 2, since: float = 100.0, per_node: int = 2) -> Heartbeat:
    return Heartbeat(rank, rank // per_node, rank % per_node, f"pod-{rank // per_node}", step, phase, seq, since)


# --------------------------------------------------------------------------------------------
# The stall clock: progress is any change of the job-wide counter
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("readings", "expected"),
    [
        pytest.param([(1, 1.0), (2, 2.0), (3, 3.0), (4, 60.0)], [False] * 4, id="counter-moves-every-reading"),
        pytest.param([(5, 1.0), (5, 5.0), (5, 10.9)], [False, False, False], id="still-under-the-timeout"),
        pytest.param([(5, 1.0), (5, 5.0), (5, 11.0)], [False, False, True], id="no-change-for-the-timeout"),
        # a slow job: the counter moves less often than the wake-ups, but within the timeout
        pytest.param([(1, 1.0), (1, 9.0), (2, 10.0), (2, 19.0), (3, 20.0)], [False] * 5, id="slow-but-moving"),
        pytest.param([(1, 1.0), (2, 2.0), (2, 11.0), (2, 12.0)], [False, False, False, True], id="stops-later"),
    ],
)
def test_stall_clock(readings: list[tuple[int, float]], expected: list[bool]) -> None:
    clock = StallClock(timeout=10.0, now=0.0)
    assert [clock.observe(count, t) for count, t in readings] == expected


# --------------------------------------------------------------------------------------------
# Who is behind
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("beats", "answered", "behind", "waiting", "silent", "reporter"),
    [
        pytest.param(  # rank 2 hangs in forward; the others finished forward and wait in the all-reduce
            [beat(0, 7, BACKWARD), beat(1, 7, BACKWARD), beat(2, 6, FORWARD), beat(3, 7, BACKWARD)],
            [0, 1, 2, 3],
            [2],
            [(0, 1, 3)],
            [],
            0,
            id="one-rank-in-forward",
        ),
        pytest.param(  # rank 0 is the one behind: the lowest rank that is not behind reports
            [beat(0, 5, DATA), beat(1, 7, BACKWARD), beat(2, 7, BACKWARD), beat(3, 7, BACKWARD)],
            [0, 1, 2, 3],
            [0],
            [(1, 2, 3)],
            [],
            1,
            id="rank-0-behind",
        ),
        pytest.param(  # two ranks stopped at different places; a third waits in between
            [beat(0, 7, BACKWARD), beat(1, 5, DATA), beat(2, 6, FORWARD), beat(3, 7, BACKWARD)],
            [0, 1, 2, 3],
            [1, 2],
            [(0, 3)],
            [],
            0,
            id="two-behind",
        ),
        pytest.param(  # everyone at the same place: a hang inside the collective itself
            [beat(r, 7, BACKWARD) for r in range(4)],
            [0, 1, 2, 3],
            [],
            [(0, 1, 2, 3)],
            [],
            0,
            id="all-alike",
        ),
        pytest.param(  # rank 3 never published; rank 0's watchdog did not answer (frozen)
            [beat(0, 7, BACKWARD), beat(1, 7, BACKWARD), beat(2, 7, BACKWARD)],
            [1, 2],
            [],
            [(0, 1, 2)],
            [3],
            1,
            id="silent-rank",
        ),
    ],
)
def test_analyse(
    beats: list[Heartbeat],
    answered: list[int],
    behind: list[int],
    waiting: list[tuple[int, ...]],
    silent: list[int],
    reporter: int,
) -> None:
    result = analyse(4, {b.rank: b for b in beats}, {}, answered)
    assert [b.rank for b in result.behind] == behind
    assert [g.ranks for g in result.waiting] == waiting
    assert list(result.silent) == silent
    assert result.reporter == reporter


def test_one_process_is_the_one_behind() -> None:
    result = analyse(1, {0: beat(0, 7, FORWARD)}, {}, [0])
    assert [b.rank for b in result.behind] == [0] and result.waiting == () and result.reporter == 0


@pytest.mark.parametrize(
    ("step", "phase", "words"),
    [
        (2, FORWARD, "in forward of step 3"),
        (2, DATA, "in data of step 3"),
        (2, BACKWARD, "in backward+all-reduce of step 3"),
        (3, LOGGING, "in logging after step 3"),
        (3, EVAL, "in eval after step 3"),
        (0, SETUP, "in setup (resuming, before the first step)"),
    ],
)
def test_position_words(step: int, phase: str, words: str) -> None:
    assert position(step, phase) == words


# --------------------------------------------------------------------------------------------
# The summary
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frames", "shown"),
    [
        pytest.param(STACK, [USER_FRAME], id="only-the-users-frames"),
        pytest.param(STACK[1:2] + STACK[3:], [STACK[3], STACK[1]], id="no-user-frame-innermost-library-frames"),
    ],
)
def test_user_frames(frames: list[Frame], shown: list[Frame]) -> None:
    assert user_frames(frames, ROOTS) == shown


def test_summary_names_the_rank_its_node_phase_frame_and_who_waits() -> None:
    beats = {b.rank: b for b in [beat(0, 7, BACKWARD), beat(1, 7, BACKWARD), beat(2, 6, FORWARD, since=60.0)]}
    beats[3] = beat(3, 7, BACKWARD)
    analysis = analyse(4, beats, {2: STACK, 0: STACK[:1]}, [0, 1, 2, 3])
    lines = summary_lines(analysis, beats, now=100.0, timeout=30.0, roots=ROOTS)
    assert all(line.startswith(STALL_SUMMARY_TAG + " ") for line in lines)
    text = "\n".join(line[len(STALL_SUMMARY_TAG) + 1 :] for line in lines)
    assert text == (
        f"no rank made progress for 30 s (--stall-timeout 30); stopping the job (exit code {EXIT_STALLED})\n"
        "rank 2 (node 1, local rank 0, host pod-1) stopped 40 s ago in forward of step 3:\n"
        "    at /work/model.py:88 in forward: self.lock.acquire()\n"
        "ranks 0, 1, 3 (nodes 0, 1) wait for it in backward+all-reduce of step 3 (for 0 s)\n"
        "every rank's Python stacks are in its log (faulthandler)"
    )


def test_summary_of_a_hang_on_every_rank_and_of_a_frozen_rank() -> None:
    same = {r: beat(r, 7, BACKWARD, since=95.0) for r in range(2)}
    lines = summary_lines(analyse(2, same, {0: STACK}, [0, 1]), same, 100.0, 5.0, ROOTS)
    assert "every rank stopped in backward+all-reduce of step 3 5 s ago" in lines[1]
    assert lines[2].endswith("at /work/model.py:88 in forward: self.lock.acquire()")

    frozen = {0: beat(0, 7, BACKWARD), 1: beat(1, 6, DATA)}
    lines = summary_lines(analyse(2, frozen, {0: STACK[:1]}, [0]), frozen, 100.0, 5.0, ROOTS)
    assert (
        "rank 1 (node 0, local rank 1, host pod-0) stopped 0 s ago in data of step 3; its stack did not come"
        in (lines[1])
    )


# --------------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, 300.0),
        (["--stall-timeout", "7.5"], {}, 7.5),
        ([], {"DDP_TRAINER_STALL_TIMEOUT": "42"}, 42.0),
        (["--stall-timeout", "0"], {"DDP_TRAINER_STALL_TIMEOUT": "42"}, 0.0),  # the command line wins; 0 = off
    ],
)
def test_stall_timeout_flag_and_env(argv: list[str], env: dict[str, str], expected: float) -> None:
    assert parse_args(argv, env).stall_timeout == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stall-timeout", "-1"], "--stall-timeout must be 0 (off) or a number of seconds"),
        (["--stall-timeout", "nan"], "--stall-timeout must be 0 (off) or a number of seconds"),
        (["--stall-timeout", "600"], "--stall-timeout 600 is not below --timeout-s 600"),  # the default timeout
        (["--stall-timeout", "90", "--timeout-s", "60"], "--stall-timeout 90 is not below --timeout-s 60"),
    ],
)
def test_bad_stall_timeout_is_a_usage_error(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_args(argv, {})


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


def test_flag_help_names_the_exit_code() -> None:
    from ddpctl_trainer.config import build_parser

    assert f"exit code {EXIT_STALLED}" in " ".join(build_parser().format_help().split())


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


def test_the_summary_is_kept_as_the_termination_message_where_kubernetes_gives_one(tmp_path) -> None:
    """In a container the kubelet mounts /dev/termination-log: the summary goes there whole (and
    stays on the pod object); where the file does not exist nothing is created."""
    from ddpctl_trainer.watchdog import _keep_as_termination_message

    log = tmp_path / "termination-log"
    log.write_text("")
    _keep_as_termination_message(["ddpctl-trainer: stalled: a", "ddpctl-trainer: stalled: b"], str(log))
    assert log.read_text() == "ddpctl-trainer: stalled: a\nddpctl-trainer: stalled: b\n"
    _keep_as_termination_message(["x" * 5000], str(log))
    assert len(log.read_text()) <= 4096
    _keep_as_termination_message(["a"], str(tmp_path / "absent"))
    assert not (tmp_path / "absent").exists()
