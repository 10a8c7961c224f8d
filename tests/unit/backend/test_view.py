"""ddpctl.backend.view: the one view of a `JobStatus` (`status_text`, `progress_phrase`) and of a
list of jobs (`list_text` in each output format), whichever backend answered."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from ddpctl.backend import JobStatus, JobSummary, NodeRow, Where
from ddpctl.backend.view import ListFormat, field_line, list_text, progress_phrase, status_text, table
from ddpctl_trainer.protocol import Progress

PROGRESS = Progress(3, 3, 254, 313, 0.1234, 424.6, 125.0)


def status(**kw: object) -> JobStatus:
    fields: dict[str, object] = {
        "name": "w",
        "backend": Where.cluster,
        "where": "namespace team, context c at https://h",
        "state": "Running",
        "nodes": "2  node: 2 Running",
    }
    fields.update(kw)
    return JobStatus(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "phrase"),
    [
        ({}, None),
        (
            {"progress": PROGRESS, "progress_age_s": 12.0},
            "epoch 3/3 step 254/313 (94%), loss 0.1234, 424.6 samples/s, ETA 1m53s (rank 0, 12s ago)",
        ),
        ({"progress": PROGRESS}, "epoch 3/3 step 254/313 (94%), loss 0.1234, 424.6 samples/s, ETA 2m05s (rank 0)"),
        ({"progress": Progress(1, 2, 1, 4)}, "epoch 1/2 step 1/4 (12%) (rank 0)"),
        # an ended job has no time left
        (
            {"progress": PROGRESS, "state": "Succeeded"},
            "epoch 3/3 step 254/313 (94%), loss 0.1234, 424.6 samples/s (rank 0)",
        ),
        (
            {"progress": PROGRESS, "state": "Failed", "progress_age_s": 3725.0},
            "epoch 3/3 step 254/313 (94%), loss 0.1234, 424.6 samples/s (rank 0, 1h02m ago)",
        ),
    ],
)
def test_progress_phrase(kw: dict[str, object], phrase: str | None) -> None:
    assert progress_phrase(status(**kw)) == phrase


def test_status_text_is_the_same_fields_in_the_same_order_then_a_row_per_node() -> None:
    lines = status_text(
        status(
            head=[("Namespace", "team"), ("Target", "job (job.batch/w)")],
            lines=[("Age", "3m")],
            progress=Progress(1, 2, 1, 4),
            rows=[
                NodeRow(0, "w-0-abc", "Running"),
                NodeRow(None, "w-x", "Pending", 0, "Unschedulable: no nodes"),
                NodeRow(1, "w-1-def", "Running", 2, "", "OOMKilled (exit code 137)"),
            ],
        )
    )
    assert "\n".join(lines).splitlines() == [
        "Name:        w",
        "Namespace:   team",
        "Target:      job (job.batch/w)",
        "Backend:     cluster: namespace team, context c at https://h",
        "State:       Running",
        "Nodes:       2  node: 2 Running",
        "Progress:    epoch 1/2 step 1/4 (12%) (rank 0)",
        "Age:         3m",
        "",
        "NODE   POD       PHASE     RESTARTS                              REASON",
        "0      w-0-abc   Running   0",
        "?      w-x       Pending   0                                     Unschedulable: no nodes",
        "1      w-1-def   Running   2 (last: OOMKilled (exit code 137))",
    ]


@pytest.mark.parametrize(("no_rows", "tail"), [("No pods yet.", ["", "No pods yet."]), ("", [])])
def test_status_text_without_rows(no_rows: str, tail: list[str]) -> None:
    text = status_text(status(no_rows=no_rows, name_column="HOST"))
    assert text[4:] == tail  # after Name, Backend, State and Nodes


def test_a_local_status_names_its_hosts() -> None:
    local = status(backend=Where.local, where="ddp-runs/w", rows=[NodeRow(0, "w-0", "Running")], name_column="HOST")
    text = "\n".join(status_text(local)).splitlines()
    assert "Backend:     local: ddp-runs/w" in text
    assert text[-2].split() == ["NODE", "HOST", "PHASE", "RESTARTS", "REASON"]


def test_field_line_and_table() -> None:
    assert field_line("A-very-long-label", "v") == "A-very-long-label:v"
    assert table(["A", "BB"], [["xyz", ""], ["1", "2"]]).splitlines() == ["A     BB", "xyz", "1     2"]


JOBS = [
    JobSummary(
        "a", "job", "2", "Running", "5m", namespace="team", ref="job.batch/a", image="img:1", raw={"kind": "Job"}
    ),
    JobSummary(
        "b",
        "pytorchjob",
        "4",
        "Pending",
        "1m",
        namespace="ml",
        admission="waiting",
        ref="pytorchjob.kubeflow.org/b",
        image="img:2",
        raw={"kind": "PyTorchJob"},
    ),
]


@pytest.mark.parametrize(
    ("jobs", "output", "all_namespaces", "lines"),
    [
        (
            JOBS[:1],
            ListFormat.table,
            False,
            ["NAME   TARGET   NODES   STATE     AGE", "a      job      2       Running   5m"],
        ),
        (
            JOBS,
            ListFormat.table,
            True,
            [
                "NAMESPACE   NAME   TARGET       NODES   STATE     ADMISSION   AGE",
                "team        a      job          2       Running   -           5m",
                "ml          b      pytorchjob   4       Pending   waiting     1m",
            ],
        ),
        (
            JOBS[:1],
            ListFormat.wide,
            False,
            [
                "NAME   TARGET   NODES   STATE     AGE   KIND          IMAGE",
                "a      job      2       Running   5m    job.batch/a   img:1",
            ],
        ),
        (
            [dataclasses.replace(JOBS[0], recoveries=2), dataclasses.replace(JOBS[0], name="c", recoveries=0)],
            ListFormat.table,
            False,
            [  # a column of its own once some job has had a node started again alone (pod recovery)
                "NAME   TARGET   NODES   STATE     RECOVERIES   AGE",
                "a      job      2       Running   2            5m",
                "c      job      2       Running   0            5m",
            ],
        ),
        (JOBS, ListFormat.name, False, ["job.batch/a", "pytorchjob.kubeflow.org/b"]),
        ([], ListFormat.table, False, ["nothing here"]),
        ([], ListFormat.wide, True, ["nothing here"]),
    ],
)
def test_list_text(jobs: list[JobSummary], output: ListFormat, all_namespaces: bool, lines: list[str]) -> None:
    assert list_text(jobs, output, all_namespaces=all_namespaces, empty="nothing here").splitlines() == lines


@pytest.mark.parametrize("output", [ListFormat.json, ListFormat.yaml])
def test_list_text_as_a_kubernetes_list(output: ListFormat) -> None:
    text = list_text(JOBS, output, all_namespaces=False, empty="nothing here")
    parsed = json.loads(text) if output is ListFormat.json else yaml.safe_load(text)
    assert parsed == {
        "apiVersion": "v1",
        "kind": "List",
        "items": [{"kind": "Job"}, {"kind": "PyTorchJob"}],
        "metadata": {},
    }
    empty = list_text([], output, all_namespaces=False, empty="nothing here")
    assert "nothing here" not in empty  # an empty List, never the table's sentence


NAMED_1 = (
    "[rank 0] ddpctl-trainer: straggler: node 1 (pod job-1, k8s node w2): own work 61.2 ms a step (rank 2), 0.48 x "
    "the median speed (29.5 ms; tolerance 0.6) for 3 windows of 10 steps, since step 41; avoid it: --avoid-node w2"
)
NAMED_3 = (
    "[rank 0] ddpctl-trainer: straggler: node 3 (pod job-3, k8s node w4): own work 70.0 ms a step (rank 6), 0.42 x "
    "the median speed (29.5 ms; tolerance 0.6) for 3 windows of 10 steps, since step 61"
)
BACK_1 = (
    "[rank 0] ddpctl-trainer: straggler recovered: node 1 (pod job-1, k8s node w2): back at 0.95 x the median "
    "speed at step 90"
)


def _body(line: str) -> str:
    return line.split("] ", 1)[1].split(": ", 2)[2]  # after `[rank 0] ddpctl-trainer: straggler[ recovered]: `


@pytest.mark.parametrize(
    ("lines", "shown"),
    [
        ([], []),
        ([NAMED_1], [f"Stragglers:  {_body(NAMED_1)}"]),
        # a recovered node is no longer a straggler: it is said briefly, after the current ones
        ([NAMED_1, NAMED_3, BACK_1], [f"Stragglers:  {_body(NAMED_3)}", f"             recovered: {_body(BACK_1)}"]),
        ([NAMED_1, BACK_1], ["Stragglers:  none now", f"             recovered: {_body(BACK_1)}"]),
        # named again after it recovered: current again, not recovered
        ([NAMED_1, BACK_1, NAMED_1], [f"Stragglers:  {_body(NAMED_1)}"]),
        # other lines (another rank's, progress) are not straggler lines
        (["[rank 0] epoch 1/2 step 3/8 loss 2.3", "[rank 0] hello"], []),
    ],
)
def test_status_shows_the_current_stragglers_then_the_recovered_ones(lines: list[str], shown: list[str]) -> None:
    text = status_text(status(stragglers=lines, lines=[("Age", "3m")]))
    at = [i for i, line in enumerate(text) if line.startswith("Stragglers:")]
    if not shown:
        assert at == []
        return
    assert text[at[0] : at[0] + len(shown)] == shown
    assert text[at[0] - 1] == field_line("Age", "3m"), "after the backend's lines, with the preflight report"


def test_status_json_has_the_current_stragglers_and_every_line() -> None:
    doc = status(stragglers=[NAMED_1, NAMED_3, BACK_1]).as_dict()
    assert doc["stragglers"] == {
        "current": [{"node": 3, "text": _body(NAMED_3), "avoid": None}],
        "recovered": [{"node": 1, "text": _body(BACK_1), "avoid": None}],
        "lines": [line.removeprefix("[rank 0] ") for line in (NAMED_1, NAMED_3, BACK_1)],
    }
    named = status(stragglers=[NAMED_1]).as_dict()["stragglers"]["current"]
    assert named == [{"node": 1, "text": _body(NAMED_1), "avoid": "w2"}]
    assert "stragglers" not in status().as_dict()
