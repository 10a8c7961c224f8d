"""metav1.Status bodies, shaped like kube-apiserver's (k8s.io/apimachinery/pkg/api/errors)."""

from __future__ import annotations

from typing import Any

from .resources import ResourceType
from .validation import FieldError


class KubeError(Exception):
    """An API error; ``.body`` is the Status the server answers with."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    @property
    def body(self) -> dict:
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def _details(rt: ResourceType | None, name: str | None = None, **extra) -> dict:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if rt is not None:
        if rt.group:
            d["group"] = rt.group
        d["kind"] = rt.plural
    d.update(extra)
    return d


def not_found(rt: ResourceType, name: str) -> KubeError:
    return KubeError(404, "NotFound", f'{rt.group_resource} "{name}" not found', _details(rt, name))


def namespace_not_found(ns: str) -> KubeError:
    return KubeError(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"})


def resource_not_found() -> KubeError:
    return KubeError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(rt: ResourceType, name: str) -> KubeError:
    return KubeError(409, "AlreadyExists", f'{rt.group_resource} "{name}" already exists', _details(rt, name))


def rv_conflict(rt: ResourceType, name: str) -> KubeError:
    return KubeError(
        409,
        "Conflict",
        (
            f'Operation cannot be fulfilled on {rt.group_resource} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again"
        ),
        _details(rt, name),
    )


def apply_conflict(conflicts: dict[str, list[str]], api_version: str) -> KubeError:
    """``conflicts``: {manager: [".spec.x", ...]} -> kube's "Apply failed with N conflicts" error."""
    causes = []
    parts = []
    total = sum(len(v) for v in conflicts.values())
    for manager, fields in conflicts.items():
        msg = f'conflict with "{manager}" using {api_version}'
        for f in fields:
            causes.append({"reason": "FieldManagerConflict", "message": msg, "field": f})
        if total == 1:
            parts.append(f"{msg}: {fields[0]}")
        else:
            parts.append(f'conflicts with "{manager}" using {api_version}:\n' + "\n".join(f"- {f}" for f in fields))
    noun = "conflict" if total == 1 else "conflicts"
    return KubeError(409, "Conflict", f"Apply failed with {total} {noun}: " + "\n".join(parts), {"causes": causes})


def invalid(qualified_kind: str, group: str, kind: str, name: str, errors: list[FieldError]) -> KubeError:
    rendered = [str(e) for e in errors]
    summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [{"reason": e.reason, "message": e.message, "field": e.field} for e in errors]
    return KubeError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {summary}', details)


def invalid_for(rt: ResourceType, name: str, errors: list[FieldError]) -> KubeError:
    return invalid(rt.qualified_kind, rt.group, rt.kind, name, errors)


def bad_request(message: str) -> KubeError:
    return KubeError(400, "BadRequest", message)


def unauthorized() -> KubeError:
    return KubeError(401, "Unauthorized", "Unauthorized")


def forbidden(
    user: str,
    verb: str,
    rt_group: str,
    resource: str,
    namespace: str | None,
    name: str | None,
    subresource: str | None = None,
) -> KubeError:
    group_resource = f"{resource}.{rt_group}" if rt_group else resource
    full = f"{resource}/{subresource}" if subresource else resource
    subject = f'{group_resource} "{name}"' if name else group_resource
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    msg = f'{subject} is forbidden: User "{user}" cannot {verb} resource "{full}" in API group "{rt_group}" {scope}'
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if rt_group:
        details["group"] = rt_group
    details["kind"] = resource
    return KubeError(403, "Forbidden", msg, details)


def method_not_allowed() -> KubeError:
    return KubeError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})


def expired(message: str) -> KubeError:
    return KubeError(410, "Expired", message)
