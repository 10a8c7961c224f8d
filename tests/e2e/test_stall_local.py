"""Hangs name their rank: real gloo jobs through `ddpctl run --local` (2 nodes x 2 processes, the
ddpctl trainer) in which one rank stops, and one in which a rank only gets slower.

* a custom model (`--model tests.support.models.stall_models:blocking`) blocks forever in rank 2's forward
  (rank 0 prints the summary), and in rank 0's (then rank 1, the lowest healthy rank, prints it);
* an image-folder dataset whose one file is a FIFO nobody writes: the rank that draws it hangs in
  its data loader exactly as on a dead network filesystem;
* a custom model whose rank 1 sleeps longer at every step, but finishes each one.

Each waits on output lines and the process's exit (bounded), never on sleeps: after the block is
seen, the job must end within --stall-timeout + 30 s.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.support import REPO
from tests.support.procs import start_ddpctl, stop_like_a_user

MODELS = REPO / "tests" / "support" / "models" / "stall_models.py"
START_TIMEOUT = 240  # seconds until the block happens (starting 4 processes on a busy machine)
STALL_TIMEOUT = 12  # above a first step on a busy 2-core machine, so no false stall fires
SUMMARY = "ddpctl-trainer: stalled:"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDPCTL_", "DDP_TRAINER_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["NO_COLOR"] = "1"
    return env


class Job:
    """A running `ddpctl` whose stdout and stderr are read line by line by two threads, so a wait
    for a line never misses one already read and a full pipe never blocks the job."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.out: list[str] = []
        self.err: list[str] = []
        self._closed = 0
        self._cond = threading.Condition()
        self._threads = [
            threading.Thread(target=self._pump, args=(stream, into), daemon=True)
            for stream, into in ((proc.stdout, self.out), (proc.stderr, self.err))
        ]
        for t in self._threads:
            t.start()

    def _pump(self, stream: IO[str], into: list[str]) -> None:
        for line in stream:
            with self._cond:
                into.append(line)
                self._cond.notify_all()
        with self._cond:
            self._closed += 1
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float) -> None:
        """Until a stdout line matches ``pattern`` (fails after ``timeout`` or at the job's end)."""

        def seen() -> bool:
            return any(re.search(pattern, line) for line in self.out)

        with self._cond:
            self._cond.wait_for(lambda: seen() or self._closed == 2, timeout)
            if seen():
                return
        pytest.fail(f"no line matching {pattern!r} within {timeout}s; got:\n{''.join(self.out)[-3000:]}")

    def finish(self, timeout: float) -> None:
        """Until the job has ended and its output is read (fails after ``timeout``)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job did not end within {timeout} s")
        for t in self._threads:
            t.join(timeout=30)


@pytest.fixture
def ddpctl() -> Iterator:
    """Start `ddpctl ARGS` in the background; anything still running at the end is stopped the way a
    user does (Ctrl-C), then killed with every process of its tree."""
    jobs: list[Job] = []

    def start(*args: str, cwd: Path) -> Job:
        proc = start_ddpctl(args, cwd, _env())
        jobs.append(Job(proc))
        return jobs[-1]

    yield start
    for job in jobs:
        stop_like_a_user(job.proc, pipes_read_elsewhere=True)


_DUMP_LINE = re.compile(r"^\[rank \d+\] (Thread 0x|Current thread 0x|  File |$)")


def _rank_lines(lines: list[str]) -> list[str]:
    """The training processes' own lines (`[rank R] ...`), without torchrun's `[node N]` report and
    without the faulthandler dumps (every rank's comes before the summary, but through separate
    tee'd files whose lines the runner may interleave)."""
    return [line.rstrip("\n") for line in lines if line.startswith("[rank ") and not _DUMP_LINE.match(line)]


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _summary(lines: list[str]) -> list[str]:
    """The watchdog's summary: it must be the last lines any rank printed, all from one rank."""
    ranks = _rank_lines(lines)
    tail: list[str] = []
    for line in reversed(ranks):
        if SUMMARY not in line:
            break
        tail.insert(0, line)
    assert tail, "\n".join(ranks[-40:])
    assert len({line.split("]", 1)[0] for line in tail}) == 1, tail  # printed once, by one rank
    assert all(SUMMARY not in line for line in ranks[: -len(tail)]), "the summary is printed only once"
    return tail


def _assert_every_rank_dumped_its_stacks(lines: list[str]) -> None:
    for rank in range(4):
        assert any(line.startswith(f"[rank {rank}] Thread 0x") for line in lines), f"rank {rank}: no faulthandler dump"


@pytest.mark.slow
def test_a_rank_blocked_in_forward_is_named_with_its_node_phase_and_frame(ddpctl, tmp_path: Path) -> None:
    job = ddpctl(
        "run",
        "--local",
        "--backoff-limit",
        "0",  # the stall ends the job (restarts are tested in test_run_local)
        "-e",
        "STALL_RANK=2",
        "-e",
        "STALL_AT_STEP=3",
        "--",
        "--model",
        "tests.support.models.stall_models:blocking",
        "--stall-timeout",
        str(STALL_TIMEOUT),
        "--image-size",
        "8",
        "--synthetic-samples",
        "256",
        "--eval-samples",
        "32",
        "--epochs",
        "3",
        cwd=tmp_path,
    )
    job.wait_for(r"^\[rank 2\] \[stall-test\] rank 2 blocks in forward", START_TIMEOUT)
    job.finish(STALL_TIMEOUT + 30)
    lines = job.out
    assert job.proc.returncode != 0, "".join(job.err)
    summary = _summary(lines)
    assert summary[0].startswith("[rank 0] ")  # rank 0 is healthy: it reports
    assert f"no rank made progress for {STALL_TIMEOUT} s" in summary[0] and "exit code 200" in summary[0]
    assert "rank 2 (node 1, local rank 0, host " in summary[1] and summary[1].endswith("in forward of step 3:")
    blocking_line = _line_of(MODELS, "threading.Event().wait()")
    assert f"at {MODELS}:{blocking_line} in hook: threading.Event().wait()" in summary[2]
    waiting = [line for line in summary if "wait for it" in line]
    assert waiting and "ranks 0, 1, 3 (nodes 0, 1) wait for it in backward+all-reduce of step 3" in waiting[0]
    _assert_every_rank_dumped_its_stacks(lines)
    agent_logs = "".join(p.read_text() for p in (tmp_path / "ddp-runs" / "ddp-train" / "logs").glob("node-*.log"))
    assert re.search(r"exitcode\s*:\s*200", agent_logs), "the workers exit with the documented code"
    # ddpctl's own closing line is the summary in one line, and the job's exit code the stall code
    error = [line for line in job.err if line.startswith("ddpctl: error:")]
    assert len(error) == 1 and error[0].startswith("ddpctl: error: job ddp-train stalled: rank 2 (node 1, "), error
    assert f"in forward of step 3 at {MODELS}:{blocking_line} in hook; ranks 0, 1, 3 (nodes 0, 1) wait" in error[0]
    assert job.proc.returncode == 200


@pytest.mark.slow
def test_when_rank_0_is_the_one_behind_the_lowest_healthy_rank_reports(ddpctl, tmp_path: Path) -> None:
    job = ddpctl(
        "run",
        "--local",
        "--backoff-limit",
        "0",  # the stall ends the job (restarts are tested in test_run_local)
        "-e",
        "STALL_RANK=0",
        "-e",
        "STALL_AT_STEP=2",
        "--",
        "--model",
        "tests.support.models.stall_models:blocking",
        "--stall-timeout",
        str(STALL_TIMEOUT),
        "--image-size",
        "8",
        "--synthetic-samples",
        "256",
        "--eval-samples",
        "32",
        cwd=tmp_path,
    )
    job.wait_for(r"^\[rank 0\] \[stall-test\] rank 0 blocks in forward", START_TIMEOUT)
    job.finish(STALL_TIMEOUT + 30)
    assert job.proc.returncode != 0, "".join(job.err)
    summary = _summary(job.out)
    assert all(line.startswith("[rank 1] ") for line in summary), summary
    assert "rank 0 (node 0, local rank 0, host " in summary[1] and summary[1].endswith("in forward of step 2:")
    assert any("ranks 1, 2, 3 (nodes 0, 1) wait for it in backward+all-reduce of step 2" in s for s in summary)


def _image_folder(root: Path, per_class: int = 16) -> list[Path]:
    """``root/train/{a,b}/NN.png``: tiny RGB images, in the order ImageFolder indexes them."""
    from PIL import Image

    paths = []
    for cls in ("a", "b"):
        (root / "train" / cls).mkdir(parents=True)
        for i in range(per_class):
            path = root / "train" / cls / f"{i:02d}.png"
            Image.new("RGB", (8, 8), (i * 8, 100 if cls == "a" else 200, 50)).save(path)
            paths.append(path)
    return paths


@pytest.mark.slow
def test_a_rank_whose_data_loader_hangs_is_named_in_the_data_phase(ddpctl, tmp_path: Path) -> None:
    """One image is a FIFO nobody writes: opening it blocks like a read from a dead filesystem.
    Which rank draws it, and in which step, follows from the trainer's sampler (epoch 0, seed 0)."""
    from ddpctl_trainer.data import ResumableDistributedSampler

    paths = _image_folder(tmp_path / "data")
    batch, rank, step = 2, 2, 3
    order = list(ResumableDistributedSampler(list(range(len(paths))), 4, rank, shuffle=True, seed=0))
    stuck = paths[order[(step - 1) * batch]]  # the first sample of rank 2's third batch
    stuck.unlink()
    os.mkfifo(stuck)
    job = ddpctl(
        "run",
        "--local",
        "--backoff-limit",
        "0",  # the stall ends the job (restarts are tested in test_run_local)
        "--",
        "--dataset",
        "imagefolder",
        "--data-dir",
        str(tmp_path / "data"),
        "--model",
        "tests.support.models.stall_models:blocking",  # never blocks here: STALL_RANK is unset
        "--image-size",
        "8",
        "--batch-size",
        str(batch),
        "--stall-timeout",
        str(STALL_TIMEOUT),
        cwd=tmp_path,
    )
    # (no line marks the moment the open() blocks: the bound here is on the summary, then the end)
    job.wait_for(re.escape(SUMMARY) + " no rank made progress", START_TIMEOUT)
    job.finish(30)
    lines = job.out
    assert job.proc.returncode != 0, "".join(job.err)
    summary = _summary(lines)
    assert "rank 2 (node 1, local rank 0, host " in summary[1] and summary[1].endswith("in data of step 3:")
    assert "torchvision/datasets/folder.py" in summary[2] and "in pil_loader: with open(path" in summary[2]
    assert any("ranks 0, 1, 3 (nodes 0, 1) wait for it in backward+all-reduce of step 3" in s for s in summary)
    _assert_every_rank_dumped_its_stacks(lines)


@pytest.mark.slow
def test_a_slow_but_progressing_rank_is_not_reported_and_no_stall_prints_nothing(ddpctl, tmp_path: Path) -> None:
    """Rank 1 sleeps 0.4 s x the step number in every forward (up to 3.2 s, the whole run ~15 s
    longer than the others'), always under the 8 s stall timeout: the job must simply finish."""
    job = ddpctl(
        "run",
        "--local",
        "--backoff-limit",
        "0",  # the stall ends the job (restarts are tested in test_run_local)
        "-e",
        "STALL_RANK=1",
        "-e",
        "SLOW_STEP_S=0.4",
        "--",
        "--model",
        "tests.support.models.stall_models:slowing",
        "--stall-timeout",
        "8",
        "--image-size",
        "8",
        "--synthetic-samples",
        "256",
        "--eval-samples",
        "32",
        "--batch-size",
        "8",
        "--epochs",
        "1",
        "--metrics-file",
        str(tmp_path / "metrics.jsonl"),
        cwd=tmp_path,
    )
    job.finish(START_TIMEOUT)
    out, err = "".join(job.out), "".join(job.err)
    assert job.proc.returncode == 0, err[-2000:] + out[-3000:]
    done = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()][-1]
    assert done["event"] == "done" and done["step"] == 8  # every step ran, each slower than the last
    assert "stalled" not in out + err and "Thread 0x" not in out
