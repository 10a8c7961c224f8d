"""ddpctl.commands.where: which backend is asked for a job. A cluster that answered (401, 403) is
the answer; one that does not have the job, or cannot be reached, hands the name on to a local run
of that name and says so; --on names the one backend to ask."""

from __future__ import annotations

import socket

import pytest

from tests.support.api import NAME, NS, one_error

COMMANDS = {"status": ["status", NAME], "logs": ["logs", NAME]}


def _local_run(cwd, name: str = NAME) -> None:
    """What `ddpctl run` leaves in ./ddp-runs/NAME: a record and a node's log."""
    import json

    run = cwd / "ddp-runs" / name
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "node-0.log").write_text("[rank 0] local line\n")
    (run / "run.json").write_text(json.dumps({"name": name, "backend": "local", "state": "succeeded", "pid": 1}))


@pytest.mark.parametrize("answer", ["401", "403"])
@pytest.mark.parametrize("name", ["status", "logs"])
def test_an_answer_from_the_cluster_is_never_replaced_by_a_local_run(cli, make_cluster, tmp_path, answer, name):
    """A cluster that answered (401, 403) is the answer, though ./ddp-runs/NAME exists: its error,
    exit 1, and nothing of the local run."""
    c = make_cluster()
    assert cli("submit", *c.args, "-n", NS, "--target", "job").code == 0
    _local_run(tmp_path)
    if answer == "401":
        args = ["--kubeconfig", str(c.double.write_kubeconfig(tmp_path / "badtoken", token="expired"))]
        needles = ("401 Unauthorized", "log in again")
    else:
        c.double.forbid("list", "jobs", "batch", NS)
        args, needles = c.args, ("403 Forbidden", 'cannot list resource "jobs"')
    r = cli(*COMMANDS[name], *args, "-n", NS)
    one_error(r, 1, *needles)
    assert "local" not in r.out and "local line" not in r.out


@pytest.mark.parametrize("name", ["status", "logs"])
def test_a_job_the_cluster_does_not_have_is_shown_from_its_local_run_saying_so(cli, make_cluster, tmp_path, name):
    c = make_cluster()
    _local_run(tmp_path)
    r = cli(*COMMANDS[name], *c.args, "-n", NS)
    assert r.code == 0, r.err
    assert f'no job "{NAME}" in namespace "{NS}"' in r.err and "is a local run in ./ddp-runs: showing it" in r.err
    assert ("Backend:     local: ddp-runs/ddp-train" if name == "status" else "[node 0] [rank 0] local line") in r.out


def test_an_unreachable_cluster_hands_the_name_to_its_local_run(cli, make_cluster, tmp_path):
    c = make_cluster()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = c.double.write_kubeconfig(tmp_path / "dead", context="dead", server=f"http://127.0.0.1:{port}")
    _local_run(tmp_path)
    r = cli("status", NAME, "--kubeconfig", str(path))
    assert r.code == 0 and "connection refused" in r.err and "State:       Succeeded" in r.out, r


def test_on_names_the_backend_and_asks_no_other(cli, make_cluster, tmp_path):
    c = make_cluster()
    _local_run(tmp_path)
    r = cli("status", NAME, "--on", "local", *c.args)
    assert r.code == 0 and "Backend:     local: ddp-runs/ddp-train" in r.out and not r.err, r
    one_error(cli("status", NAME, "--on", "cluster", *c.args, "-n", NS), 1, f'no job "{NAME}" in namespace "{NS}"')
