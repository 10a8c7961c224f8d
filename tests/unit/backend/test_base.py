"""ddpctl.backend.base: what every backend answers, the same for all (`JobStatus`: its time left and
its machine-readable form; `LogOptions`: when lines carry their node)."""

from __future__ import annotations

import pytest

from ddpctl.backend import Backend, JobStatus, LogOptions, NodeRow, Where
from ddpctl_trainer.protocol import Progress


def status(progress: Progress | None = None, age: float | None = None, **data: object) -> JobStatus:
    return JobStatus("w", Where.local, "ddp-runs/w", "Running", "2 nodes", progress, age, data=data)


@pytest.mark.parametrize(
    ("eta", "age", "left"),
    [
        (120.0, None, 120.0),  # just printed
        (120.0, 30.0, 90.0),  # printed 30 s ago: 30 s of it have passed
        (120.0, 500.0, 0.0),  # never below zero
        (None, 30.0, None),  # rank 0 gave no estimate
    ],
)
def test_the_time_left_is_rank_0s_estimate_less_its_age(
    eta: float | None, age: float | None, left: float | None
) -> None:
    assert status(Progress(1, 2, 3, 10, eta_s=eta), age).eta_s == left


def test_no_progress_means_no_time_left() -> None:
    assert status().eta_s is None


def test_as_dict_adds_the_backend_and_the_progress_to_the_backends_data() -> None:
    done = status(Progress(2, 3, 5, 8, 0.25, 12.34, 65.0), 5.4, state="Running", namespace="team")
    assert done.as_dict() == {
        "name": "w",
        "backend": "local",
        "state": "Running",
        "namespace": "team",
        "progress": {
            "epoch": 2,
            "epochs": 3,
            "step": 5,
            "steps": 8,
            "percent": 54.2,  # (1 * 8 + 5) / 24, one decimal
            "loss": 0.25,
            "samplesPerSecond": 12.34,
            "etaSeconds": 60,
            "ageSeconds": 5,
        },
    }


def test_as_dict_without_progress_says_null() -> None:
    assert status(name_in_data="x").as_dict() == {
        "name": "w",
        "backend": "local",
        "name_in_data": "x",
        "progress": None,
    }
    partial = status(Progress(1, 1, 1, 2)).as_dict()["progress"]
    assert (partial["loss"], partial["etaSeconds"], partial["ageSeconds"]) == (None, None, None)


def test_the_progress_is_always_the_statuss_own() -> None:
    """A run record keeps its progress line under `progress` too: the parsed one replaces it."""
    record = {"state": "running", "progress": {"line": "epoch 1/2 step 1/4", "at": 0}}
    data = JobStatus("w", Where.local, "ddp-runs/w", "Running", "2", data=record).as_dict()
    assert data["progress"] is None


@pytest.mark.parametrize(
    ("rank", "prefix", "with_prefix"),
    [(None, None, True), (2, None, False), (2, True, True), (None, False, False)],
)
def test_lines_carry_their_node_unless_one_node_is_asked_for(
    rank: int | None, prefix: bool | None, with_prefix: bool
) -> None:
    assert LogOptions(rank=rank, prefix=prefix).with_prefix is with_prefix


def test_the_backends_are_named_as_on_names_them() -> None:
    assert [w.value for w in Where] == ["cluster", "local", "docker"]
    assert Where("docker") is Where.docker


def test_a_backend_must_answer_every_method() -> None:
    class Half(Backend):
        where = Where.local

        def describe(self) -> str:
            return "half"

    with pytest.raises(TypeError, match="abstract"):
        Half()  # type: ignore[abstract]


def test_a_node_row_defaults_to_no_restarts_and_no_reason() -> None:
    assert NodeRow(0, "w-0", "Running") == NodeRow(0, "w-0", "Running", 0, "", "")


def test_a_dry_run_shows_the_prepared_request_and_a_run_starts_it_inside_its_context() -> None:
    """The two phases: `dry_run` is prepare then show, `run` prepare then start, and what prepare
    holds (a packed workspace, a connection) lasts until start returns. A minimal Backend: only
    its prepare and start are this test's; dry_run and run are the base class's."""
    from contextlib import contextmanager

    events: list[str] = []

    class Shown:
        def show(self, out, say) -> None:  # type: ignore[no-untyped-def]
            out("would start")

    class Minimal(Backend[Shown]):
        where = Where.local

        @contextmanager
        def prepare(self, spec_input, say, *, dry_run=False):  # type: ignore[no-untyped-def]
            events.append("prepared to show" if dry_run else "prepared")
            yield Shown()
            events.append("released")

        def start(self, request: Shown, out, say) -> int:  # type: ignore[no-untyped-def]
            events.append("started")
            return 7

        describe = status = wait = logs = list = delete = None  # type: ignore[assignment]

    out: list[str] = []
    Minimal().dry_run(None, out.append, out.append)  # type: ignore[arg-type]
    assert out == ["would start"] and events == ["prepared to show", "released"]
    events.clear()
    assert Minimal().run(None, out.append, out.append) == 7  # type: ignore[arg-type]
    assert events == ["prepared", "started", "released"]
