"""The client's failures as one-line ddpctl errors that name the object and the fix.

Every request goes through `config.Cluster`, which hands a failed answer (a Status body) or a
transport exception to `from_status` / `from_transport` together with an `Op`: the verb and the
object it was for. Nothing here imports `kubernetes`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ddpctl.cluster.kinds import Kind
from ddpctl.errors import ClusterError, DdpctlError, Unreachable, UsageError
from ddpctl.records import record

MAX_CAUSES = 5


@record
class Op:
    """What a request was doing, for messages: `apply job.batch "x" in namespace "team"`."""

    verb: str  # get, list, watch, apply, create, delete, logs
    kind: Kind | None = None
    name: str | None = None
    namespace: str | None = None
    dry_run: bool = False

    @property
    def subject(self) -> str:
        if self.kind is None:
            what = "the API"
        elif self.name:
            what = f'{self.kind.ref_kind} "{self.name}"'
        else:
            what = self.kind.resource
        if self.namespace and (self.kind is None or self.kind.namespaced):
            what += f' in namespace "{self.namespace}"'
        return what

    @property
    def rbac_verb(self) -> str:
        return {"apply": "patch", "logs": "get"}.get(self.verb, self.verb)

    @property
    def rbac_resource(self) -> str:
        if self.kind is None:
            return "?"
        return "pods/log" if self.verb == "logs" else self.kind.resource


class ApiError(ClusterError):
    """An error answer of the API server (exit 1), with what callers branch on."""

    def __init__(
        self, message: str, code: int, reason: str = "", *, not_served: bool = False, namespace_missing: bool = False
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.not_served = not_served  # 404 for the resource itself: the CRD is not installed
        self.namespace_missing = namespace_missing

    def __reduce__(self) -> tuple[Callable[..., ApiError], tuple[Any, ...]]:  # copy/pickle keep the attributes
        return (_rebuild_api_error, (self.message, self.code, self.reason, self.not_served, self.namespace_missing))

    @property
    def object_missing(self) -> bool:
        return self.code == 404 and not self.not_served and not self.namespace_missing


def _rebuild_api_error(message: str, code: int, reason: str, not_served: bool, namespace_missing: bool) -> ApiError:
    return ApiError(message, code, reason, not_served=not_served, namespace_missing=namespace_missing)


def one_line(text: str) -> str:
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _status_body(body: Any) -> dict[str, Any]:
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return {"message": body.strip()}
    return body if isinstance(body, dict) else {}


def from_status(code: int, body: Any, op: Op, where: str) -> ApiError:
    """An HTTP error answer (a metav1.Status) as one ddpctl error. `where`: "context X at URL"."""
    status = _status_body(body)
    message = one_line(status.get("message") or "")
    reason = status.get("reason") or ""
    details = status.get("details") or {}
    ns = op.namespace
    if code == 401:
        return _err(
            code,
            reason,
            f"the API server ({where}) rejected the credentials (401 Unauthorized) when asked to {op.verb} "
            f"{op.subject}; log in again or refresh the token in your kubeconfig, or pick another --context",
        )
    if code == 403:
        scope = f' in namespace "{ns}"' if ns and (op.kind is None or op.kind.namespaced) else ""
        return _err(
            code,
            reason,
            f"cannot {op.verb} {op.subject}: 403 Forbidden: {message or 'no permission'}; ask a cluster admin "
            f'for RBAC permission to {op.rbac_verb} "{op.rbac_resource}"{scope}, or use a namespace you may write to '
            'with -n',
        )
    if code == 404:
        if details.get("kind") == "namespaces" and details.get("name") == ns and ns:
            err = _err(
                code,
                reason,
                f'namespace "{ns}" does not exist ({where}); create it with '
                f"`kubectl create namespace {ns}` or choose another with -n",
            )
            err.namespace_missing = True
            return err
        if message == "the server could not find the requested resource" or (
            not details and op.kind is not None and op.kind.group
        ):
            if op.kind is not None and op.kind.target:
                err = _err(
                    code,
                    reason,
                    f"the cluster does not serve {op.kind.resource}/{op.kind.version} ({op.kind.installed_by} is "
                    "not installed); install it, or choose a target this cluster serves (--target auto picks one)",
                )
            else:
                kind = op.kind.resource if op.kind else "this resource"
                err = _err(
                    code,
                    reason,
                    f"the cluster does not serve {kind} ({where}); check the cluster version and installed CRDs",
                )
            err.not_served = True
            return err
        return _err(
            code, reason, f"{op.subject} not found; see `ddpctl list{' -n ' + ns if ns else ''}` for the jobs there"
        )
    if code == 409:
        if reason == "AlreadyExists":
            return _err(
                code,
                reason,
                f"{op.subject} already exists; delete it (`ddpctl delete {op.name}"
                f"{' -n ' + ns if ns else ''}`) or resubmit with --replace",
            )
        return _err(
            code, reason, f"conflict on {op.subject}: {message}; resubmit with --replace to recreate the job's objects"
        )
    if code == 422:
        causes = details.get("causes") or []
        parts = [
            f"{c.get('field')}: {one_line(c.get('message', ''))}" if c.get("field") else one_line(c.get("message", ""))
            for c in causes[:MAX_CAUSES]
        ]
        if len(causes) > MAX_CAUSES:
            parts.append(f"and {len(causes) - MAX_CAUSES} more")
        fields = "; ".join(parts) or message
        return _err(
            code,
            reason,
            f"the API server rejected {op.subject} as invalid: {fields}; fix the spec "
            "(`ddpctl render` shows what is sent)",
        )
    if code == 400:
        return _err(
            code, reason, f"the API server refused to {op.verb} {op.subject}: {message or reason or 'Bad Request'}"
        )
    if code == 410:
        return _err(
            code, reason, f"{op.verb} {op.subject}: {message or 'resource version expired'}; run the command again"
        )
    if code >= 500 or code == 429:
        return _err(
            code,
            reason,
            f"the API server failed to {op.verb} {op.subject}: {code} {reason or 'error'}"
            f"{': ' + message if message else ''}; retry, or check the cluster's health",
        )
    return _err(code, reason, f"{op.verb} {op.subject} failed: {code} {reason}{': ' + message if message else ''}")


def _err(code: int, reason: str, message: str) -> ApiError:
    return ApiError(message, code, reason)


def short_transport_reason(exc: BaseException) -> str:
    """'connection refused', 'timed out', 'TLS: ...' out of a urllib3 exception chain."""
    seen = exc
    for _ in range(5):
        inner = getattr(seen, "reason", None)
        if isinstance(inner, BaseException):
            seen = inner
        else:
            break
    text = str(seen)
    low = text.lower()
    if "refused" in low:
        return "connection refused"
    if "timed out" in low or "timeout" in low:
        return "timed out"
    if (
        "name or service not known" in low
        or "nodename nor servname" in low
        or "failed to resolve" in low
        or "temporary failure in name resolution" in low
    ):
        return "the host name does not resolve"
    if "ssl" in low or "certificate" in low:
        return "TLS error: " + one_line(text)[:200]
    return one_line(text)[:200] or type(seen).__name__


def from_transport(exc: BaseException, op: Op, where: str, attempts: int = 1) -> DdpctlError:
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    return Unreachable(
        f"cannot reach the Kubernetes API server ({where}){tried}: {short_transport_reason(exc)} "
        f"(while trying to {op.verb} {op.subject}); check that the cluster is running and that "
        "--context / --kubeconfig / KUBECONFIG point to it"
    )


def config_error(source: str, exc: BaseException | str) -> UsageError:
    return UsageError(f"{source}: {one_line(str(exc))[:300]}; fix the kubeconfig or pass --kubeconfig / --context")
