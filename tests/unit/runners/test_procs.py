"""ddpctl.runners.procs: a local run's worker lines told apart by the marker torchrun adds, and the
process helpers every run relies on (children in their own sessions, their output line by line,
nothing left running), with small `sh` children instead of torchrun agents."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ddpctl.runners import procs
from ddpctl.runners.procs import RANK_MARK, log_line, split_rank_line

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def test_a_stray_rank_marker_joined_to_a_line_is_not_the_workers_text() -> None:
    """torchrun can join the next line's prefix to a line written in two parts (seen in a local run:
    `{json}@@ddpctl-rank=2@@`); the marker is ours, so the rank's text is the line without it."""
    assert split_rank_line(f'{RANK_MARK}2@@{{"rank": 2}}{RANK_MARK}2@@') == (2, '{"rank": 2}')
    assert split_rank_line(f"{RANK_MARK}0@@[rank 0] done") == (0, "done")
    assert split_rank_line("agent line") is None


@pytest.mark.parametrize(
    ("line", "found", "logged"),
    [
        (f"{RANK_MARK}3@@hello", (3, "hello"), "[rank 3] hello"),
        (f"{RANK_MARK}3@@[rank 1] not mine", (3, "[rank 1] not mine"), "[rank 3] [rank 1] not mine"),
        (f"{RANK_MARK}12@@", (12, ""), "[rank 12] "),
        (f"prefix {RANK_MARK}1@@x", (1, "x"), "[rank 1] x"),
        ("[rank 0] the trainer's own prefix", None, "[rank 0] the trainer's own prefix"),
        ("@@ddpctl-rank=x@@no rank", None, "@@ddpctl-rank=x@@no rank"),
    ],
)
def test_split_rank_line_and_log_line(line: str, found: tuple[int, str] | None, logged: str) -> None:
    assert split_rank_line(line) == found
    assert log_line(line) == logged


# ------------------------------------------------------------------------------ ports


def test_a_port_with_a_listener_is_not_free() -> None:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert procs.port_is_free(port) is False
    assert procs.port_is_free(port) is True


def test_free_port_is_one_nobody_listens_on() -> None:
    port = procs.free_port()
    assert 0 < port < 65536 and procs.port_is_free(port)


# ------------------------------------------------------------------------------ process trees


def test_subtree_finds_every_descendant_children_first() -> None:
    stats = {1: (0, 10), 2: (1, 11), 3: (2, 12), 4: (2, 13), 5: (9, 14), 6: (3, 15)}
    assert procs.subtree(1, stats) == {2: 11, 3: 12, 4: 13, 6: 15}
    assert list(procs.subtree(2, stats)) == [3, 4, 6]
    assert procs.subtree(5, stats) == {}


def test_alive_and_start_time_of_this_process_and_an_ended_one() -> None:
    assert procs.alive(os.getpid()) and procs.start_time(os.getpid()) is not None
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert not procs.alive(ended.pid) and procs.start_time(ended.pid) is None


def test_a_zombie_is_not_alive() -> None:
    child = subprocess.Popen(["true"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped: a zombie
    try:
        assert not procs.alive(child.pid)
    finally:
        child.wait()


def test_kill_if_same_leaves_a_reused_pid_alone() -> None:
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        started = procs.start_time(child.pid)
        assert started is not None
        assert procs.kill_if_same(child.pid, started + 1) is False  # another process with that pid
        assert child.poll() is None
        assert procs.kill_if_same(child.pid, started) is True
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()


# ------------------------------------------------------------------------------ children


def test_a_childs_lines_come_in_order_and_go_to_its_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "node-0.log"
    script = f"echo one; echo '{RANK_MARK}1@@two' >&2; printf 'three'"
    child = procs.start_child(0, "node 0", ["sh", "-c", script], ENV, log_path=log)
    mux = procs.LineMux([child])
    lines = []
    while mux.open:
        item = mux.get(timeout=30)
        assert item is not None, "no line within 30 s"
        lines.append(item[1])
    mux.join(timeout=5)
    assert lines == ["one", f"{RANK_MARK}1@@two", "three", None]  # stderr merged; None at EOF
    assert child.popen.wait(timeout=30) == 0 and child.poll() == 0
    assert log.read_text() == "one\n[rank 1] two\nthree\n"  # the marker as `[rank R] `
    assert child.started is not None


def test_a_child_runs_in_a_session_of_its_own(tmp_path: Path) -> None:
    child = procs.start_child(0, "node 0", ["sh", "-c", "exec sleep 60"], ENV)
    try:
        assert os.getsid(child.pid) == child.pid != os.getsid(0)
    finally:
        procs.stop_children([child], grace_s=5)


def test_a_program_that_does_not_exist_starts_nothing_and_closes_its_log(tmp_path: Path) -> None:
    log = tmp_path / "node-0.log"
    with pytest.raises(FileNotFoundError):
        procs.start_child(0, "node 0", ["no-such-program-for-ddpctl-tests"], ENV, log_path=log)
    assert log.exists() and log.read_text() == ""


def test_stopping_children_leaves_no_process_of_their_trees() -> None:
    """An agent's workers live in sessions of their own: stopping the agent's group alone would leave
    them; the tree seen under each child is killed too."""
    script = "setsid sleep 60 & echo $!; wait"
    child = procs.start_child(0, "node 0", ["sh", "-c", script], ENV)
    assert child.popen.stdout is not None
    worker = int(child.popen.stdout.readline())
    procs.remember_trees([child], force=True)
    assert worker in child.known_tree
    procs.stop_children([child], grace_s=5)
    assert child.poll() is not None and child.stopping
    assert not procs.alive(worker)


def test_workers_done_is_whether_every_process_seen_under_a_child_ended() -> None:
    """An agent whose workers all ended waits in torchrun's exit barrier: the child runs on, the
    processes once seen under it are gone."""
    script = "sleep 60 & echo $!; wait; echo waited; exec sleep 60"  # a worker, then the agent's barrier
    child = procs.start_child(0, "node 0", ["sh", "-c", script], ENV)
    assert child.popen.stdout is not None
    try:
        assert procs.workers_done(child) is False  # nothing seen under it yet, or the worker runs
        worker = int(child.popen.stdout.readline())
        assert procs.workers_done(child) is False and worker in child.known_tree
        os.kill(worker, signal.SIGKILL)
        assert child.popen.stdout.readline() == "waited\n"  # sh reaped it
        assert child.poll() is None and procs.workers_done(child) is True
    finally:
        procs.kill_leftovers([child])


def test_interrupt_on_signals_turns_sigterm_into_keyboardinterrupt() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"), procs.interrupt_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0)  # let the handler run now
    assert signal.getsignal(signal.SIGTERM) is before


def test_interrupt_on_signals_does_nothing_off_the_main_thread() -> None:
    seen: list[object] = []

    def off_main() -> None:
        with procs.interrupt_on_signals():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=off_main)
    thread.start()
    thread.join()
    assert seen == [before]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_the_subreaper_can_be_set_and_unset() -> None:
    assert procs.set_child_subreaper(True) is True
    assert procs.set_child_subreaper(False) is True


def test_await_gone_returns_once_a_killed_process_has_ended_and_gives_up_on_a_live_one() -> None:
    """A SIGKILL is delivered asynchronously: `kill_leftovers` waits for its victims, boundedly."""
    victim = subprocess.Popen(["sleep", "60"])
    live = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(victim.pid, signal.SIGKILL)
        procs.await_gone([victim.pid])
        assert not procs.alive(victim.pid)  # ended (a zombie until we wait: not alive)
        procs.await_gone([live.pid], timeout_s=0.05)
        assert procs.alive(live.pid)  # still running: the wait gave up at its bound
    finally:
        live.kill()
        live.wait()
        victim.wait()


@pytest.mark.parametrize(
    ("line", "base", "found"),
    [
        (RANK_MARK + "0@@[rank 2] hello", 2, (2, "hello")),  # a node run alone: its rank 0 is rank 2
        (RANK_MARK + "1@@hi", 4, (5, "hi")),
        (RANK_MARK + "3@@[rank 3] same", 0, (3, "same")),
        ("agent line", 2, None),
    ],
)
def test_a_marked_line_counts_its_rank_from_the_nodes_first(line: str, base: int, found: tuple | None) -> None:
    assert split_rank_line(line, base) == found
