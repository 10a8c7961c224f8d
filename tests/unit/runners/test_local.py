"""ddpctl.runners.local: the plan of `run --local` (each node's torchrun argv and env, its log
directory, the rendezvous port, the notes), checked before anything starts, and what
`LocalLauncher` makes of a failed node. No torchrun: the real runs are in tests/e2e/test_run_local.py."""

from __future__ import annotations

import io
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddpctl.console import make_console
from ddpctl.engines.base import NODE_RANK_LAUNCHER
from ddpctl.errors import SpecError, UsageError
from ddpctl.runners import local
from ddpctl.runners.local import (
    DEFAULT_PORT,
    RANK_TEMPLATE,
    LocalLauncher,
    LocalPlan,
    choose_port,
    omp_threads,
    plan_local,
    port_asked_for,
    port_for_start,
)
from ddpctl.runners.node_env import loopback_ifname, start_env
from ddpctl.runners.state import Failure, JobState
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol

SHELL = {"HOME": "/home/u", "PATH": "/usr/bin:/bin"}


def _plan(tmp_path: Path, data: dict | None = None, **kw: object) -> LocalPlan:
    layout = {} if "nodeGroups" in (data or {}) else {"nodes": 2, "procsPerNode": 1}
    if "recovery" in kw:  # the spec's key, as --recovery gives it
        data = {**(data or {}), "recovery": kw.pop("recovery")}
    spec = JobSpec.from_dict({"name": "w", **layout, **(data or {})})
    return plan_local(spec, cwd=tmp_path, parent_env=kw.pop("parent_env", SHELL), **kw)  # type: ignore[arg-type]


def _tee(log_dir: Path) -> list[str]:
    return ["--tee", "3", "--log-dir", str(log_dir), "--log-line-prefix-template", RANK_TEMPLATE]


# ------------------------------------------------------------------------------ argv


def test_the_built_in_trainer_runs_under_ddpctls_launcher_with_this_interpreter(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"args": ["--epochs", "2"]})
    logs = tmp_path.resolve() / "ddp-runs" / "w" / "logs"
    assert [n.log_dir for n in plan.nodes] == [logs / "node-0", logs / "node-1"]
    assert list(plan.nodes[1].argv) == [
        sys.executable,
        "-m",
        protocol.LAUNCHER_MODULE,
        *_tee(logs / "node-1"),
        "-m",
        protocol.TRAINER_MODULE,
        "--epochs",
        "2",
    ]
    assert [n.hostname for n in plan.nodes] == ["w-0", "w-1"]


def test_a_script_runs_under_torchrun_of_this_interpreter(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    plan = _plan(tmp_path, {"module": None, "script": "train.py", "args": ["--lr", "0.1"]})
    log_dir = plan.nodes[0].log_dir
    assert list(plan.nodes[0].argv) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *_tee(log_dir),
        "train.py",
        "--lr",
        "0.1",
    ]
    assert plan.checkpoint_dir is None  # a script's checkpoints are its own business


def test_a_script_of_node_groups_runs_the_node_rank_launcher(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    groups = [
        {"name": "a", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 2},
        {"name": "b", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 1},
    ]
    plan = _plan(tmp_path, {"module": None, "script": "train.py", "nodeGroups": groups})
    tee = _tee(plan.nodes[1].log_dir)
    assert list(plan.nodes[1].argv) == [sys.executable, "-c", NODE_RANK_LAUNCHER, *tee, "train.py"]
    # the launcher adds the offset to the completion index: the second group's first node is node rank 1
    env = plan.nodes[1].env
    assert (env["PET_NODE_RANK_OFFSET"], env["JOB_COMPLETION_INDEX"], env["PET_NPROC_PER_NODE"]) == ("1", "0", "1")


def test_a_command_runs_as_given(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"module": None, "command": ["python3", "t.py"], "args": ["--x"]})
    assert [list(n.argv) for n in plan.nodes] == [["python3", "t.py", "--x"]] * 2


def test_a_script_that_is_not_here_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^script: train.py does not exist in .*; give the path of your training"):
        _plan(tmp_path, {"module": None, "script": "train.py"})


def test_the_trainers_flags_are_checked_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as error:
        _plan(tmp_path, {"args": ["--no-such-flag"]})
    assert str(error.value).startswith("trainer: ") and "--no-such-flag" in str(error.value)


# ------------------------------------------------------------------------------ env


def test_each_node_gets_its_pods_env_on_loopback(tmp_path: Path) -> None:
    plan = _plan(tmp_path, parent_env={**SHELL, "RANK": "7", "MASTER_ADDR": "x", "PET_NNODES": "9"})
    for index, node in enumerate(plan.nodes):
        env = node.env
        assert (env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == ("127.0.0.1", str(plan.port))
        assert (env["PET_NODE_RANK"], env["JOB_COMPLETION_INDEX"], env["PET_NNODES"]) == (str(index), str(index), "2")
        # the shell's env is inherited, but never a torch.distributed wiring of its own
        assert env["HOME"] == "/home/u" and "RANK" not in env and "MASTER_ADDR" not in env
        assert env[protocol.CHECKPOINT_DIR_ENV] == str(tmp_path.resolve() / "ddp-runs" / "w" / "checkpoints")
        assert env.get("GLOO_SOCKET_IFNAME") == loopback_ifname()
        assert list(env) == sorted(env)
    assert plan.checkpoint_dir == tmp_path.resolve() / "ddp-runs" / "w" / "checkpoints"


@pytest.mark.parametrize(
    ("preflight", "stragglers"), [("off", "off"), ("warn", "off"), ("off", "warn"), ("off", "fail")]
)
def test_with_the_preflight_or_stragglers_on_each_node_gets_its_pods_name_and_this_machine_as_its_node(
    tmp_path: Path, preflight: str, stragglers: str
) -> None:
    """The downward API's fields, resolved here: the pod's name is its hostname in the cluster, and
    every node runs on this machine (the preflight takes its ranks for ranks that share cores). The
    straggler settings reach each node as they reach each pod, off included."""
    plan = _plan(tmp_path, {"preflight": {"mode": preflight}, "stragglers": {"mode": stragglers}})
    got = [(n.env.get(protocol.POD_NAME_ENV), n.env.get(protocol.NODE_NAME_ENV)) for n in plan.nodes]
    assert all(n.env[protocol.STRAGGLERS_ENV] == stragglers for n in plan.nodes)
    if preflight == stragglers == "off":
        assert got == [(None, None), (None, None)]
        assert protocol.STRAGGLERS_EVERY_ENV not in plan.nodes[0].env
    else:
        assert got == [("w-0", socket.gethostname()), ("w-1", socket.gethostname())]
    if preflight == "warn":
        assert plan.nodes[0].env[protocol.PREFLIGHT_ENV] == "warn"
    if stragglers != "off":
        assert plan.nodes[1].env[protocol.STRAGGLERS_WINDOWS_ENV] == str(protocol.STRAGGLER_WINDOWS)


def test_an_elastic_job_names_which_agent_hosts_the_store(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"nodes": "1:2", "procsPerNode": 1})
    confs = [n.env["PET_RDZV_CONF"] for n in plan.nodes]
    assert confs == [
        "join_timeout=600,last_call_timeout=30,is_host=true",
        "join_timeout=600,last_call_timeout=30,is_host=false",
    ]
    assert plan.nodes[1].env["PET_RDZV_ENDPOINT"] == f"127.0.0.1:{plan.port}"


@pytest.mark.parametrize(
    ("processes", "cores", "threads"), [(3, 2, 1), (4, 2, 1), (2, 8, 4), (3, 8, 2), (1, 8, 8), (16, 4, 1)]
)
def test_the_machines_cores_are_shared_out_among_the_jobs_processes(processes: int, cores: int, threads: int) -> None:
    assert omp_threads(processes, cores) == threads


@pytest.mark.parametrize(
    ("spec_env", "shell", "expected"),
    [({}, {}, None), ({}, {"OMP_NUM_THREADS": "3"}, "3"), ({"OMP_NUM_THREADS": "5"}, {"OMP_NUM_THREADS": "3"}, "5")],
)
def test_each_node_gets_its_share_of_threads_unless_the_user_set_them(
    tmp_path: Path, spec_env: dict[str, str], shell: dict[str, str], expected: str | None
) -> None:
    plan = _plan(tmp_path, {"env": spec_env}, parent_env={**SHELL, **shell})
    share = str(omp_threads(plan.job.world_size, protocol.usable_cores()))
    assert [n.env["OMP_NUM_THREADS"] for n in plan.nodes] == [expected or share] * 2


def test_a_gloo_interface_the_user_chose_is_kept(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"env": {"GLOO_SOCKET_IFNAME": "eth9"}})
    assert plan.nodes[0].env["GLOO_SOCKET_IFNAME"] == "eth9"


def test_volumes_are_host_directories_and_paths_in_args_follow_them(tmp_path: Path) -> None:
    volumes = {
        "data": {"claimName": "d", "mountPath": "/data"},
        "checkpoints": {"claimName": "c", "mountPath": "/ckpt"},
    }
    mine = tmp_path / "mine"
    plan = _plan(tmp_path, {"volumes": volumes, "args": ["--metrics-file=/data/m.jsonl"]}, mounts={"data": mine})
    run_dir = tmp_path.resolve() / "ddp-runs" / "w"
    argv = list(plan.nodes[0].argv)
    assert argv[argv.index("--checkpoint-dir") + 1] == str(run_dir / "checkpoints")
    assert argv[argv.index("--data-dir") + 1] == str(mine)
    assert f"--metrics-file={mine}/m.jsonl" in argv
    assert plan.checkpoint_dir == run_dir / "checkpoints"
    assert protocol.CHECKPOINT_DIR_ENV not in plan.nodes[0].env  # the flag says it


def test_checkpoints_in_an_object_store_stay_a_url(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"checkpoints": "s3://bucket/runs/w"})
    assert plan.checkpoint_dir == "s3://bucket/runs/w"


@pytest.mark.parametrize(
    ("data", "parent_env", "notes"),
    [
        ({}, SHELL, ()),
        ({"gpusPerNode": 1}, SHELL, ("gpusPerNode is 1: every local node would need that many GPUs; use --gpus 0 "
                                     "for CPU + gloo",)),
        ({"secretEnv": {"TOKEN": {"secret": "s", "key": "k"}, "KEY": {"secret": "s", "key": "j"}}},
         {**SHELL, "KEY": "x"},
         ("secretEnv TOKEN come from Secrets in the cluster; export them to set them here",)),
    ],
)  # fmt: skip
def test_the_notes_a_local_run_starts_with(
    tmp_path: Path, data: dict, parent_env: dict[str, str], notes: tuple[str, ...]
) -> None:
    assert _plan(tmp_path, data, parent_env=parent_env).notes == notes


# ------------------------------------------------------------------------------ the rendezvous port


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def test_a_port_the_user_chose_is_used_and_must_be_free(tmp_path: Path, busy_port: int) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    plan = _plan(tmp_path, {"rendezvous": {"port": free}})
    assert (plan.port, plan.port_explicit) == (free, True)
    with pytest.raises(UsageError, match=rf"^rendezvous.port: port {busy_port} is in use on this machine; "):
        _plan(tmp_path, {"rendezvous": {"port": busy_port}})


def test_the_default_port_is_replaced_by_a_free_one(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert plan.port != DEFAULT_PORT and plan.port_explicit is False
    assert choose_port(plan.job, explicit=False)[1] is None


@pytest.mark.parametrize(
    ("flags", "environ", "asked"),
    [
        ({}, {}, False),
        ({"rendezvous": {"port": 29500}}, {}, True),  # the default's value, but asked for
        ({"rendezvous": {"mode": "static"}}, {}, False),
        ({}, {"DDPCTL_RENDEZVOUS_PORT": "1234"}, True),
    ],
)
def test_port_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: dict, environ: dict[str, str], asked: bool
) -> None:
    from ddpctl.spec.sources import merged_layers

    monkeypatch.chdir(tmp_path)  # no ./ddp.yaml
    assert port_asked_for(merged_layers(flags, None, environ)) is asked


@pytest.mark.parametrize("port", [4000, 29500])  # 29500: the default's value, but asked for
def test_port_asked_for_in_ddp_yaml(tmp_path: Path, port: int) -> None:
    from ddpctl.spec.sources import merged_layers

    config = tmp_path / "ddp.yaml"
    config.write_text(f"rendezvous:\n  port: {port}\n")
    assert port_asked_for(merged_layers({}, config, {})) is True


def test_each_restart_gets_a_fresh_port_unless_the_user_chose_it(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert port_for_start(plan, 0) == plan.port
    assert port_for_start(plan, 1) != plan.port  # a fresh one from the kernel
    chosen = LocalPlan(**{**plan.__dict__, "port_explicit": True})
    assert port_for_start(chosen, 3) == plan.port


def test_each_start_gets_its_port_and_a_rendezvous_id_of_its_own() -> None:
    plan = plan_local(JobSpec(name="w", nodes=2, procs_per_node=1, gpus_per_node=0), cwd=Path.cwd())
    env = start_env(plan.nodes[1].env, 40123, "w-abcd-1")
    assert env["PET_MASTER_PORT"] == "40123" and env["PET_RDZV_ID"] == "w-abcd-1"
    assert env["PET_MASTER_ADDR"] == "127.0.0.1"
    elastic = plan_local(JobSpec(name="w", nodes=2, min_nodes=1, max_nodes=2, gpus_per_node=0), cwd=Path.cwd())
    env = start_env(elastic.nodes[0].env, 40124, "w-abcd-0")
    assert env["PET_RDZV_ENDPOINT"] == "127.0.0.1:40124" and env["PET_RDZV_ID"] == "w-abcd-0"


# ------------------------------------------------------------------------------ the launcher


@dataclass
class FakeChild:
    """What `node_failed` reads of a node that ended (procs.Child without a process)."""

    index: int
    returncode: int | None


def _launcher(plan: LocalPlan) -> tuple[LocalLauncher, io.StringIO]:
    err = io.StringIO()
    return LocalLauncher(plan, make_console(io.StringIO(), err, False)), err


def test_a_failed_node_is_described_with_its_logs(tmp_path: Path) -> None:
    launcher, _ = _launcher(_plan(tmp_path))
    state = JobState("w", 2, 2)
    state.failures.append(Failure(1, 1, 0, 1))
    state.last_error[1] = "ValueError: x"
    state.node_codes.update({0: 138, 1: 1})
    failed = launcher.node_failed(state, FakeChild(1, 1))  # type: ignore[arg-type]
    assert failed is not None and (failed.node, failed.code, failed.again) == (1, 1, None)
    assert failed.message == (
        "job w failed: rank 1 (node 1, local rank 0) exited with code 1: ValueError: x (exit code 1; logs in "
        "ddp-runs/w/logs)"
    )


def test_a_port_taken_before_node_0_bound_it_starts_the_group_again(tmp_path: Path) -> None:
    launcher, _ = _launcher(_plan(tmp_path))
    launcher.ports[0] = 40000
    state = JobState("w", 2, 2)
    state.on_node_line(0, "DistNetworkError: ... EADDRINUSE, message: address already in use")
    failed = launcher.node_failed(state, FakeChild(0, 1))  # type: ignore[arg-type]
    assert failed is not None and failed.again == (
        "node 0 could not bind rendezvous port 40000: another process took it first"
    )


def test_a_port_the_user_chose_that_is_taken_is_a_failure(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launcher, _ = _launcher(_plan(tmp_path, {"rendezvous": {"port": port}}))
    state = JobState("w", 2, 2)
    state.on_node_line(0, "DistNetworkError: ... EADDRINUSE, message: address already in use")
    state.node_codes[0] = 1
    failed = launcher.node_failed(state, FakeChild(0, 1))  # type: ignore[arg-type]
    assert failed is not None and failed.again is None and failed.message.startswith("job w failed: node 0")


def test_ranks_killed_at_exit_after_the_work_was_done_are_no_failure(tmp_path: Path) -> None:
    launcher, err = _launcher(_plan(tmp_path))
    state = JobState("w", 2, 2)
    state.failures.append(Failure(1, 1, 0, -6))
    state.node_codes.update({0: 0, 1: 1})
    assert launcher.node_failed(state, FakeChild(1, 1)) is None  # type: ignore[arg-type]
    assert err.getvalue().startswith("ddpctl: killed at exit: rank 1 (node 1) by SIGABRT, after every other rank")


def test_a_command_that_does_not_exist_is_the_users_error(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"module": None, "command": ["no-such-program-for-ddpctl-tests"]})
    launcher, _ = _launcher(plan)
    with pytest.raises(UsageError, match=r"^command: no-such-program-for-ddpctl-tests was not found"):
        launcher.start_node(0, 0)


def test_the_timeout_error_names_the_logs(tmp_path: Path) -> None:
    launcher, _ = _launcher(_plan(tmp_path))
    assert str(launcher.timed_out(90)) == (
        "job w was still running after --timeout 90s; stopped it (logs in ddp-runs/w/logs)"
    )


# ------------------------------------------------------------------------------ --recovery pod

UNEVEN = [
    {"name": "a", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 2},
    {"name": "b", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 1},
]


def test_with_pod_recovery_each_node_runs_alone_and_meets_the_others_through_the_coordinator(
    tmp_path: Path,
) -> None:
    plan = _plan(tmp_path, {"nodeGroups": UNEVEN}, recovery="pod")
    assert plan.coordinator_port is not None
    address = f"127.0.0.1:{plan.coordinator_port}"
    seen = []
    for node in plan.nodes:
        env = node.env
        assert (env["PET_NNODES"], env["PET_STANDALONE"], env[protocol.COORDINATOR_ENV]) == ("1", "1", address)
        assert not {"PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NODE_RANK"} & set(env)  # no job-wide rendezvous
        seen.append((env[protocol.JOB_NODE_RANK_ENV], env[protocol.NODE_FIRST_RANK_ENV], env["PET_NPROC_PER_NODE"]))
        assert env[protocol.JOB_WORLD_SIZE_ENV] == "4"
    assert seen == [("0", "0", "2"), ("1", "2", "1"), ("2", "3", "1")]  # ranks contiguous per node, groups uneven
    assert _plan(tmp_path).coordinator_port is None  # gang: torchrun's rendezvous as before


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"module": None, "script": "train.py"}, "only the built-in trainer"),
        ({"nodes": "1:3"}, "an elastic layout"),
        ({"gpusPerNode": 1}, "a nccl group is not formed again"),
        ({"args": ["--strategy", "fsdp"]}, "only DDP is formed again"),
    ],
)
def test_pod_recovery_is_refused_where_it_cannot_work(tmp_path: Path, data: dict, problem: str) -> None:
    (tmp_path / "train.py").write_text("")
    with pytest.raises(SpecError) as error:
        _plan(tmp_path, data, recovery="pod")
    assert error.value.field == "recovery"
    assert error.value.problem.startswith(f"pod: {problem}")
    assert error.value.fix == "leave recovery at gang (whole-group restarts)"


def test_a_node_that_keeps_failing_is_not_started_again_forever(tmp_path: Path) -> None:
    """Pod recovery: past --backoff-limit replacements of one node the job ends, naming it, and
    the group is not restarted as a whole either; a usage error is never replaced."""
    import subprocess

    from ddpctl.runners.procs import Child

    plan = _plan(tmp_path, {"backoffLimit": 2}, recovery="pod")
    launcher = LocalLauncher(plan, make_console(io.StringIO(), io.StringIO(), False))
    state = JobState("w", 2, 2)

    def ended(code: int) -> Child:
        child = Child(1, "node 1", subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"]))
        child.popen.wait()
        child.poll()
        return child

    assert launcher.replace_node(ended(2), state) is None  # a usage error ends the job as before
    assert launcher.replace_node(ended(143), state) is None  # preempted: every rank stopped, the group restarts
    assert launcher.spent == set()
    launcher.replacements[1] = 2  # started again alone twice already
    assert launcher.replace_node(ended(137), state) is None
    failed = launcher.node_failed(state, ended(137))
    assert failed is not None and failed.final
    assert failed.message.endswith(
        "node 1 was started again alone 2 times already (--backoff-limit, per node): not again"
    )


@pytest.mark.parametrize(
    ("data", "recovery", "message"),
    [
        ({}, "gang", "--spares: a warm spare takes a lost node's place under --recovery pod"),
        ({"nodeGroups": UNEVEN}, "pod", "--spares: the nodes run different numbers of processes"),
    ],
)
def test_spares_where_they_cannot_stand_in(tmp_path: Path, data: dict, recovery: str, message: str) -> None:
    with pytest.raises(UsageError) as error:
        _plan(tmp_path, data, recovery=recovery, spares=1)
    assert str(error.value).startswith(message)


@dataclass
class FakeHelper:
    """A coordinator process as `tend` reads it: its exit code once ended, and whether we stopped it."""

    code: int | None
    stopping: bool = False

    def poll(self) -> int | None:
        return self.code


@pytest.mark.parametrize(
    ("code", "stopping", "started_before", "restarted", "said"),
    [
        (None, False, 0, False, ""),  # running
        (0, False, 0, False, ""),  # ended with the training
        (-9, True, 0, False, ""),  # stopped by us at the end
        (-9, False, 0, True, "the job's coordinator was killed by SIGKILL; starting it again on port"),
        (1, False, 0, True, "the job's coordinator exited with code 1; starting it again on port"),
        (-9, False, 1, False, "started again 1 times already (--backoff-limit): not again"),
    ],
)
def test_a_coordinator_that_exits_before_the_training_ended_is_started_again_up_to_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int | None, stopping: bool, started_before: int,
    restarted: bool, said: str,
) -> None:  # fmt: skip
    plan = _plan(tmp_path, {"backoffLimit": 1}, recovery="pod")
    launcher, err = _launcher(plan)
    new = FakeHelper(None)
    monkeypatch.setattr(local, "start_coordinator", lambda p: new if p is plan else None)
    launcher.coordinator = FakeHelper(code, stopping)  # type: ignore[assignment]
    launcher.coordinator_starts = started_before
    launcher.tend(JobState("w", 2, 2))
    assert (launcher.coordinator is new) == restarted
    assert said in err.getvalue() and bool(said) == bool(err.getvalue())
