"""Helpers for the trainer tests: run the trainer as real processes (python or torchrun).

Every multi-process test launches ``python -m torch.distributed.run`` (torchrun) as a
subprocess with a timeout and ``OMP_NUM_THREADS=1``; nothing synchronises by sleeping.

No test may leave a process behind. torchrun starts each worker in a session of its own, so
killing torchrun's process group does not reach the workers; instead every process a test
starts carries ``DDP_TRAINER_TEST_TAG`` in its environment (inherited by torchrun's workers and
their data-loader workers), and ``kill_tree`` SIGKILLs whatever still has the tag. ``launch``
and ``wait_all`` do that in a ``finally``, an autouse fixture sweeps after every test, and
each child gets SIGTERM from the kernel if the test process itself dies (torchrun then stops
its workers).
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch

from tests.support import REPO
from tests.support.ports import free_port  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from ddpctl_trainer.trainer import Trainer

PY = sys.executable
PROG_PREFIX = "ddpctl-trainer: error:"

# Small, fast settings shared by most runs: float64 so "equal" can be tested tightly.
TINY = [
    "--synthetic-samples",
    "64",
    "--eval-samples",
    "61",
    "--image-size",
    "8",
    "--num-classes",
    "4",
    "--log-every",
    "2",
    "--progress",
    "lines",
]


@dataclass
class Run:
    code: int
    out: str
    err: str
    workdir: Path

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        path = self.workdir / "metrics.jsonl"
        if not path.exists():
            return []
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [r for r in rows if name is None or r["event"] == name]

    def final(self, rank: int | None = None) -> dict[str, torch.Tensor]:
        name = "final.pt" if rank is None else f"final-{rank}.pt"
        return torch.load(self.workdir / name, weights_only=True)["model"]

    def explain(self) -> str:
        return f"exit {self.code}\n--- stdout ---\n{self.out[-4000:]}\n--- stderr ---\n{self.err[-6000:]}"


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment minus anything that would make the trainer think it is distributed
    (or reach a developer's own cloud storage: AWS_*), with the checkout on PYTHONPATH (the trainer
    imports the tests' models and fault plugin from it)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not (
            k.startswith(("PET_", "DDP_TRAINER_", "TORCHELASTIC_", "AWS_"))
            or k
            in (
                "RANK",
                "LOCAL_RANK",
                "WORLD_SIZE",
                "LOCAL_WORLD_SIZE",
                "GROUP_RANK",
                "MASTER_ADDR",
                "MASTER_PORT",
                "JOB_COMPLETION_INDEX",
            )
        )
    }
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if "GLOO_SOCKET_IFNAME" not in env and os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # test hosts often map their hostname to 127.0.0.1
    env.update(extra or {})
    return env


TAG_ENV = "DDP_TRAINER_TEST_TAG"
_SESSION = f"{os.getpid()}-"
_tags = itertools.count()


def _die_with_parent() -> None:
    """preexec_fn: SIGTERM this child when the test process dies, however it dies (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def tagged_pids(tag: str) -> list[int]:
    """Live processes whose environment holds ``DDP_TRAINER_TEST_TAG=<tag>...`` (a prefix match)."""
    needle = f"{TAG_ENV}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
        except OSError:  # gone, or not ours
            continue
        if any(var.startswith(needle) for var in env.split(b"\0")):
            found.append(int(entry))
    return found


def kill_tree(tag: str) -> list[int]:
    """SIGKILL every process started with ``tag`` (torchrun first, so it restarts no worker)."""
    killed: list[int] = []
    for _ in range(5):  # a worker may be starting while we look: look again until none is left
        pids = sorted(tagged_pids(tag))
        if not pids:
            break
        for pid in pids:  # parents have smaller pids here: torchrun goes before its workers
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return killed


def agent_command(
    node: int,
    nnodes: int,
    nproc: int,
    port: int | str,
    entry: Sequence[str],
    launcher: str = "torch.distributed.run",
    master_addr: str = "127.0.0.1",
) -> list[str]:
    """Node ``node``'s torchrun agent (or ``ddpctl_trainer.launch``) running ``entry`` (``-m MODULE
    ARGS``) in each worker, wired by hand with the static rendezvous on loopback (or ``master_addr``),
    as each pod's torchrun is on a cluster."""
    return [
        PY,
        "-m",
        launcher,
        "--nnodes",
        str(nnodes),
        "--node-rank",
        str(node),
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        master_addr,
        "--master-port",
        str(port),
        *entry,
    ]


def static_node_command(
    node: int,
    nnodes: int,
    nproc: int,
    port: str,
    workdir: Path,
    args: Sequence[str] = (),
    launcher: str = "torch.distributed.run",
) -> list[str]:
    """`agent_command` of the built-in trainer, which writes its checkpoints and metrics under ``workdir``."""
    entry = ["-m", "ddpctl_trainer", "--checkpoint-dir", str(workdir / "ckpt")]
    return agent_command(
        node, nnodes, nproc, port, [*entry, "--metrics-file", str(workdir / "metrics.jsonl"), *args], launcher
    )


def start(cmd: Sequence[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    """Popen with pipes, a session of its own and a fresh ``DDP_TRAINER_TEST_TAG`` (``proc.tag``)."""
    tag = f"{_SESSION}{next(_tags)}."  # the dot: tag 1 must not prefix-match tag 10
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env={**env, TAG_ENV: tag},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    proc.tag = tag  # type: ignore[attr-defined]
    return proc


def wait_all(procs: Sequence[subprocess.Popen], timeout: float) -> list[tuple[str, str]]:
    """``communicate`` with cooperating processes concurrently (one thread each: a process that
    fills its pipe while another waits for it in a collective would hang a sequential loop);
    whatever happens, every process and its workers are gone when this returns."""
    results: list[tuple[str, str]] = [("", "")] * len(procs)

    def drain(i: int, p: subprocess.Popen) -> None:
        results[i] = p.communicate()

    threads = [threading.Thread(target=drain, args=(i, p), daemon=True) for i, p in enumerate(procs)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0))
        if any(t.is_alive() for t in threads):
            raise AssertionError(f"timed out after {timeout}s: {[p.args for p in procs]}")
    finally:
        for p in procs:
            kill_tree(p.tag)  # type: ignore[attr-defined]
        for t in threads:
            t.join(30)
    return results


@pytest.fixture(autouse=True)
def _no_orphans() -> Iterator[None]:
    """After every test: nothing this session started may still run (kill it, then fail)."""
    yield
    leaked = kill_tree(_SESSION)
    assert not leaked, f"processes left running after the test (killed now): {leaked}"


def launch(
    workdir: Path,
    args: Sequence[str],
    nproc: int | None = None,
    env: dict[str, str] | None = None,
    torchrun_args: Sequence[str] = (),
    timeout: float = 240,
    metrics: bool = True,
) -> Run:
    """Run the trainer in ``workdir``: with ``nproc`` under torchrun --standalone, else plain python."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [PY]
    if nproc is not None:
        cmd += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *torchrun_args]
    cmd += ["-m", "ddpctl_trainer", "--checkpoint-dir", str(workdir / "ckpt"), *args]
    if metrics:
        cmd += ["--metrics-file", str(workdir / "metrics.jsonl")]
    proc = start(cmd, workdir, clean_env(env))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.tag)  # type: ignore[attr-defined]
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout}s: {' '.join(cmd)}\n{out[-3000:]}\n{err[-3000:]}") from None
    finally:
        # torchrun's workers sit in sessions of their own: killpg(torchrun) would orphan them, and
        # an exception other than the timeout (pytest-timeout, Ctrl-C) lands here too
        kill_tree(proc.tag)  # type: ignore[attr-defined]
    return Run(proc.returncode, out, err, workdir)


def assert_same_params(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0, msg=lambda m, k=k: f"{k}: {m}")


@pytest.fixture(scope="session")
def trainer_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trainer")


# --------------------------------------------------------------------------------------------
# In this process: a one-process trainer (no process group) for the unit tests
# --------------------------------------------------------------------------------------------

ONE_PROCESS = [
    *("--synthetic-samples", "32", "--image-size", "8", "--batch-size", "16"),
    *("--no-eval", "--progress", "none"),
]


def in_process(checkpoint_dir: str | Path, *args: str) -> Trainer:
    """A ``Trainer`` of one process in this one, its parts made from ``ONE_PROCESS`` and ``args``
    (later flags win): 32 samples in batches of 16, 2 steps an epoch."""
    from ddpctl_trainer.config import parse_args
    from ddpctl_trainer.dist import DistContext
    from ddpctl_trainer.trainer import Trainer

    cfg = parse_args([*ONE_PROCESS, "--checkpoint-dir", str(checkpoint_dir), *args], {})
    return Trainer.from_config(cfg, DistContext(0, 0, 1, 1, 0, 0, "single"), torch.device("cpu"), "gloo")
