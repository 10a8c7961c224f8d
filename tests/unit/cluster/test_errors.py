"""Every cluster error as one line naming the object and the fix, for every cluster command,
with the real client over real HTTP (tests/support/kube_api_double); never a traceback."""

from __future__ import annotations

import socket

import kubernetes  # noqa: F401 - a core dependency: missing, it fails here rather than skips
import pytest
from ddpctl.cluster import errors as E
from ddpctl.cluster.kinds import JOB, PYTORCHJOB

from tests.support.api import NAME, NS, one_error

COMMANDS = {
    "submit": ["submit", "--target", "job"],
    "status": ["status", NAME],
    "logs": ["logs", NAME],
    "list": ["list"],
    "delete": ["delete", NAME],
}


@pytest.fixture(params=sorted(COMMANDS))
def command(request):
    return COMMANDS[request.param]


def test_no_kubeconfig(cli, command, isolated_kube):
    """Without a kubeconfig a name is looked up in ./ddp-runs: not found there, the error says that
    no cluster was asked either; `list` lists ./ddp-runs and says the same."""
    if command[0] == "list":
        r = cli(*command)
        assert r.code == 0 and "No ddpctl jobs found in ./ddp-runs and no kubeconfig" in r.out, r
        assert "set KUBECONFIG or pass --kubeconfig" in r.out
        return
    if command[0] == "submit":
        one_error(cli(*command), 1, "no kubeconfig", "KUBECONFIG", "--kubeconfig")
        return
    one_error(cli(*command), 1, f'no local run "{NAME}" here', "no kubeconfig", "KUBECONFIG", "--kubeconfig")


def test_kubeconfig_flag_to_a_missing_file(cli, command, isolated_kube, tmp_path):
    one_error(cli(*command, "--kubeconfig", str(tmp_path / "nope")), 2, "--kubeconfig", "does not exist")


def test_unreadable_kubeconfig(cli, command, isolated_kube, tmp_path):
    bad = tmp_path / "kc"
    bad.write_text("apiVersion: v1\nkind: Config\ncontexts: [\n")
    one_error(cli(*command, "--kubeconfig", str(bad)), 2, str(bad))


def test_unreachable_api_server_is_retried_then_named(cli, command, make_cluster, tmp_path):
    c = make_cluster()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = c.double.write_kubeconfig(tmp_path / "dead", context="dead", server=f"http://127.0.0.1:{port}")
    err = one_error(
        cli(*command, "--kubeconfig", str(path)),
        1,
        "cannot reach the Kubernetes API server",
        f"context dead at http://127.0.0.1:{port}",
        "after 3 attempts",
        "connection refused",
    )
    assert "--context" in err


def test_unauthorized(cli, command, make_cluster, tmp_path):
    c = make_cluster()
    path = c.double.write_kubeconfig(tmp_path / "badtoken", token="expired")
    one_error(cli(*command, "--kubeconfig", str(path)), 1, "401 Unauthorized", "log in again")


@pytest.mark.parametrize(
    "name, verb, resource, group",
    [
        ("status", "list", "jobs", "batch"),
        ("logs", "get", "pods", ""),
        ("list", "list", "jobs", "batch"),
        ("delete", "delete", "jobs", "batch"),
        ("submit", "patch", "services", ""),
    ],
)
def test_forbidden_names_verb_and_resource(cli, make_cluster, name, verb, resource, group):
    c = make_cluster()
    assert cli("submit", *c.args, "-n", NS, "--target", "job").code == 0
    pods = c.double.pod_names_for("Job", NAME, NS)
    for p in pods:
        c.double.start_container(p, NS)
    c.double.forbid(verb, resource if name != "logs" else "pods/log", group, NS)
    args = COMMANDS[name] + (["--replace"] if name == "submit" else [])
    err = one_error(
        cli(*args, *c.args, "-n", NS),
        1,
        "403 Forbidden",
        f'cannot {verb} resource "{resource}{"/log" if name == "logs" else ""}"',
        "RBAC permission",
    )
    assert f'in namespace "{NS}"' in err


def test_namespace_that_does_not_exist(cli, make_cluster):
    c = make_cluster()
    for args, code in (
        (COMMANDS["submit"], 1),
        (COMMANDS["status"], 1),
        (COMMANDS["logs"], 1),
        (COMMANDS["delete"], 1),
    ):
        one_error(cli(*args, *c.args, "-n", "ghost"), code, 'namespace "ghost" does not exist', "-n")
    r = cli("list", *c.args, "-n", "ghost")  # like kubectl get: an empty list
    assert r.code == 0 and "No ddpctl jobs found" in r.out


def test_crd_not_installed_names_the_target_that_would_work(cli, make_cluster):
    c = make_cluster(("jobset",))
    one_error(
        cli("submit", *c.args, "--target", "trainjob"),
        1,
        "trainjobs.trainer.kubeflow.org/v1alpha1",
        "Kubeflow Trainer v2 is not installed",
        "--target jobset",
    )


def test_invalid_object_lists_the_servers_field_paths(cli, make_cluster):
    bad = lambda o: (
        [
            "spec.completions: Invalid value: 0: must be greater than or equal to 1",
            "metadata.labels: Invalid value: \"x\": bad",
        ]
        if o["kind"] == "Job"
        else []
    )
    c = make_cluster(validator=bad)
    one_error(
        cli(*COMMANDS["submit"], *c.args),
        1,
        'job.batch "ddp-train" in namespace "default" as invalid',
        "spec.completions: Invalid value: 0",
        "metadata.labels: Invalid value",
    )


def test_already_exists_says_delete_or_replace(cli, make_cluster):
    c = make_cluster()
    assert cli(*COMMANDS["submit"], *c.args).code == 0
    one_error(cli(*COMMANDS["submit"], *c.args), 1, "already exists", "ddpctl delete ddp-train -n default", "--replace")


def test_server_errors_during_list_and_watch_are_one_line(cli, make_cluster):
    c = make_cluster()
    assert cli("submit", *c.args, "-n", NS).code == 0
    c.double.fail_next("GET", r"/pods$", status=503, count=10, message="etcdserver: leader changed")
    one_error(
        cli("status", NAME, *c.args, "-n", NS),
        1,
        "the API server failed to list pods",
        "503",
        "etcdserver: leader changed",
        "retry",
    )


# --------------------------------------------------------------------------- translation units


def test_status_translation_table():
    op = E.Op("apply", PYTORCHJOB, "x", "team")
    where = "context c at http://h"
    not_served = E.from_status(
        404, '{"message": "the server could not find the requested resource", "details": {}}', op, where
    )
    assert not_served.not_served and "pytorchjobs.kubeflow.org/v1" in not_served.message
    ns = E.from_status(
        404, {"message": 'namespaces "team" not found', "details": {"name": "team", "kind": "namespaces"}}, op, where
    )
    assert ns.namespace_missing and not ns.object_missing
    gone = E.from_status(
        404,
        {"message": 'jobs.batch "x" not found', "details": {"name": "x", "group": "batch", "kind": "jobs"}},
        E.Op("get", JOB, "x", "team"),
        where,
    )
    assert gone.object_missing and gone.message.startswith('job.batch "x" in namespace "team" not found')
    conflict = E.from_status(
        409, {"reason": "Conflict", "message": "Apply failed with 2 conflicts:\n- .spec.a\n- .spec.b"}, op, where
    )
    assert "\n" not in conflict.message and ".spec.a; - .spec.b" in conflict.message
    html = E.from_status(502, b"<html>bad gateway</html>", op, where)
    assert "502" in html.message and "\n" not in html.message


@pytest.fixture
def not_kubernetes(tmp_path):
    """A web server that is not Kubernetes: every path, /version included, answers 404 (real HTTP)."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_server():
    """A server that accepts connections (the kernel's backlog) and never answers a byte."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_server_that_is_not_kubernetes_is_named_as_such(cli, command, make_cluster, not_kubernetes, tmp_path):
    """Was: `the API not found; see ddpctl list ...` (also from `ddpctl list` itself)."""
    c = make_cluster()
    path = c.double.write_kubeconfig(tmp_path / "web", context="web", server=not_kubernetes)
    err = one_error(
        cli(*command, "--kubeconfig", str(path)),
        1,
        f"the server at {not_kubernetes} (context web) answered GET /version with 404 Not Found",
        "is this a Kubernetes API server?",
    )
    assert "the API not found" not in err and "ddpctl list" not in err


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_silent_server_is_reported_then_given_up_on(
    cli, command, make_cluster, silent_server, tmp_path, monkeypatch, how
):
    """Was: 62 s of silence. Now a "waiting" line after a few seconds and one error at the stated
    timeout (urllib3 must not retry the read behind ddpctl's back)."""
    c = make_cluster()
    path = c.double.write_kubeconfig(tmp_path / "silent", context="silent", server=silent_server)
    from ddpctl.cluster import config as kconfig

    monkeypatch.setattr(kconfig, "WAITING_NOTICE_AFTER", 0.2)
    args = [*command, "--kubeconfig", str(path)]
    if how == "flag":
        args += ["--request-timeout", "1.5s"]
    else:
        monkeypatch.setenv("DDPCTL_REQUEST_TIMEOUT", "1.5s")
    result = cli(*args)
    one_error(result, 1, f"the API server at {silent_server} (context silent) did not answer within 1.5s")
    assert f"ddpctl: waiting for the API server at {silent_server} (context silent) to answer ..." in result.err
    assert "--request-timeout" in result.err


@pytest.mark.parametrize("value", ["0", "abc"])
def test_request_timeout_must_be_a_finite_duration(cli, make_cluster, value):
    c = make_cluster()
    one_error(cli("list", *c.args, "--request-timeout", value), 2, "--request-timeout")


# --------------------------------------------------------------------------- retries


@pytest.mark.parametrize(
    ("method", "error_name", "retried"),
    [
        ("GET", "timeout", False),  # a silent server: --request-timeout is the whole wait
        ("GET", "dropped", True),  # a pooled keep-alive connection the server closed: try a fresh one
        ("PATCH", "dropped", False),  # apply is not idempotent to urllib3: never sent twice
    ],
)
def test_only_a_dropped_connection_is_retried(method: str, error_name: str, retried: bool) -> None:
    import http.client

    import urllib3
    from ddpctl.cluster.config import retry_policy
    from urllib3.exceptions import MaxRetryError, ProtocolError, ReadTimeoutError

    policy = retry_policy(urllib3)
    error = {
        "timeout": ReadTimeoutError(None, "/api/v1/pods", "Read timed out."),  # type: ignore[arg-type]
        "dropped": ProtocolError("Connection aborted.", http.client.RemoteDisconnected("closed")),
    }[error_name]
    if retried:
        assert policy.increment(method, "/api/v1/pods", error=error).total == policy.total - 1
    else:
        with pytest.raises((MaxRetryError, ProtocolError)):
            policy.increment(method, "/api/v1/pods", error=error)


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
