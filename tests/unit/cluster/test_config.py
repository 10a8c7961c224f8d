"""ddpctl.cluster.config: reaching the API server. The kubeconfig (--kubeconfig, KUBECONFIG,
~/.kube/config, --context, the namespace, in-cluster config), the first contact and its retries,
--request-timeout, and a server that is not Kubernetes or never answers, for every cluster command
through the real client over real HTTP (tests/support/kube_api_double), and the parts that need no
server."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import kubernetes  # noqa: F401 - a core dependency: missing, it fails here rather than skips
import pytest
import yaml

from ddpctl.cluster.config import (
    DEFAULT_REQUEST_TIMEOUT,
    ClusterOptions,
    connect,
    iter_lines,
    kubeconfig_paths,
    load,
    request_timeout_seconds,
)
from ddpctl.cluster.errors import ApiError
from ddpctl.errors import Unreachable, UsageError
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
    from urllib3.exceptions import MaxRetryError, ProtocolError, ReadTimeoutError

    from ddpctl.cluster.config import retry_policy

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


# --------------------------------------------------------------------------- the parts without a server


@pytest.mark.parametrize(
    ("flag", "environ", "seconds"),
    [
        ("10s", {"DDPCTL_REQUEST_TIMEOUT": "2m"}, 10.0),  # the flag wins
        (None, {"DDPCTL_REQUEST_TIMEOUT": "2m"}, 120.0),
        (None, {"DDPCTL_REQUEST_TIMEOUT": " "}, DEFAULT_REQUEST_TIMEOUT),
        (None, {}, DEFAULT_REQUEST_TIMEOUT),
        ("1.5s", {}, 1.5),
        ("500ms", {}, 0.5),
    ],
)
def test_request_timeout_seconds(flag: str | None, environ: dict[str, str], seconds: float) -> None:
    assert request_timeout_seconds(flag, environ) == seconds


@pytest.mark.parametrize(
    ("flag", "environ", "message"),
    [
        ("0", {}, "--request-timeout: '0' would wait forever; give a duration such as 30s or 2m"),
        (None, {"DDPCTL_REQUEST_TIMEOUT": "0"}, "DDPCTL_REQUEST_TIMEOUT: '0' would wait forever"),
        ("soon", {}, "--request-timeout: 'soon' is not a duration"),
    ],
)
def test_a_request_timeout_that_is_not_finite_is_refused(
    flag: str | None, environ: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError) as error:
        request_timeout_seconds(flag, environ)
    assert str(error.value).startswith(message)


def _kubeconfig(path: Path, *contexts: tuple[str, str | None], current: str | None = None) -> Path:
    """A kubeconfig with these (context, namespace) pairs, all pointing at one server."""
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://kube.example:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": name, "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})}}
            for name, ns in contexts
        ],
    }
    if current:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return path


def test_kubeconfig_paths_in_kubectls_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_kube) -> None:
    home = Path(os.environ["HOME"])
    assert kubeconfig_paths(None) == (None, "~/.kube/config")
    default = _kubeconfig(home / ".kube" / "config", ("a", None), current="a")
    assert kubeconfig_paths(None) == (str(default), str(default))
    one, two = _kubeconfig(tmp_path / "one", ("a", None)), _kubeconfig(tmp_path / "two", ("b", None))
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(one), str(tmp_path / "missing"), str(two)]))
    assert kubeconfig_paths(None) == (os.pathsep.join([str(one), str(two)]), "KUBECONFIG")  # the missing one left out
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert kubeconfig_paths(None) == (None, f"KUBECONFIG ({tmp_path / 'missing'})")
    assert kubeconfig_paths(str(one)) == (str(one), str(one))  # the flag wins
    assert kubeconfig_paths("~/.kube/config") == (str(default), "~/.kube/config")
    with pytest.raises(UsageError, match=r"^--kubeconfig: /nope does not exist; give the path of a kubeconfig file$"):
        kubeconfig_paths("/nope")


def test_the_first_file_that_sets_a_current_context_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_kube
) -> None:
    one = _kubeconfig(tmp_path / "one", ("a", "team-a"), ("b", "team-b"))
    two = _kubeconfig(tmp_path / "two", ("b", None), current="b")
    three = _kubeconfig(tmp_path / "three", ("a", None), current="a")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(one), str(two), str(three)]))
    cluster = load(ClusterOptions())
    try:
        assert (cluster.context, cluster.namespace) == ("b", "team-b")  # b's first definition is one's
    finally:
        cluster.close()


@pytest.mark.parametrize(
    ("options", "context", "namespace"),
    [
        (ClusterOptions(), "a", "team-a"),  # the current context and its namespace
        (ClusterOptions(context="b"), "b", "default"),  # a context without a namespace
        (ClusterOptions(context="a", namespace="mine"), "a", "mine"),  # -n wins
    ],
)
def test_the_context_and_namespace(
    tmp_path: Path, isolated_kube, options: ClusterOptions, context: str, namespace: str
) -> None:
    path = _kubeconfig(tmp_path / "kc", ("a", "team-a"), ("b", None), current="a")
    cluster = load(ClusterOptions(str(path), options.context, options.namespace))
    try:
        assert (cluster.context, cluster.namespace, cluster.host) == (context, namespace, "https://kube.example:6443")
        assert cluster.where == f"context {context} at https://kube.example:6443"
    finally:
        cluster.close()


def test_an_unknown_context_lists_the_ones_there_are(tmp_path: Path, isolated_kube) -> None:
    path = _kubeconfig(tmp_path / "kc", ("a", None), ("b", None), current="a")
    with pytest.raises(UsageError) as error:
        load(ClusterOptions(str(path), "c"))
    assert str(error.value) == (
        f"--context c: no such context in {path} (it has: a, b); see `kubectl config get-contexts`"
    )


def test_a_kubeconfig_without_a_current_context_asks_for_one(tmp_path: Path, isolated_kube) -> None:
    path = _kubeconfig(tmp_path / "kc", ("a", None), ("b", None))
    with pytest.raises(UsageError) as error:
        load(ClusterOptions(str(path)))
    assert str(error.value) == f"{path} has no current-context; pass --context (one of: a, b)"


def test_a_context_named_needs_no_current_context(tmp_path: Path, isolated_kube) -> None:
    path = _kubeconfig(tmp_path / "kc", ("a", None), ("b", "team-b"))
    cluster = load(ClusterOptions(str(path), "b"))
    try:
        assert (cluster.context, cluster.namespace) == ("b", "team-b")
    finally:
        cluster.close()


def test_in_cluster_config_is_the_pods_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_kube) -> None:
    """No kubeconfig, but the pod's service account and KUBERNETES_SERVICE_*: the namespace is the pod's."""
    from ddpctl.cluster import config as kconfig

    account = kconfig.SERVICE_ACCOUNT_DIR
    assert not kconfig.in_cluster_available()
    account.mkdir(parents=True)
    (account / "token").write_text("sa-token")
    (account / "ca.crt").write_text("not checked before the first request")
    (account / "namespace").write_text("training\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    assert kconfig.in_cluster_available()
    cluster = load(ClusterOptions())
    try:
        assert (cluster.context, cluster.namespace, cluster.host) == (None, "training", "https://10.0.0.1:443")
        assert cluster.where == "in-cluster at https://10.0.0.1:443"
    finally:
        cluster.close()
    with pytest.raises(Unreachable, match=r"\(in-cluster config ignores --context\)"):
        load(ClusterOptions(context="a"))


def test_iter_lines_joins_chunks_into_lines() -> None:
    class Raw:
        """A streamed answer in arbitrary chunks, as urllib3 hands them over."""

        def stream(self, amt: object, decode_content: bool) -> list[bytes]:
            return [b"one\ntw", b"o\n", b"", b"three\nfour"]

    assert list(iter_lines(Raw())) == [b"one", b"two", b"three", b"four"]


# --------------------------------------------------------------------------- requests through the double


def test_connect_gets_objects_lists_and_nothing_for_a_missing_one(make_cluster) -> None:
    from ddpctl.cluster.kinds import JOB, NAMESPACE

    c = make_cluster(context_namespace="team")
    said: list[str] = []
    with connect(ClusterOptions(str(c.kubeconfig)), said.append) as cluster:
        assert (cluster.namespace, cluster.context) == ("team", "double")
        assert cluster.get(NAMESPACE, "team", None)["metadata"]["name"] == "team"
        assert cluster.get_or_none(JOB, "nope") is None
        assert cluster.list(JOB, "team")["items"] == []
        with pytest.raises(ApiError) as missing:
            cluster.get(JOB, "nope")
        assert missing.value.object_missing and missing.value.message.startswith('job.batch "nope" in namespace "team"')
    assert said == []  # the server answered at once: no "waiting for the API server"
