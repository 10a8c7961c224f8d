"""Schema validation for the kube-apiserver test double.

Two sources of truth, both offline:

* core kinds (Pod, Service, ConfigMap, Namespace, Event, batch/v1 Job) are checked
  against the Kubernetes 1.33 OpenAPI schemas bundled by the PyPI package
  ``kubernetes-validate`` (its ``-strict`` variant, where unknown fields are errors);
* custom kinds (PyTorchJob, JobSet, TrainJob, ClusterTrainingRuntime) are checked
  against the ``openAPIV3Schema`` of the upstream CRDs kept in ``tests/contract/schemas/crds``,
  with the structural-schema rules of the apiserver (``x-kubernetes-int-or-string``,
  ``x-kubernetes-preserve-unknown-fields``, ``nullable``, ``additionalProperties``)
  and, stricter than a cluster's default ``fieldValidation=Warn``, unknown fields
  reported as errors.

Every error is a :class:`FieldError` (field path in kube's notation such as
``spec.template.spec.containers[0].image``, a StatusCause reason, and a message).
``validate_object(obj) -> list[str]`` gives the same errors as ``"<path>: <message>"``
strings, the interface shared with the render tests (``tests/support/k8s_schemas.py``).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

KUBE_SCHEMA_VERSION = "1.33.0"

#: kinds validated with kubernetes-validate, by (apiVersion, kind)
CORE_SCHEMA_FILES = {
    ("v1", "Pod"): "pod-v1.json",
    ("v1", "Service"): "service-v1.json",
    ("v1", "ConfigMap"): "configmap-v1.json",
    ("v1", "Namespace"): "namespace-v1.json",
    ("v1", "Event"): "event-v1.json",
    ("batch/v1", "Job"): "job-batch-v1.json",
}


@dataclass(frozen=True)
class FieldError:
    field: str
    reason: str  # a metav1.CauseType, e.g. FieldValueRequired
    message: str  # e.g. "Required value"

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


Validator = Callable[[dict], "list[str]"]


# --------------------------------------------------------------------------- paths


def default_crd_dir(repo_root: Path | None = None) -> Path:
    """``<repo>/tests/contract/schemas/crds`` (vendored upstream CRDs); the repo root defaults to this checkout's."""
    if repo_root is None:
        repo_root = Path(__file__).resolve().parents[3]
    return Path(repo_root) / "tests" / "contract" / "schemas" / "crds"


def join_path(parent: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    key = str(key)
    return f"{parent}.{key}" if parent else key


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


# --------------------------------------------------------------------------- names

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def validate_name(kind: str, name: str) -> list[FieldError]:
    """The apiserver's name rules for the kinds the double serves."""
    errs: list[FieldError] = []
    f = "metadata.name"
    if kind == "Service":
        # Services: DNS-1035 label (they become DNS names), at most 63 characters
        if len(name) > 63:
            errs.append(
                FieldError(f, "FieldValueInvalid", f'Invalid value: "{name}": must be no more than 63 characters')
            )
        if not DNS1035_LABEL.match(name):
            errs.append(
                FieldError(
                    f,
                    "FieldValueInvalid",
                    (
                        f'Invalid value: "{name}": a DNS-1035 label must consist of lower case alphanumeric '
                        "characters or '-', start with an alphabetic character, and end with an alphanumeric "
                        "character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                        "'[a-z]([-a-z0-9]*[a-z0-9])?')"
                    ),
                )
            )
        return errs
    if kind == "Namespace":
        if len(name) > 63 or not DNS1123_LABEL.match(name):
            errs.append(
                FieldError(
                    f,
                    "FieldValueInvalid",
                    (
                        f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower case '
                        "alphanumeric characters or '-', and must start and end with an alphanumeric character "
                        "(e.g. 'my-name',  or '123-abc', regex used for validation is "
                        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                    ),
                )
            )
        return errs
    if len(name) > 253:
        errs.append(FieldError(f, "FieldValueInvalid", f'Invalid value: "{name}": must be no more than 253 characters'))
    if not DNS1123_SUBDOMAIN.match(name):
        errs.append(
            FieldError(
                f,
                "FieldValueInvalid",
                (
                    f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                    "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
                    "(e.g. 'example.com', regex used for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                ),
            )
        )
    if kind == "Job" and len(name) > 63:
        # the Job controller puts the name in the pods' job-name label (63 chars max)
        errs.append(FieldError(f, "FieldValueInvalid", f'Invalid value: "{name}": must be no more than 63 characters'))
    return errs


# --------------------------------------------------------------------------- core kinds


@functools.cache
def _core_validator(filename: str):
    import importlib.resources

    import jsonschema
    from referencing import Registry, Resource

    base = importlib.resources.files("kubernetes_validate").joinpath(
        "kubernetes-json-schema", f"v{KUBE_SCHEMA_VERSION}-local-strict"
    )
    schema = json.loads(base.joinpath(filename).read_text())
    defs = json.loads(base.joinpath("_definitions.json").read_text())
    registry = Registry().with_resources(
        [
            (schema["$id"], Resource.from_contents(schema)),
            (defs["$id"], Resource.from_contents(defs)),
        ]
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _jsonschema_error_to_field(err) -> list[FieldError]:
    path = ""
    for p in err.absolute_path:
        path = join_path(path, p)
    if err.validator == "required":
        m = re.match(r"'([^']+)' is a required property", err.message)
        return [FieldError(join_path(path, m.group(1) if m else "?"), "FieldValueRequired", "Required value")]
    if err.validator == "additionalProperties":
        names = re.findall(r"'([^']+)'", err.message.split("(")[-1]) or ["?"]
        return [FieldError(join_path(path, n), "FieldValueInvalid", "field not declared in schema") for n in names]
    if err.validator == "enum":
        allowed = ", ".join(json.dumps(a) for a in err.validator_value if a is not None)
        return [
            FieldError(
                path,
                "FieldValueNotSupported",
                f"Unsupported value: {_short(err.instance)}: supported values: {allowed}",
            )
        ]
    if err.validator in ("type", "oneOf", "anyOf"):
        return [FieldError(path, "FieldValueTypeInvalid", f"Invalid value: {_short(err.instance)}: {err.message}")]
    return [FieldError(path, "FieldValueInvalid", f"Invalid value: {_short(err.instance)}: {err.message}")]


def validate_core(obj: dict) -> list[FieldError]:
    filename = CORE_SCHEMA_FILES[(obj.get("apiVersion"), obj.get("kind"))]
    errs: list[FieldError] = []
    for e in sorted(_core_validator(filename).iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        errs.extend(_jsonschema_error_to_field(e))
    return errs


# --------------------------------------------------------------------------- CRDs


@functools.cache
def load_crds(crd_dir: str) -> dict[tuple[str, str], dict]:
    """{(apiVersion, kind): {"crd": <CRD>, "schema": <openAPIV3Schema>}} for every served version."""
    out: dict[tuple[str, str], dict] = {}
    d = Path(crd_dir)
    if not d.is_dir():
        return out
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for f in sorted(d.glob("*.yaml")):
        for doc in yaml.load_all(f.read_text(), Loader=loader):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for v in spec["versions"]:
                if not v.get("served", True):
                    continue
                key = (f'{spec["group"]}/{v["name"]}', spec["names"]["kind"])
                out[key] = {"crd": doc, "version": v, "schema": (v.get("schema") or {}).get("openAPIV3Schema") or {}}
    return out


_TYPE_NAMES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
}


def _type_ok(t: str, v: Any) -> bool:
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return isinstance(v, _TYPE_NAMES.get(t, object))


def validate_structural(schema: dict, value: Any, path: str, errs: list[FieldError], top: bool = False) -> None:
    """Validate ``value`` against a CRD structural schema, the way the apiserver does."""
    if value is None:
        if not schema.get("nullable") and schema.get("type") is not None:
            errs.append(
                FieldError(
                    path,
                    "FieldValueTypeInvalid",
                    f'Invalid value: "null": {path} in body must be of type {schema["type"]}: "null"',
                )
            )
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _type_ok("integer", value)):
            errs.append(
                FieldError(
                    path,
                    "FieldValueTypeInvalid",
                    f"Invalid value: {_short(value)}: {path} in body must be of type int-or-string",
                )
            )
        return
    t = schema.get("type")
    if t and not _type_ok(t, value):
        errs.append(
            FieldError(
                path,
                "FieldValueTypeInvalid",
                f"Invalid value: {_short(value)}: {path} in body must be of type {t}: "
                f"{json.dumps(type(value).__name__)}",
            )
        )
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(json.dumps(a) for a in schema["enum"])
        errs.append(
            FieldError(
                path, "FieldValueNotSupported", f"Unsupported value: {_short(value)}: supported values: {allowed}"
            )
        )
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errs.append(
                FieldError(path, "FieldValueTooLong", f"Too long: may not be more than {schema['maxLength']} bytes")
            )
        if "minLength" in schema and len(value) < schema["minLength"]:
            errs.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {_short(value)}: {path} in body should be at least "
                    f"{schema['minLength']} chars long",
                )
            )
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errs.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {_short(value)}: {path} in body should match '{schema['pattern']}'",
                )
            )
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errs.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {value}: {path} in body should be greater than or equal to {schema['minimum']}",
                )
            )
        if "maximum" in schema and value > schema["maximum"]:
            errs.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {value}: {path} in body should be less than or equal to {schema['maximum']}",
                )
            )
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(
                FieldError(
                    path, "FieldValueTooMany", f"Too many: {len(value)}: must have at most {schema['maxItems']} items"
                )
            )
        if "minItems" in schema and len(value) < schema["minItems"]:
            errs.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {len(value)}: {path} in body should have at least {schema['minItems']} items",
                )
            )
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                validate_structural(items, item, join_path(path, i), errs)
    if isinstance(value, dict):
        props = schema.get("properties")
        for req in schema.get("required", []) or []:
            if req not in value:
                errs.append(FieldError(join_path(path, req), "FieldValueRequired", "Required value"))
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        for k, v in value.items():
            sub = join_path(path, k)
            if top and k == "metadata":
                continue  # ObjectMeta of a custom resource: only the name rules apply
            if props is not None and k in props:
                validate_structural(props[k], v, sub, errs)
            elif isinstance(extra, dict):
                validate_structural(extra, v, sub, errs)
            elif preserve or extra is True:
                continue
            elif props is not None or extra is False:
                errs.append(FieldError(sub, "FieldValueInvalid", "field not declared in schema"))
            elif schema.get("type") == "object":
                # an object schema with neither properties nor additionalProperties: pruned to empty
                errs.append(FieldError(sub, "FieldValueInvalid", "field not declared in schema"))


def validate_custom(obj: dict, crd_dir: str | os.PathLike) -> list[FieldError]:
    entry = load_crds(str(crd_dir)).get((obj.get("apiVersion"), obj.get("kind")))
    if entry is None:
        return [
            FieldError(
                "kind",
                "FieldValueNotSupported",
                f'Unsupported value: "{obj.get("kind")}": no schema for {obj.get("apiVersion")}',
            )
        ]
    errs: list[FieldError] = []
    validate_structural(entry["schema"], obj, "", errs, top=True)
    return errs


# --------------------------------------------------------------------------- entry points


def builtin_field_errors(obj: dict, crd_dir: str | os.PathLike | None = None) -> list[FieldError]:
    """The double's own validator: schema errors for any kind it serves."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key in CORE_SCHEMA_FILES:
        return validate_core(obj)
    return validate_custom(obj, crd_dir or default_crd_dir())


def validate_object(obj: dict) -> list[str]:
    """``list[str]`` form (``"<field path>: <message>"``) of :func:`builtin_field_errors`."""
    return [str(e) for e in builtin_field_errors(obj)]


_REASON_BY_PREFIX = [
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Forbidden", "FieldValueForbidden"),
    ("Duplicate value", "FieldValueDuplicate"),
]


def parse_error_string(text: str) -> FieldError:
    """Turn ``"<path>: <message>"`` (the shared validator's form) back into a FieldError.

    Understands the forms ``tests/support/k8s_schemas.py`` produces: an optional ``[k8s 1.33.0] `` prefix,
    dotted paths with list indexes (``containers.0``) and jsonschema's raw messages, which are
    restated the way the apiserver words them (the unknown / missing field named in the path).
    """
    text = re.sub(r"^\[k8s [^\]]*\]\s*", "", text.strip())
    field, sep, message = text.partition(": ")
    if not sep or " " in field.strip():
        field, message = "", text
    field = field.strip().lstrip(".")
    if field.startswith("/"):
        # a JSON-pointer style path
        parts = [p for p in field.split("/") if p]
        field = ""
        for p in parts:
            field = join_path(field, int(p) if p.isdigit() else p)
    field = re.sub(r"\.(\d+)(?=\.|\[|$)", r"[\1]", field)  # a.0.b -> a[0].b
    message = message.strip()
    m = re.match(r"Additional properties are not allowed \((.*) (?:was|were) unexpected\)", message)
    if m:
        names = re.findall(r"'([^']+)'", m.group(1))
        if names:
            return FieldError(join_path(field, names[0]), "FieldValueInvalid", "field not declared in schema")
    m = re.match(r"'([^']+)' is a required property", message)
    if m:
        return FieldError(join_path(field, m.group(1)), "FieldValueRequired", "Required value")
    reason = "FieldValueTypeInvalid" if " must be of type " in message else "FieldValueInvalid"
    for prefix, r in _REASON_BY_PREFIX:
        if message.startswith(prefix):
            reason = r
            break
    return FieldError(field, reason, message)


def resolve_default_validator() -> tuple[Validator | None, str]:
    """Prefer the render tests' shared validator (``tests/support/k8s_schemas.py``) when present.

    Returns (callable or None, a description of which one was picked). ``None`` means:
    use the double's built-in validator.
    """
    for modname in ("tests.support.k8s_schemas", "k8s_schemas"):
        try:
            mod = __import__(modname, fromlist=["validate_object"])
        except ImportError:
            continue
        fn = getattr(mod, "validate_object", None)
        if callable(fn):
            return fn, f"{modname}.validate_object"
    return None, "kube_api_double.validation (built-in)"


def errors_from_validator(validator: Validator, obj: dict) -> list[FieldError]:
    out: list[FieldError] = []
    for item in validator(obj) or []:
        out.append(item if isinstance(item, FieldError) else parse_error_string(str(item)))
    return out


def dedupe(errs: Iterable[FieldError]) -> list[FieldError]:
    seen: set = set()
    out = []
    for e in errs:
        if (e.field, e.message) not in seen:
            seen.add((e.field, e.message))
            out.append(e)
    return out
