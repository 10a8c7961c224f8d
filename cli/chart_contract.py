"""The Helm chart's contract, generated from the JobSpec: one source, no hand-written copy.

`charts/ddp-job/values.yaml` (every key's default with its doc) and `values.schema.json` (every
key's rules) come from the fields of `ddpctl.spec.model`: the doc and the JSON-Schema keywords each field
carries (`spec.doc`), its type annotation, and the spec's constants (TARGETS, MAX_NODES, the name
regexes, ...). Rules that span keys are derived here from the same constants and from JobSpec's own
naming, so the chart refuses what `JobSpec` refuses.

    python -m ddpctl.chart_contract --check   # exit 1 when the committed files differ (a test runs it)
    python -m ddpctl.chart_contract --write   # regenerate them (`make chart-contract`)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpctl.engines import plan_for
from ddpctl.manifests.yamlsafe import dump_portable
from ddpctl.spec import model as S

CHART_DIR = Path(__file__).resolve().parents[1] / "charts" / "ddp-job"
JSON_SCHEMA = "http://json-schema.org/draft-07/schema#"
WRAP = 100  # columns of values.yaml's comments

_HEADER = """\
# Values of the ddp-job chart = ddpctl's JobSpec in its camelCase form (the keys of ddp.yaml).
# GENERATED from cli/spec.py by `make chart-contract` (python -m ddpctl.chart_contract --write): edit
# the field docs there, not here. `ddpctl render --helm-values` writes a values file for any spec;
# `ddpctl render` with the same spec renders the same objects as this chart. The defaults below are
# JobSpec()'s defaults. values.schema.json rejects what ddpctl rejects (rules across keys fail at
# render time).
"""


# ------------------------------------------------------------------------------------ fields


def _fields(cls: type) -> list[tuple[str, dataclasses.Field[Any], Any]]:
    """(camelCase key, field, resolved type) of the keys a dataclass serialises, in order."""
    hints = typing.get_type_hints(cls)
    keys = set(cls().to_dict()) if cls is S.JobSpec else None
    out = []
    for f in dataclasses.fields(cls):
        key = S.camel(f.name)
        if keys is None or key in keys:
            out.append((key, f, hints[f.name]))
    return out


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
    if origin is str:
        return ["string"]
    if origin is tuple:
        return ["array", "null"]
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return ["object", "null"]
    if _is_dataclass_type(tp):
        return ["object"]
    raise TypeError(f"no JSON type for {tp!r}: teach ddpctl.chart_contract._json_types")


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
        raise ValueError(f"{key}: give the field a doc (metadata=doc(...)) in cli/spec.py")
    return str(f.metadata["doc"])


def _property_schema(key: str, f: dataclasses.Field[Any], tp: Any) -> dict[str, Any]:
    rules = dict(f.metadata.get("schema", {}))
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
    out["properties"] = {key: _property_schema(key, f, tp) for key, f, tp in fields}
    return out


# ------------------------------------------------------------------------------------ rules across keys


def _elastic() -> dict[str, Any]:
    return {"type": "string", "pattern": ":"}


def _when(key: str, condition: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
    return {"if": {"properties": {key: condition}, "required": [key]}, "then": {"properties": then}}


def _name_limits() -> list[dict[str, Any]]:
    """`name`'s longest length per target: what is left of a DNS label after the longest suffix the
    engine adds with one node (JobSpec's own pod naming; more nodes are checked at render time)."""
    by_limit: dict[int, list[str]] = {}
    example: dict[int, str] = {}
    for target in S.TARGETS:
        host = plan_for(S.JobSpec(name="n", target=target, nodes=1)).longest_generated_name
        limit = S.MAX_DNS_LABEL - (len(host) - 1)
        by_limit.setdefault(limit, []).append(target)
        example.setdefault(limit, "<name>" + host[1:])
    rules = []
    for limit, targets in sorted(by_limit.items(), reverse=True):
        condition = {"const": targets[0]} if len(targets) == 1 else {"enum": targets}
        then = {"name": {"maxLength": limit, "description": f"{example[limit]} must fit {S.MAX_DNS_LABEL} characters"}}
        rules.append(_when("target", condition, then))
    return rules


def _cross_key_rules() -> list[dict[str, Any]]:
    """JobSpec's checks that span keys, where JSON Schema can state them (the chart's templates
    check the rest at render time: MIN <= MAX, procsPerNode <= gpusPerNode, env/secretEnv, ...)."""
    return [
        _when(
            "gpusPerNode",
            {"const": 0},
            {"backend": {"not": {"const": "nccl"}, "description": "nccl needs gpusPerNode >= 1"}},
        ),
        _when(
            "nodes",
            _elastic(),
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
        ),
        _when(
            "target",
            {"const": "trainjob"},
            {
                "nodes": {"not": _elastic(), "description": "trainjob has no elastic policy"},
                "priorityClassName": {"type": "null", "description": "TrainJob has no priorityClassName"},
            },
        ),
        *_name_limits(),
    ]


# ------------------------------------------------------------------------------------ the two files


def values_schema() -> dict[str, Any]:
    """values.schema.json: the JobSpec's keys and rules as a draft-07 JSON Schema."""
    body = _object_schema(S.JobSpec, chart_defaults=True)
    body["properties"]["global"] = {
        "type": "object",
        "description": "Helm's global values (set when the chart is a subchart); unused.",
    }
    return {
        "$schema": JSON_SCHEMA,
        "title": "ddp-job values (ddpctl JobSpec, camelCase)",
        "description": (
            "GENERATED from cli/spec.py (make chart-contract). Rejects what ddpctl's JobSpec rejects where JSON "
            "Schema can say it; rules across keys that it cannot (elastic MIN <= MAX <= "
            f"{S.MAX_NODES}, procsPerNode <= gpusPerNode, generated pod names within {S.MAX_DNS_LABEL} characters, "
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
    defaults = S.JobSpec().to_dict()
    lines = [_HEADER]
    for key, f, tp in _fields(S.JobSpec):
        lines += _comment(_doc(f, key), "")
        if _is_dataclass_type(tp):
            lines.append(f"{key}:")
            for sub_key, sub_field, _ in _fields(tp):
                lines += _comment(_doc(sub_field, f"{key}.{sub_key}"), "  ")
                lines.append("  " + dump_portable({sub_key: defaults[key][sub_key]}).rstrip("\n"))
        else:
            lines.append(dump_portable({key: defaults[key]}).rstrip("\n"))
    return "\n".join(lines) + "\n"


def generated(chart_dir: Path = CHART_DIR) -> dict[Path, str]:
    return {chart_dir / "values.yaml": values_yaml(), chart_dir / "values.schema.json": values_schema_json()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpctl.chart_contract", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a committed file differs from the spec's")
    mode.add_argument("--write", action="store_true", help="rewrite the files from the spec")
    parser.add_argument("--chart-dir", type=Path, default=CHART_DIR)
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated(args.chart_dir).items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.write:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        else:
            stale.append(path)
    for path in stale:
        print(f"{path} differs from cli/spec.py: run `make chart-contract`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
