"""`ddpctl run --local` as a user runs it: the README's first command end to end, a failing rank,
Ctrl-C, busy ports, and the env each node gets (the same as its pod in the cluster).

The multi-process tests start real torchrun agents (2 nodes x 2 CPU processes, gloo on loopback)
through `python -m ddpctl`, exactly like the installed `ddpctl` script. They wait on output lines
and process exits (bounded), never on sleeps.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ddpctl.engines import plan_for
from ddpctl.runners.local import plan_local
from ddpctl.runners.node_env import cluster_env, loopback_env
from ddpctl.runners.procs import alive
from ddpctl.spec.model import JobSpec
from tests.support import skip_unless
from tests.support.models.faults import env_flags, hold_at, plugin_env
from tests.support.procs import cmdline, descendants, start_ddpctl, stop_like_a_user, with_env
from tests.support.procs import ddpctl_env as _env
from tests.support.procs import run_ddpctl as _ddpctl

JOB_TIMEOUT = 240  # seconds; a hang fails the test instead of the CI run
SMALL = ["--", "--synthetic-samples", "512", "--eval-samples", "64"]


@pytest.fixture
def started():
    """Start `ddpctl ARGS` in the background; whatever the test's end, nothing it started is left.

    A ddpctl still running at the end is stopped the way a user does (SIGINT, then waiting for its
    own cleanup). Only if that does not end it is it SIGKILLed, and then every process that was in
    its tree is killed too (torchrun agents and workers run in sessions of their own and would be
    orphaned, stealing CPU from later tests). What the product must clean up is asserted by the
    tests themselves, before this runs."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str, cwd: Path) -> subprocess.Popen[str]:
        proc = start_ddpctl(args, cwd, _env())
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        stop_like_a_user(proc)


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
    stop_like_a_user(proc)
    pytest.fail(f"no line matching {pattern!r} within {timeout}s; got:\n{''.join(seen)[-3000:]}")


def _trainer_pids(root: int) -> list[int]:
    """The training processes (not the torchrun agents, whose argv names the module too)."""
    return [
        pid
        for pid in descendants(root)
        if "-m ddpctl_trainer" in (cmd := cmdline(pid))
        and "torch.distributed.run" not in cmd
        and "ddpctl_trainer.launch" not in cmd
    ]


def needs_proc() -> None:
    skip_unless(Path("/proc/self/stat").exists(), "process-tree checks read /proc (Linux)")


# --------------------------------------------------------------------------------------------
# The README's first command, end to end
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_default_run_trains_2x2_on_cpu_and_writes_a_checkpoint(tmp_path: Path) -> None:
    result = _ddpctl("run", "--local", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    # rank 0 reports the (global) progress; the other ranks would only repeat it
    assert re.search(r"^\[rank 0\] epoch 2/2 step 8/8 loss ", result.stdout, re.M), result.stdout
    assert not re.search(r"^\[rank [1-3]\] (eval )?epoch", result.stdout, re.M), result.stdout
    assert "[rank 0] world size 4 (ddp, gloo, cpu)" in result.stdout
    # ddpctl sets each process's OMP_NUM_THREADS, so torchrun has no banner about it to print
    assert "Setting OMP_NUM_THREADS" not in result.stdout, result.stdout
    assert "ddp-train succeeded" in result.stderr and "\x1b[" not in result.stdout  # no colour off a TTY
    assert result.stderr.rstrip().endswith("; logs in ddp-runs/ddp-train/logs"), result.stderr
    ckpt = tmp_path / "ddp-runs" / "ddp-train" / "checkpoints" / "ckpt-00000016.pt"
    assert ckpt.is_file(), sorted(p.name for p in ckpt.parent.iterdir())
    assert str(ckpt.relative_to(tmp_path)) in result.stderr  # the path is printed at the end
    import torch

    payload = torch.load(ckpt, weights_only=True)
    assert payload["step"] == 16 and payload["world_size"] == 4 and payload["model"]
    # the log files hold what the console showed, without the runner's internal rank markers
    node_log = (tmp_path / "ddp-runs" / "ddp-train" / "logs" / "node-0.log").read_text()
    assert "@@ddpctl-rank=" not in node_log and "[rank 0] world size 4" in node_log
    # with no cluster, `status` and `logs` (NAME defaulted like every command's) find the local run
    no_cluster = {"KUBECONFIG": str(tmp_path / "no-kubeconfig")}
    status = _ddpctl("status", cwd=tmp_path, extra_env=no_cluster)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[:4] == [
        "Name:        ddp-train",
        "Backend:     local: ddp-runs/ddp-train",
        "State:       Succeeded",
        "Nodes:       2 nodes x 2 processes = world size 4",
    ], status.stdout
    # the same fields as a cluster job's status: rank 0's last progress, each node's end
    assert "Progress:    epoch 2/2 step 8/8 (100%), loss " in status.stdout, status.stdout
    assert "Checkpoint:  step 16 in ddp-runs/ddp-train/checkpoints" in status.stdout
    rows = [line.split() for line in status.stdout.splitlines() if line[:1].isdigit()]
    assert rows == [["0", "ddp-train-0", "Succeeded", "0"], ["1", "ddp-train-1", "Succeeded", "0"]], status.stdout
    as_json = json.loads(_ddpctl("status", "-o", "json", cwd=tmp_path, extra_env=no_cluster).stdout)
    assert as_json["backend"] == "local" and as_json["progress"]["step"] == 8 and as_json["world_size"] == 4
    logs = _ddpctl("logs", "ddp-train", "--rank", "0", "--tail", "1", cwd=tmp_path, extra_env=no_cluster)
    assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 1, logs.stdout + logs.stderr
    assert "[rank 0] done: 16 steps" in logs.stdout, logs.stdout
    logs = _ddpctl("logs", cwd=tmp_path, extra_env=no_cluster)
    assert "[node 0] [rank 0] world size 4" in logs.stdout, logs.stdout
    # every node's file is read, each line under its node's tag. Node 1's ranks report nothing (rank 0
    # does), but its torchrun agent may: when node 0's agent, which hosts the store, leaves first,
    # node 1's prints torchrun's exit-barrier traceback although the job succeeded
    node_1 = (tmp_path / "ddp-runs" / "ddp-train" / "logs" / "node-1.log").read_text()
    assert not re.search(r"^\[rank [0-3]\] ", node_1, re.M), node_1
    tags = ["[node 0"] * len(node_log.splitlines()) + ["[node 1"] * len(node_1.splitlines())
    assert [line.split("] ", 1)[0] for line in logs.stdout.splitlines()] == tags, logs.stdout[-3000:]
    elsewhere = _ddpctl("status", "ddp-train", cwd=tmp_path / "ddp-runs", extra_env=no_cluster)
    assert elsewhere.returncode == 1 and "no kubeconfig" in elsewhere.stderr  # no local run there either


# --------------------------------------------------------------------------------------------
# Failures and stopping: the job's exit code, the failed rank named, no process left
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_killed_rank_fails_the_job_names_the_rank_and_leaves_no_process(started, tmp_path: Path) -> None:
    """Rank 3 holds after step 2 (the tests' fault plugin, loaded with the trainer's --callback), so
    the process tree is complete when the test reads it; then the test SIGKILLs that rank, as the
    OOM killer would."""
    needs_proc()
    hold = tmp_path / "held"
    proc = started(
        "run",
        "--local",
        "--backoff-limit",
        "0",  # no restart: the job ends with the kill
        *env_flags(plugin_env(hold_at(2, rank=3, file=hold))),
        "--",
        "--synthetic-samples",
        "512",
        "--eval-samples",
        "64",
        "--epochs",
        "3",
        cwd=tmp_path,
    )
    _wait_for_file(proc, hold)
    workers = _trainer_pids(proc.pid)
    tree = descendants(proc.pid)
    assert len(workers) == 4, [cmdline(p) for p in tree]
    os.kill(with_env(workers, "RANK", "3"), signal.SIGKILL)
    out, err = proc.communicate(timeout=JOB_TIMEOUT)
    assert proc.returncode not in (0, None)
    error = [line for line in err.splitlines() if line.startswith("ddpctl: error:")]
    assert len(error) == 1, err
    assert "rank 3 (node 1, local rank 1) was killed by SIGKILL" in error[0]
    assert "Traceback" not in out  # the agents' own tracebacks stay in their log files
    assert [p for p in tree if alive(p)] == []


def _wait_for_file(proc: subprocess.Popen[str], path: Path) -> None:
    """Wait until the fault plugin's hold wrote `path` (the held rank finished its step and waits)."""
    deadline = time.monotonic() + JOB_TIMEOUT
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no rank reached the hold step ({path} not written)"
        time.sleep(0.05)


@pytest.mark.slow
def test_ctrl_c_stops_every_agent_and_worker(started, tmp_path: Path) -> None:
    needs_proc()
    proc = started("run", "--local", *SMALL, "--epochs", "500", cwd=tmp_path)
    _wait_for_line(proc, r"^\[rank 0\] world size 4", JOB_TIMEOUT)
    tree = descendants(proc.pid)
    assert len(_trainer_pids(proc.pid)) == 4
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    # the last line says where the job stopped (the ranks checkpointed on the way out) and how to go on
    last = err.rstrip().splitlines()[-1]
    assert re.fullmatch(
        r"ddpctl: ddp-train interrupted at step \d+ \(checkpoint ddp-runs/ddp-train/checkpoints/ckpt-\d+\.pt\); "
        r"run the same command to resume there, or add --fresh to start over",
        last,
    ), err
    assert [p for p in tree if alive(p)] == []


@pytest.mark.slow
def test_pytorchjob_target_runs_with_the_operators_env(tmp_path: Path) -> None:
    """The training operator, not our manifest, sets PET_NNODES/NODE_RANK/MASTER_*: emulated here."""
    result = _ddpctl(
        "run",
        "--local",
        "-t",
        "pytorchjob",
        "--nodes",
        "2",
        "--procs",
        "1",
        "--name",
        "pj",
        "--",
        "--synthetic-samples",
        "128",
        "--eval-samples",
        "32",
        "--epochs",
        "1",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:] + result.stdout[-2000:]
    assert "[rank 0] world size 2" in result.stdout and "[rank 0] epoch 1/1" in result.stdout
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


@pytest.mark.parametrize("busy", [True, False])
def test_the_default_port_is_replaced_by_a_free_one(tmp_path: Path, busy: bool) -> None:
    """Not the default 29500, busy or not: two local jobs started at once would both pick it."""
    try:
        holder: socket.socket | None = _listener(29500) if busy else None
    except OSError:
        holder = None  # something else holds it already: the choice must be the same
    try:
        plan = plan_local(JobSpec(), cwd=tmp_path, parent_env={})
    finally:
        if holder is not None:
            holder.close()
    assert plan.port != 29500 and plan.port_note is None
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
        # torchrun under ddpctl_trainer.launch: a node's exit code keeps the reason (2 usage, 143 preempted)
        assert node.argv[:3] == (sys.executable, "-m", "ddpctl_trainer.launch") and node.argv[-2:] == (
            "-m",
            "ddpctl_trainer",
        )
        # without the loopback rewrite it is exactly what the cluster gives this pod
        assert cluster_env(plan.job, index)["PET_MASTER_ADDR"] == plan.job.rank0_host


def test_elastic_nodes_use_c10d_with_node_0_hosting_the_store() -> None:
    plan = plan_for(JobSpec(name="el", nodes=2, min_nodes=1, max_nodes=2))
    envs = [loopback_env(cluster_env(plan, i), plan, i, "127.0.0.1", 4242) for i in range(plan.replicas)]
    assert [e["PET_RDZV_ENDPOINT"] for e in envs] == ["127.0.0.1:4242"] * 2
    assert "is_host=true" in envs[0]["PET_RDZV_CONF"] and "is_host=false" in envs[1]["PET_RDZV_CONF"]
    assert all("PET_NODE_RANK" not in e for e in envs)  # the rendezvous assigns node ranks


def test_checkpoint_volume_maps_to_a_host_directory(tmp_path: Path) -> None:
    spec = JobSpec.from_dict(
        {
            "volumes": {"checkpoints": {"claimName": "ck", "mountPath": "/ckpt"}},
            "args": ["--save-final", "/ckpt/final.pt"],
        }
    )
    plan = plan_local(spec, cwd=tmp_path, parent_env={}, mounts={"checkpoints": tmp_path / "mine"})
    argv = plan.nodes[0].argv
    assert argv[argv.index("--checkpoint-dir") + 1] == str(tmp_path / "mine")
    assert argv[argv.index("--save-final") + 1] == str(tmp_path / "mine" / "final.pt")
    assert plan.checkpoint_dir == tmp_path / "mine"


def test_run_help_does_not_import_torch() -> None:
    code = (
        "import sys; from ddpctl.app import main; main(['run', '--help']); "
        "print('torch' in sys.modules, 'kubernetes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True).stdout
    assert "--local" in out and "--docker" in out
    assert out.strip().endswith("False False")


# --------------------------------------------------------------------------------------------
# --fresh: only the trainer's checkpoints go
# --------------------------------------------------------------------------------------------


def _checkpoint_dir_with_a_users_file(directory: Path) -> None:
    (directory / "notes.txt").write_text("mine\n")
    (directory / "ckpt-notes").mkdir()  # looks a bit like ours, is not
    (directory / "ckpt-00000008.pt").write_bytes(b"x")
    (directory / "ckpt-00000016").mkdir()  # a sharded checkpoint
    (directory / "ckpt-00000016" / "trainer_state.pt").write_bytes(b"x")
    (directory / ".ckpt-00000024.pt.tmp.4242").write_bytes(b"x")  # a writer died before its rename
    (directory / ".ckpt-00000032.tmp").mkdir()


def test_fresh_removes_the_trainers_checkpoints_and_nothing_else(tmp_path: Path) -> None:
    from ddpctl.runners.local import clean_run_dir

    _checkpoint_dir_with_a_users_file(tmp_path)
    spec = JobSpec.from_dict({"args": ["--checkpoint-dir", "."]})
    plan = plan_local(spec, cwd=tmp_path, parent_env={})
    assert plan.checkpoint_dir == tmp_path
    clean_run_dir(plan)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-notes", "notes.txt"]


def test_fresh_removes_the_checkpoints_the_trainer_writes_and_nothing_else(tmp_path: Path) -> None:
    """--fresh knows the trainer's checkpoint names from the protocol module both sides import: what
    the trainer's writer names a checkpoint (file or sharded directory, and their temp files) goes;
    a user's file with a look-alike name stays."""
    from ddpctl.runners.common import remove_checkpoints
    from ddpctl_trainer import checkpoint

    made = []
    for step, sharded in ((16, False), (24, True)):
        final = checkpoint.checkpoint_path(tmp_path, step, sharded)
        for path in (final, final.with_name(f".{final.name}.tmp.123"), final.with_name(f".{final.name}.tmp")):
            if sharded and not path.name.endswith(".123"):
                path.mkdir()
            else:
                path.write_text("x")
            made.append(path.name)
    (tmp_path / "ckpt-notes.txt").write_text("mine")
    removed = remove_checkpoints(tmp_path)
    assert sorted(p.name for p in removed) == sorted(made)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-notes.txt"]


@pytest.mark.slow
def test_fresh_with_the_current_directory_as_checkpoint_dir_keeps_it(tmp_path: Path) -> None:
    _checkpoint_dir_with_a_users_file(tmp_path)
    result = _ddpctl(
        "run",
        "--local",
        "--fresh",
        "--nodes",
        "1",
        "--procs",
        "1",
        "--",
        "--checkpoint-dir",
        ".",
        "--epochs",
        "1",
        "--synthetic-samples",
        "32",
        "--no-eval",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ckpt-00000001.pt").is_file()  # the trainer ran (from scratch), in this directory
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
    assert not (tmp_path / "ckpt-00000008.pt").exists() and not (tmp_path / "ckpt-00000016").exists()


# --------------------------------------------------------------------------------------------
# Starting and sweeping processes
# --------------------------------------------------------------------------------------------


def test_a_missing_command_is_a_one_line_usage_error(cli) -> None:
    result = cli("run", "--local", "--nodes", "1", "--command", "ddpctl-no-such-program --flag")
    assert result.code == 2, result.err
    errors = [line for line in result.err.splitlines() if line.startswith("ddpctl: error:")]
    assert (
        len(errors) == 1 and "ddpctl-no-such-program was not found" in errors[0] and "internal error" not in result.err
    )


def test_a_node_that_fails_to_start_leaves_the_started_ones_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ddpctl.errors import RuntimeFailure
    from ddpctl.runners import procs
    from ddpctl.runners.local import run_local

    spec = JobSpec(nodes=3, procs_per_node=1)
    plan = plan_local(spec, cwd=tmp_path, parent_env={})
    sleeper = (sys.executable, "-c", "import time; time.sleep(120)")
    nodes = (
        dataclasses.replace(plan.nodes[0], argv=sleeper),
        dataclasses.replace(plan.nodes[1], argv=sleeper),
        dataclasses.replace(plan.nodes[2], argv=(str(tmp_path / "no-such-agent"),)),
    )
    plan = dataclasses.replace(plan, nodes=nodes)
    seen: list[procs.Child] = []
    real = procs.start_child

    def spy(*args, **kwargs):
        child = real(*args, **kwargs)
        seen.append(child)
        return child

    monkeypatch.setattr(procs, "start_child", spy)
    with (
        open(os.devnull, "w") as devnull,
        pytest.raises(RuntimeFailure, match=r"could not start node 2 \(.*no-such-agent\): No such file or directory"),
    ):
        run_local(plan, out=devnull, err=devnull)
    assert len(seen) == 2 and all(c.popen.poll() is not None for c in seen)  # nodes 0 and 1 were stopped


def test_the_sweep_never_kills_a_process_that_reused_a_recorded_pid(tmp_path: Path) -> None:
    """A pid recorded in a child's tree may belong to another process by the end of the job."""
    needs_proc()
    from ddpctl.runners import procs

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        started = procs.start_time(bystander.pid)
        assert started is not None
        done = procs.start_child(0, "node 0", ["true"], os.environ)
        done.popen.wait(timeout=30)
        done.known_tree[bystander.pid] = started - 1  # the same pid, an earlier process
        assert procs.kill_leftovers([done]) == [] and bystander.poll() is None
        done.known_tree[bystander.pid] = started  # the very process: it goes
        assert procs.kill_leftovers([done]) == [bystander.pid]
        assert bystander.wait(timeout=30) == -signal.SIGKILL
    finally:
        if bystander.poll() is None:
            bystander.kill()
            bystander.wait()


def test_process_trees_are_read_at_most_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_proc()
    from ddpctl.runners import procs

    scans = []
    real = procs.stat_map
    monkeypatch.setattr(procs, "stat_map", lambda: scans.append(1) or real())
    children = [
        procs.start_child(i, f"node {i}", [sys.executable, "-c", "import time; time.sleep(60)"], os.environ)
        for i in range(2)
    ]
    try:
        for _ in range(100):  # as on 100 output lines
            procs.remember_trees(children)
        assert len(scans) == 1  # one scan for both children, none again within the second
        procs.remember_trees(children, force=True)
        assert len(scans) == 2
    finally:
        procs.stop_children(children, grace_s=5)
    assert all(c.poll() is not None for c in children)


# --------------------------------------------------------------------------------------------
# Ports the user asked for, from any layer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["ddp.yaml", "env"])
def test_a_busy_port_asked_for_in_ddp_yaml_or_the_environment_is_an_error(
    where: str, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _listener() as sock:
        port = sock.getsockname()[1]
        if where == "env":
            monkeypatch.setenv("DDPCTL_RENDEZVOUS_PORT", str(port))
        else:
            (tmp_path / "ddp.yaml").write_text(f"rendezvous:\n  port: {port}\n")
        result = cli("run", "--local")
    assert result.code == 2 and f"port {port} is in use" in result.err


# --------------------------------------------------------------------------------------------
# Node groups: uneven process counts per node
# --------------------------------------------------------------------------------------------

ALLREDUCE_SCRIPT = """
import json, os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank)])
dist.all_reduce(total)
print("WIRING " + json.dumps({
    "rank": rank, "world": world, "sum": total.item(),
    "local_rank": int(os.environ["LOCAL_RANK"]), "local_world": int(os.environ["LOCAL_WORLD_SIZE"]),
    "node_rank": int(os.environ["GROUP_RANK"]),
}), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize("target", ["job", "pytorchjob"])
@pytest.mark.parametrize("layout,procs", [("2+1", [2, 1]), ("1+2", [1, 2])])
def test_uneven_layout_all_reduces_over_every_rank(target: str, layout: str, procs: list[int], tmp_path: Path) -> None:
    """`run --local --layout 2+1 --gpus 0`: agents with 2 and 1 processes meet in one static
    rendezvous; torchrun sums their local world sizes, every rank 0..2 exists once."""
    import json

    from tests.support.ports import free_port

    (tmp_path / "allreduce.py").write_text(ALLREDUCE_SCRIPT)
    port = str(free_port())  # not the shared default: other jobs on this machine may hold it
    layout_flags = ["--layout", layout, "--gpus", "0", "-t", target, "--port", port]
    result = _ddpctl("run", "--local", *layout_flags, "--script", "allreduce.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:] + result.stdout[-2000:]
    rows = [json.loads(line.split("WIRING ", 1)[1]) for line in result.stdout.splitlines() if "WIRING " in line]
    world = sum(procs)
    assert sorted(r["rank"] for r in rows) == list(range(world)), "every rank once"
    assert {r["world"] for r in rows} == {world}
    assert {r["sum"] for r in rows} == {float(sum(range(world)))}, "the all-reduce spans every rank"
    for r in rows:
        node_procs = procs[r["node_rank"]]
        assert r["local_world"] == node_procs and r["local_rank"] < node_procs
        assert r["rank"] == sum(procs[: r["node_rank"]]) + r["local_rank"], "ranks contiguous per node, in node order"


# Restarts: the target's rules, as in the cluster
# --------------------------------------------------------------------------------------------

RESTART_ARGS = [
    "--",
    "--synthetic-samples",
    "128",
    "--eval-samples",
    "32",
    "--global-batch-size",
    "16",
    "--epochs",
    "2",
    "--save-every",
    "3",
    "--dtype",
    "float64",
    "--save-final",
    "final.pt",
]


def _node_agent(root: int, node: int) -> int:
    """The torchrun agent (ddpctl_trainer.launch) of node `node` under ddpctl process `root`."""
    agents = [pid for pid in descendants(root) if "ddpctl_trainer.launch" in cmdline(pid)]
    return with_env(agents, "PET_NODE_RANK", str(node))


RESTART_LAYOUT = ["run", "--local", "--nodes", "2", "--procs", "1", "--backoff-limit", "3"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The final weights of the restart tests' job run without interruption (float64)."""
    import torch

    cwd = tmp_path_factory.mktemp("plain")
    plain = _ddpctl(*RESTART_LAYOUT, *RESTART_ARGS, cwd=cwd)
    assert plain.returncode == 0, plain.stderr[-3000:]
    return dict(torch.load(cwd / "final.pt", weights_only=True)["model"])


def _assert_same_weights(final: Path, expected: dict[str, Any]) -> None:
    import torch

    ours = torch.load(final, weights_only=True)["model"]
    assert ours.keys() == expected.keys()
    for key in ours:
        assert torch.equal(ours[key], expected[key]), key  # bit-identical: same steps, same data order


@pytest.mark.slow
def test_a_killed_worker_restarts_the_group_which_resumes_from_the_last_save(
    started, uninterrupted: dict[str, Any], tmp_path: Path
) -> None:
    """SIGKILL of node 1's worker after step 5 (the OOM killer's way): the whole group restarts
    (backoffLimit 3), resumes from the last save (step 3, --save-every 3), loses steps 4-5 and
    redoes them, and ends with the weights of an uninterrupted run."""
    needs_proc()
    hold = tmp_path / "held"
    hook = env_flags(plugin_env(hold_at(5, rank=1, file=hold)))
    proc = started(*RESTART_LAYOUT, *hook, *RESTART_ARGS, cwd=tmp_path)
    _wait_for_file(proc, hold)
    os.kill(with_env(_trainer_pids(proc.pid), "RANK", "1"), signal.SIGKILL)
    out, err = proc.communicate(timeout=JOB_TIMEOUT)
    assert proc.returncode == 0, err[-3000:]
    assert re.search(
        r"ddpctl: rank 1 \(node 1, local rank 0\) was killed by SIGKILL.*; restarting all 2 nodes from step 3 "
        r"\(restart 1 of 3, 2 left; --backoff-limit 0 turns restarts off\)",
        err,
    ), err
    assert "(epoch 1, step 3)" in out, out
    _assert_same_weights(tmp_path / "final.pt", uninterrupted)
    logs = tmp_path / "ddp-runs" / "ddp-train" / "logs"
    assert "workers failed; exit 137" in (logs / "node-1.log").read_text()  # the failed start's log is kept
    assert (logs / "node-1.restart-1.log").is_file() and (logs / "node-0.restart-1.log").is_file()


@pytest.mark.slow
def test_a_preempted_node_restarts_the_group_which_resumes_at_that_step(
    started, uninterrupted: dict[str, Any], tmp_path: Path
) -> None:
    """SIGTERM to node 1's agent after step 5: both ranks stop after step 5 with a checkpoint, the
    whole group restarts (backoffLimit 3) and ends with the weights of an uninterrupted run."""
    needs_proc()
    layout = RESTART_LAYOUT
    hold = tmp_path / "held"
    hook = env_flags(plugin_env(hold_at(5, rank=1, file=hold)))
    (tmp_path / "preempted").mkdir()
    proc = started(*layout, *hook, *RESTART_ARGS, cwd=tmp_path / "preempted")
    _wait_for_file(proc, hold)  # rank 1 finished step 5 and waits for a signal (the fault plugin's hold)
    os.kill(_node_agent(proc.pid, 1), signal.SIGTERM)  # as the kubelet does to a preempted pod
    out, err = proc.communicate(timeout=JOB_TIMEOUT)
    assert proc.returncode == 0, err[-3000:]
    assert (
        "ddpctl: node 1 was preempted (SIGTERM); restarting all 2 nodes from step 5 (not counted: a preemption; "
        "3 of 3 restarts left)" in err
    ), err
    assert "resumed from" in out and "(epoch 1, step 5)" in out, out
    _assert_same_weights(tmp_path / "preempted" / "final.pt", uninterrupted)  # 0 steps lost


@pytest.mark.slow
def test_a_preempted_node_resumes_from_checkpoints_in_an_object_store(
    started, uninterrupted: dict[str, Any], tmp_path: Path, s3: Any, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--checkpoints s3://...` against a real S3 server: the trainers reach it with the shell's
    credentials, SIGTERM to node 1's agent after step 5 puts the stop checkpoint in the store, and
    the restarted group resumes there (0 steps lost: the weights of an uninterrupted run), with no
    checkpoint on this machine and the secret in no output or log."""
    from tests.support.s3 import SECRET_KEY

    needs_proc()
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    hold = tmp_path / "held"
    hook = env_flags(plugin_env(hold_at(5, rank=1, file=hold)))
    proc = started(*RESTART_LAYOUT, "--checkpoints", s3_url, *hook, *RESTART_ARGS, cwd=tmp_path)
    _wait_for_file(proc, hold)
    os.kill(_node_agent(proc.pid, 1), signal.SIGTERM)
    out, err = proc.communicate(timeout=JOB_TIMEOUT)
    assert proc.returncode == 0, err[-3000:]
    assert (
        f"ddpctl: node 1 was preempted (SIGTERM); restarting all 2 nodes from the newest checkpoint in {s3_url} "
        "(not counted: a preemption" in err
    ), err
    assert "resumed from" in out and "(epoch 1, step 5)" in out, out
    _assert_same_weights(tmp_path / "final.pt", uninterrupted)
    run = tmp_path / "ddp-runs" / "ddp-train"
    assert not (run / "checkpoints").exists()
    logs = "".join(p.read_text(errors="replace") for p in (run / "logs").rglob("*") if p.is_file())
    assert SECRET_KEY not in out + err + logs


@pytest.mark.slow
def test_a_usage_error_at_run_time_is_not_retried(tmp_path: Path) -> None:
    """A model factory that does not exist is found by every rank (exit 2): restarting cannot help."""
    result = _ddpctl(
        "run",
        "--local",
        "--nodes",
        "2",
        "--procs",
        "1",
        "--backoff-limit",
        "3",
        "--",
        "--model",
        "nosuchmod:f",
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "restarting" not in result.stderr and "nosuchmod" in result.stderr, result.stderr


# --------------------------------------------------------------------------------------------
# Two jobs on one machine, a deterministic crash, a lost node, ranks killed at exit
# --------------------------------------------------------------------------------------------

SIDE_BY_SIDE = ["run", "--local", "--nodes", "2", "--procs", "2", "--backoff-limit", "3", *SMALL, "--epochs", "1"]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["same-name-two-folders", "two-names-one-folder"])
def test_two_jobs_on_one_machine_run_side_by_side(started, tmp_path: Path, how: str) -> None:
    """Both jobs want the default port 29500 at once: each start of a group binds its own port
    and rendezvous id, so neither joins the other (nor spends a restart on it)."""
    if how == "same-name-two-folders":
        runs = [(tmp_path / "a", "ddp-train"), (tmp_path / "b", "ddp-train")]
    else:
        runs = [(tmp_path, "job-a"), (tmp_path, "job-b")]
    procs = []
    for cwd, name in runs:
        cwd.mkdir(exist_ok=True)
        procs.append(started(*SIDE_BY_SIDE[:2], "--name", name, *SIDE_BY_SIDE[2:], cwd=cwd))
    for proc, (cwd, name) in zip(procs, runs, strict=True):
        out, err = proc.communicate(timeout=JOB_TIMEOUT)
        assert proc.returncode == 0, err[-3000:]
        assert "restarting" not in err and "outside" not in out, err
        assert f"{name} succeeded" in err and "[rank 0] world size 4" in out
        assert (cwd / "ddp-runs" / name / "checkpoints" / "ckpt-00000004.pt").is_file()


@pytest.mark.slow
def test_the_same_crash_twice_is_not_retried_again(tmp_path: Path) -> None:
    """Rank 3 raises at step 5, before any checkpoint: the restart crashes the same way, and the
    job ends there (not after backoffLimit + 1 starts), naming the rank, its error and why."""
    result = _ddpctl(
        "run",
        "--local",
        "--backoff-limit",
        "3",
        "-e",
        "CRASH_RANK=3",
        "-e",
        "CRASH_AT_STEP=5",
        "--",
        "--model",
        "tests.support.models.fault_models:crashing",
        "--image-size",
        "8",
        "--synthetic-samples",
        "1024",
        "--eval-samples",
        "32",
        "--save-every",
        "100",
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    cause = "rank 3 (node 1, local rank 1) exited with code 1: unexpected ValueError: rank 3 crashes at step 5"
    restarts = [line for line in result.stderr.splitlines() if "restarting" in line]
    assert len(restarts) == 1 and restarts[0].startswith(f"ddpctl: {cause}; "), restarts
    assert _secondary_ranks(restarts[0]) == [0, 1, 2], restarts[0]
    assert "(restart 1 of 3, 2 left; --backoff-limit 0 turns restarts off)" in restarts[0]
    last = result.stderr.rstrip().splitlines()[-1]
    assert last.startswith(f"ddpctl: error: job ddp-train failed: {cause}") and last.endswith(
        "; the same failure twice: not retried"
    ), last


def _secondary_ranks(line: str) -> list[int]:
    """The ranks a failure line says only lost their peer or stopped after the failed one: which of
    the two a rank is depends on whether it saw its peer go before torchrun stopped it (timing), so
    a test asks only that every other rank is one of them and none "failed too"."""
    assert "failed too" not in line, line
    clauses = re.findall(r"; ranks? ([\d, ]+) (?:only lost (?:its|their) peer|stopped after it)", line)
    return sorted(int(r) for clause in clauses for r in clause.split(", "))


@pytest.mark.slow
def test_a_lost_node_restarts_the_group_without_counting(
    started, uninterrupted: dict[str, Any], tmp_path: Path
) -> None:
    """Node 1's agent and workers SIGKILLed, as a machine lost: node 0's ranks only lost their
    peer; the group restarts and the restart count is unchanged (backoffLimit 1 still left)."""
    needs_proc()
    hold = tmp_path / "held"
    hook = env_flags(plugin_env(hold_at(5, rank=1, file=hold)))
    proc = started(*RESTART_LAYOUT, *hook, *RESTART_ARGS, cwd=tmp_path)
    _wait_for_file(proc, hold)
    agent = _node_agent(proc.pid, 1)
    for pid in [agent, *descendants(agent)]:
        os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=JOB_TIMEOUT)
    assert proc.returncode == 0, err[-3000:]
    assert "ddpctl: node 1 was lost (its agent was killed by SIGKILL); restarting all 2 nodes from step 3" in err, err
    assert "(not counted: a lost node; 3 of 3 restarts left)" in err
    _assert_same_weights(tmp_path / "final.pt", uninterrupted)


ABORT_AT_EXIT = """\
import gc
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
model(torch.ones(2, 4)).sum().backward()
t = torch.ones(1)
dist.all_reduce(t)
del model
gc.collect()  # the teardown docs/trainer.md asks for, so no other rank aborts by chance
dist.barrier()
dist.destroy_process_group()
print(f"done {int(t.item())}", flush=True)
if os.environ["RANK"] == "2":
    os.abort()  # what gloo's teardown does at interpreter exit (pytorch/pytorch#179291), made certain
"""


@pytest.mark.slow
def test_a_rank_killed_at_exit_after_the_others_finished_is_not_restarted(tmp_path: Path) -> None:
    (tmp_path / "abort_at_exit.py").write_text(ABORT_AT_EXIT)
    result = _ddpctl(
        "run",
        "--local",
        "--script",
        "abort_at_exit.py",
        "--nodes",
        "3",
        "--procs",
        "1",
        "--backoff-limit",
        "3",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "restarting all" not in result.stderr and result.stdout.count("done 3") == 3, result.stderr
    [line] = [line for line in result.stderr.splitlines() if "killed at exit: " in line]
    # gloo can still abort another rank at exit by chance (pytorch#179291): it is then named too
    assert "rank 2 (node 2) by SIGABRT" in line and "after every other rank had finished" in line, line


@pytest.mark.parametrize(
    ("given", "ddp_yaml", "env", "name"),
    [
        ("mine", "name: from-file\n", {}, "mine"),
        (None, "name: from-file\n", {}, "from-file"),
        (None, "name: from-file\n", {"DDPCTL_NAME": "from-env"}, "from-env"),
        (None, None, {}, "ddp-train"),  # the default job name, as run and submit use
    ],
)
def test_status_and_logs_default_the_name_like_every_command(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    given: str | None,
    ddp_yaml: str | None,
    env: dict[str, str],
    name: str,
) -> None:
    from ddpctl.commands.where import job_name, spec_choices

    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith("DDPCTL_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if ddp_yaml is not None:
        (tmp_path / "ddp.yaml").write_text(ddp_yaml)
    assert job_name(given, spec_choices()) == name


def test_logs_of_a_local_run_read_the_latest_start_or_the_one_before(tmp_path: Path) -> None:
    """The files a run with one restart leaves: node-N.log (first start), node-N.restart-1.log."""
    from ddpctl.backend import LogOptions
    from ddpctl.errors import UsageError
    from ddpctl.runners.runs import run_logs

    logs = tmp_path / "logs"
    logs.mkdir()
    for node in (0, 1):
        (logs / f"node-{node}.log").write_text(f"@@ddpctl-rank={node}@@first start\n")
        (logs / f"node-{node}.restart-1.log").write_text(f"@@ddpctl-rank={node}@@restarted\nlast\n")

    def local_logs(**asked: object) -> list[str]:
        lines: list[str] = []
        run_logs(tmp_path, LogOptions(**asked), lines.append, lines.append)  # type: ignore[arg-type]
        return lines

    latest = local_logs()
    assert latest == ["[node 0] [rank 0] restarted", "[node 0] last", "[node 1] [rank 1] restarted", "[node 1] last"]
    before = local_logs(rank=1, previous=True)
    assert before == ["[rank 1] first start"]  # --rank: no prefix unless asked
    assert local_logs(rank=0, tail=1, prefix=True) == ["[node 0] last"]
    with pytest.raises(UsageError, match="has no node 2; its nodes: 0, 1"):
        local_logs(rank=2)


def test_checkpoints_in_an_object_store_reach_every_node_and_fresh_leaves_them(tmp_path: Path) -> None:
    """`checkpoints: s3://...` goes to each node's trainer as it is (no local directory is made for it),
    the agents inherit the shell's credentials for it, and --fresh refuses to delete from a store."""
    from ddpctl.errors import UsageError
    from ddpctl.runners.local import clean_run_dir

    url = "s3://bucket/runs/r1"
    shell = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "not-printed", "AWS_ENDPOINT_URL": "http://s3.x"}
    plan = plan_local(JobSpec(name="w", checkpoints=url), cwd=tmp_path, parent_env=shell)
    assert plan.checkpoint_dir == url
    for node in plan.nodes:
        assert list(node.argv[-2:]) != [] and "--checkpoint-dir" in node.argv
        assert node.argv[node.argv.index("--checkpoint-dir") + 1] == url
        assert {k: node.env[k] for k in shell} == shell  # the agents' env: the trainer reads them there
    with pytest.raises(UsageError, match=r"^--fresh: the checkpoints are in s3://bucket/runs/r1, an object store"):
        clean_run_dir(plan)
    assert not (tmp_path / "ddp-runs" / "w" / "checkpoints").exists()


def test_run_local_without_torch_says_so_before_starting_anything(tmp_path: Path, monkeypatch) -> None:
    """Was: both nodes failed, the group restarted once, and the run ended on "exit code 1"."""
    import importlib.util

    from ddpctl.errors import RuntimeFailure

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(
        RuntimeFailure, match=r"^torch is not importable here \(.*python.*\).*pip install 'ddpctl\[train\]'"
    ):
        plan_local(JobSpec(), cwd=tmp_path, parent_env={})
    assert not (tmp_path / "ddp-runs").exists()
