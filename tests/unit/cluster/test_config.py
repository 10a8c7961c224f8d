"""ddpctl.cluster.config: reaching the API server. The kubeconfig (--kubeconfig, KUBECONFIG,
~/.kube/config, --context, the namespace, in-cluster config), the first contact and its retries,
--request-timeout, and a server that is not Kubernetes or never answers, for every cluster command
through the real client over real HTTP (tests/support/kube_api_double), and the parts that need no
server."""

from __future__ import annotations

import socket

import kubernetes  # noqa: F401 - a core dependency: missing, it fails here rather than skips
import pytest

from tests.support.api import NAME, one_error


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
