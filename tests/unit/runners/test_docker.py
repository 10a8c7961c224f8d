"""ddpctl.runners.docker: the plan of `run --docker` (each container's `docker run` argv: its
names, network aliases, labels, env, volumes, security, command), the host directories it mounts,
the credentials it passes by name, and what `DockerLauncher` makes of a failed container. No
container engine: dry-run plans only (the real runs are in tests/e2e/test_run_docker.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddpctl.engines import plan_for
from ddpctl.errors import RuntimeFailure, UsageError
from ddpctl.runners.docker import (
    LOCAL_CHECKPOINTS,
    DockerLauncher,
    DockerPlan,
    credentials_passed,
    plan_docker,
    prepare_volume_dir,
    quantity_bytes,
    writable_by,
)
from ddpctl.runners.state import Failure, JobState
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol
from tests.support import skip_unless


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # plan_docker puts ./ddp-runs/NAME in the current directory


def _plan(data: dict | None = None, **kw: object) -> DockerPlan:
    spec = JobSpec.from_dict({"name": "w", "nodes": 2, "procsPerNode": 1, **(data or {})})
    return plan_docker(spec, run_id="abc123", dry_run=True, **kw)  # type: ignore[arg-type]


def _pairs(argv: tuple[str, ...], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


# ------------------------------------------------------------------------------ quantities


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2Gi", 2 * 1024**3),
        ("512Mi", 512 * 1024**2),
        ("512M", 512 * 1000**2),
        ("1.5Gi", int(1.5 * 1024**3)),
        ("1e9", 10**9),
        ("64k", 64_000),
        ("100", 100),
        ("5000m", 5),  # milli: a thousandth of a byte
    ],
)
def test_quantity_bytes(text: str, size: int) -> None:
    assert quantity_bytes(text) == size


@pytest.mark.parametrize("text", ["2GB", "lots", "", "-1Gi"])
def test_a_size_docker_cannot_use_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match=r"^shmSize: .* is not a size docker understands"):
        quantity_bytes(text)


# ------------------------------------------------------------------------------ the containers


def test_each_container_is_its_pod(tmp_path: Path) -> None:
    plan = _plan({"args": ["--epochs", "2"]})
    assert (plan.network, plan.run_id, plan.engine) == ("ddpctl-w-abc123", "abc123", "docker")
    one = plan.containers[1]
    assert (one.name, one.hostname, one.aliases) == ("ddpctl-abc123-w-1", "w-1", ("w-1", "w-1.w"))
    argv = one.argv
    assert argv[:2] == ("docker", "run")
    assert _pairs(argv, "--name") == ["ddpctl-abc123-w-1"] and _pairs(argv, "--hostname") == ["w-1"]
    assert _pairs(argv, "--network") == ["ddpctl-w-abc123"]
    assert _pairs(argv, "--network-alias") == ["w-1", "w-1.w"]  # the DNS names other pods use
    assert _pairs(argv, "--label") == ["ddpctl.io/run=abc123", "ddpctl.io/job=w", "ddpctl.io/node=1"]
    assert _pairs(argv, "--shm-size") == [str(quantity_bytes(plan.spec.shm_size))]
    env = dict(e.split("=", 1) for e in _pairs(argv, "-e"))
    assert (env["PET_MASTER_ADDR"], env["PET_NODE_RANK"], env["JOB_COMPLETION_INDEX"]) == ("w-0.w", "1", "1")
    assert env[protocol.CHECKPOINT_DIR_ENV] == LOCAL_CHECKPOINTS
    checkpoints = tmp_path.resolve() / "ddp-runs" / "w" / "checkpoints"
    assert _pairs(argv, "-v") == [f"{checkpoints}:{LOCAL_CHECKPOINTS}"]
    assert plan.checkpoint_dir == checkpoints
    entry = argv.index("--entrypoint")
    assert argv[entry:] == (
        "--entrypoint",
        "python3",
        plan.spec.image,
        "-m",
        protocol.LAUNCHER_MODULE,
        "-m",
        protocol.TRAINER_MODULE,
        "--epochs",
        "2",
    )


def test_a_dry_run_makes_nothing(tmp_path: Path) -> None:
    _plan()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("security", "hardened"), [("restricted", True), ("baseline", False)])
def test_restricted_pods_drop_every_capability_here_too(security: str, hardened: bool) -> None:
    argv = _plan({"podSecurity": security}).containers[0].argv
    assert (_pairs(argv, "--cap-drop") == ["ALL"]) is hardened
    assert (_pairs(argv, "--security-opt") == ["no-new-privileges"]) is hardened


def test_the_specs_volumes_are_host_directories(tmp_path: Path) -> None:
    volumes = {
        "data": {"claimName": "d", "mountPath": "/data", "readOnly": True},
        "checkpoints": {"claimName": "c", "mountPath": "/ckpt"},
    }
    mine = tmp_path / "mine"
    plan = _plan({"volumes": volumes}, mounts=[f"data={mine}"])
    run_dir = tmp_path.resolve() / "ddp-runs" / "w"
    assert _pairs(plan.containers[0].argv, "-v") == [f"{run_dir / 'checkpoints'}:/ckpt", f"{mine}:/data:ro"]
    assert plan.checkpoint_dir == run_dir / "checkpoints"
    env = dict(e.split("=", 1) for e in _pairs(plan.containers[0].argv, "-e"))
    assert protocol.CHECKPOINT_DIR_ENV not in env  # --checkpoint-dir /ckpt is in the args
    assert dict(plan.host_dirs) == {"data": mine, "checkpoints": run_dir / "checkpoints"}


def test_a_job_with_its_own_checkpoint_dir_gets_no_host_directory_for_it() -> None:
    plan = _plan({"args": ["--checkpoint-dir", "/scratch/ckpt"]})
    assert _pairs(plan.containers[0].argv, "-v") == [] and plan.checkpoint_dir is None


@pytest.mark.parametrize(
    ("data", "kw", "message"),
    [
        ({"gpusPerNode": 1}, {}, "gpusPerNode: 1 GPUs per node cannot be given to local containers by ddpctl"),
        ({}, {"mounts": ["nope"]}, "--mount: 'nope' is not NAME=DIR"),
        ({}, {"mounts": ["data=/x"]}, "--mount: the spec has no volume 'data'"),
        ({"args": ["--epochs", "zero"]}, {}, "trainer: "),
        ({"checkpoints": "s3://b/p"}, {"fresh": True}, "--fresh: the checkpoints are in s3://b/p"),
    ],
)
def test_what_is_refused_before_any_container_runs(data: dict, kw: dict, message: str) -> None:
    with pytest.raises(UsageError) as error:
        _plan(data, **kw)
    assert str(error.value).startswith(message)


def test_dns_names_are_the_engines(tmp_path: Path) -> None:
    job = plan_for(JobSpec(name="w", nodes=2, procs_per_node=1, target="pytorchjob"))
    assert job.dns_names == (("w-master-0",), ("w-worker-0",))


# ------------------------------------------------------------------------------ host directories


@pytest.mark.parametrize(
    ("mode", "who", "writable"),
    [
        (0o700, "owner", True),
        (0o500, "owner", False),
        (0o077, "owner", False),  # the owner's bits decide for the owner
        (0o770, "group", True),
        (0o707, "group", False),
        (0o703, "other", True),
        (0o775, "other", False),
        (0o000, "root", True),  # root writes anywhere
    ],
)
def test_writable_by(tmp_path: Path, mode: int, who: str, writable: bool) -> None:
    """Mode bits as the kernel reads them for the image's user: owner, else group, else others."""
    directory = tmp_path / "d"
    directory.mkdir()
    if directory.stat().st_uid == 0:  # as root: give it an owner that is not root
        os.chown(directory, 5000, 5000)
    directory.chmod(mode)
    st = directory.stat()
    uid, gid = {
        "owner": (st.st_uid, st.st_gid + 1),
        "group": (st.st_uid + 1, st.st_gid),
        "other": (st.st_uid + 1, st.st_gid + 1),
        "root": (0, 0),
    }[who]
    assert writable_by(directory, uid, gid) is writable


def test_a_directory_ddpctl_makes_is_opened_to_the_images_user(tmp_path: Path) -> None:
    made = tmp_path / "ddp-runs" / "w" / "checkpoints"
    prepare_volume_dir(made, read_only=False, given_as=None, ours=True)
    assert made.is_dir() and made.stat().st_mode & 0o777 == 0o777
    ro = tmp_path / "ro"
    prepare_volume_dir(ro, read_only=True, given_as=None, ours=True)
    assert ro.is_dir() and ro.stat().st_mode & 0o777 != 0o777


def test_a_users_directory_is_never_opened_up(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    mine.chmod(0o700)
    skip_unless(not writable_by(mine), "a user other than uid 1000 (the image's user: its own directory is writable)")
    with pytest.raises(UsageError) as error:
        prepare_volume_dir(mine, read_only=False, given_as="data", ours=False)
    assert str(error.value) == (
        f"--mount data: {mine} is not writable by uid 1000, the user the image runs as; make it writable (sudo "
        f"chown -R 1000 {mine}, or chmod o+rwx {mine}) or drop --mount data to let ddpctl make one"
    )
    assert mine.stat().st_mode & 0o777 == 0o700
    prepare_volume_dir(mine, read_only=True, given_as="data", ours=False)  # read-only: fine as it is
    prepare_volume_dir(mine, read_only=False, given_as=None, ours=True)  # ddpctl's own layout: opened
    assert mine.stat().st_mode & 0o777 == 0o777


# ------------------------------------------------------------------------------ credentials


def test_secret_env_is_passed_by_name_and_a_missing_one_is_noted() -> None:
    job = plan_for(
        JobSpec.from_dict({"secretEnv": {"TOKEN": {"secret": "s", "key": "k"}, "GONE": {"secret": "s", "key": "g"}}})
    )
    passed, notes = credentials_passed(job, {"TOKEN": "t0ps3cret", "AWS_ACCESS_KEY_ID": "x"})
    assert passed == ["TOKEN"]  # no object store: no store credentials
    assert notes == ("secretEnv GONE come from Secrets in the cluster; export them to set them here",)


def test_an_object_stores_credentials_are_passed_by_name() -> None:
    job = plan_for(JobSpec.from_dict({"checkpoints": "s3://b/p", "env": {"AWS_REGION": "set-in-spec"}}))
    environ = {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "r", "HOME": "/h"}
    passed, notes = credentials_passed(job, environ)
    assert passed == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]  # the spec's own AWS_REGION wins
    assert notes == ()


@pytest.mark.parametrize(
    ("endpoint", "noted"),
    [
        ("http://127.0.0.1:9000", True),
        ("http://localhost:9000/", True),
        ("http://[::1]:9000", True),
        ("http://minio.local:9000", False),
    ],
)
def test_a_store_on_loopback_is_noted(endpoint: str, noted: bool) -> None:
    job = plan_for(JobSpec.from_dict({"checkpoints": "s3://b/p"}))
    passed, notes = credentials_passed(job, {protocol.OBJECT_STORE_ENDPOINT_ENV: endpoint})
    assert passed == [protocol.OBJECT_STORE_ENDPOINT_ENV]
    assert bool(notes) is noted and all("loopback, which the containers cannot reach" in n for n in notes)


def test_credentials_never_appear_in_the_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "t0ps3cret")
    argv = _plan({"checkpoints": "s3://b/p"}).containers[0].argv
    assert "AWS_SECRET_ACCESS_KEY" in _pairs(argv, "-e") and not any("t0ps3cret" in a for a in argv)


# ------------------------------------------------------------------------------ the launcher


@dataclass
class FakeChild:
    """What `node_failed` reads of a container's `docker run` client (procs.Child without a process)."""

    index: int
    returncode: int | None


def _state(**kw: object) -> JobState:
    state = JobState("w", 2, 2)
    for key, value in kw.items():
        setattr(state, key, value)
    return state


def test_a_failed_container_is_named_with_its_engines_exit_code() -> None:
    launcher = DockerLauncher(_plan())
    launcher.exit_states = {1: (137, True)}
    state = _state(ranks_spoke=True)
    failed = launcher.node_failed(state, FakeChild(1, 1))  # type: ignore[arg-type]
    assert failed is not None and (failed.node, failed.code) == (1, 137)
    assert failed.message == (
        "job w failed: node 1 (rank 1) was killed by SIGKILL (out of memory) (container w-1, exit code 137; "
        "logs in ddp-runs/w/logs)"
    )


def test_a_failed_container_the_engine_has_no_state_of_uses_its_clients_code() -> None:
    launcher = DockerLauncher(_plan())
    state = _state(ranks_spoke=True, failures=[Failure(0, 0, 0, 1)], last_error={0: "ValueError: x"})
    failed = launcher.node_failed(state, FakeChild(0, 1))  # type: ignore[arg-type]
    assert failed is not None and failed.code == 1
    assert failed.message.startswith("job w failed: rank 0 (node 0, local rank 0) exited with code 1: ValueError: x")


def test_a_container_the_engine_could_not_run_is_not_restarted() -> None:
    launcher = DockerLauncher(_plan())
    launcher.exit_states = {0: (125, False)}
    with pytest.raises(RuntimeFailure, match=r"^docker run of node 0 failed: see ddp-runs/w/logs/node-0.log$"):
        launcher.node_failed(_state(), FakeChild(0, 125))  # type: ignore[arg-type]


def test_the_timeout_error_says_the_containers_are_gone() -> None:
    assert str(DockerLauncher(_plan()).timed_out(30)) == (
        "job w was still running after --timeout 30s; stopped and removed its containers (logs in ddp-runs/w/logs)"
    )
