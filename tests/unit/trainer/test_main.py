"""ddpctl_trainer.main: the entry point's contract: an exit code and at most one error line per
rank, never a traceback, whatever ends the run (a usage error, SIGTERM while reporting, a lost peer,
a missing object store client)."""

from __future__ import annotations

import sys

import pytest
import torch

from ddpctl_trainer import main as trainer_main
from ddpctl_trainer.config import parse_args, validate_for_world
from ddpctl_trainer.errors import CheckpointError, Preempted, Straggling, UsageError, peer_lost

GLOO_RESET = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:12174: "
    "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application."
)
RANK_1_OF_2 = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}


def test_sigterm_while_an_error_is_reported_is_still_one_line_and_exit_143(monkeypatch, capsys) -> None:
    """A SIGTERM that lands while an error is being printed (or a second one during the report of
    the first) must not escape as a traceback: torchrun SIGTERMs the other ranks after a failure."""
    import os
    import signal

    real_print = trainer_main.print_error
    printed: list[str] = []

    def print_and_get_terminated(message: str, rank: int | None = None) -> None:
        printed.append(message)
        real_print(message, rank)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered at the next bytecode, inside the handler

    monkeypatch.setattr(trainer_main, "print_error", print_and_get_terminated)
    before = signal.getsignal(signal.SIGTERM)
    code = trainer_main.main(["--model", "no-such-model"])
    assert code == 143
    assert printed[-1] == "stopped by SIGTERM" and len(printed) == 2, printed
    assert "Traceback" not in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_sigterm_that_lands_in_a_weakref_callback_still_ends_the_run(monkeypatch, capsys) -> None:
    """The garbage collector runs weakref callbacks between any two bytecodes, and Python prints and
    drops an exception raised in one: the handler's Terminated is raised again in the run, which
    ends with 143 and no traceback instead of training on."""
    import os
    import signal
    import threading
    import weakref

    def run(argv, label) -> int:
        class Thing:
            pass

        def kill_self(_: object) -> None:
            os.kill(os.getpid(), signal.SIGTERM)  # handled before this callback returns
            sum(range(10))

        thing = Thing()
        ref = weakref.ref(thing, kill_self)
        del thing  # the callback runs here, during the deallocation
        for _ in range(100):  # the run goes on: only the signal can end it early
            threading.Event().wait(0.02)
        return 0 if ref() is None else 1

    monkeypatch.setattr(trainer_main, "_run", run)
    before = sys.unraisablehook
    assert trainer_main.main([]) == 143
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert sys.unraisablehook is before


@pytest.mark.parametrize(
    ("stalling", "code", "line"),
    [
        pytest.param(
            False,
            138,
            "ddpctl-trainer: error: lost a peer during a collective after step 7 "
            "(Read error [127.0.0.1]:12174: Connection reset by peer): a collective failed because another rank "
            "stopped; exit 138 so the job restarts",
            id="peer-lost",
        ),
        # a peer's watchdog ended that peer first: this rank's watchdog exits it with 200, no line of its own
        pytest.param(True, 200, None, id="while-the-watchdog-ends-a-stall"),
    ],
)
def test_main_maps_a_lost_peer_to_138_with_one_line_and_no_traceback(
    stalling: bool, code: int, line: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ddpctl_trainer import trainer, watchdog

    def fails_as_a_peer_dies(*args: object) -> None:
        if stalling:
            watchdog._stalling.set()
        raise peer_lost(RuntimeError(GLOO_RESET), 7)

    monkeypatch.setattr(trainer, "run_trainer", fails_as_a_peer_dies)
    monkeypatch.setattr(trainer_main, "_WATCHDOG_EXIT_WAIT_S", 0.0)
    try:
        assert trainer_main.main(["--model", "convnet", "--synthetic-samples", "8"]) == code
    finally:
        watchdog._stalling.clear()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [x for x in err.splitlines() if x.startswith("ddpctl-trainer: error:")] == ([line] if line else [])


def test_the_obstore_client_is_required_where_the_trainer_starts_not_in_the_static_checks(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI runs parse_args and validate_for_world on its host (`run --docker`, whose image may
    have obstore while the host does not): they accept an s3:// dir without the client. The
    trainer itself, started without it, stops with one usage line (exit 2) on every rank alike."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "obstore" else real(name, *a))
    validate_for_world(parse_args(["--checkpoint-dir", "gs://bucket/run"], env={}), 4)
    assert trainer_main.main(["--checkpoint-dir", "gs://bucket/run"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "ddpctl-trainer: error: --checkpoint-dir: checkpoints in object storage need the obstore package, which is "
        "not installed: pip install 'obstore>=0.12,<0.13' (or 'ddpctl[s3]'); ddpctl build --build-arg "
        "OBJECT_STORE=1 puts it in the trainer image\n"
    )


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        # a runtime failure names its rank, as every line of a distributed job's rank starts
        (
            CheckpointError("checkpoint x is unreadable"),
            1,
            "ddpctl-trainer: error: [rank 1] checkpoint x is unreadable",
        ),
        (
            Preempted("stopped by SIGTERM after step 3"),
            143,
            "ddpctl-trainer: error: [rank 1] stopped by SIGTERM after step 3",
        ),
        # a usage error is the same on every rank: no rank
        (UsageError("--epochs must be at least 1"), 2, "ddpctl-trainer: error: --epochs must be at least 1"),
    ],
)
def test_a_ranks_error_line_starts_with_its_rank_prefix_after_the_tag(
    error: Exception, code: int, line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ddpctl_trainer import dist, trainer

    for name, value in RANK_1_OF_2.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LOCAL_RANK", "0")  # a preemption's line is printed by each node's local rank 0

    def fails(*args: object) -> None:
        raise error

    monkeypatch.setattr(dist, "setup", lambda *args, **kwargs: torch.device("cpu"))
    monkeypatch.setattr(trainer, "run_trainer", fails)
    assert trainer_main.main(["--synthetic-samples", "8"]) == code
    assert capsys.readouterr().err.splitlines() == [line]


@pytest.mark.parametrize(
    ("argv", "code", "errors"),
    [
        (["--preflight", "warn", "--preflight-only"], 0, []),
        (
            ["--preflight", "fail", "--preflight-only", "--preflight-min-gflops", "1e6"],
            201,
            ["ddpctl-trainer: error: preflight failed: slow node: node 0"],
        ),
    ],
)
def test_the_preflight_runs_before_anything_is_built_and_fail_exits_201(
    argv: list[str], code: int, errors: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """One process: the checks run once the process group would be up, rank 0 prints the report
    (`--preflight-only` stops there: `ddpctl check`), and under fail a finding (here a floor no CPU
    reaches) ends the run with EXIT_PREFLIGHT and one error line."""
    assert trainer_main.main([*argv, "--preflight-window", "0.05"]) == code
    out, err = capsys.readouterr()
    report = [line for line in out.splitlines() if "ddpctl-trainer: preflight" in line]
    assert report[0].startswith("[rank 0] ddpctl-trainer: preflight: 1 rank on 1 node (gloo, cpu)"), out
    assert report[-1].startswith("[rank 0] ddpctl-trainer: preflight verdict: " + ("failed" if code else "passed"))
    lines = [x for x in err.splitlines() if x.startswith("ddpctl-trainer: error:")]
    assert [x[: len(e)] for x, e in zip(lines, errors)] == errors and len(lines) == len(errors), err
    assert "Traceback" not in err


@pytest.mark.parametrize(("env", "printed"), [({}, 1), (RANK_1_OF_2, 0)], ids=["rank-0", "rank-1-of-2"])
def test_every_rank_keeps_a_straggler_stop_as_its_termination_message(
    env: dict[str, str], printed: int, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only rank 0 prints why --stragglers fail stopped the job, but every rank writes it where
    Kubernetes keeps it on the pod: the Job controller may delete node 0's pod, and its log with it."""
    import functools

    from ddpctl_trainer import dist, errors, trainer

    why = "straggler: node 1 (pod sg-1-x, k8s node n1) below 0.6 x the median since step 12; stopping (exit 202)"

    def stops_for_a_straggler(*args: object) -> None:
        raise Straggling(why)

    log = tmp_path / "termination-log"
    log.write_text("")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(dist, "setup", lambda *a, **kw: torch.device("cpu"))
    monkeypatch.setattr(trainer, "run_trainer", stops_for_a_straggler)
    keep = functools.partial(errors.keep_as_termination_message, path=str(log))
    monkeypatch.setattr(trainer_main, "keep_as_termination_message", keep)
    assert trainer_main.main(["--model", "convnet", "--synthetic-samples", "8"]) == 202
    assert log.read_text() == why + "\n"
    err = capsys.readouterr().err
    assert len([x for x in err.splitlines() if x.startswith("ddpctl-trainer: error:")]) == printed, err
