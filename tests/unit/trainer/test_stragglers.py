"""The straggler detector: the judge (table-driven: windows, tolerance, recovery, ties, one node,
uneven node groups), its lines as the CLI parses them, the settings, the clock (the CPU path and
the CUDA path through stand-in events), the DDP hooks on a real one-process gloo group, and the
trainer's callback."""

from __future__ import annotations

import atexit
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
import torch.distributed as dist

from ddpctl_trainer import protocol
from ddpctl_trainer.callbacks import StragglerWatch
from ddpctl_trainer.config import parse_args, straggler_config
from ddpctl_trainer.errors import UsageError
from ddpctl_trainer.stragglers import (
    Judge,
    Seat,
    StepClock,
    StragglerConfig,
    Stragglers,
    StragglerStop,
    config_from_env,
    my_seat,
    reference,
)
from tests.support import REPO
from tests.support.trainer import agent_command, clean_env, free_port, start, wait_all

CFG = StragglerConfig(mode="warn", tolerance=0.6, every=10, windows=3)


def seats(
    *nprocs: int, k8s: Sequence[str | None] | None = None, groups: Sequence[str | None] | None = None
) -> list[Seat]:
    """One seat per rank: node i runs nprocs[i] ranks, in pod job-i on Kubernetes node k8s[i], in
    node group groups[i] (none by default)."""
    out, rank = [], 0
    for node, n in enumerate(nprocs):
        for _ in range(n):
            k8s_node = (k8s or [f"w{i}" for i in range(len(nprocs))])[node]
            out.append(Seat(rank, node, f"job-{node}", k8s_node, n, (groups or [None] * len(nprocs))[node]))
            rank += 1
    return out


def run(judge: Judge, windows: Sequence[Sequence[float]], every: int = 10) -> list[tuple[int, str, int]]:
    """Feed per-rank figures window by window: (window index, kind, node) of every verdict."""
    out = []
    for i, figures in enumerate(windows):
        for v in judge.window(i * every + 1, (i + 1) * every, dict(enumerate(figures))):
            out.append((i, v.kind, v.node))
    return out


HEALTHY = [0.10, 0.11, 0.10]
SLOW1 = [0.10, 0.25, 0.10]  # node 1 at 0.4 of the median speed
NEAR1 = [0.10, 0.15, 0.10]  # at 0.67: within the tolerance, short of halfway back to 1 (0.8)


@pytest.mark.parametrize(
    ("nprocs", "windows", "cfg", "expected"),
    [
        pytest.param((1, 1, 1), [HEALTHY] * 8, CFG, [], id="healthy-names-nobody"),
        pytest.param((1, 1, 1), [HEALTHY] * 2 + [SLOW1] * 3, CFG, [(4, "straggler", 1)], id="named-after-3-windows"),
        pytest.param(
            (1, 1, 1),
            [HEALTHY, SLOW1, SLOW1, HEALTHY, SLOW1, SLOW1, HEALTHY],
            CFG,
            [],
            id="two-slow-windows-then-one-fine-resets-the-count",
        ),
        pytest.param(
            (1, 1, 1),
            [HEALTHY, SLOW1, NEAR1, SLOW1, HEALTHY],
            CFG,
            [(3, "straggler", 1)],
            id="a-window-near-the-tolerance-goes-on-the-run-while-the-speed-over-it-stays-below",
        ),
        pytest.param(
            (1, 1, 1),
            [HEALTHY, NEAR1, SLOW1, SLOW1, HEALTHY],
            CFG,
            [],
            id="a-run-starts-only-below-the-tolerance",
        ),
        pytest.param(
            (1, 1, 1),
            [HEALTHY, [0.10, 0.18, 0.10], [0.10, 0.15, 0.10], [0.10, 0.18, 0.10], HEALTHY],
            CFG,
            [],
            id="not-while-the-speed-over-the-run-is-back-within",  # 0.56, then 0.67: 0.20 / 0.33 s = 0.61 over the two
        ),
        pytest.param(
            (1, 1, 1),
            [SLOW1] * 3 + [HEALTHY] * 3,
            CFG,
            [(2, "straggler", 1), (5, "recovered", 1)],
            id="recovered-after-3-windows-within",
        ),
        pytest.param(
            (1, 1, 1),
            [[0.10, 0.16, 0.10]] * 4,
            CFG,
            [],
            id="at-0.62-of-the-median-is-within-0.6",
        ),
        pytest.param(
            (1, 1, 1),
            [[0.10, 0.16, 0.10]] * 4,
            StragglerConfig("warn", 0.8, 10, 3),
            [(2, "straggler", 1)],
            id="the-same-below-0.8",
        ),
        pytest.param(
            (1, 1, 1), [SLOW1], StragglerConfig("warn", 0.6, 10, 1), [(0, "straggler", 1)], id="one-window-setting"
        ),
        pytest.param((1, 1), [[0.10, 0.30]] * 3, CFG, [(2, "straggler", 1)], id="two-nodes-the-faster-is-the-median"),
        pytest.param((1, 1), [[0.20, 0.20]] * 5, CFG, [], id="a-tie-names-nobody"),
        pytest.param((1, 1, 1), [[0.5, 0.5, 0.5]] * 5, CFG, [], id="all-slow-together-is-no-straggler"),
        pytest.param((4,), [[0.1, 0.1, 0.1, 0.9]] * 5, CFG, [], id="one-node-is-never-judged"),
        pytest.param(
            (2, 2, 2),
            [[0.10, 0.10, 0.10, 0.30, 0.10, 0.10]] * 3,
            CFG,
            [(2, "straggler", 1)],
            id="a-node-is-its-slowest-rank",
        ),
        pytest.param((1, 1, 1), [[0.10, 0.0, 0.10]] * 5, CFG, [], id="a-node-that-timed-nothing-is-not-judged"),
    ],
)
def test_the_judge(
    nprocs: tuple[int, ...], windows: list[list[float]], cfg: StragglerConfig, expected: list[tuple[int, str, int]]
) -> None:
    assert run(Judge(cfg, seats(*nprocs)), windows) == expected


BASE = [0.20] * 8 + [0.10] * 3  # nodes of 4, 4 and 3 processes: the 3-process node twice as fast per rank
SLOW_LONE = [0.20] * 8 + [0.10, 0.10, 0.30]
SLOW_PEER = [0.20] * 4 + [0.20, 0.20, 0.45, 0.20] + [0.10] * 3
PEERS_SLOW = [0.50] * 8 + [0.10] * 3  # both 4-process nodes slow together: no straggler among them


@pytest.mark.parametrize(
    ("windows", "expected"),
    [
        pytest.param([BASE] * 5, [], id="healthy-names-nobody"),
        pytest.param([BASE] * 5 + [SLOW_LONE] * 3, [(7, "straggler", 2)], id="the-lone-node-slows-against-its-pace"),
        pytest.param([BASE, *[SLOW_PEER] * 3], [(3, "straggler", 1)], id="a-node-slows-against-its-peer"),
        pytest.param(
            [BASE] * 3 + [PEERS_SLOW] * 2 + [BASE] * 5, [], id="its-peers-slow-and-recover-the-lone-node-is-not-named"
        ),
        pytest.param([BASE] + [PEERS_SLOW] * 2 + [BASE] * 5, [], id="the-same-after-one-window"),
        pytest.param([BASE] * 3 + [[0.40] * 8 + [0.20] * 3] * 5, [], id="the-whole-job-slows-nobody-is-named"),
        pytest.param([BASE] * 3 + [SLOW_LONE] * 3 + [BASE] * 3, [(5, "straggler", 2), (8, "recovered", 2)], id="back"),
        # a node alone in its group that is slow from its first window has no faster pace of its own
        pytest.param([[0.20] * 8 + [0.30] * 3] * 5, [], id="slow-from-the-start-is-the-preflights"),
    ],
)
def test_uneven_groups_compare_like_with_like(windows: list[list[float]], expected: list[tuple[int, str, int]]) -> None:
    """4-process and 3-process nodes: on CPU the 4-process ones are slower per rank, always; only a
    node that slows against its peers of the same size (or, alone in its size, against its own
    usual pace: the median of its past windows, by its own time and by its share of the job's
    median) is named."""
    assert run(Judge(CFG, seats(4, 4, 3)), windows) == expected


def test_the_lone_nodes_line_says_its_usual_pace() -> None:
    judge = Judge(CFG, seats(4, 4, 3, groups=["l4", "l4", "a100"]))
    run(judge, [BASE] * 5)
    verdicts = [v for i in range(3) for v in judge.window(51 + 10 * i, 60 + 10 * i, dict(enumerate(SLOW_LONE)))]
    assert [v.text for v in verdicts] == [
        "node 2 (pod job-2, k8s node w2): own work 300 ms a step (rank 10), 0.33 x its usual speed (100 ms, "
        "alone in group a100; tolerance 0.6) for 3 windows of 10 steps, since step 51; avoid it: --avoid-node w2"
    ]
    assert judge.failure(verdicts[0]).startswith("straggler: node 2 (pod job-2, k8s node w2) below 0.6 x its usual")


A100, L4 = [0.10] * 8, [0.25] * 8  # two nodes of each, 4 processes a node: an L4 step takes 2.5 times as long


def test_node_groups_of_as_many_processes_are_compared_within_their_group() -> None:
    """Two A100 and two L4 nodes at 4 processes each: by processes alone the L4 nodes are 0.4 of the
    median and named; by node group nobody is, until an L4 node slows against the other."""
    healthy = [A100 + L4] * 4
    assert run(Judge(CFG, seats(4, 4, 4, 4)), healthy) == [(2, "straggler", 2), (2, "straggler", 3)]
    groups = ["a100", "a100", "l4", "l4"]
    fail = StragglerConfig("fail", 0.6, 10, 3)
    assert run(Judge(fail, seats(4, 4, 4, 4, groups=groups)), healthy * 3) == []
    judge = Judge(fail, seats(4, 4, 4, 4, groups=groups))
    slow = A100 + [0.25] * 4 + [0.25, 0.55, 0.25, 0.25]
    run(judge, healthy)
    (v,) = [v for i in range(3) for v in judge.window(41 + 10 * i, 50 + 10 * i, dict(enumerate(slow)))]
    assert v.node == 3 and "0.45 x the median speed of group l4 (250 ms; tolerance 0.6)" in v.text


def test_the_line_names_node_pod_k8s_node_figure_and_step_and_the_cli_parses_it() -> None:
    judge = Judge(CFG, seats(1, 1, 1))
    verdicts = [v for i in range(3) for v in judge.window(i * 10 + 31, i * 10 + 40, dict(enumerate(SLOW1)))]
    (v,) = verdicts
    assert v.line == (
        "ddpctl-trainer: straggler: node 1 (pod job-1, k8s node w1): own work 250 ms a step (rank 1), 0.40 x the "
        "median speed (100 ms; tolerance 0.6) for 3 windows of 10 steps, since step 31; avoid it: --avoid-node w1"
    )
    note = protocol.straggler_line(protocol.rank_prefix(0) + v.line)
    assert note == protocol.StragglerNote("straggler", 1, v.text, "w1")
    assert judge.failure(v) == (
        "straggler: node 1 (pod job-1, k8s node w1) below 0.6 x the median speed since step 31; stopping (exit 202, "
        "--stragglers fail); resubmit with --avoid-node w1"
    )
    back = [v for i in range(3) for v in judge.window(61 + i * 10, 70 + i * 10, dict(enumerate(HEALTHY)))]
    assert [b.line for b in back] == [
        "ddpctl-trainer: straggler recovered: node 1 (pod job-1, k8s node w1): back at 0.91 x the median speed "
        "at step 90"
    ]
    assert protocol.current_stragglers([v.line, back[0].line]) == []


def test_the_line_gives_the_speed_over_the_windows_that_named_it() -> None:
    """A window near the tolerance went on the run: the figures are the run's, not its last window's."""
    judge = Judge(CFG, seats(1, 1, 1))
    runs = [SLOW1, NEAR1, SLOW1]  # 0.65 s against 0.30 s over the three windows
    (v,) = [v for i, f in enumerate(runs) for v in judge.window(i * 10 + 1, i * 10 + 10, dict(enumerate(f)))]
    assert "own work 217 ms a step (rank 1), 0.46 x the median speed" in v.text and "for 3 windows" in v.text


@pytest.mark.parametrize(
    ("k8s", "avoid"),
    [
        pytest.param(["w0", "w1", "w2"], "w1", id="its-own-machine"),
        pytest.param(["w", "w", "w"], None, id="everyone-shares-it"),
        pytest.param([None, None, None], None, id="unknown"),
    ],
)
def test_the_node_to_avoid_is_named_only_when_the_others_ran_elsewhere(
    k8s: list[str | None], avoid: str | None
) -> None:
    judge = Judge(StragglerConfig("warn", 0.6, 10, 1), seats(1, 1, 1, k8s=k8s))
    (v,) = judge.window(1, 10, dict(enumerate(SLOW1)))
    assert v.avoid == avoid and (f"--avoid-node {avoid}" in v.text) == (avoid is not None)


def test_the_reference_is_the_median_or_the_faster_middle_value() -> None:
    assert (reference([3.0, 1.0, 2.0]), reference([4.0, 1.0]), reference([4.0, 3.0, 2.0, 1.0])) == (2.0, 1.0, 2.0)


# ------------------------------------------------------------------------------------ settings


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, StragglerConfig("warn", 0.6, 10, 3)),
        (
            {
                protocol.STRAGGLERS_ENV: "fail",
                protocol.STRAGGLERS_TOLERANCE_ENV: "0.8",
                protocol.STRAGGLERS_EVERY_ENV: "20",
                protocol.STRAGGLERS_WINDOWS_ENV: "2",
            },
            StragglerConfig("fail", 0.8, 20, 2),
        ),
        ({protocol.STRAGGLERS_ENV: "off"}, StragglerConfig("off", 0.6, 10, 3)),
    ],
)
def test_settings_come_from_the_env_the_spec_renders(env: dict[str, str], expected: StragglerConfig) -> None:
    assert config_from_env(env) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({protocol.STRAGGLERS_ENV: "loud"}, "--stragglers 'loud': use one of off, warn, fail, replace"),
        (  # replace without a coordinator: no pod recovery to replace a pod with
            {protocol.STRAGGLERS_ENV: "replace"},
            "--stragglers replace: a straggler's pod is replaced alone only under pod recovery",
        ),
        ({protocol.STRAGGLERS_TOLERANCE_ENV: "1.2"}, "--stragglers-tolerance 1.2: give a share"),
        ({protocol.STRAGGLERS_EVERY_ENV: "0"}, "--stragglers-every 0"),
        ({protocol.STRAGGLERS_WINDOWS_ENV: "x"}, "DDP_TRAINER_STRAGGLERS_WINDOWS='x' is not a number"),
    ],
)
def test_bad_settings_are_one_line_naming_the_flag(
    env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(protocol.COORDINATOR_ENV, raising=False)
    with pytest.raises(ValueError) as raised:
        config_from_env(env)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_replace_is_taken_under_pod_recovery() -> None:
    env = {protocol.STRAGGLERS_ENV: "replace", protocol.COORDINATOR_ENV: "coordinator:29510"}
    assert config_from_env(env).mode == "replace"


def test_the_trainers_flags_are_the_same_settings_and_refuse_the_same_values() -> None:
    cfg = parse_args(["--stragglers", "fail", "--stragglers-every", "5"], env={})
    assert straggler_config(cfg) == StragglerConfig("fail", 0.6, 5, 3)
    assert straggler_config(parse_args([], env={protocol.STRAGGLERS_ENV: "off"})).mode == "off"
    with pytest.raises(UsageError, match="--stragglers-windows 0"):
        parse_args(["--stragglers-windows", "0"], env={})


def test_a_seat_comes_from_torchruns_env_and_the_downward_api() -> None:
    env = {
        "RANK": "5",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "2",
        protocol.POD_NAME_ENV: "job-2",
        protocol.NODE_NAME_ENV: "w7",
    }
    assert my_seat(env) == Seat(5, 2, "job-2", "w7", 2)
    assert my_seat({"RANK": "3", "LOCAL_WORLD_SIZE": "2", "HOSTNAME": "h"}) == Seat(3, 1, "h", None, 2)
    assert my_seat({**env, protocol.NODE_GROUP_ENV: "l4"}) == Seat(5, 2, "job-2", "w7", 2, "l4")


# ------------------------------------------------------------------------------------ the clock


class FakeEvent:
    """A stand-in for ``torch.cuda.Event``: its time is given; ``elapsed_time`` in ms, as CUDA's."""

    synced: ClassVar[list[float]] = []

    def __init__(self, at: float) -> None:
        self.at = at

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1000.0

    def synchronize(self) -> None:
        FakeEvent.synced.append(self.at)


def test_the_cuda_path_reads_events_once_a_window_less_the_buffer_broadcast() -> None:
    times: Iterator[float] = iter([0.0, 0.01, 0.05, 0.20, 1.0, 1.0, 1.30])
    clock = StepClock("cuda", event=lambda: FakeEvent(next(times)))
    FakeEvent.synced = []
    clock.start()  # 0.0
    clock.wait_begins()  # 0.01: DDP's forward, the buffer broadcast
    clock.wait_ends()  # 0.05: the module's forward
    clock.ready()  # 0.20: the last bucket
    clock.stop()  # no stamp: the step's own work ended at the bucket
    clock.start()  # 1.0
    clock.ready()  # 1.0 ... (the same)
    clock.ready()  # 1.30: a later bucket wins
    clock.stop()
    assert FakeEvent.synced == []  # nothing waited for the GPU during the steps
    assert clock.take() == pytest.approx((0.16 + 0.30) / 2)
    assert FakeEvent.synced == [1.30]
    assert clock.take() == 0.0  # a new window


def test_the_cpu_path_times_to_the_step_end_without_a_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    """No bucket stamp (no DDP, or a script's own comm hook): the step is timed to its `stop`; the
    clock is this process's perf_counter, given here."""
    import ddpctl_trainer.stragglers as module

    times = iter([10.0, 10.25, 20.0, 20.5])
    monkeypatch.setattr(module.time, "perf_counter", lambda: next(times))
    clock = StepClock("cpu")
    clock.start()  # 10.0
    clock.stop()  # 10.25
    clock.stop()  # a second stop without a start adds nothing (and reads no clock)
    clock.start()  # 20.0
    clock.stop()  # 20.5
    assert clock.take() == pytest.approx((0.25 + 0.5) / 2) and clock.take() == 0.0


@pytest.fixture
def one_process_group(tmp_path: Path) -> Iterator[None]:
    """A real gloo process group of one process: DDP, its hooks and the gathers run for real."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_the_ddp_hooks_stamp_the_buckets_and_the_broadcast(one_process_group: None) -> None:
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    )
    clock = StepClock("cpu")
    assert clock.hook(model) is None and clock.hooked
    clock.start()
    model(torch.randn(8, 4)).sum().backward()
    assert clock._ready is not None and len(clock._waits) == 1 and clock._waits[0][1] is not None
    clock.stop()
    assert clock.take() > 0.0
    second = StepClock("cpu")
    assert "comm hook of its own" in (second.hook(model) or "") and not second.hooked  # DDP takes one
    assert "a Linear, not DDP" in (StepClock("cpu").hook(torch.nn.Linear(2, 2)) or "")
    assert "no model" in (StepClock("cpu").hook(None) or "")


def _fsdp(module: torch.nn.Module) -> torch.nn.Module:
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    fully_shard(module)
    return module


def _with_own_hook(module: torch.nn.Module) -> torch.nn.Module:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp = torch.nn.parallel.DistributedDataParallel(module)
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    return ddp


@pytest.mark.parametrize(
    ("wrap", "why"),
    [
        pytest.param(_fsdp, "FSDP runs its collectives inside forward and backward", id="fsdp"),
        pytest.param(lambda m: torch.compile(_fsdp(m)), "FSDP runs", id="fsdp-compiled"),
        pytest.param(_with_own_hook, "the script registered a DDP comm hook of its own", id="own-comm-hook"),
        pytest.param(lambda m: None, "no model was given", id="no-model"),
    ],
)
def test_where_a_ranks_own_work_cannot_be_timed_rank_0_says_so_once_and_the_detector_is_off(
    one_process_group: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    wrap: Callable[[torch.nn.Module], Any],
    why: str,
) -> None:
    """Under FSDP or a script's own comm hook every rank would time the slowest rank's step: nobody
    could ever be named, so nothing is judged, and rank 0 says why instead of watching silently."""
    model = wrap(torch.nn.Linear(4, 4))
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)  # as if it had a peer
    watch = Stragglers(model, StragglerConfig("warn", 0.6, 1, 1))
    assert not watch.active and watch.unwatched is not None and watch.unwatched.startswith(why)
    monkeypatch.setattr(watch, "_gather", lambda mine: pytest.fail("an unwatched detector gathered"))
    for _ in range(3):
        with watch.step():
            pass
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"ddpctl-trainer: warning: [rank 0] stragglers are not watched (--stragglers warn): {watch.unwatched}"
    ]


def test_a_one_process_job_is_not_judged(one_process_group: None) -> None:
    watch = Stragglers(None, StragglerConfig("fail", 0.6, 1, 1))
    assert not watch.active
    with watch.step():
        pass
    assert watch.verdicts == []


def test_the_gather_returns_every_ranks_figure(one_process_group: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(os.environ, protocol.POD_NAME_ENV, "job-0")
    watch = Stragglers(None, StragglerConfig("warn", 0.6, 2, 1))
    assert watch._gather(0.25) == {0: 0.25}
    assert watch.judge is not None and watch.judge.seats[0].pod == "job-0"


def test_fail_stops_through_the_trainers_callback() -> None:
    """Under fail the detector raises on every rank; the callback hands its message to the trainer's
    stop (which checkpoints and exits 202), and otherwise starts the next step's clock."""

    class Detector:
        def __init__(self, fail: bool) -> None:
            self.fail, self.calls = fail, []

        def begin(self) -> None:
            self.calls.append("begin")

        def end(self, step: int) -> list[object]:
            self.calls.append(f"end {step}")
            if self.fail:
                raise StragglerStop("straggler: node 1")
            return []

    class View:
        step = 7

    stopped: list[str] = []
    replaced: list[tuple[int, str]] = []

    def replace(node: int, message: str) -> None:
        replaced.append((node, message))

    ok = Detector(fail=False)
    StragglerWatch(ok, stopped.append, replace).on_step_end(View())  # type: ignore[arg-type]
    assert ok.calls == ["end 7", "begin"] and stopped == []
    StragglerWatch(Detector(fail=True), stopped.append, replace).on_step_end(View())  # type: ignore[arg-type]
    assert stopped == ["straggler: node 1"] and replaced == []
    assert StragglerStop.exit_code == protocol.EXIT_STRAGGLER == 202

    class Replacing(Detector):
        def end(self, step: int) -> list[object]:
            raise StragglerStop("straggler: node 2", node=2)  # replace: the node whose pod leaves

    StragglerWatch(Replacing(fail=False), stopped.append, replace).on_step_end(View())  # type: ignore[arg-type]
    assert replaced == [(2, "straggler: node 2")] and stopped == ["straggler: node 1"]


# ------------------------------------------------------------------------------------ a user's script

SCRIPT = REPO / "tests" / "support" / "models" / "straggler_script.py"


@pytest.mark.parametrize("mode", ["warn", "fail"])
def test_the_with_around_a_users_step_names_the_node_and_leaves_with_202_only_under_fail(
    one_process_group: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    """The context manager a user's script wraps its step in: the window's verdict is printed by
    rank 0 either way; under warn the step goes on, under fail it leaves with 202 once its own
    finally blocks ran (an exit hook, here recorded instead of registered)."""
    watch = Stragglers(None, StragglerConfig(mode, 0.6, 1, 1))
    watch.active, watch.world_size = True, 3  # one process: judged as if two peers had reported
    watch.judge = Judge(watch.cfg, seats(1, 1, 1))  # type: ignore[arg-type]
    monkeypatch.setattr(watch, "_gather", lambda mine: {0: 0.03, 1: 0.1, 2: 0.03})  # node 1 at 0.3 x
    exits: list[object] = []
    monkeypatch.setattr(atexit, "register", exits.append)
    ran = []
    try:
        with watch.step():
            ran.append("step")
    except SystemExit as exc:
        assert mode == "fail" and exc.code == protocol.EXIT_STRAGGLER
    else:
        assert mode == "warn" and exits == []
    out, err = capsys.readouterr()
    assert ran == ["step"] and [(v.kind, v.node) for v in watch.verdicts] == [("straggler", 1)]
    assert out.startswith("[rank 0] ddpctl-trainer: straggler: node 1 (pod job-1"), out
    assert ("ddpctl-trainer: error: [rank 0] straggler: node 1" in err) == (mode == "fail"), err
    assert len(exits) == (mode == "fail")


@pytest.mark.slow
def test_a_users_own_script_opts_in_with_a_with_around_its_step(tmp_path: Path) -> None:
    """Two hand-wired nodes (ddpctl's launcher, which keeps the workers' exit code) running a DDP
    script of the user's own, under fail, whose node 1 slows from step 6: every rank leaves with
    202 after the same step, named by rank 0 (warn's going on: the test above)."""
    mode, code = "fail", protocol.EXIT_STRAGGLER
    port = free_port()
    env = clean_env(
        {
            protocol.STRAGGLERS_ENV: mode,
            protocol.STRAGGLERS_EVERY_ENV: "3",
            protocol.STRAGGLERS_WINDOWS_ENV: "2",
            "OMP_NUM_THREADS": "1",
        }
    )
    procs = [
        start(agent_command(n, 2, 1, port, [str(SCRIPT)], launcher=protocol.LAUNCHER_MODULE), tmp_path, env)
        for n in range(2)
    ]
    outputs = wait_all(procs, timeout=180)
    assert [p.returncode for p in procs] == [code, code], outputs
    rank0 = [line for line in outputs[0][0].splitlines() if protocol.straggler_line(line)]
    assert len(rank0) == 1 and rank0[0].startswith("[rank 0] ddpctl-trainer: straggler: node 1 (pod "), outputs[0]
    assert 4 <= _since(rank0[0]) <= 7, rank0  # the window holding step 6 (steps counted from 1)
    assert "[rank 0] finished 40 steps" not in outputs[0][0]
    assert "ddpctl-trainer: error: [rank 0] straggler: node 1" in outputs[0][1], outputs[0][1]


def _since(line: str) -> int:
    found = re.search(r"since step (\d+)", line)
    assert found, line
    return int(found.group(1))


def test_a_windows_figures_ride_on_the_stop_vote_after_the_first(
    one_process_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first window gathers by itself (it shares the seats); later ones hand their figure to the
    trainer's stop vote (`riders`) and judge what it reduced (`receive`), with no gather of their own."""
    watch = Stragglers(None, StragglerConfig("warn", 0.6, 2, 1))
    watch.active = True  # one process: judged as if it had peers
    assert watch.riders(1) is None  # no seats yet
    watch.begin()
    watch.end(1)
    watch.begin()
    watch.end(2)  # the first window: its own gather
    assert watch.judge is not None
    watch.begin()
    assert watch.riders(3) is None  # mid-window
    watch.end(3)
    watch.begin()
    riders = watch.riders(4)
    assert riders is not None and len(riders) == 1 and riders[0] >= 0.0
    watch.receive(4, [0.25])
    monkeypatch.setattr(watch, "_gather", lambda mine: pytest.fail("a window that rode on the vote gathered again"))
    watch.end(4)
    assert watch.riders(4) is None  # the vote at the epoch's end, after the same step, carries nothing
