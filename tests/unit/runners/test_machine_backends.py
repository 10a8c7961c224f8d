"""ddpctl.runners.machine_backends: this machine as a Backend. `run --dry-run` of LocalBackend (each agent's
env and argv, as a shell would run them) and DockerBackend (the network and every `docker run`),
and finding a job again in ./ddp-runs for status, logs, list and delete (processes and containers
alike). Nothing is started: no torchrun, no container engine."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from ddpctl.backend import LogOptions, Where
from ddpctl.errors import NotFound
from ddpctl.runners.machine_backends import DockerBackend, LocalBackend, RunOptions
from ddpctl.spec.sources import SpecInput
from ddpctl_trainer import protocol

FLAGS = {"name": "w", "nodes": 2, "procsPerNode": 1}


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty working directory (no ddp.yaml) and no DDPCTL_* settings of the machine."""
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.startswith("DDPCTL_"):
            monkeypatch.delenv(key)


def _dry_run(backend: LocalBackend | DockerBackend, flags: dict | None = None) -> tuple[list[str], list[str]]:
    out: list[str] = []
    said: list[str] = []
    backend.dry_run(SpecInput(flags or FLAGS, None), out.append, said.append)
    return out, said


def test_a_local_dry_run_prints_each_agents_env_and_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SHELLS_OWN_SETTING", "same as the shell")
    out, said = _dry_run(LocalBackend(cwd=tmp_path))
    assert said == [f"ddpctl: w: 2 torchrun agents would start in {tmp_path.resolve()} (dry run)"]
    assert out[0] == "# node 0 (w-0)" and out[3] == "# node 1 (w-1)" and len(out) == 6
    for index in (0, 1):
        assignments, command = out[3 * index + 1], out[3 * index + 2]
        assert assignments.endswith(" \\")
        env = dict(word.split("=", 1) for word in shlex.split(assignments[:-2]))
        # only what differs from the shell's env: the pod's wiring, on loopback
        assert "MY_SHELLS_OWN_SETTING" not in env and "PATH" not in env
        assert (env["PET_MASTER_ADDR"], env["PET_NODE_RANK"], env["PET_NNODES"]) == ("127.0.0.1", str(index), "2")
        assert env[protocol.CHECKPOINT_DIR_ENV] == str(tmp_path.resolve() / "ddp-runs" / "w" / "checkpoints")
        argv = shlex.split(command)
        assert command.startswith("  ") and argv[1:3] == ["-m", protocol.LAUNCHER_MODULE]
        assert argv[argv.index("--log-dir") + 1] == str(
            tmp_path.resolve() / "ddp-runs" / "w" / "logs" / f"node-{index}"
        )
    assert not (tmp_path / "ddp-runs").exists()  # a dry run starts and makes nothing


def test_a_local_dry_run_quotes_what_a_shell_would_split(tmp_path: Path) -> None:
    out, _ = _dry_run(LocalBackend(cwd=tmp_path), {**FLAGS, "env": {"NOTE": "two words; $HOME"}})
    assert "NOTE='two words; $HOME'" in out[1]
    assert dict(w.split("=", 1) for w in shlex.split(out[1][:-2]))["NOTE"] == "two words; $HOME"


def test_a_local_dry_run_takes_the_run_options(tmp_path: Path) -> None:
    options = RunOptions(run_dir=tmp_path / "elsewhere", mounts=(f"checkpoints={tmp_path / 'ckpt'}",))
    out, _ = _dry_run(LocalBackend(options, cwd=tmp_path))
    env = dict(word.split("=", 1) for word in shlex.split(out[1][:-2]))
    assert env[protocol.CHECKPOINT_DIR_ENV] == str(tmp_path / "ckpt")
    assert f"--log-dir {tmp_path / 'elsewhere' / 'logs' / 'node-0'}" in out[2]


def test_a_port_asked_for_is_kept_in_a_dry_run(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out, _ = _dry_run(LocalBackend(cwd=tmp_path), {**FLAGS, "rendezvous": {"port": port}})
    assert f"PET_MASTER_PORT={port}" in out[1]


def test_a_docker_dry_run_prints_the_network_and_every_container(tmp_path: Path) -> None:
    out, said = _dry_run(DockerBackend(RunOptions(engine="podman")))
    network = shlex.split(out[0])
    assert network[:3] == ["podman", "network", "create"] and network[3].startswith("ddpctl-w-")
    assert said == [f"ddpctl: w: 2 containers would run on network {network[3]} (dry run)"]
    containers = [shlex.split(line) for line in out[1:]]
    assert len(containers) == 2
    for index, argv in enumerate(containers):
        assert argv[:2] == ["podman", "run"]
        assert argv[argv.index("--hostname") + 1] == f"w-{index}"
        assert argv[argv.index("--network") + 1] == network[3]
        assert f"PET_NODE_RANK={index}" in argv
    assert not (tmp_path / "ddp-runs").exists()


def test_recovery_auto_is_pod_in_processes_and_gang_in_containers() -> None:
    """A container group restarts whole (no coordinator runs beside it); processes meet at one."""
    auto = {**FLAGS, "recovery": "auto"}
    local, _ = _dry_run(LocalBackend(RunOptions()), auto)
    assert local[0] == "# the job's coordinator (--recovery pod: a lost node is started again alone)", local
    containers, _ = _dry_run(DockerBackend(RunOptions(engine="podman")), auto)
    assert len(containers) == 3 and not any("DDP_COORDINATOR" in line for line in containers), containers
    assert all("PET_NODE_RANK=" in line for line in containers[1:])  # torchrun's own rendezvous, as gang


# ------------------------------------------------------------------------------ runs found again


def _run(cwd: Path, name: str, state: str = "succeeded", backend: str = "local") -> Path:
    run_dir = cwd / "ddp-runs" / name
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "node-0.log").write_text("[rank 0] hello\n")
    record = {"name": name, "backend": backend, "target": "job", "state": state, "pid": 1, "nodes": 1}
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


@pytest.mark.parametrize("backend", [LocalBackend, DockerBackend])
def test_either_backend_reads_any_run_here(tmp_path: Path, backend: type[LocalBackend]) -> None:
    _run(tmp_path, "a", backend="docker")
    _run(tmp_path, "b", backend="local")
    here = backend(cwd=tmp_path)
    assert here.describe() == "./ddp-runs" and here.has("a") and not here.has("c")
    assert here.status("a").backend == Where.docker and here.status("b").backend == Where.local
    lines: list[str] = []
    here.logs("a", LogOptions(), lines.append, lines.append)
    assert lines == ["[node 0] [rank 0] hello"]
    said: list[str] = []
    here.wait("b", None, said.append)
    assert said == ["ddpctl: local run b succeeded"]
    assert [j.name for j in here.list().jobs] == ["a", "b"]


def test_a_name_not_here_says_where_it_looked(tmp_path: Path) -> None:
    here = LocalBackend(cwd=tmp_path, hint=" and no kubeconfig")
    with pytest.raises(NotFound, match=r'^no local run "x" here \(no ddp-runs/x\) and no kubeconfig; see'):
        here.status("x")
    assert here.list().looked_in == "./ddp-runs and no kubeconfig"


def test_delete_removes_what_it_finds_then_names_what_it_did_not(tmp_path: Path) -> None:
    _run(tmp_path, "a")
    said: list[str] = []
    with pytest.raises(NotFound, match=r'^no local run "x" here'):
        LocalBackend(cwd=tmp_path).delete(["x", "a"], ignore_not_found=False, wait=True, timeout=None, out=said.append)
    assert said == ["local run a deleted"] and not (tmp_path / "ddp-runs" / "a").exists()
    LocalBackend(cwd=tmp_path).delete(["x"], ignore_not_found=True, wait=True, timeout=None, out=said.append)
    assert said == ["local run a deleted"]
