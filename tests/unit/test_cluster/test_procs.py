"""testcluster.procs with real processes: a component starts in its own session with a pidfile and a
log, `stop` ends it with its children, and waiting fails early with the end of a dead one's log."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testcluster import procs
from tests.support import REPO


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(procs, "STATE", tmp_path)
    return tmp_path


def start_and_leave(state: Path, name: str, argv: list[str]) -> int:
    """Start a component from a process that then exits, as `python -m testcluster up` does: the
    component outlives it (reaped by init, not by this test)."""
    code = f"from testcluster.procs import start; start({name!r}, {argv!r})"
    env = {**os.environ, "DDPCTL_CLUSTER_DIR": str(state)}
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True)
    pid = procs.running(name)
    assert pid, (state / "logs" / f"{name}.log").read_text()
    return pid


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stop_ends_the_component_and_its_children(state: Path) -> None:
    pid = start_and_leave(state, "sleeper", ["sh", "-c", "echo started; sleep 300 & wait"])
    assert os.getpgid(pid) == pid  # a session of its own: `stop` signals the whole group
    procs.stop("sleeper")
    assert procs.running("sleeper") is None
    assert not procs.pidfile("sleeper").exists()
    deadline = time.monotonic() + 10  # init reaps the group's processes; the sleep is among them
    while group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(pid)
    assert (state / "logs" / "sleeper.log").read_text() == "started\n"


def test_start_leaves_a_running_component_alone(state: Path) -> None:
    pid = start_and_leave(state, "sleeper", ["sleep", "300"])
    try:
        procs.start("sleeper", ["false"])
        assert procs.running("sleeper") == pid
    finally:
        procs.stop("sleeper")


@pytest.mark.parametrize("pidfile", [None, "not a pid", "999999999"])
def test_a_missing_garbled_or_dead_pidfile_means_not_running(state: Path, pidfile: str | None) -> None:
    if pidfile is not None:
        (state / "run").mkdir()
        procs.pidfile("x").write_text(pidfile)
    assert procs.running("x") is None
    procs.stop("x")  # nothing to stop: no error
    assert not procs.pidfile("x").exists()


def test_a_component_that_exited_but_is_not_reaped_yet_is_not_running(state: Path) -> None:
    """A zombie (exited, its parent not yet waiting for it: init, for a component) still answers
    kill(pid, 0); `running` must not count it, or every stop waits for init's next reaping."""
    child = subprocess.Popen(["true"])
    (state / "run").mkdir()
    procs.pidfile("x").write_text(str(child.pid))
    try:
        deadline = time.monotonic() + 10  # until it has exited: its stat says Z, and it stays so
        while "Z" not in Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1][:3]:
            assert time.monotonic() < deadline, "true did not exit"
            time.sleep(0.01)
        assert procs.running("x") is None
    finally:
        child.wait()


def test_waiting_returns_once_the_check_holds_and_retries_what_is_not_up_yet(state: Path) -> None:
    answers = iter([OSError("refused"), False, True])

    def check() -> bool:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    procs.wait_for("a thing", check, timeout=10)
    assert next(answers, "done") == "done"


def test_waiting_on_a_component_that_exited_fails_with_its_log(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (state / "logs").mkdir()
    (state / "logs" / "ghost.log").write_text("".join(f"line {i}\n" for i in range(30)) + "bind: address in use\n")
    with pytest.raises(SystemExit) as e:
        procs.wait_for("the ghost's port", lambda: False, timeout=60, name="ghost")
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert "cluster: error: ghost exited while waiting for the ghost's port" in err
    assert "bind: address in use" in err
    assert "line 15\n" not in err  # the end of the log only


def test_waiting_times_out_naming_what_and_where_the_logs_are(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        procs.wait_for("nothing", lambda: False, timeout=0.3)
    assert f"timed out after 0 s waiting for nothing (logs: {state / 'logs'})" in capsys.readouterr().err
