"""charts/ddp-job's values.yaml and values.schema.json, from the JobSpec's declared fields: each
key's doc, default, JSON type (its annotation) and rule (spec/fields), and the rules across keys
JSON Schema can state."""

from __future__ import annotations

import dataclasses
import json
import textwrap
import types
import typing
from collections.abc import Mapping
from typing import Any

from ddpctl.engines import plan_for
from ddpctl.manifests.yamlsafe import dump_portable
from ddpctl.spec import TARGETS, JobSpec
from ddpctl.spec.fields import declared, json_schema
from ddpctl.spec.names import MAX_DNS_LABEL
from ddpctl.spec.schema import MAX_NODES
from tools.chart import COMMAND

JSON_SCHEMA = "http://json-schema.org/draft-07/schema#"
WRAP = 100  # columns of values.yaml's comments

_HEADER = f"""\
# Values of the ddp-job chart = ddpctl's JobSpec in its camelCase form (the keys of ddp.yaml).
# GENERATED from the JobSpec's fields by {COMMAND}:
# edit the field docs there, not here. `ddpctl render --helm-values` writes a values file for any
# spec; `ddpctl render` with the same spec renders the same objects as this chart. The defaults
# below are JobSpec()'s defaults. values.schema.json rejects what ddpctl rejects (rules across keys
# fail at render time).
"""


# ------------------------------------------------------------------------------------ fields


def _fields(cls: type) -> list[tuple[str, dataclasses.Field[Any], Any]]:
    """(camelCase key, field, resolved type) of the keys a spec part declares, in order."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    return [(k.key, fields[k.name], hints[k.name]) for k in declared(cls)]


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _json_types(tp: Any) -> list[str]:
    """The JSON types of a field's annotation. Lists and maps also take null: JobSpec.from_dict reads
    a null list or map as empty."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        found: list[str] = []
        for arg in typing.get_args(tp):
            for name in ["null"] if arg is type(None) else _json_types(arg):
                if name not in found:
                    found.append(name)
        return found
    origin = typing.get_origin(tp) or tp
    if origin is bool:
        return ["boolean"]
    if origin is int:
        return ["integer"]
    if origin is float:
        return ["number"]
    if origin is str:
        return ["string"]
    if origin is tuple:
        return ["array", "null"]
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return ["object", "null"]
    if _is_dataclass_type(tp):
        return ["object"]
    raise TypeError(f"no JSON type for {tp!r}: teach tools/chart/values.py _json_types")


def _is_required(f: dataclasses.Field[Any], tp: Any, *, chart_defaults: bool) -> bool:
    """Where the chart supplies defaults (top level, rendezvous, resources) a key is required unless
    it may be null or empty; in a map entry (a volume, a secret ref) unless it has a default."""
    if not chart_defaults:
        return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    return "null" not in _json_types(tp)


def _plain(value: Any) -> Any:
    """Metadata as JSON: tuples become lists, a dataclass named in a rule becomes its schema."""
    if _is_dataclass_type(value):
        return _object_schema(value, chart_defaults=False)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _doc(f: dataclasses.Field[Any], key: str) -> str:
    if "doc" not in f.metadata:
        raise ValueError(f"{key}: give the field a doc (metadata=doc(text, rule))")
    return str(f.metadata["doc"])


def _property_schema(cls: type, key: str, f: dataclasses.Field[Any], tp: Any) -> dict[str, Any]:
    rules = json_schema(cls, f.name)
    out: dict[str, Any] = {}
    if "oneOf" not in rules and "type" not in rules:
        names = _json_types(tp)
        out["type"] = names[0] if len(names) == 1 else names
    out["description"] = _doc(f, key)
    if _is_dataclass_type(tp):
        out.update(_object_schema(tp, chart_defaults=True))
    out.update(_plain(rules))
    return out


def _object_schema(cls: type, *, chart_defaults: bool) -> dict[str, Any]:
    fields = _fields(cls)
    out: dict[str, Any] = {"type": "object", "additionalProperties": False}
    required = [key for key, f, tp in fields if _is_required(f, tp, chart_defaults=chart_defaults)]
    if required:
        out["required"] = required
    out["properties"] = {key: _property_schema(cls, key, f, tp) for key, f, tp in fields}
    return out


# ------------------------------------------------------------------------------------ rules across keys


def _elastic() -> dict[str, Any]:
    return {"type": "string", "pattern": ":"}


def _when(condition: dict[str, Any], then: dict[str, Any], required: str) -> dict[str, Any]:
    return {"if": {"properties": condition, "required": [required]}, "then": {"properties": then}}


def _name_limits() -> list[dict[str, Any]]:
    """`name`'s longest length per target: what is left of a DNS label after the longest suffix the
    engine adds with one node (the engine's own pod naming; more nodes are checked at render time)."""
    by_limit: dict[int, list[str]] = {}
    example: dict[int, str] = {}
    for target in TARGETS:
        host = plan_for(JobSpec(name="n", target=target, nodes=1)).longest_generated_name
        limit = MAX_DNS_LABEL - (len(host) - 1)
        by_limit.setdefault(limit, []).append(target)
        example.setdefault(limit, "<name>" + host[1:])
    rules = []
    for limit, targets in sorted(by_limit.items(), reverse=True):
        condition = {"const": targets[0]} if len(targets) == 1 else {"enum": targets}
        then = {"name": {"maxLength": limit, "description": f"{example[limit]} must fit {MAX_DNS_LABEL} characters"}}
        rules.append(_when({"target": condition}, then, "target"))
    return rules


def _cross_key_rules() -> list[dict[str, Any]]:
    """JobSpec's checks that span keys, where JSON Schema can state them (the chart's templates
    check the rest at render time: MIN <= MAX, procsPerNode <= gpusPerNode, env/secretEnv, ...)."""
    return [
        # node groups carry their own GPU counts (the top-level gpusPerNode is then the chart's default)
        _when(
            {"gpusPerNode": {"const": 0}, "nodeGroups": {"maxItems": 0}},
            {"backend": {"not": {"const": "nccl"}, "description": "nccl needs gpusPerNode >= 1"}},
            "gpusPerNode",
        ),
        _when(
            {"nodes": _elastic()},
            {
                "rendezvous": {
                    "properties": {
                        "mode": {
                            "not": {"const": "static"},
                            "description": "an elastic job cannot use static rendezvous",
                        }
                    }
                }
            },
            "nodes",
        ),
        _when(
            {"target": {"const": "trainjob"}},
            {
                "nodes": {"not": _elastic(), "description": "trainjob has no elastic policy"},
                "priorityClassName": {"type": "null", "description": "TrainJob has no priorityClassName"},
            },
            "target",
        ),
        *_name_limits(),
    ]


# ------------------------------------------------------------------------------------ values files


def values_schema() -> dict[str, Any]:
    """values.schema.json: the JobSpec's keys and rules as a draft-07 JSON Schema."""
    body = _object_schema(JobSpec, chart_defaults=True)
    body["properties"]["global"] = {
        "type": "object",
        "description": "Helm's global values (set when the chart is a subchart); unused.",
    }
    return {
        "$schema": JSON_SCHEMA,
        "title": "ddp-job values (ddpctl JobSpec, camelCase)",
        "description": (
            "GENERATED from the JobSpec (make chart-contract). Rejects what ddpctl's JobSpec rejects where JSON "
            "Schema can say it; rules across keys that it cannot (elastic MIN <= MAX <= "
            f"{MAX_NODES}, procsPerNode <= gpusPerNode, generated pod names within {MAX_DNS_LABEL} characters, "
            "env/secretEnv clashes, duplicate mount paths, no entrypoint) fail at render time with the key named."
        ),
        **body,
        "allOf": _cross_key_rules(),
    }


def values_schema_json() -> str:
    return json.dumps(values_schema(), indent=2, ensure_ascii=False) + "\n"


def _comment(text: str, indent: str) -> list[str]:
    wrapped = textwrap.wrap(
        "-- " + text, WRAP - len(indent), initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False
    )
    return [indent + line for line in wrapped]


def values_yaml() -> str:
    """values.yaml: JobSpec()'s defaults in its key order, each key under its doc."""
    defaults = JobSpec().to_dict()
    lines = [_HEADER]
    for key, f, tp in _fields(JobSpec):
        lines += _comment(_doc(f, key), "")
        if _is_dataclass_type(tp):
            lines.append(f"{key}:")
            for sub_key, sub_field, _ in _fields(tp):
                lines += _comment(_doc(sub_field, f"{key}.{sub_key}"), "  ")
                lines.append("  " + dump_portable({sub_key: defaults[key][sub_key]}).rstrip("\n"))
        else:
            lines.append(dump_portable({key: defaults[key]}).rstrip("\n"))
    return "\n".join(lines) + "\n"
