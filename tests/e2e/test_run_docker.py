"""`ddpctl run --docker`: a 2-node gloo job across two containers that find rank 0 by the DNS
name the cluster would give, a killed container failing the job with its ranks named, bad input
in one line, and never a container or network left behind.

Needs a Docker engine and the CPU base image (.ci/run: scripts/install-docker.sh and
scripts/make-base-image.sh); skips without them on a user's machine, fails under CI=true.
"""

from __future__ import annotations

import os
import re
import secrets
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpctl.engines import plan_for
from ddpctl.errors import UsageError
from ddpctl.runners.docker import plan_docker, quantity_bytes
from ddpctl.spec.model import JobSpec
from tests.support import REPO, skip_unless
from tests.support.docker import BASE_IMAGE, docker_works, image_present, local_images
from tests.support.models.faults import env_flags, hold_at, plugin_env

JOB_TIMEOUT = 300
SMALL = ["--", "--synthetic-samples", "512", "--eval-samples", "64"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPCTL_")}
    env["PYTHONPATH"] = str(REPO)
    return env


def _ddpctl(*args: str, cwd: Path, timeout: float = JOB_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddpctl", *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout
    )


def _left_behind(job: str) -> list[str]:
    """Containers and networks of job `job` that still exist (by the label ddpctl puts on them)."""
    flt = f"label=ddpctl.io/job={job}"
    containers = subprocess.run(["docker", "ps", "-aq", "--filter", flt], capture_output=True, text=True).stdout.split()
    networks = subprocess.run(
        ["docker", "network", "ls", "-q", "--filter", flt], capture_output=True, text=True
    ).stdout.split()
    return containers + networks


def _job_name() -> str:
    return f"dt{secrets.token_hex(3)}"


def _remove_job(job: str) -> None:
    """Remove every container and network labelled for `job` (test teardown, not the product's)."""
    flt = f"label=ddpctl.io/job={job}"
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", flt], capture_output=True, text=True).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
    nets = subprocess.run(
        ["docker", "network", "ls", "-q", "--filter", flt], capture_output=True, text=True
    ).stdout.split()
    if nets:
        subprocess.run(["docker", "network", "rm", *nets], capture_output=True)


@pytest.fixture
def docker_job():
    """Start `ddpctl run --docker --name JOB ...` in the background: returns (job, start). At the
    end a ddpctl still running is stopped as a user would (SIGINT, waiting for its cleanup), only
    then SIGKILLed; whatever is left labelled for the job is removed. Tests assert the product's
    own cleanup (`_left_behind(job) == []`) before this runs."""
    job = _job_name()
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str, cwd: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ddpctl", "run", "--docker", "--name", job, *args],
            cwd=cwd,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return proc

    yield job, start
    for proc in procs:
        _interrupt(proc)
    _remove_job(job)


def _interrupt(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    """Ctrl-C a running ddpctl and wait for it; SIGKILL only if it does not end. Returns stderr."""
    if proc.poll() is not None:
        return ""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1]


@pytest.fixture(scope="module")
def trainer_image() -> str:
    """The real Dockerfile built on the CPU base (cached by the engine after the first build)."""
    skip_unless(docker_works(), "a running Docker engine (bash scripts/install-docker.sh)")
    skip_unless(image_present(BASE_IMAGE), f"the CPU base image {BASE_IMAGE} (bash scripts/make-base-image.sh)")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpctl",
            "build",
            "--quiet",
            "--no-latest",
            "--base-image",
            BASE_IMAGE,
            "--repo",
            "ddpctl-trainer-test",
        ],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


@pytest.fixture(scope="module")
def fault_image(trainer_image: str) -> str:
    """The trainer image plus the tests' fault plugin (tests/e2e/cluster/user-image.Dockerfile, as
    the real-node tests build it): the product image ships no test hooks."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpctl",
            "build",
            "--quiet",
            "--no-latest",
            "--base-image",
            trainer_image,
            "--repo",
            "ddpctl-user-test",
            "--file",
            "tests/e2e/cluster/user-image.Dockerfile",
            "--context",
            "tests/support/models",
        ],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


# --------------------------------------------------------------------------------------------
# The plan (no engine needed)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "rank0"),
    [
        ("job", ("w-0", "w-0.w")),
        ("jobset", ("w-node-0-0", "w-node-0-0.w")),
        ("pytorchjob", ("w-master-0",)),
        ("trainjob", ("w-node-0-0", "w-node-0-0.w")),
    ],
)
def test_rank0_alias_is_the_address_the_cluster_gives(target: str, rank0: tuple[str, ...]) -> None:
    plan = plan_for(JobSpec(name="w", target=target))
    names = plan.dns_names
    assert names[0] == rank0
    assert plan.rank0_host in names[0]  # MASTER_ADDR / the rendezvous host resolves on the network


def test_shm_size_quantities() -> None:
    assert quantity_bytes("2Gi") == 2 * 1024**3
    assert quantity_bytes("512M") == 512 * 1000**2
    assert quantity_bytes("1e9") == 10**9


def test_missing_engine_is_a_one_line_error(tmp_path: Path) -> None:
    result = _ddpctl("run", "--docker", "--engine", "no-such-engine-cli", cwd=tmp_path, timeout=60)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "no-such-engine-cli is not installed" in result.stderr


@pytest.mark.docker
def test_docker_run_plan_wires_each_container_like_its_pod(
    trainer_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = JobSpec(name="wired", image=trainer_image, shm_size="1Gi")
    plan = plan_docker(spec, run_id="abc123")
    assert plan.network == "ddpctl-wired-abc123"
    first, second = (list(c.argv) for c in plan.containers)
    assert first[first.index("--hostname") + 1] == "wired-0" and "wired-0.wired" in first
    assert "PET_NODE_RANK=1" in second and "PET_MASTER_ADDR=wired-0.wired" in second
    assert first[first.index("--shm-size") + 1] == str(1024**3)
    assert "--cap-drop" in first and "ddpctl.io/run=abc123" in first
    # the trainer's torchrun runs as its launcher (exit codes that keep the reason), the container's PID 1
    entry = first.index("--entrypoint")
    assert first[entry + 1 : entry + 5] == ["python3", trainer_image, "-m", "ddpctl_trainer.launch"]
    assert first[-2:] == ["-m", "ddpctl_trainer"]
    assert f"{tmp_path}/ddp-runs/wired/checkpoints:/checkpoints" in first
    assert _left_behind("wired") == []  # planning creates nothing in the engine


# --------------------------------------------------------------------------------------------
# Real jobs
# --------------------------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.slow
def test_two_containers_rendezvous_by_hostname_and_checkpoint_to_a_volume(trainer_image: str, tmp_path: Path) -> None:
    job = _job_name()
    result = _ddpctl("run", "--docker", "--name", job, "--image", trainer_image, *SMALL, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    assert f"rank 0 at {job}-0.{job}:29500" in result.stderr  # MASTER_ADDR is the cluster's DNS name
    # rank 0 reports the global progress, the other ranks none; torchrun's banner is shown once
    assert re.search(r"^\[rank 0\] epoch 2/2 step 4/4 loss ", result.stdout, re.M), result.stdout
    assert not re.search(r"^\[rank [1-3]\] (eval )?epoch", result.stdout, re.M), result.stdout
    assert result.stdout.count("Setting OMP_NUM_THREADS") == 1, result.stdout
    ckpt = tmp_path / "ddp-runs" / job / "checkpoints" / "ckpt-00000008.pt"
    assert ckpt.is_file()
    import torch

    payload = torch.load(ckpt, weights_only=True)
    assert payload["step"] == 8 and payload["world_size"] == 4
    assert _left_behind(job) == []


def _wait_for_line(proc: subprocess.Popen[str], pattern: str, timeout: float) -> None:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline and sel.select(timeout=max(0.0, deadline - time.monotonic())):
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if re.search(pattern, line):
            return
    _interrupt(proc)  # ddpctl's own cleanup: a SIGKILL would leave its containers behind
    pytest.fail(f"no line matching {pattern!r} within {timeout}s: {''.join(seen)[-2000:]}")


@pytest.mark.docker
@pytest.mark.slow
def test_killing_one_container_fails_the_job_and_names_its_ranks(
    trainer_image: str, tmp_path: Path, docker_job
) -> None:
    job, start = docker_job
    proc = start("--image", trainer_image, "--backoff-limit", "0", *SMALL, "--epochs", "500", cwd=tmp_path)
    _wait_for_line(proc, r"^\[rank 0\] world size 4", JOB_TIMEOUT)
    victim = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=ddpctl.io/job={job}", "--filter", "label=ddpctl.io/node=1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert len(victim) == 1
    subprocess.run(["docker", "kill", victim[0]], capture_output=True, check=True)
    _, err = proc.communicate(timeout=JOB_TIMEOUT)
    assert proc.returncode == 137, err
    errors = [line for line in err.splitlines() if line.startswith("ddpctl: error:")]
    assert len(errors) == 1, err
    assert "node 1 (ranks 2-3) was killed by SIGKILL" in errors[0] and f"container {job}-1" in errors[0]
    assert _left_behind(job) == []


@pytest.mark.docker
@pytest.mark.slow
def test_ctrl_c_removes_the_containers_and_the_network(trainer_image: str, tmp_path: Path, docker_job) -> None:
    job, start = docker_job
    proc = start("--image", trainer_image, *SMALL, "--epochs", "500", cwd=tmp_path)
    _wait_for_line(proc, r"^\[rank 0\] world size 4", JOB_TIMEOUT)
    assert len(_left_behind(job)) == 3  # two containers and the network, while it runs
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err
    assert _left_behind(job) == []


@pytest.mark.docker
def test_an_image_that_does_not_exist_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    skip_unless(docker_works(), "a running Docker engine (bash scripts/install-docker.sh)")
    job = _job_name()
    result = _ddpctl("run", "--docker", "--name", job, "--image", "ddpctl-no-such-image:0", cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "ddpctl-no-such-image:0 does not exist locally" in result.stderr and "ddpctl build" in result.stderr
    assert _left_behind(job) == []


@pytest.mark.docker
def test_a_stopped_engine_is_a_one_line_error(tmp_path: Path) -> None:
    skip_unless(docker_works(), "a running Docker engine (bash scripts/install-docker.sh)")
    env = {**_env(), "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    result = subprocess.run(
        [sys.executable, "-m", "ddpctl", "run", "--docker"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "the docker engine does not answer" in result.stderr


# --------------------------------------------------------------------------------------------
# Host directories: --fresh and user directories are left as they are
# --------------------------------------------------------------------------------------------


@pytest.mark.docker
def test_fresh_keeps_a_users_files_and_a_mounted_dirs_mode(
    trainer_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    mine.chmod(0o703)  # uid 1000 may write (others: wx), and nothing more
    (mine / "notes.txt").write_text("mine\n")
    (mine / "ckpt-00000008.pt").write_bytes(b"x")
    (mine / ".ckpt-00000016.pt.tmp.77").write_bytes(b"x")
    plan = plan_docker(
        JobSpec(name="fr", image=trainer_image), mounts=[f"checkpoints={mine}"], fresh=True, run_id="abc123"
    )
    assert plan.checkpoint_dir == mine
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert mine.stat().st_mode & 0o777 == 0o703  # a user's directory is never chmodded
    ours = tmp_path / "ddp-runs" / "fr"
    assert not (ours / "checkpoints").exists()  # the --mount replaced it


@pytest.mark.docker
def test_a_mounted_dir_uid_1000_cannot_write_is_a_one_line_error(trainer_image: str, tmp_path: Path) -> None:
    mine = tmp_path / "data-of-mine"
    mine.mkdir()
    mine.chmod(0o755)
    if os.getuid() == 1000:
        mine.chmod(0o555)
    result = _ddpctl(
        "run", "--docker", "--image", trainer_image, "--mount", f"checkpoints={mine}", cwd=tmp_path, timeout=120
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"--mount checkpoints: {mine} is not writable by uid 1000" in result.stderr and "chown" in result.stderr
    assert mine.stat().st_mode & 0o777 == (0o555 if os.getuid() == 1000 else 0o755)


@pytest.mark.docker
def test_directories_ddpctl_makes_are_writable_for_the_image_user(
    trainer_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plan = plan_docker(JobSpec(name="own", image=trainer_image), run_id="abc123")
    assert plan.checkpoint_dir == tmp_path / "ddp-runs" / "own" / "checkpoints"
    assert plan.checkpoint_dir.stat().st_mode & 0o777 == 0o777
    assert (tmp_path / "ddp-runs" / "own").stat().st_mode & 0o777 != 0o777  # not mounted: not opened up


def test_plan_docker_takes_no_port_flag() -> None:
    import inspect

    assert "port_explicit" not in inspect.signature(plan_docker).parameters


@pytest.mark.docker
@pytest.mark.slow
def test_uneven_layout_runs_the_pods_command_in_containers(trainer_image: str, tmp_path: Path) -> None:
    """`run --docker --layout 2+1 --gpus 0`: each container runs its pod's command, the node-rank
    launcher (python3 -c) that adds the group offset to the completion index, then torchrun."""
    job = _job_name()
    result = _ddpctl(
        "run", "--docker", "--layout", "2+1", "--gpus", "0", "--name", job, "--image", trainer_image,
        "--", "--synthetic-samples", "96", "--eval-samples", "30", "--global-batch-size", "12", "--epochs", "1",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    assert f"rank 0 at {job}-g0-0.{job}:29500" in result.stderr and "world size 3" in result.stderr
    # progress comes from rank 0 only; the world size says every rank joined
    assert re.search(r"^\[rank 0\] world size 3 \(ddp, gloo, cpu\)", result.stdout, re.M), result.stdout
    assert re.search(r"^\[rank 0\] epoch 1/1 step 8/8 loss ", result.stdout, re.M), result.stdout
    ckpt = tmp_path / "ddp-runs" / job / "checkpoints" / "ckpt-00000008.pt"
    import torch

    assert torch.load(ckpt, weights_only=True)["world_size"] == 3
    assert _left_behind(job) == []


def test_docker_plan_of_a_layout_uses_each_groups_command_and_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("ddpctl.runners.docker.require_engine_cli", lambda engine: engine)
    monkeypatch.setattr("ddpctl.runners.docker.ensure_image", lambda engine, spec: None)
    from ddpctl.commands.options import parse_layout
    from ddpctl.spec.sources import merged_layers

    spec = JobSpec.from_dict(
        merged_layers(
            {"name": "lay", "nodeGroups": parse_layout("--layout", "2+1"), "gpusPerNode": 0}, Path(os.devnull), {}
        )
    )
    plan = plan_docker(spec, run_id="abc123")
    first, second = (list(c.argv) for c in plan.containers)
    assert first[first.index("--hostname") + 1] == "lay-g0-0" and "lay-g0-0.lay" in first
    assert second[second.index("--hostname") + 1] == "lay-g1-0" and "lay-g1-0.lay" in second
    assert (
        "PET_NODE_RANK_OFFSET=1" in second and "JOB_COMPLETION_INDEX=0" in second and "PET_NPROC_PER_NODE=1" in second
    )
    assert "PET_NPROC_PER_NODE=2" in first and not any(a.startswith("PET_NODE_RANK=") for a in first + second)
    entry = second.index("--entrypoint")
    # the trainer's launcher adds the group's offset to the completion index itself (as in the pods)
    assert second[entry + 1 : entry + 6] == ["python3", spec.image, "-m", "ddpctl_trainer.launch", "-m"]


# --------------------------------------------------------------------------------------------
# Restarts: the target's rules, as run --local plays them (2 containers x 1 process, float64)
# --------------------------------------------------------------------------------------------

# 128 samples / global batch 16 = 8 steps per epoch, 2 epochs; a checkpoint every 3 steps. The
# final weights are written to the checkpoints volume (/checkpoints), which the host sees.
RESTART_LAYOUT = ["--nodes", "2", "--procs", "1", "--backoff-limit", "3"]
RESTART_ARGS = [
    "--",
    "--synthetic-samples", "128", "--eval-samples", "32", "--global-batch-size", "16", "--epochs", "2",
    "--save-every", "3", "--dtype", "float64", "--save-final", "/checkpoints/final.pt",
]  # fmt: skip
# The tests' fault plugin (in `fault_image`): rank 1 (node 1's only process) waits after step 5
# for a SIGTERM, having written this file on the checkpoints volume (once: a restarted group does
# not hold again).
HOLD = env_flags(plugin_env(hold_at(5, rank=1, file="/checkpoints/held"), image=True))
# Run inside a container: SIGKILL the training process, PID 1's (the launcher's) child.
KILL_WORKER = (
    "import os, signal\n"
    "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
    "    argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')\n"
    "    ppid = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1]\n"
    "    if ppid == '1' and b'ddpctl_trainer' in argv and b'ddpctl_trainer.launch' not in argv:\n"
    "        os.kill(int(pid), signal.SIGKILL); print(pid)\n"
)


def _final_weights(run_dir: Path) -> dict:
    import torch

    return torch.load(run_dir / "checkpoints" / "final.pt", weights_only=True)["model"]


def _assert_same_weights(ours: dict, theirs: dict) -> None:
    import torch

    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key  # bit-identical: same data order, same steps


@pytest.fixture(scope="module")
def uninterrupted(trainer_image: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The final weights of the restart tests' job run without interruption (run once)."""
    cwd = tmp_path_factory.mktemp("uninterrupted")
    job = _job_name()
    result = _ddpctl(
        "run", "--docker", "--name", job, "--image", trainer_image, *RESTART_LAYOUT, *RESTART_ARGS, cwd=cwd
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    assert "restarting" not in result.stderr
    return _final_weights(cwd / "ddp-runs" / job)


def _wait_for_hold(proc: subprocess.Popen[str], hold: Path) -> None:
    """Wait until rank 1 finished step 5 and holds (the hook wrote `hold`), or ddpctl ended."""
    deadline = time.monotonic() + JOB_TIMEOUT
    while not hold.exists():
        try:
            proc.wait(timeout=0.2)  # waits on ddpctl: it must not end before the hold
        except subprocess.TimeoutExpired:
            assert time.monotonic() < deadline, f"rank 1 did not reach step 5 ({hold} not written)"
            continue
        pytest.fail(f"ddpctl ended before rank 1 held at step 5: {proc.communicate()[1][-3000:]}")


def _container_of_node(job: str, node: int) -> str:
    found = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=ddpctl.io/job={job}", "--filter", f"label=ddpctl.io/node={node}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert len(found) == 1, found
    return found[0]


@pytest.mark.docker
@pytest.mark.slow
def test_a_preempted_container_restarts_the_group_which_resumes_at_that_step(
    fault_image: str, uninterrupted: dict, tmp_path: Path, docker_job
) -> None:
    """SIGTERM to node 1's container after step 5 (the kubelet's signal to a preempted pod's PID 1,
    which is the trainer's launcher): every rank stops after step 5 with a checkpoint, all
    containers run again (backoffLimit 3) and the job ends with an uninterrupted run's weights."""
    job, start = docker_job
    proc = start("--image", fault_image, *RESTART_LAYOUT, *HOLD, *RESTART_ARGS, cwd=tmp_path)
    run_dir = tmp_path / "ddp-runs" / job
    _wait_for_hold(proc, run_dir / "checkpoints" / "held")
    victim = _container_of_node(job, 1)
    pid1 = subprocess.run(["docker", "exec", victim, "cat", "/proc/1/cmdline"], capture_output=True, check=True)
    assert pid1.stdout.split(b"\0")[:3] == [b"python3", b"-m", b"ddpctl_trainer.launch"], pid1.stdout
    subprocess.run(["docker", "kill", "--signal", "TERM", victim], capture_output=True, check=True)
    out, err = proc.communicate(timeout=JOB_TIMEOUT)
    assert proc.returncode == 0, err[-3000:]
    assert (
        "ddpctl: node 1 was preempted (SIGTERM); restarting all 2 nodes from step 5 (not counted: a preemption; "
        "3 of 3 restarts left)" in err
    ), err
    assert "resumed from /checkpoints/ckpt-00000005.pt (epoch 1, step 5)" in out, out  # 0 steps lost
    _assert_same_weights(_final_weights(run_dir), uninterrupted)
    assert _left_behind(job) == []


@pytest.mark.docker
@pytest.mark.slow
def test_a_killed_worker_restarts_the_group_which_resumes_from_its_last_checkpoint(
    fault_image: str, uninterrupted: dict, tmp_path: Path, docker_job
) -> None:
    """SIGKILL of node 1's training process after step 5 (as the OOM killer would): the group
    restarts from the checkpoint of step 3, trains steps 4 and 5 again on the same data, and ends
    with an uninterrupted run's weights."""
    job, start = docker_job
    proc = start("--image", fault_image, *RESTART_LAYOUT, *HOLD, *RESTART_ARGS, cwd=tmp_path)
    run_dir = tmp_path / "ddp-runs" / job
    _wait_for_hold(proc, run_dir / "checkpoints" / "held")
    killed = subprocess.run(
        ["docker", "exec", _container_of_node(job, 1), "python3", "-c", KILL_WORKER], capture_output=True, text=True
    )
    assert killed.returncode == 0 and len(killed.stdout.split()) == 1, killed.stdout + killed.stderr
    out, err = proc.communicate(timeout=JOB_TIMEOUT)
    assert proc.returncode == 0, err[-3000:]
    assert (
        "ddpctl: node 1 was killed (SIGKILL); restarting all 2 nodes from step 3 (restart 1 of 3, 2 left; "
        "--backoff-limit 0 turns restarts off)" in err
    ), err
    assert "resumed from /checkpoints/ckpt-00000003.pt (epoch 1, step 3)" in out, out
    _assert_same_weights(_final_weights(run_dir), uninterrupted)
    assert _left_behind(job) == []


@pytest.mark.docker
@pytest.mark.slow
def test_a_usage_error_in_a_container_is_not_retried(trainer_image: str, tmp_path: Path) -> None:
    """A model factory that does not exist is found by every rank at run time (exit 2 from the
    launcher, the container's exit code): restarting cannot help, whatever backoffLimit says."""
    job = _job_name()
    result = _ddpctl(
        "run", "--docker", "--name", job, "--image", trainer_image, *RESTART_LAYOUT, "--", "--model", "nosuchmod:f",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert "restarting" not in result.stderr and "nosuchmod" in result.stderr, result.stderr
    assert _left_behind(job) == []


def test_docker_containers_get_store_credentials_by_name_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With checkpoints in an object store, each container gets the URL and the store's credentials
    and settings from this shell by name (`-e NAME`: the engine reads the value), so no secret is in
    an argv that `ps` shows; an endpoint on loopback, which containers cannot reach, is said."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("ddpctl.runners.docker.require_engine_cli", lambda engine: engine)
    monkeypatch.setattr("ddpctl.runners.docker.ensure_image", lambda engine, spec: None)
    for key, value in {
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "HF_TOKEN": "hf-value",
    }.items():
        monkeypatch.setenv(key, value)
    url = "s3://bucket/runs/r1"
    spec = JobSpec.from_dict(
        {"name": "st", "checkpoints": url, "secretEnv": {"HF_TOKEN": {"secret": "hf", "key": "t"}}}
    )
    plan = plan_docker(spec, run_id="abc123")
    for container in plan.containers:
        argv = list(container.argv)
        assert argv[argv.index("--checkpoint-dir") + 1] == url
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "HF_TOKEN"):
            assert argv[argv.index(name) - 1] == "-e"
        text = " ".join(argv)
        assert "s3cr3t-value" not in text and "AKIDEXAMPLE" not in text and "hf-value" not in text
        assert not any(a.endswith(":/checkpoints") for a in argv)  # no host directory stands in for the store
    assert plan.checkpoint_dir == url
    assert any("127.0.0.1:9000: this machine's loopback" in note for note in plan.notes)
    # the trainer's own --checkpoint-dir URL (the last one wins, as in argparse) gets the same
    by_arg = plan_docker(JobSpec(name="st", args=("--checkpoint-dir", "/x", f"--checkpoint-dir={url}")), run_id="b")
    assert by_arg.checkpoint_dir == url and "AWS_SECRET_ACCESS_KEY" in by_arg.containers[0].argv
    # --fresh cannot delete from a store: refused before any image is looked for
    monkeypatch.setattr("ddpctl.runners.docker.ensure_image", lambda engine, spec: pytest.fail("looked for the image"))
    with pytest.raises(UsageError, match=r"^--fresh: the checkpoints are in s3://bucket/runs/r1"):
        plan_docker(spec, run_id="c", fresh=True)


USER_TRAIN = """\
import os

import torch.distributed as dist

import helper

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} of {dist.get_world_size()} says {helper.CONSTANT} in {os.getcwd()}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.docker
@pytest.mark.slow
def test_workspace_runs_the_edited_code_without_a_rebuild(trainer_image: str, tmp_path: Path) -> None:
    """A user's folder (train.py importing helper.py, and a .env): every container runs the folder's
    current code from /workspace, unpacked from the same archive a pod gets; an edit runs at once,
    with the same image; the .env never reaches a container."""
    job = _job_name()
    (tmp_path / "train.py").write_text(USER_TRAIN)
    (tmp_path / "helper.py").write_text("CONSTANT = 'first'\n")
    (tmp_path / ".env").write_text("TOKEN=never-shipped\n")
    args = ["run", "--docker", "--name", job, "--image", trainer_image, "--nodes", "2", "--procs", "1",
            "--script", "train.py", "--workspace", "."]  # fmt: skip
    first = _ddpctl(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:] + first.stdout[-3000:]
    said = sorted(line.split("] ", 1)[-1] for line in first.stdout.splitlines() if " says " in line)
    assert said == ["rank 0 of 2 says first in /workspace", "rank 1 of 2 says first in /workspace"], first.stdout
    assert "left out: .env (likely secrets" in first.stderr
    images = local_images()
    (tmp_path / "helper.py").write_text("CONSTANT = 'edited'\n")
    second = _ddpctl(*args, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("says edited in /workspace") == 2, second.stdout
    assert local_images() == images
    assert _left_behind(job) == []
