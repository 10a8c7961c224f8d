"""ddpctl.cluster.logs: every node's log read once (prefixed by node, --tail, --previous,
--timestamps, the pods that have none), the timestamps that let a dropped stream be followed again
without losing or repeating a line, and rank 0's progress read from node 0's log tail; through the
API server double (tests/support/kube_api_double). Following logs live is in test_operate.py and
test_submit.py."""

from __future__ import annotations

import io
from typing import Any

import pytest

from ddpctl.cluster import errors as E
from ddpctl.cluster.kinds import JOB, POD, job_selector
from ddpctl.cluster.logs import Output, _Printed, rank0_progress, read_logs, stamp_ns
from ddpctl.cluster.pods import ranked
from ddpctl.errors import ClusterError
from ddpctl_trainer.protocol import Progress
from tests.support.api import NAME, NS


@pytest.mark.parametrize(
    "stamp, ns",
    [
        ("1970-01-01T00:00:01Z", 1_000_000_000),
        ("1970-01-01T00:00:01.5Z", 1_500_000_000),
        ("1970-01-01T00:00:01.000000007Z", 1_000_000_007),
        ("1970-01-01T01:00:01.25+01:00", 1_250_000_000),
        ("1970-01-01T00:00:01-00:30", 1_801_000_000_000),
        ("step", None),
        ("", None),
        ("2030-13-01T00:00:00Z", None),
    ],
)
def test_log_timestamps(stamp, ns):
    from ddpctl.cluster.logs import stamp_ns

    assert stamp_ns(stamp) == ns


def test_a_line_printed_before_is_skipped_when_a_stream_is_followed_again() -> None:
    """The kubelet resumes `sinceTime` at whole seconds: lines of that second come again and are
    skipped, as many as were printed with that very timestamp; a later one is new."""
    printed = _Printed()
    first = [("t1", 1), ("t2", 2), ("t2", 2), ("", None)]
    assert [printed.take(stamp, ns) for stamp, ns in first] == [True, True, True, True]
    assert (printed.stamp, printed.same) == ("t2", 2)
    printed.new_stream()  # followed again from t2
    again = [("t2", 2), ("t2", 2), ("t2", 2), ("t1", 1), ("t3", 3)]
    assert [printed.take(stamp, ns) for stamp, ns in again] == [False, False, True, False, True]


def test_output_writes_whole_lines() -> None:
    stream = io.StringIO()
    out = Output(stream)
    out.line("a")
    out.line("b c")
    assert stream.getvalue() == "a\nb c\n"


# ------------------------------------------------------------------------------ through the API double


def _pods(cluster) -> list[tuple[int | None, dict[str, Any]]]:
    job = cluster.get(JOB, NAME)
    return ranked(JOB, job, cluster.list(POD, NS, job_selector(NAME))["items"])


def _read(cluster, **kw: Any) -> tuple[list[str], list[str]]:
    stream, notes = io.StringIO(), []
    pods = kw.pop("pods", None) or _pods(cluster)
    read_logs(cluster, JOB, cluster.get(JOB, NAME), pods, out=Output(stream), note=notes.append, **kw)
    return stream.getvalue().splitlines(), notes


@pytest.fixture
def two_nodes(submitted):
    d, cluster = submitted()
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    for name, rank in ((p0, 0), (p1, 1)):
        d.start_container(name, NS)
        d.append_log(name, f"[rank {2 * rank}] hello", f"[rank {2 * rank}] bye", namespace=NS)
    return d, cluster, p0, p1


@pytest.mark.parametrize(
    ("kw", "lines"),
    [
        ({"prefix": True}, ["[node 0] [rank 0] hello", "[node 0] [rank 0] bye", "[node 1] [rank 2] hello",
                            "[node 1] [rank 2] bye"]),
        ({"prefix": False, "tail": 1}, ["[rank 0] bye", "[rank 2] bye"]),
    ],
)  # fmt: skip
def test_read_logs_in_node_order(two_nodes, kw: dict[str, Any], lines: list[str]) -> None:
    _, cluster, _, _ = two_nodes
    assert _read(cluster, **kw) == (lines, [])


def test_read_logs_with_the_servers_timestamps(two_nodes) -> None:
    _, cluster, _, _ = two_nodes
    lines, _ = _read(cluster, prefix=True, tail=1, timestamps=True)
    assert len(lines) == 2
    for node, (line, text) in enumerate(zip(lines, ["[rank 0] bye", "[rank 2] bye"])):
        prefix, rest = line.split("] ", 1)
        stamp, said = rest.split(" ", 1)
        assert (prefix, said) == (f"[node {node}", text) and stamp_ns(stamp) is not None


def test_read_logs_of_the_previous_instance(two_nodes) -> None:
    d, cluster, p0, _ = two_nodes
    d.restart_container(p0, NS, exit_code=137, reason="OOMKilled")
    d.append_log(p0, "[rank 0] new instance", namespace=NS)
    pods = [rp for rp in _pods(cluster) if rp[0] == 0]
    assert _read(cluster, prefix=True, pods=pods)[0] == ["[node 0] [rank 0] new instance"]
    assert _read(cluster, prefix=True, previous=True, pods=pods)[0] == [
        "[node 0] [rank 0] hello",
        "[node 0] [rank 0] bye",
    ]


def test_a_pod_without_logs_is_a_note_and_the_others_are_read(two_nodes) -> None:
    d, cluster, _p0, p1 = two_nodes
    d.set_container_waiting(p1, NS, reason="ImagePullBackOff")
    lines, notes = _read(cluster, prefix=True)
    assert lines == ["[node 0] [rank 0] hello", "[node 0] [rank 0] bye"]
    assert len(notes) == 1 and notes[0].startswith(f"ddpctl: node 1 (pod {p1}): no logs: ")
    assert "waiting to start" in notes[0]


def test_a_pod_deleted_since_it_was_listed_is_a_note(two_nodes) -> None:
    d, cluster, p0, _p1 = two_nodes
    pods = _pods(cluster)
    d.delete_pod(p0, NS)
    lines, notes = _read(cluster, prefix=True, pods=pods)
    assert notes == [f"ddpctl: node 0 (pod {p0}): no logs: the pod was deleted"]
    assert lines == ["[node 1] [rank 2] hello", "[node 1] [rank 2] bye"]


@pytest.mark.parametrize("failing", [1, 2])
def test_kubelets_that_serve_no_logs(two_nodes, failing: int) -> None:
    """The API server's 500 when it cannot reach a pod's kubelet: a note per pod, or one error when
    no pod's logs could be read (a simulated node keeps none)."""
    d, cluster, p0, _p1 = two_nodes
    message = "Get https://10.0.0.7:10250/containerLogs/...: dial tcp 10.0.0.7:10250: connect: connection refused"
    d.fail_next("GET", r"/log$", status=500, count=failing, message=message)
    if failing == 2:
        with pytest.raises(ClusterError, match=r"^no logs: the kubelets of nodes \? served none; a simulated node"):
            _read(cluster, prefix=True)
        return
    lines, notes = _read(cluster, prefix=True)
    assert notes == [f"ddpctl: node 0 (pod {p0}): no logs: the kubelet of node ? did not serve them"]
    assert lines == ["[node 1] [rank 2] hello", "[node 1] [rank 2] bye"]


def test_any_other_error_is_the_answer(two_nodes) -> None:
    d, cluster, _, _ = two_nodes
    d.fail_next("GET", r"/log$", status=500, message="etcdserver: leader changed")
    with pytest.raises(E.ApiError, match="the API server failed to logs pod"):
        _read(cluster, prefix=True)


def test_rank_0s_newest_progress_and_how_long_ago_it_was_printed(two_nodes) -> None:
    d, cluster, p0, p1 = two_nodes
    pods = _pods(cluster)
    assert rank0_progress(cluster, JOB, pods) is None  # no progress line yet
    d.append_log(p0, "[rank 0] epoch 1/2 step 1/4 loss 1.0000", "[rank 0] epoch 1/2 step 2/4 loss 0.5000 eta 30s",
                 "[rank 0] saved a checkpoint", namespace=NS)  # fmt: skip
    d.append_log(p1, "[rank 2] epoch 2/2 step 4/4", namespace=NS)  # not rank 0's
    _, text = cluster.call("GET", POD.path(NS, p0, "log"), E.Op("logs", POD, p0, NS), query=[("timestamps", "true")])
    stamped = next(line for line in text.splitlines() if "step 2/4" in line)
    at = stamp_ns(stamped.split(" ", 1)[0])
    assert at is not None
    found = rank0_progress(cluster, JOB, pods, now=at / 1e9 + 7)
    assert found is not None
    progress, age = found
    assert progress == Progress(1, 2, 2, 4, 0.5, None, 30.0)
    assert age == pytest.approx(7.0)
    assert rank0_progress(cluster, JOB, [(1, p) for _, p in pods]) is None  # no node 0 among them
