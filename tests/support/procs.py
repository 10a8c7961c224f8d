"""Process-tree helpers the tests use to check that nothing outlives a run (ddpctl itself needs
only `ddpctl.runners.procs.subtree` over one /proc scan)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from ddpctl.runners.procs import kill_if_same, stat_map, subtree
from tests.support import REPO


def descendant_starts(pid: int) -> dict[int, int]:
    """pid -> start time of every live descendant of `pid` (children first; see `kill_if_same`)."""
    return subtree(pid, stat_map())


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children first), or [] where /proc is missing."""
    return list(descendant_starts(pid))


def cmdline(pid: int) -> str:
    """A process's command line, its arguments joined by spaces ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def with_env(pids: Iterable[int], name: str, value: str) -> int:
    """The first of `pids` whose environment has NAME=value (RANK=3: that rank's process;
    PET_NODE_RANK=1: node 1's agent). Processes that ended meanwhile are skipped."""
    wanted = f"{name}={value}".encode()
    pids = list(pids)
    for pid in pids:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in env:
            return pid
    raise AssertionError(f"no process with {name}={value} among {pids}")


def stop_like_a_user(proc: subprocess.Popen[str], *, pipes_read_elsewhere: bool = False) -> None:
    """Stop a background `ddpctl` the way a user does (Ctrl-C: its own cleanup, never a SIGKILL that
    would orphan its agents), then SIGKILL it and every process of its tree that is still there.
    `pipes_read_elsewhere`: threads read its output, so wait instead of communicate."""
    if proc.poll() is not None:
        return
    tree = descendant_starts(proc.pid)

    def wait(timeout: float | None) -> None:
        if pipes_read_elsewhere:
            proc.wait(timeout=timeout)
        else:
            proc.communicate(timeout=timeout)

    proc.send_signal(signal.SIGINT)
    try:
        wait(60)
    except subprocess.TimeoutExpired:
        tree.update(descendant_starts(proc.pid))
        proc.kill()
        wait(None)
    for pid, started in tree.items():
        kill_if_same(pid, started)


def start_ddpctl(args: Sequence[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """`ddpctl ARGS` in the background, from this interpreter, with its output in pipes (stop it
    with `stop_like_a_user`)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ddpctl", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ddpctl_env() -> dict[str, str]:
    """This environment without DDPCTL_* settings, with the checkout importable (as `ddpctl` runs from it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPCTL_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("NO_COLOR", None)
    return env


def run_ddpctl(
    *args: str, cwd: Path, timeout: float = 240, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`ddpctl ARGS` as a user starts it (`python -m ddpctl`), its output captured; bounded by `timeout`."""
    return subprocess.run(
        [sys.executable, "-m", "ddpctl", *args],
        cwd=cwd,
        env={**ddpctl_env(), **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
