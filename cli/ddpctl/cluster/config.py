"""Cluster access: kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config), --context, the namespace,
in-cluster config, a short connect retry, and `Cluster`, through which every request goes.

Precedence of the namespace: an explicit one (-n, DDPCTL_NAMESPACE, `namespace:` in ddp.yaml),
else the context's namespace, else the pod's own namespace in-cluster, else `default`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpctl.cluster import errors as E
from ddpctl.cluster.kinds import Kind
from ddpctl.errors import ClusterError, DdpctlError, Unreachable, UsageError
from ddpctl.records import record

Query = list[tuple[str, Any]]  # (name, value) query parameters; `Cluster.list` shadows `list` in the class

FIELD_MANAGER = "ddpctl"
#: a first contact (GET /version) is tried this many times, each with this connect timeout
CONNECT_ATTEMPTS = 3
CONNECT_TIMEOUT = 5.0
RETRY_BACKOFF = 0.5  # seconds, doubled after each failed attempt
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


DEFAULT_REQUEST_TIMEOUT = 30.0  # seconds an API request may take; --request-timeout / DDPCTL_REQUEST_TIMEOUT
WAITING_NOTICE_AFTER = 2.0  # seconds of silence from the server before ddpctl says it is waiting
REQUEST_TIMEOUT_ENV = "DDPCTL_REQUEST_TIMEOUT"


@record
class ClusterOptions:
    kubeconfig: str | None = None  # --kubeconfig
    context: str | None = None  # --context
    namespace: str | None = None  # explicit namespace (flag, env, ddp.yaml); None: the context's
    request_timeout: str | None = None  # --request-timeout (a duration); None: the env, else the default


def request_timeout_seconds(flag: str | None, environ: Any = None) -> float:
    """--request-timeout, else $DDPCTL_REQUEST_TIMEOUT, else DEFAULT_REQUEST_TIMEOUT; `0` is refused
    (unlike kubectl's "no timeout": a silent server would hang ddpctl)."""
    from ddpctl.cluster.flags import parse_duration

    env = os.environ if environ is None else environ
    source, text = (
        ("--request-timeout", flag) if flag is not None else (REQUEST_TIMEOUT_ENV, env.get(REQUEST_TIMEOUT_ENV))
    )
    if text is None or not str(text).strip():
        return DEFAULT_REQUEST_TIMEOUT
    seconds = parse_duration(text, source)
    if not seconds:
        raise UsageError(f"{source}: {text!r} would wait forever; give a duration such as 30s or 2m")
    return seconds


@dataclass
class Cluster:
    """One connection: the client, the namespace to use, and where it points (for messages)."""

    api: Any  # kubernetes.client.ApiClient
    namespace: str
    context: str | None
    host: str
    streams: list[Any] = field(default_factory=list)
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT

    @property
    def where(self) -> str:
        return f"context {self.context} at {self.host}" if self.context else f"in-cluster at {self.host}"

    def close(self) -> None:
        for resp in list(self.streams):
            _shutdown(resp)
        try:
            self.api.close()
        except Exception:  # noqa: BLE001, S110 - closing is best effort
            pass

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ requests

    def _send(
        self,
        method: str,
        path: str,
        op: E.Op,
        query: list[tuple[str, Any]] | None,
        body: Any,
        content_type: str | None,
        timeout: Any,
        accept: str = "application/json",
    ) -> Any:
        import urllib3
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        m, url, hdrs, data, post = self.api.param_serialize(
            method, path, query_params=query or None, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        try:
            return self.api.call_api(m, url, hdrs, data, post, _request_timeout=timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise E.from_transport(exc, op, self.where) from None
        except ApiException as exc:  # status 0: the client could not send it (TLS, ...)
            raise E.from_transport(Exception(exc.reason), op, self.where) from None

    def call(
        self,
        method: str,
        path: str,
        op: E.Op,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: Any = None,
    ) -> tuple[int, Any]:
        """One request; returns (HTTP status, parsed JSON). Errors become one-line ddpctl errors."""
        import urllib3

        timeout = timeout or (min(CONNECT_TIMEOUT, self.request_timeout), self.request_timeout)
        resp = self._send(method, path, op, query, body, content_type, timeout)
        try:
            raw = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise E.from_transport(exc, op, self.where) from None
        if not 200 <= resp.status <= 299:
            raise E.from_status(resp.status, raw, op, self.where)
        if not raw:
            return resp.status, None
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw.decode("utf-8", "replace")

    def get(self, kind: Kind, name: str, namespace: str | None = None, *, verb: str = "get") -> dict[str, Any]:
        ns = namespace if namespace is not None else self.namespace
        obj: dict[str, Any] = self.call("GET", kind.path(ns, name), E.Op(verb, kind, name, ns))[1]
        return obj

    def get_or_none(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return self.get(kind, name, namespace)
        except E.ApiError as exc:
            if exc.object_missing:
                return None
            raise

    def list(
        self, kind: Kind, namespace: str | None, selector: str | None = None, field_selector: str | None = None
    ) -> dict[str, Any]:
        """A list (all namespaces when `namespace` is None)."""
        query = [(k, v) for k, v in (("labelSelector", selector), ("fieldSelector", field_selector)) if v]
        items: dict[str, Any] = self.call(
            "GET", kind.path(namespace), E.Op("list", kind, None, namespace), query=query
        )[1]
        return items

    def stream(self, path: str, op: E.Op, query: Query, read_timeout: float | None) -> Any:
        """A streaming GET (watch, log follow): the raw urllib3 response, status already checked."""
        resp = self._send("GET", path, op, query, None, None, (CONNECT_TIMEOUT, read_timeout), accept="*/*")
        if not 200 <= resp.status <= 299:
            raw = resp.read()
            raise E.from_status(resp.status, raw, op, self.where)
        raw = resp.response
        self.streams.append(raw)
        return raw

    def done_with(self, raw: Any) -> None:
        _shutdown(raw)
        try:
            self.streams.remove(raw)
        except ValueError:
            pass


def iter_lines(raw: Any) -> Iterator[bytes]:
    """Lines of a chunked stream as they arrive (the last one may lack its newline)."""
    buf = b""
    for chunk in raw.stream(amt=None, decode_content=True):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line
    if buf:
        yield buf


def _shutdown(raw: Any) -> None:
    try:
        if hasattr(raw, "shutdown"):
            raw.shutdown()  # interrupts a blocked read in another thread (urllib3 >= 2.3)
        raw.release_conn()
    except Exception:  # noqa: BLE001, S110 - best effort: the stream may be closed already
        pass


# ---------------------------------------------------------------------- loading the config


def kubeconfig_paths(explicit: str | None) -> tuple[str | None, str]:
    """(the path list to load or None, how to name it in messages)."""
    if explicit:
        if not Path(explicit).expanduser().exists():
            raise UsageError(f"--kubeconfig: {explicit} does not exist; give the path of a kubeconfig file")
        return str(Path(explicit).expanduser()), explicit
    env = os.environ.get("KUBECONFIG")
    if env:
        existing = [p for p in env.split(os.pathsep) if p and Path(p).expanduser().exists()]
        if existing:
            return os.pathsep.join(str(Path(p).expanduser()) for p in existing), "KUBECONFIG"
        return None, f"KUBECONFIG ({env})"
    default = Path("~/.kube/config").expanduser()
    return (str(default), str(default)) if default.exists() else (None, "~/.kube/config")


def _contexts(path: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The kubeconfig's contexts (a KUBECONFIG list merged as the client merges it) and its
    current one, None when current-context is unset or names none of them. (The client's own
    list_kube_config_contexts refuses a file without current-context even where --context names
    one; kubectl takes it.)"""
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import ConfigNode, KubeConfigMerger

    merged = KubeConfigMerger(path).config
    if merged is None:
        raise ConfigException("Invalid kube-config file. No configuration found.")
    found = merged.safe_get("contexts") or []
    contexts = [c.value if isinstance(c, ConfigNode) else c for c in found]
    name = merged.safe_get("current-context")
    return contexts, next(
        (c for c in contexts if isinstance(c, dict) and c.get("name") == name), None
    ) if name else None


def _first_current_context(paths: str) -> str | None:
    import yaml

    for p in paths.split(os.pathsep):
        try:
            data = yaml.safe_load(Path(p).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and data.get("current-context"):
            return str(data["current-context"])
    return None


def in_cluster_available() -> bool:
    return bool(
        os.environ.get("KUBERNETES_SERVICE_HOST")
        and os.environ.get("KUBERNETES_SERVICE_PORT")
        and (SERVICE_ACCOUNT_DIR / "token").exists()
    )


def retry_policy(urllib3: Any) -> Any:
    """urllib3's retries, minus one: a read that timed out is final.

    Retrying it would turn `--request-timeout 10s` into 40 s of silence. A pooled keep-alive
    connection that the server (or a proxy) closed meanwhile is also a "read error" to urllib3
    (ProtocolError: RemoteDisconnected); that one is retried on a fresh connection, as kubectl's
    client does, but only for idempotent verbs (urllib3's allowed_methods: no POST/PATCH)."""
    from urllib3.exceptions import ReadTimeoutError

    retry_cls = urllib3.util.Retry

    class SilenceIsFinal(retry_cls):  # type: ignore[misc,valid-type]  # urllib3 is imported lazily
        def increment(self, *args: Any, **kwargs: Any) -> Any:
            error = kwargs.get("error", args[3] if len(args) > 3 else None)
            if isinstance(error, ReadTimeoutError):
                return retry_cls.increment(self.new(read=0), *args, **kwargs)
            return super().increment(*args, **kwargs)

    return SilenceIsFinal(total=3, redirect=0, status=0)


def load(options: ClusterOptions) -> Cluster:
    """Build a client from the kubeconfig (or in-cluster config) without contacting the server."""
    import urllib3
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    configuration.retries = retry_policy(urllib3)
    path, label = kubeconfig_paths(options.kubeconfig)
    if path is None:
        if options.kubeconfig is None and options.context is None and in_cluster_available():
            return _load_in_cluster(configuration, options)
        hint = "" if not in_cluster_available() else " (in-cluster config ignores --context)"
        raise Unreachable(
            f"no kubeconfig: {label} does not exist and ddpctl is not running in a cluster{hint}; "
            "set KUBECONFIG or pass --kubeconfig FILE (or `kubectl config view` to check yours)"
        )
    try:
        contexts, current = _contexts(path)
    except ConfigException as exc:
        raise E.config_error(label, exc) from None
    except Exception as exc:  # noqa: BLE001 - unreadable YAML and friends
        raise E.config_error(label, f"cannot read it: {exc}") from None
    names = [str(c.get("name")) for c in contexts]
    if options.context is not None:
        chosen = next((c for c in contexts or [] if c.get("name") == options.context), None)
        if chosen is None:
            raise UsageError(
                f"--context {options.context}: no such context in {label} (it has: {', '.join(names) or 'none'}); "
                "see `kubectl config get-contexts`"
            )
    else:
        first = _first_current_context(path)  # kubectl: the first file that sets it wins
        chosen = next((c for c in contexts or [] if c.get("name") == first), None) or current
        if not chosen:
            raise UsageError(f"{label} has no current-context; pass --context (one of: {', '.join(names) or 'none'})")
    try:
        config.load_kube_config(config_file=path, context=chosen["name"], client_configuration=configuration)
    except ConfigException as exc:
        raise E.config_error(f"{label} context {chosen['name']}", exc) from None
    namespace = options.namespace or (chosen.get("context") or {}).get("namespace") or "default"
    return Cluster(client.ApiClient(configuration), namespace, chosen["name"], configuration.host)


def _load_in_cluster(configuration: Any, options: ClusterOptions) -> Cluster:
    from kubernetes import client
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import InClusterConfigLoader

    try:
        InClusterConfigLoader(
            token_filename=str(SERVICE_ACCOUNT_DIR / "token"), cert_filename=str(SERVICE_ACCOUNT_DIR / "ca.crt")
        ).load_and_set(configuration)
    except ConfigException as exc:
        raise E.config_error("in-cluster config", exc) from None
    ns_file = SERVICE_ACCOUNT_DIR / "namespace"
    own = ns_file.read_text().strip() if ns_file.exists() else ""
    return Cluster(client.ApiClient(configuration), options.namespace or own or "default", None, configuration.host)


def connect(options: ClusterOptions, say: Callable[[str], None] | None = None) -> Cluster:
    """Load the config and make first contact (GET /version), retried briefly on transport errors.

    A server that accepts the connection and does not answer is reported after a few seconds
    ("waiting for the API server at ...") and given up on after the request timeout; a server
    that answers /version with something other than Kubernetes' version is named as such."""
    timeout = request_timeout_seconds(options.request_timeout)
    cluster = load(options)
    cluster.request_timeout = timeout
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    notice = threading.Timer(
        WAITING_NOTICE_AFTER,
        lambda: say(f"ddpctl: waiting for the API server at {cluster.host} ({_context_of(cluster)}) to answer ..."),
    )
    notice.daemon = True
    notice.start()
    try:
        return _first_contact(cluster, timeout)
    except BaseException:
        cluster.close()
        raise
    finally:
        notice.cancel()


def _context_of(cluster: Cluster) -> str:
    return f"context {cluster.context}" if cluster.context else "in-cluster config"


def _first_contact(cluster: Cluster, timeout: float) -> Cluster:
    op = E.Op("reach", None)
    deadline = time.monotonic() + timeout
    delay = RETRY_BACKOFF
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        left = max(deadline - time.monotonic(), 0.1)
        try:
            _, version = cluster.call("GET", "/version", op, timeout=(min(CONNECT_TIMEOUT, left), left))
        except E.ApiError as exc:
            if exc.code in (401, 403):
                raise
            raise _not_kubernetes(cluster, _http_status(exc.code)) from None
        except DdpctlError as exc:  # transport: not reached, or no answer in time
            if "timed out" in exc.message and time.monotonic() >= deadline - 0.5:
                raise Unreachable(
                    f"the API server at {cluster.host} ({_context_of(cluster)}) did not answer within "
                    f"{timeout:g}s; check that it is up (`kubectl cluster-info`), or wait longer with "
                    f"--request-timeout (or {REQUEST_TIMEOUT_ENV})"
                ) from None
            if attempt == CONNECT_ATTEMPTS or time.monotonic() + delay >= deadline:
                tried = f" after {attempt} attempts" if attempt > 1 else ""
                raise Unreachable(exc.message.replace(f"({cluster.where})", f"({cluster.where}){tried}", 1)) from None
            time.sleep(delay)  # a retry backoff, bounded by CONNECT_ATTEMPTS and the deadline
            delay *= 2
            continue
        if not (isinstance(version, dict) and "gitVersion" in version):
            raise _not_kubernetes(cluster, "200 OK, but not a Kubernetes version")
        return cluster
    raise AssertionError("unreachable")  # pragma: no cover


def _http_status(code: int) -> str:
    from http import HTTPStatus

    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return str(code)


def _not_kubernetes(cluster: Cluster, answer: str) -> ClusterError:
    return ClusterError(
        f"the server at {cluster.host} ({_context_of(cluster)}) answered GET /version with {answer}: is this a "
        "Kubernetes API server? check the server URL of that context in your kubeconfig "
        "(`kubectl config view --minify`), or pick another with --context"
    )
