"""`ddpctl run --local` as a user runs it: the README's first command end to end, a failing rank,
Ctrl-C, busy ports, and the env each node gets (the same as its pod in the cluster).

The multi-process tests start real torchrun agents (2 nodes x 2 CPU processes, gloo on loopback)
through `python -m ddpctl`, exactly like the installed `ddpctl` script. They wait on output lines
and process exits (bounded), never on sleeps.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpctl.local_run import cluster_env, loopback_env, plan_local
from ddpctl.procs import alive, descendants
from ddpctl.spec import JobSpec

REPO = Path(__file__).resolve().parents[1]
JOB_TIMEOUT = 240  # seconds; a hang fails the test instead of the CI run
SMALL = ["--", "--synthetic-samples", "512", "--eval-samples", "64"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPCTL_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("NO_COLOR", None)
    return env


def _ddpctl(*args: str, cwd: Path, timeout: float = JOB_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddpctl", *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ddpctl", *args], cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_line(proc: subprocess.Popen[str], pattern: str, timeout: float) -> list[str]:
    """Read stdout until a line matches `pattern` (or fail after `timeout`); returns lines read."""
    assert proc.stdout is not None
    seen: list[str] = []
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            break
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if re.search(pattern, line):
            return seen
    proc.kill()
    pytest.fail(f"no line matching {pattern!r} within {timeout}s; got:\n{''.join(seen)[-3000:]}")


def _trainer_pids(root: int) -> list[int]:
    """The training processes (not the torchrun agents, whose argv names the module too)."""
    return [pid for pid in descendants(root) if "-m ddpctl_trainer" in (cmd := _cmdline(pid)) and "torch.distributed.run" not in cmd]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process-tree checks read /proc (Linux)")


# --------------------------------------------------------------------------------------------
# The README's first command, end to end
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_default_run_trains_2x2_on_cpu_and_writes_a_checkpoint(tmp_path: Path) -> None:
    result = _ddpctl("run", "--local", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    # every rank of 2 nodes x 2 processes reports progress, with its own prefix
    for rank in range(4):
        assert re.search(rf"^\[rank {rank}\] epoch 2/2 step 8/8 loss ", result.stdout, re.M), result.stdout
    assert "[rank 0] world size 4 (ddp, gloo, cpu)" in result.stdout
    assert "ddp-train succeeded" in result.stderr and "\x1b[" not in result.stdout  # no colour off a TTY
    ckpt = tmp_path / "ddp-runs" / "ddp-train" / "checkpoints" / "ckpt-00000016.pt"
    assert ckpt.is_file(), sorted(p.name for p in ckpt.parent.iterdir())
    assert str(ckpt.relative_to(tmp_path)) in result.stderr  # the path is printed at the end
    import torch

    payload = torch.load(ckpt, weights_only=True)
    assert payload["step"] == 16 and payload["world_size"] == 4 and payload["model"]


# --------------------------------------------------------------------------------------------
# Failures and stopping: the job's exit code, the failed rank named, no process left
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_proc
def test_a_killed_rank_fails_the_job_names_the_rank_and_leaves_no_process(tmp_path: Path) -> None:
    proc = _start("run", "--local", "-e", "DDP_TRAINER_FAULT_AT_STEP=2", "-e", "DDP_TRAINER_FAULT_RANK=3",
                  "--", "--synthetic-samples", "512", "--eval-samples", "64", "--epochs", "3", cwd=tmp_path)
    lines = _wait_for_line(proc, r"^\[rank 0\] world size 4", JOB_TIMEOUT)
    workers = _trainer_pids(proc.pid)
    tree = descendants(proc.pid)
    assert len(workers) == 4, [_cmdline(p) for p in tree]
    out, err = proc.communicate(timeout=JOB_TIMEOUT)
    assert proc.returncode not in (0, None)
    error = [line for line in err.splitlines() if line.startswith("ddpctl: error:")]
    assert len(error) == 1, err
    assert "rank 3 (node 1, local rank 1) was killed by SIGKILL" in error[0]
    assert "[rank 3] [fault] killing rank 3 at step 2" in "".join(lines) + out
    assert "Traceback" not in out  # the agents' own tracebacks stay in their log files
    assert [p for p in tree if alive(p)] == []


@pytest.mark.slow
@needs_proc
def test_ctrl_c_stops_every_agent_and_worker(tmp_path: Path) -> None:
    proc = _start("run", "--local", *SMALL, "--epochs", "500", cwd=tmp_path)
    _wait_for_line(proc, r"^\[rank 0\] world size 4", JOB_TIMEOUT)
    tree = descendants(proc.pid)
    assert len(_trainer_pids(proc.pid)) == 4
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert [p for p in tree if alive(p)] == []


@pytest.mark.slow
def test_bad_trainer_flag_fails_with_the_trainers_message(tmp_path: Path) -> None:
    result = _ddpctl("run", "--local", "--nodes", "2", "--procs", "1", "--", "--epochs", "0", cwd=tmp_path)
    assert result.returncode != 0
    assert "--epochs must be at least 1" in result.stdout
    assert result.stderr.count("ddpctl: error:") == 1 and "job ddp-train failed" in result.stderr


@pytest.mark.slow
def test_pytorchjob_target_runs_with_the_operators_env(tmp_path: Path) -> None:
    """The training operator, not our manifest, sets PET_NNODES/NODE_RANK/MASTER_*: emulated here."""
    result = _ddpctl("run", "--local", "-t", "pytorchjob", "--nodes", "2", "--procs", "1", "--name", "pj",
                     "--", "--synthetic-samples", "128", "--eval-samples", "32", "--epochs", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:] + result.stdout[-2000:]
    assert "[rank 0] world size 2" in result.stdout and "[rank 1] epoch 1/1" in result.stdout
    assert "in the cluster: pj-master-0:29500" in result.stderr


# --------------------------------------------------------------------------------------------
# Ports
# --------------------------------------------------------------------------------------------


def _listener(port: int = 0) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT leftover must not stop the test
    sock.bind(("0.0.0.0", port))
    sock.listen()
    return sock


def test_a_port_in_use_that_was_asked_for_is_a_one_line_error(cli, tmp_path: Path) -> None:
    with _listener() as sock:
        port = sock.getsockname()[1]
        result = cli("run", "--local", "--port", str(port))
    assert result.code == 2
    assert result.err.count("\n") == 1
    assert f"port {port} is in use" in result.err and "--port" in result.err
    assert not (tmp_path / "ddp-runs").exists()  # nothing was started


def test_a_busy_default_port_falls_back_to_a_free_one(tmp_path: Path) -> None:
    try:
        holder: socket.socket | None = _listener(29500)
    except OSError:
        holder = None  # something else holds it already: the fallback must happen all the same
    try:
        plan = plan_local(JobSpec(), cwd=tmp_path, parent_env={})
    finally:
        if holder is not None:
            holder.close()
    assert plan.port != 29500 and plan.port_note and "29500 is in use" in plan.port_note
    assert {n.env["PET_MASTER_PORT"] for n in plan.nodes} == {str(plan.port)}


# --------------------------------------------------------------------------------------------
# The env each node gets: the pod's, with rank 0's DNS name on loopback
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob", "trainjob"])
def test_each_node_gets_its_pods_env_with_rank0_on_loopback(target: str, tmp_path: Path) -> None:
    spec = JobSpec(name="w", target=target, nodes=3, procs_per_node=2)
    plan = plan_local(spec, cwd=tmp_path, parent_env={"RANK": "7", "PET_NNODES": "9", "KEEP": "1"})
    assert len(plan.nodes) == 3
    for index, node in enumerate(plan.nodes):
        env = node.env
        assert env["PET_NODE_RANK"] == str(index)
        assert env["PET_NNODES"] == "3" and env["PET_NPROC_PER_NODE"] == "2"
        assert env["PET_MASTER_ADDR"] == "127.0.0.1" and env["PET_MASTER_PORT"] == str(plan.port)
        assert env["DDP_TRAINER_BACKEND"] == "gloo"
        assert env["KEEP"] == "1" and env.get("RANK") != "7"  # the shell's wiring never leaks in
        assert env["DDP_TRAINER_CHECKPOINT_DIR"] == str(tmp_path / "ddp-runs" / "w" / "checkpoints")
        assert node.argv[:3] == (sys.executable, "-m", "torch.distributed.run") and node.argv[-2:] == ("-m", "ddpctl_trainer")
        # without the loopback rewrite it is exactly what the cluster gives this pod
        assert cluster_env(spec, index)["PET_MASTER_ADDR"] == spec.rank0_host


def test_elastic_nodes_use_c10d_with_node_0_hosting_the_store() -> None:
    spec = JobSpec(name="el", nodes=2, min_nodes=1, max_nodes=2)
    envs = [loopback_env(cluster_env(spec, i), spec, i, "127.0.0.1", 4242) for i in range(spec.replicas)]
    assert [e["PET_RDZV_ENDPOINT"] for e in envs] == ["127.0.0.1:4242"] * 2
    assert "is_host=true" in envs[0]["PET_RDZV_CONF"] and "is_host=false" in envs[1]["PET_RDZV_CONF"]
    assert all("PET_NODE_RANK" not in e for e in envs)  # the rendezvous assigns node ranks


def test_checkpoint_volume_maps_to_a_host_directory(tmp_path: Path) -> None:
    spec = JobSpec.from_dict({"volumes": {"checkpoints": {"claimName": "ck", "mountPath": "/ckpt"}}, "args": ["--save-final", "/ckpt/final.pt"]})
    plan = plan_local(spec, cwd=tmp_path, parent_env={}, mounts={"checkpoints": tmp_path / "mine"})
    argv = plan.nodes[0].argv
    assert argv[argv.index("--checkpoint-dir") + 1] == str(tmp_path / "mine")
    assert argv[argv.index("--save-final") + 1] == str(tmp_path / "mine" / "final.pt")
    assert plan.checkpoint_dir == tmp_path / "mine"


def test_run_help_does_not_import_torch() -> None:
    code = "import sys; from ddpctl.app import main; main(['run', '--help']); print('torch' in sys.modules, 'kubernetes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True).stdout
    assert "--local" in out and "--docker" in out
    assert out.strip().endswith("False False")
