"""HTTP front end of the kube-apiserver test double (see the package docstring)."""

from __future__ import annotations

import bisect
import copy
import json
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from . import status as S
from .controller import Scenario
from .logs import LogBook, format_line, since_time
from .resources import ENGINES, Registry, ResourceType
from .selectors import parse_field_selector, parse_label_selector
from .store import Store
from .validation import (
    FieldError,
    Validator,
    builtin_field_errors,
    dedupe,
    default_crd_dir,
    errors_from_validator,
    load_crds,
    resolve_default_validator,
    validate_name,
)

KUBE_VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.1",
    "gitCommit": "8adc0f041b8e7ad1d30e29cc59c6ae7a15e19828",
    "gitTreeState": "clean",
    "buildDate": "2025-05-15T08:19:08Z",
    "goVersion": "go1.24.2",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_DEFAULT = object()


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: bytes
    headers: dict[str, str]  # names in lower case
    status: int = 0  # filled in when the answer is sent

    @property
    def json(self) -> Any:
        if not self.body:
            return None
        try:
            if "yaml" in self.content_type:
                return yaml.safe_load(self.body)
            return json.loads(self.body)
        except Exception:  # noqa: BLE001 - any undecodable body reads as no body
            return None

    def param(self, name: str) -> str | None:
        v = self.query.get(name)
        return v[-1] if v else None


@dataclass
class Fault:
    method: str | None
    path: re.Pattern
    status: int
    remaining: int
    reason: str
    message: str
    body_contains: str | None = None
    hits: int = 0


@dataclass
class Route:
    kind: str  # "discovery", "resource", "log"
    rt: ResourceType | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    discovery: tuple = ()
    group: str = ""
    version: str = ""
    plural: str = ""


@dataclass
class Rule:
    verb: str = "*"
    resource: str = "*"  # plural, or "pods/log"
    group: str = "*"
    namespace: str = "*"

    def matches(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        return (
            (self.verb in ("*", verb))
            and (self.group in ("*", group))
            and (self.resource in ("*", resource))
            and (self.namespace in ("*", namespace or ""))
        )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-api-double"
    # Headers and body go out as two writes; with Nagle's algorithm on, the body waits for the
    # client's delayed ACK (~40 ms a request on Linux). kube-apiserver (Go) sets TCP_NODELAY too.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _dispatch(self) -> None:
        self.server.double._handle(self)  # type: ignore[attr-defined]

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class KubeApiDouble(Scenario):
    """A kube-apiserver test double on ``127.0.0.1:<ephemeral port>``; see the package docstring.

    Args:
        engines: CRD engines installed: any of ``"pytorchjob"``, ``"jobset"``, ``"trainjob"`` (core and
            batch are always served). Default: none.
        namespaces: namespaces that exist at start (default ``("default",)``).
        token: the bearer token required (``None``: no authentication). Requests without it, or with
            another token, get 401.
        user: user name the token maps to (appears in 403 messages).
        forbidden: rules ``(verb, resource, group, namespace)`` (``"*"`` wildcards; resource may be
            ``"pods/log"``) that get 403.
        authorize: a hook ``(user, verb, group, resource, namespace, name) -> bool``; False -> 403.
        validator: ``obj -> list[str]`` schema validator; default: ``tests/support/k8s_schemas.validate_object``
            when that module exists, else the double's own (``validation.validate_object``). ``None``
            disables schema validation (name rules still apply).
        crd_dir: where the CRD YAML files are (default ``<repo>/tests/contract/schemas/crds``, vendored).
        auto_pods: run the engine controllers on create (children and pods appear at once).
        seed: seed of the random suffixes (pod names), for reproducible tests.
    """

    def __init__(
        self,
        *,
        engines: Iterable[str] = (),
        namespaces: Iterable[str] = ("default",),
        token: str | None = "kube-api-double-token",
        user: str = "ddpctl-test",
        forbidden: Iterable[tuple] = (),
        authorize: Callable[..., bool] | None = None,
        validator: Validator | object | None = _DEFAULT,
        crd_dir: str | os.PathLike | None = None,
        auto_pods: bool = True,
        seed: int | None = None,
    ):
        engines = frozenset(engines)
        unknown = engines - set(ENGINES)
        if unknown:
            raise ValueError(f"unknown engines {sorted(unknown)}; choose from {sorted(ENGINES)}")
        self.registry = Registry(installed=engines)
        self.crd_dir = Path(crd_dir) if crd_dir else default_crd_dir()
        if validator is _DEFAULT:
            validator, self.validator_name = resolve_default_validator()
            self._validator: Validator | None = validator
            self._use_builtin = validator is None
        else:
            self._validator = validator  # type: ignore[assignment]
            self._use_builtin = False
            self.validator_name = "none" if validator is None else getattr(validator, "__qualname__", "custom")
        self._check_validator_ready(engines)
        self.store = Store(self.registry, validate=self._validate)
        self.logbook = LogBook()
        self.store.on_remove.append(self._on_remove)
        self.auto_pods = auto_pods
        self.rng = random.Random(seed)
        self.token = token
        self.user = user
        self.rules: list[Rule] = [Rule(*r) for r in forbidden]
        self.authorize = authorize
        self.requests: list[RecordedRequest] = []
        self.faults: list[Fault] = []
        #: tracebacks of the double's own failures while serving (each answered 500); `stop` raises them
        self.internal_errors: list[str] = []
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        for ns in namespaces:
            self.add_namespace(ns)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> KubeApiDouble:
        if self._httpd is not None:
            return self
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.double = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="kube-api-double", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, *, check: bool = True) -> None:
        """Shut down; then, with `check`, fail the test if the double itself broke while serving.

        A bug in the double (or a missing validator resource) is answered 500 in the server thread,
        where pytest cannot see it: raising it here makes it the test's failure, not a mystery 500."""
        self.store.close()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if check and self.internal_errors:
            raise AssertionError(
                "the API double failed while serving (answered 500):\n" + "\n".join(self.internal_errors)
            )

    def __enter__(self) -> KubeApiDouble:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop(check=exc[0] is None)

    def _check_validator_ready(self, engines: frozenset[str]) -> None:
        """Load what schema validation needs now, in the caller's (the test's) thread.

        Validation runs in the server thread, where a missing module or CRD would only turn into a
        500; checked here it is an error of the test that made the double, naming what is missing.
        The schemas are vendored and the modules are test dependencies, so nothing here is optional."""
        if self._validator is None and not self._use_builtin:
            return  # validation disabled
        if self._validator is not None and getattr(self._validator, "__module__", "") not in (
            "tests.support.k8s_schemas",
            "k8s_schemas",
        ):
            return  # a test's own validator: its business
        import importlib

        for module in ("jsonschema", "kubernetes_validate"):
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise RuntimeError(f"the API double validates with {module}: pip install -e '.[test]' ({exc})") from exc
        if engines:
            served = {api_version for api_version, _ in load_crds(str(self.crd_dir))}
            missing = sorted(
                g for e, g in ENGINES.items() if e in engines and not any(v.startswith(g + "/") for v in served)
            )
            if missing:
                raise RuntimeError(f"the API double has no CRD schema for {', '.join(missing)} in {self.crd_dir}")

    @property
    def port(self) -> int:
        assert self._httpd is not None, "not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(
        self,
        path: str | os.PathLike,
        context: str = "kube-api-double",
        namespace: str = "default",
        token: str | object | None = _DEFAULT,
        server: str | None = None,
    ) -> Path:
        """Write a kubeconfig for this server (``kubernetes.config.load_kube_config(config_file=path,
        context=context)``). ``token`` defaults to the one the double requires; ``server`` to its URL."""
        tok = self.token if token is _DEFAULT else token
        user: dict[str, Any] = {"token": tok} if tok else {}
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": context, "cluster": {"server": server or self.url}}],
            "users": [{"name": f"{context}-user", "user": user}],
            "contexts": [
                {"name": context, "context": {"cluster": context, "user": f"{context}-user", "namespace": namespace}}
            ],
            "current-context": context,
        }
        p = Path(path)
        p.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return p

    def api_client(self, tmp_dir: str | os.PathLike, context: str = "kube-api-double", **kw: Any):
        """A ``kubernetes.client.ApiClient`` loaded from a kubeconfig written in ``tmp_dir``."""
        from kubernetes import client, config

        path = self.write_kubeconfig(Path(tmp_dir) / f"kubeconfig-{context}", context=context, **kw)
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(path), context=context, client_configuration=configuration)
        return client.ApiClient(configuration)

    # ------------------------------------------------------------------ test controls

    def forbid(self, verb: str = "*", resource: str = "*", group: str = "*", namespace: str = "*") -> None:
        """Deny (403) requests matching the rule from now on."""
        self.rules.append(Rule(verb, resource, group, namespace))

    def fail_next(
        self,
        method: str | None,
        path: str,
        status: int = 500,
        count: int = 1,
        reason: str | None = None,
        message: str | None = None,
        body_contains: str | None = None,
    ) -> Fault:
        """Make the next ``count`` requests whose method matches and whose path matches the regex
        ``path`` (``re.search``) fail with a Status of code ``status``. ``body_contains`` narrows it to
        requests whose body contains that text (e.g. a kind name)."""
        default_reason = {
            400: "BadRequest",
            401: "Unauthorized",
            403: "Forbidden",
            404: "NotFound",
            409: "Conflict",
            422: "Invalid",
            429: "TooManyRequests",
            500: "InternalError",
            503: "ServiceUnavailable",
            504: "Timeout",
        }.get(status, "InternalError")
        f = Fault(
            method.upper() if method else None,
            re.compile(path),
            status,
            count,
            reason or default_reason,
            message or f"injected failure ({status})",
            body_contains,
        )
        with self._lock:
            self.faults.append(f)
        return f

    def requests_to(self, method: str | None = None, path: str | None = None) -> list[RecordedRequest]:
        """Recorded requests, optionally filtered by method and a path regex."""
        with self._lock:
            reqs = list(self.requests)
        return [
            r
            for r in reqs
            if (method is None or r.method == method.upper()) and (path is None or re.search(path, r.path))
        ]

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def compact(self) -> int:
        """Drop the watch history (later watches from older resourceVersions get 410 Expired)."""
        return self.store.compact()

    # ------------------------------------------------------------------ validation

    def _validate(self, rt: ResourceType, obj: dict) -> None:
        name = obj["metadata"].get("name", "")
        errs: list[FieldError] = list(validate_name(rt.kind, name))
        clean = _without_server_fields(obj)
        if self._use_builtin:
            errs += builtin_field_errors(clean, self.crd_dir)
        elif self._validator is not None:
            errs += errors_from_validator(self._validator, clean)
        errs = dedupe(errs)
        if errs:
            raise S.invalid_for(rt, name, errs)

    def _on_remove(self, rt: ResourceType, obj: dict) -> None:
        if rt.kind == "Pod":
            self.logbook.drop_pod(obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

    # ------------------------------------------------------------------ HTTP

    def _handle(self, h: _Handler) -> None:
        url = urlsplit(h.path)
        query = parse_qs(url.query, keep_blank_values=True)
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        rec = RecordedRequest(
            h.command,
            url.path,
            query,
            h.headers.get("Content-Type", ""),
            body,
            {k.lower(): v for k, v in h.headers.items()},
        )
        with self._lock:
            self.requests.append(rec)
        try:
            self._serve(h, rec)
        except S.KubeError as e:
            self._send_json(h, rec, e.code, e.body)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True
        except BaseException as e:  # a bug in the double: answer 500 like kube, and fail the test at stop()
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            import traceback

            self.internal_errors.append(f"{h.command} {url.path}: {traceback.format_exc()}")
            self._send_json(h, rec, 500, S.status_body(500, "InternalError", f"Internal error occurred: {e!r}"))

    def _send_json(self, h: _Handler, rec: RecordedRequest, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        rec.status = code
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Cache-Control", "no-cache, private")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _start_stream(self, h: _Handler, rec: RecordedRequest, content_type: str) -> None:
        rec.status = 200
        h.send_response(200)
        h.send_header("Content-Type", content_type)
        h.send_header("Cache-Control", "no-cache, private")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.flush()
        h.close_connection = True

    @staticmethod
    def _chunk(h: _Handler, data: bytes) -> None:
        if data:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

    @staticmethod
    def _end_stream(h: _Handler) -> None:
        try:
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _serve(self, h: _Handler, rec: RecordedRequest) -> None:
        # authentication
        if self.token is not None:
            auth = h.headers.get("Authorization", "")
            if auth != f"Bearer {self.token}":
                raise S.unauthorized()
        route = self._route(rec.path)
        verb = self._verb(rec, route)
        # authorization (before routing errors, as in the apiserver's filter chain)
        if route.kind != "discovery":
            resource = route.plural + (f"/{route.subresource}" if route.subresource else "")
            ns = route.namespace
            denied = any(r.matches(verb, route.group, resource, ns) for r in self.rules)
            if not denied and self.authorize is not None:
                denied = not self.authorize(self.user, verb, route.group, resource, ns, route.name)
            if denied:
                name = route.name if verb not in ("create",) else None
                raise S.forbidden(self.user, verb, route.group, route.plural, ns, name, route.subresource)
        # injected faults
        with self._lock:
            for f in self.faults:
                if (
                    f.remaining > 0
                    and (f.method is None or f.method == rec.method)
                    and f.path.search(rec.path)
                    and (f.body_contains is None or f.body_contains.encode() in rec.body)
                ):
                    f.remaining -= 1
                    f.hits += 1
                    raise S.KubeError(f.status, f.reason, f.message, {})
        if route.kind == "discovery":
            return self._send_json(h, rec, 200, self._discovery(route))
        if route.rt is None:
            raise S.resource_not_found()
        if route.kind == "log":
            return self._serve_log(h, rec, route)
        handler = {
            "list": self._list,
            "watch": self._watch,
            "get": self._get,
            "create": self._create,
            "update": self._update,
            "patch": self._patch,
            "delete": self._delete,
        }.get(verb)
        if handler is None:
            raise S.method_not_allowed()
        return handler(h, rec, route)

    # routing -------------------------------------------------------------

    def _route(self, path: str) -> Route:
        parts = [p for p in path.split("/") if p]
        if not parts:
            raise S.resource_not_found()
        if parts == ["version"]:
            return Route("discovery", discovery=("version",))
        if parts[0] == "api":
            if len(parts) == 1:
                return Route("discovery", discovery=("api",))
            if parts[1] != "v1":
                raise S.resource_not_found()
            group, version, rest = "", "v1", parts[2:]
        elif parts[0] == "apis":
            if len(parts) == 1:
                return Route("discovery", discovery=("apis",))
            group = parts[1]
            if group not in self.registry.groups():
                raise S.resource_not_found()
            if len(parts) == 2:
                return Route("discovery", discovery=("group", group))
            version, rest = parts[2], parts[3:]
            if version not in self.registry.groups()[group]:
                raise S.resource_not_found()
        else:
            raise S.resource_not_found()
        if not rest:
            return Route("discovery", discovery=("resources", group, version))
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        rt = self.registry.find(group, version, plural)
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3:
            raise S.resource_not_found()
        r = Route("resource", rt, namespace, name, sub, group=group, version=version, plural=plural)
        if rt is None:
            return r
        if rt.namespaced and namespace is None and name is not None:
            r.rt = None  # e.g. /api/v1/pods/x does not exist
        if not rt.namespaced and namespace is not None:
            r.rt = None
        if sub is not None and sub not in rt.subresources:
            r.rt = None
        if sub == "log":
            r.kind = "log"
        return r

    @staticmethod
    def _verb(rec: RecordedRequest, route: Route) -> str:
        m = rec.method
        if route.kind == "discovery":
            return "get"
        if m == "GET":
            if route.name is None:
                return "watch" if rec.param("watch") in ("true", "1", "True") else "list"
            return "get"
        return {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if route.name else "deletecollection",
        }.get(m, m.lower())

    # discovery -----------------------------------------------------------

    def _discovery(self, route: Route) -> dict:
        what = route.discovery
        if what[0] == "version":
            return dict(KUBE_VERSION)
        if what[0] == "api":
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}],
            }
        if what[0] == "apis":
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [self._group(g, vs) for g, vs in self.registry.groups().items()],
            }
        if what[0] == "group":
            g = what[1]
            return dict(self._group(g, self.registry.groups()[g]), kind="APIGroup", apiVersion="v1")
        _, group, version = what
        resources = []
        for rt in self.registry.all():
            if (rt.group, rt.version) != (group, version):
                continue
            resources.append(
                {
                    "name": rt.plural,
                    "singularName": rt.singular,
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": list(self._verbs_for(rt)),
                    **({"shortNames": list(rt.short_names)} if rt.short_names else {}),
                    **({"categories": list(rt.categories)} if rt.categories else {}),
                    "storageVersionHash": _hash(rt),
                }
            )
            for sub in rt.subresources:
                resources.append(
                    {
                        "name": f"{rt.plural}/{sub}",
                        "singularName": "",
                        "namespaced": rt.namespaced,
                        "kind": rt.kind,
                        "verbs": ["get"] if sub == "log" else ["get", "patch", "update"],
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    @staticmethod
    def _verbs_for(rt: ResourceType) -> list[str]:
        return ["create", "delete", "get", "list", "patch", "update", "watch"]

    @staticmethod
    def _group(group: str, versions: list[str]) -> dict:
        vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": vs, "preferredVersion": vs[0]}

    # helpers -------------------------------------------------------------

    def _manager(self, rec: RecordedRequest) -> str:
        fm = rec.param("fieldManager")
        if fm:
            return fm
        ua = rec.headers.get("user-agent", "") or "unknown"
        return ua.split("/")[0]

    @staticmethod
    def _dry_run(rec: RecordedRequest, body: Any = None) -> bool:
        values = list(rec.query.get("dryRun", []))
        if isinstance(body, dict) and isinstance(body.get("dryRun"), list):
            values += body["dryRun"]
        for v in values:
            if v != "All":
                opts = {
                    "POST": "CreateOptions",
                    "PUT": "UpdateOptions",
                    "PATCH": "PatchOptions",
                    "DELETE": "DeleteOptions",
                }.get(rec.method, "CreateOptions")
                raise S.invalid(
                    f"{opts}.meta.k8s.io",
                    "meta.k8s.io",
                    opts,
                    "",
                    [
                        FieldError(
                            "dryRun", "FieldValueNotSupported", f'Unsupported value: "{v}": supported values: "All"'
                        )
                    ],
                )
        return bool(values)

    @staticmethod
    def _parse_json(rec: RecordedRequest) -> Any:
        try:
            return json.loads(rec.body or b"null")
        except ValueError as e:
            raise S.bad_request(f"the object provided is unrecognized (must be of type object): {e}") from e

    # verbs ---------------------------------------------------------------

    def _get(self, h, rec, route):
        self._send_json(h, rec, 200, self.store.get(route.rt, route.namespace, route.name))

    def _matcher(self, rec: RecordedRequest, rt: ResourceType) -> Callable[[dict], bool]:
        lab = parse_label_selector(rec.param("labelSelector"))
        fld = parse_field_selector(rec.param("fieldSelector"), rt.field_selectors, rt.plural)
        return lambda o: lab(o["metadata"].get("labels") or {}) and fld(o)

    def _list(self, h, rec, route):
        rt = route.rt
        match = self._matcher(rec, rt)
        items, rv = self.store.list(rt, route.namespace, match)
        if not rt.is_custom:
            for o in items:  # built-in lists carry kind/apiVersion only at the top
                o.pop("apiVersion", None)
                o.pop("kind", None)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        limit = int(rec.param("limit") or 0)
        start = int(rec.param("continue") or 0) if (rec.param("continue") or "").isdigit() else 0
        if limit:
            page = items[start : start + limit]
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
                meta["remainingItemCount"] = len(items) - start - limit
            items = page
        self._send_json(
            h, rec, 200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": items}
        )

    def _create(self, h, rec, route):
        rt = route.rt
        if route.name is not None:
            raise S.method_not_allowed()
        body = self._parse_json(rec)
        if not isinstance(body, dict):
            raise S.bad_request("the object provided is unrecognized (must be of type object)")
        self._check_body_type(rt, body)
        md = body.get("metadata") or {}
        if rt.namespaced and md.get("namespace") not in (None, "", route.namespace):
            raise S.bad_request("the namespace of the provided object does not match the namespace sent on the request")
        dry = self._dry_run(rec)
        obj = self.store.create(rt, route.namespace, body, self._manager(rec), dry_run=dry)
        if not dry:
            self.on_created(rt, obj)
        self._send_json(h, rec, 201, obj)

    @staticmethod
    def _check_body_type(rt: ResourceType, body: dict) -> None:
        av, kind = body.get("apiVersion"), body.get("kind")
        if av not in (None, rt.api_version) or kind not in (None, rt.kind):
            raise S.bad_request(
                f"the API version in the data ({av}) does not match the expected API version ({rt.api_version})"
                if av != rt.api_version
                else f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )

    def _update(self, h, rec, route):
        rt = route.rt
        if route.name is None:
            raise S.method_not_allowed()
        body = self._parse_json(rec)
        if not isinstance(body, dict):
            raise S.bad_request("the object provided is unrecognized (must be of type object)")
        self._check_body_type(rt, body)
        dry = self._dry_run(rec)
        obj = self.store.replace(
            rt, route.namespace, route.name, body, self._manager(rec), subresource=route.subresource, dry_run=dry
        )
        self._send_json(h, rec, 200, obj)

    def _patch(self, h, rec, route):
        rt = route.rt
        if route.name is None:
            raise S.method_not_allowed()
        ctype = rec.content_type.split(";")[0].strip()
        force = rec.param("force")
        dry = self._dry_run(rec)
        if ctype == "application/apply-patch+yaml":
            manager = rec.param("fieldManager")
            if not manager:
                raise S.invalid(
                    "PatchOptions.meta.k8s.io",
                    "meta.k8s.io",
                    "PatchOptions",
                    "",
                    [FieldError("fieldManager", "FieldValueRequired", "Required value: is required for apply patch")],
                )
            try:
                config = yaml.safe_load(rec.body or b"")
            except yaml.YAMLError as e:
                raise S.bad_request(f"error decoding YAML: {e}") from e
            obj, created = self.store.apply(
                rt,
                route.namespace,
                route.name,
                config,
                manager,
                force=force in ("true", "1", "True"),
                subresource=route.subresource,
                dry_run=dry,
            )
            if created and not dry:
                self.on_created(rt, obj)
            return self._send_json(h, rec, 201 if created else 200, obj)
        if force is not None:
            raise S.invalid(
                "PatchOptions.meta.k8s.io",
                "meta.k8s.io",
                "PatchOptions",
                "",
                [FieldError("force", "FieldValueForbidden", "Forbidden: may not be specified for non-apply patch")],
            )
        if ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            if ctype == "application/strategic-merge-patch+json" and rt.is_custom:
                raise S.KubeError(
                    415,
                    "UnsupportedMediaType",
                    (
                        'the body of the request was in an unknown format - accepted media types include: '
                        'application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml'
                    ),
                    {},
                )
            patch = self._parse_json(rec)
            obj = self.store.merge_patch(
                rt, route.namespace, route.name, patch, self._manager(rec), subresource=route.subresource, dry_run=dry
            )
            return self._send_json(h, rec, 200, obj)
        if ctype == "application/json-patch+json":
            ops = self._parse_json(rec)
            with self.store.lock:
                cur = self.store.get(rt, route.namespace, route.name)
                patched = _json_patch(cur, ops)
                patched["metadata"].setdefault("resourceVersion", cur["metadata"]["resourceVersion"])
                obj = self.store.replace(
                    rt,
                    route.namespace,
                    route.name,
                    patched,
                    self._manager(rec),
                    subresource=route.subresource,
                    dry_run=dry,
                )
            return self._send_json(h, rec, 200, obj)
        raise S.KubeError(
            415,
            "UnsupportedMediaType",
            (
                'the body of the request was in an unknown format - accepted media types include: '
                'application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml'
                + ("" if rt.is_custom else ", application/strategic-merge-patch+json")
            ),
            {},
        )

    def _delete(self, h, rec, route):
        rt = route.rt
        body = self._parse_json(rec) if rec.body else {}
        body = body if isinstance(body, dict) else {}
        policy = body.get("propagationPolicy") or rec.param("propagationPolicy")
        if policy is None and (body.get("orphanDependents") is not None or rec.param("orphanDependents")):
            orphan = body.get("orphanDependents")
            if orphan is None:
                orphan = rec.param("orphanDependents") == "true"
            policy = "Orphan" if orphan else "Background"
        dry = self._dry_run(rec, body)
        obj = self.store.delete(
            rt, route.namespace, route.name, policy, dry_run=dry, preconditions=body.get("preconditions")
        )
        self._send_json(h, rec, 200, obj)

    # watch ---------------------------------------------------------------

    def _watch(self, h, rec, route):
        rt = route.rt
        match = self._matcher(rec, rt)
        ns = route.namespace
        rv_param = rec.param("resourceVersion")
        timeout = float(rec.param("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        store = self.store

        def in_scope(o: dict) -> bool:
            return ns is None or o["metadata"].get("namespace") == ns

        initial: list[dict] = []
        with store.lock:
            if rv_param in (None, "", "0"):
                initial, cursor = store.list(rt, ns, match)
            else:
                try:
                    cursor = int(rv_param)
                except ValueError:
                    raise S.bad_request(f'invalid resource version "{rv_param}"') from None
                if cursor < store.compacted_rv:
                    expired = S.expired(f"too old resource version: {cursor} ({store.compacted_rv})")
                    initial = []
                    cursor = -1
        self._start_stream(h, rec, "application/json")
        try:
            if cursor == -1:
                self._chunk(h, json.dumps({"type": "ERROR", "object": expired.body}).encode() + b"\n")
                return
            for o in initial:
                self._chunk(h, json.dumps({"type": "ADDED", "object": o}).encode() + b"\n")
            while True:
                with store.cond:
                    while True:
                        if store.closed:
                            return
                        i = bisect.bisect_right(store.history, cursor, key=lambda e: e.rv)
                        pending = store.history[i:]
                        if pending:
                            break
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return
                        store.cond.wait(left)
                out = []
                for ev in pending:
                    cursor = ev.rv
                    if (ev.rt.group, ev.rt.plural) != (rt.group, rt.plural) or not in_scope(ev.obj):
                        continue
                    now_m = match(ev.obj)
                    if ev.type == "MODIFIED":
                        was = match(ev.prev) if ev.prev is not None else now_m
                        typ = "MODIFIED" if (now_m and was) else "ADDED" if now_m else "DELETED" if was else None
                    else:
                        typ = ev.type if now_m else None
                    if typ:
                        out.append(json.dumps({"type": typ, "object": ev.obj}).encode() + b"\n")
                for line in out:
                    self._chunk(h, line)
        finally:
            self._end_stream(h)

    # logs ----------------------------------------------------------------

    def _serve_log(self, h, rec, route):
        if rec.method != "GET":
            raise S.method_not_allowed()
        ns, name = route.namespace, route.name
        pod = self.store.get(route.rt, ns, name)
        names = [c["name"] for c in pod["spec"].get("containers", [])]
        init_names = [c["name"] for c in pod["spec"].get("initContainers", []) or []]
        container = rec.param("container")
        if not container:
            if len(names) != 1:
                raise S.bad_request(
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(names)}]"
                    + (f" or one of the init containers: [{' '.join(init_names)}]" if init_names else "")
                )
            container = names[0]
        elif container not in names + init_names:
            raise S.bad_request(f"container {container} is not valid for pod {name}")
        previous = rec.param("previous") in ("true", "1", "True")
        follow = rec.param("follow") in ("true", "1", "True")
        timestamps = rec.param("timestamps") in ("true", "1", "True")
        tail = rec.param("tailLines")
        tail_n = int(tail) if tail not in (None, "") else None
        limit_bytes = int(rec.param("limitBytes") or 0)
        try:
            since = since_time(rec.param("sinceTime"))
        except ValueError:
            raise S.bad_request(f'parsing time "{rec.param("sinceTime")}" as RFC3339: cannot parse') from None
        with self.store.lock:
            statuses = {s["name"]: s for s in (pod.get("status") or {}).get("containerStatuses", []) or []}
            st = statuses.get(container)
            if previous:
                inst = self.logbook.previous(ns, name, container)
                if inst is None or not st or not st.get("restartCount"):
                    raise S.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
                follow = False
            else:
                waiting = (st or {}).get("state", {}).get("waiting") if st else {"reason": "ContainerCreating"}
                if waiting and waiting.get("reason") != "CrashLoopBackOff":
                    reason = waiting.get("reason", "ContainerCreating")
                    text = (
                        "trying and failing to pull image" if reason in ("ImagePullBackOff", "ErrImagePull") else reason
                    )
                    raise S.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {text}')
                inst = self.logbook.current(ns, name, container)
            lines = list(inst.lines)
            cursor = len(lines)
            drops = inst.drops
            if since is not None:
                lines = [(t, text) for t, text in lines if t >= since]
            start = 0 if tail_n is None else max(0, len(lines) - tail_n)
            first = b"".join(format_line(t, s, timestamps) for t, s in lines[start:])
        if limit_bytes:
            first = first[:limit_bytes]
        if not follow:
            rec.status = 200
            h.send_response(200)
            h.send_header("Content-Type", "text/plain")
            h.send_header("Cache-Control", "no-cache, private")
            h.send_header("Content-Length", str(len(first)))
            h.end_headers()
            h.wfile.write(first)
            return
        self._start_stream(h, rec, "text/plain")
        try:
            self._chunk(h, first)
            while True:
                with self.store.cond:
                    while True:
                        if self.store.closed:
                            return
                        if len(inst.lines) > cursor:
                            new = inst.lines[cursor:]
                            cursor = len(inst.lines)
                            break
                        if inst.terminated or inst.drops != drops:
                            return
                        self.store.cond.wait()
                self._chunk(h, b"".join(format_line(t, s, timestamps) for t, s in new))
        finally:
            self._end_stream(h)


def _without_server_fields(obj: dict) -> dict:
    o = copy.deepcopy(obj)
    md = o.get("metadata") or {}
    for k in (
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ):
        md.pop(k, None)
    return o


def _hash(rt: ResourceType) -> str:
    import base64
    import hashlib

    return base64.b64encode(hashlib.sha256(f"{rt.group}/{rt.version}/{rt.plural}".encode()).digest()[:8]).decode()


def _json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 (add, remove, replace, test) - enough for tests that send JSON patches."""
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise S.bad_request("the body of the request was in an unknown format")

    def walk(path: str):
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
        cur = doc
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        return cur, parts[-1]

    for op in ops:
        try:
            parent, key = walk(op["path"])
            kind = op["op"]
            if isinstance(parent, list):
                idx = len(parent) if key == "-" else int(key)
                if kind == "add":
                    parent.insert(idx, op["value"])
                elif kind == "remove":
                    parent.pop(idx)
                elif kind == "replace":
                    parent[idx] = op["value"]
                elif kind == "test" and parent[idx] != op["value"]:
                    raise S.KubeError(422, "Invalid", "the server rejected our request due to an error in our request")
            else:
                if kind in ("add", "replace"):
                    parent[key] = op["value"]
                elif kind == "remove":
                    del parent[key]
                elif kind == "test" and parent.get(key) != op["value"]:
                    raise S.KubeError(422, "Invalid", "the server rejected our request due to an error in our request")
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise S.KubeError(
                422, "Invalid", f"the server rejected our request due to an error in our request: {e}"
            ) from e
    return doc
