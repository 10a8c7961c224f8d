"""ddpctl_trainer.stall: the stall clock with an injected clock, who is behind from fake
heartbeats, the summary's wording and the frames it shows (pure functions, no threads)."""

from __future__ import annotations

import pytest

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


def test_a_heartbeat_is_one_line_of_json_and_back() -> None:
    sent = beat(3, 41, FORWARD, step=9, since=1234.5)
    text = sent.to_json()
    assert "\n" not in text and Heartbeat.from_json(text) == sent
    assert Heartbeat.from_json(text.encode()) == sent  # as the c10d store gives it back


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
