"""The Helm chart's contract, generated from ddpctl's Python: one source, no hand-written copy.

- charts/ddp-job/values.yaml (every key's default with its doc) and values.schema.json (every key's
  rules) come from the JobSpec's fields: the doc and JSON-Schema keywords each field carries
  (`metadata=doc(...)`), its type annotation, and the spec's constants. Rules that span keys are
  derived from the same constants and from the engines' own naming.
- charts/ddp-job/templates/_generated.tpl holds, as one JSON dict the chart reads with `fromJson`,
  what the chart's templates would otherwise restate: the spec's limits and defaults, every error
  message the chart can raise (field, problem and fix, as the Python that raises it words them),
  and per engine its names, wiring, failure rules and what it refuses.

Nothing in the second file is copied from the source: each entry is read off the code by running
it on probe specs. A text that depends on the spec (a message naming a value, a pod's hostname, an
env value) is derived as a template with `%(arg)` placeholders from two or more probes whose
arguments differ, and must reproduce the code's output for every probe; generation fails when no
single template fits (then the code changed shape, and a probe or the chart must follow).

    python tools/chart_contract.py --check   # exit 1 naming each stale file (a test runs it)
    python tools/chart_contract.py --write   # regenerate them (`make chart-contract`)
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ddpctl.engines import ENGINES, plan_for
from ddpctl.errors import SpecError
from ddpctl.manifests.render import view
from ddpctl.manifests.yamlsafe import dump_portable
from ddpctl.plan import Node, Plan
from ddpctl.spec import TARGETS, JobSpec, NodeGroup, Topology, camel, kueue
from ddpctl.spec.names import MAX_DNS_LABEL
from ddpctl.spec.schema import GRACE_MARGIN, MAX_NODES, POD_SECURITY, RESTART_POLICIES
from ddpctl_trainer import protocol

REPO = Path(__file__).resolve().parents[1]
CHART_DIR = REPO / "charts" / "ddp-job"
COMMAND = "`make chart-contract` (python tools/chart_contract.py --write)"
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
    """(camelCase key, field, resolved type) of the keys a dataclass serialises, in order."""
    hints = typing.get_type_hints(cls)
    keys = set(cls().to_dict()) if cls is JobSpec else None
    out = []
    for f in dataclasses.fields(cls):
        key = camel(f.name)
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
    raise TypeError(f"no JSON type for {tp!r}: teach tools/chart_contract.py _json_types")


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
        raise ValueError(f"{key}: give the field a doc (metadata=doc(...))")
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


# ------------------------------------------------------------------------------------ templates from probes

Args = dict[str, Any]
PLACEHOLDER = re.compile(r"%\((\w+)\)")  # the chart's `ddp-job.format` fills the same placeholders
MAX_AMBIGUOUS = 12  # occurrences of argument values in one text that may each be literal or not


def fill(template: Any, args: Mapping[str, Any]) -> Any:
    """A template (a text or JSON holding `%(arg)` placeholders) with its arguments filled in."""
    if isinstance(template, str):
        return PLACEHOLDER.sub(lambda m: str(args[m.group(1)]), template)
    if isinstance(template, Mapping):
        return {k: fill(v, args) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, args) for v in template]
    return template


def derive(produce: Callable[[Args], Any], probes: Sequence[Args]) -> Any:
    """The template of `produce`'s output (a text, or JSON of texts) over its arguments, from its
    output on each probe. Arguments whose value is the same in every probe stay literal; those
    named `_...` are for `produce` alone."""
    outputs = [json.loads(json.dumps(produce(p))) for p in probes]
    return _derive(outputs, probes, "")


def _derive(outputs: list[Any], probes: Sequence[Args], where: str) -> Any:
    first = outputs[0]
    if isinstance(first, str) and all(isinstance(o, str) for o in outputs):
        return _derive_text(outputs, probes, where)
    if isinstance(first, dict) and all(isinstance(o, dict) and list(o) == list(first) for o in outputs):
        return {k: _derive([o[k] for o in outputs], probes, f"{where}.{k}") for k in first}
    if isinstance(first, list) and all(isinstance(o, list) and len(o) == len(first) for o in outputs):
        return [_derive([o[i] for o in outputs], probes, f"{where}[{i}]") for i in range(len(first))]
    if any(o != first for o in outputs):
        raise ValueError(f"{where or 'output'} changes shape between probes: {outputs!r}")
    return first


def _derive_text(texts: list[str], probes: Sequence[Args], where: str) -> str:
    text = texts[0]
    if "%" in text:
        raise ValueError(f"{where}: {text!r} holds '%', which the chart's templates read as a placeholder")
    varying = [
        n for n in probes[0] if not n.startswith("_") and str(probes[0][n]) and len({str(p[n]) for p in probes}) > 1
    ]
    spans: list[tuple[int, int, str]] = []  # where each argument's value shows in the first text
    taken: set[int] = set()
    for name in sorted(varying, key=lambda n: -len(str(probes[0][n]))):
        value = re.escape(str(probes[0][name]))
        for m in re.finditer(rf"(?<![A-Za-z0-9]){value}(?![A-Za-z0-9])", text):
            if taken.isdisjoint(range(m.start(), m.end())):
                spans.append((m.start(), m.end(), name))
                taken.update(range(m.start(), m.end()))
    spans.sort()
    if len(spans) > MAX_AMBIGUOUS:
        raise ValueError(f"{where}: {len(spans)} argument values in {text!r}: give the probes rarer values")
    fits = []
    for chosen in itertools.product((False, True), repeat=len(spans)):
        template, end = "", 0
        for (start, stop, name), placeholder in zip(spans, chosen):
            if placeholder:
                template += text[end:start] + f"%({name})"
                end = stop
        template += text[end:]
        if all(fill(template, p) == t for p, t in zip(probes, texts)):
            fits.append(template)
    if len(fits) != 1:
        raise ValueError(f"{where}: {len(fits)} templates fit {texts!r} over {list(probes)!r}: change a probe")
    return fits[0]


def _refusal(values: Mapping[str, Any]) -> SpecError | None:
    """What ddpctl says of a spec dict: None when it renders, else its first error."""
    try:
        plan_for(JobSpec.from_dict(values))
    except SpecError as exc:
        return exc
    return None


def _message(spec: Callable[[Args], Mapping[str, Any]] | Mapping[str, Any], *probes: Args) -> dict[str, str]:
    """The template of the error ddpctl gives for a spec dict (or the one `spec` makes of each probe)."""

    def error(args: Args) -> dict[str, str]:
        values = spec(args) if callable(spec) else spec
        exc = _refusal(values)
        if exc is None:
            raise ValueError(f"probe {dict(values)!r} is not refused: the rule it probes changed")
        return {"field": exc.field, "problem": exc.problem, "fix": exc.fix}

    return typing.cast(dict[str, str], derive(error, probes or [{}]))


def _plan(values: Mapping[str, Any]) -> Plan:
    return plan_for(JobSpec.from_dict(values))


def _groups(*shapes: tuple[str, int, int] | dict[str, Any]) -> list[dict[str, Any]]:
    """nodeGroups entries from (name, nodes, gpusPerNode) or whole maps."""
    return [s if isinstance(s, dict) else {"name": s[0], "nodes": s[1], "gpusPerNode": s[2]} for s in shapes]


def _after(index: int, *groups: dict[str, Any], gpus: int = 1) -> dict[str, Any]:
    """A spec whose groups from number `index` on are `groups`, after groups of `gpus` GPUs each."""
    return {"nodeGroups": [*_groups(*((f"z{i}", 1, gpus) for i in range(index))), *groups]}


LEVEL = "example.com/zone"  # a topology level (a node label key)
TOPOLOGY, GROUP_TOPOLOGY = {"where": "topology"}, {"where": "nodeGroups[0].topology"}


def _topology_at(where: str, topology: dict[str, Any], nodes: int = 2) -> dict[str, Any]:
    """A spec with `topology` at `where`: the spec's own, or its one group's."""
    if where == TOPOLOGY["where"]:
        return {"nodes": nodes, "topology": topology}
    return {"nodeGroups": _groups({"name": "za", "nodes": nodes, "gpusPerNode": 0, "topology": topology})}


def _keys(a: Args, key: str) -> list[str]:
    return str(a[key]).split(", ")


# ------------------------------------------------------------------------------------ the spec's rules


def field_messages() -> dict[str, dict[str, str]]:
    """The JobSpec's rules that JSON Schema cannot state (they span keys), which the chart checks at
    render time: each error's field, problem and fix, as templates over the values the chart knows."""
    return {
        "groupName": _message(
            lambda a: _after(a["_index"] - 1, *_groups(*[(a["name"], 1, 1)] * 2)),
            {"where": "nodeGroups[1]", "name": "zdup", "_index": 1},
            {"where": "nodeGroups[2]", "name": "ztwice", "_index": 2},
        ),
        "groupProcs": _message(
            lambda a: _after(
                a["_index"], {"name": "zg", "nodes": 1, "gpusPerNode": a["gpus"], "procsPerNode": a["procs"]}
            ),
            {"where": "nodeGroups[0]", "procs": 5, "gpus": 3, "_index": 0},
            {"where": "nodeGroups[1]", "procs": 4, "gpus": 2, "_index": 1},
        ),
        "groupGpus": _message(
            lambda a: _after(a["_index"], *_groups(("zg", 1, a["gpus"])), gpus=a["first"]),
            {"where": "nodeGroups[1]", "gpus": 7, "first": 0, "_index": 1},
            {"where": "nodeGroups[2]", "gpus": 0, "first": 6, "_index": 2},
        ),
        "groupsNodes": _message(
            lambda a: {"nodeGroups": _groups(("za", a["total"] - 1, 0), ("zb", 1, 0))}, {"total": 1025}, {"total": 1030}
        ),
        "groupsWithLayout": _message(
            lambda a: {**_after(0, *_groups(("za", 1, 1))), **dict.fromkeys(_keys(a, "keys"), 1)},
            {"keys": "nodes"},
            {"keys": "gpusPerNode, procsPerNode"},
        ),
        "nodes": _message(lambda a: {"nodes": str(a["nodes"])}, {"nodes": 1025}, {"nodes": 3000}),
        "nodesRange": _message(
            lambda a: {"nodes": f"{a['min']}:{a['max']}"}, {"min": 5, "max": 3}, {"min": 9, "max": 2}
        ),
        "nodesMax": _message(lambda a: {"nodes": f"1:{a['max']}"}, {"max": 1025}, {"max": 2000}),
        "procs": _message(
            lambda a: {"gpusPerNode": a["gpus"], "procsPerNode": a["procs"]},
            {"procs": 5, "gpus": 3},
            {"procs": 4, "gpus": 2},
        ),
        "entrypoint": _message(
            lambda a: typing.cast(dict[str, Any], a["_values"]),
            {"chosen": "none", "_values": {"module": None}},
            {"chosen": "module, script", "_values": {"module": "zmod", "script": "zs"}},
        ),
        "backend": _message({"backend": "nccl"}),
        "secretEnv": _message(
            lambda a: (
                {"env": dict.fromkeys(_keys(a, "names"), "x")}
                | {"secretEnv": {name: {"secret": "s", "key": "k"} for name in _keys(a, "names")}}
            ),
            {"names": "ZA"},
            {"names": "ZB, ZC"},
        ),
        "mountPath": _message(
            lambda a: {"volumes": {v: {"claimName": "c", "mountPath": a["path"]} for v in (a["other"], a["volume"])}},
            {"volume": "zb", "other": "za", "path": "/zp"},
            {"volume": "zd", "other": "zc", "path": "/zq/r"},
        ),
        "checkpointsTrainer": _message({"checkpoints": "s3://zb/p", "module": "zmod"}),
        "checkpointsVolume": _message(
            {"checkpoints": "s3://zb/p", "volumes": {"checkpoints": {"claimName": "c", "mountPath": "/zc"}}}
        ),
        "checkpointsArgs": _message({"checkpoints": "s3://zb/p", "args": ["--checkpoint-dir", "/zc"]}),
        "topologyModes": _message(
            lambda a: _topology_at(
                a["where"], {a["first"]: LEVEL} | {a["second"]: a["second"] == "unconstrained" or LEVEL}
            ),
            {**TOPOLOGY, "first": "required", "second": "preferred"},
            {**GROUP_TOPOLOGY, "first": "preferred", "second": "unconstrained"},
        ),
        "sliceSizeMissing": _message(
            lambda a: _topology_at(a["where"], {"sliceLevel": LEVEL}), TOPOLOGY, GROUP_TOPOLOGY
        ),
        "sliceLevelMissing": _message(lambda a: _topology_at(a["where"], {"sliceSize": 1}), TOPOLOGY, GROUP_TOPOLOGY),
        "sliceElastic": _message({"nodes": "1:4", "topology": {"sliceLevel": LEVEL, "sliceSize": 2}}),
        "sliceDivides": _message(
            lambda a: _topology_at(a["where"], {"sliceLevel": LEVEL, "sliceSize": a["size"]}, a["pods"]),
            {**TOPOLOGY, "size": 4, "pods": 6, "divisors": "1, 2, 3, 6"},
            {**GROUP_TOPOLOGY, "size": 3, "pods": 10, "divisors": "1, 2, 5, 10"},
        ),
        "collectiveTimeout": _message(
            lambda a: {"collectiveTimeout": a["collective"], **a["_stall"]},
            {"collective": 250, "stall": protocol.STALL_TIMEOUT_S, "_stall": {}},
            {"collective": 100, "stall": 120, "_stall": {"stallTimeout": 120}},
        ),
        "stallTimeout": _message(lambda a: {"stallTimeout": a["stall"]}, {"stall": 700}, {"stall": 650}),
    }


# ------------------------------------------------------------------------------------ the engines

# What an engine may refuse (its `check`), each as a change to a spec dict that asks for it; the
# group rules are the shapes of node groups an engine may or may not lay out.
ENGINE_RULES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "exitCode": lambda d: {**d, "restartPolicy": "ExitCode"},
    "elastic": lambda d: {**d, "nodes": "1:3"},
    "groups:one": lambda d: {**d, "nodeGroups": _groups(("za", 2, 0))},
    "groups:pairSingleFirst": lambda d: {**d, "nodeGroups": _groups(("za", 1, 0), ("zb", 2, 0))},
    "groups:pair": lambda d: {**d, "nodeGroups": _groups(("za", 2, 0), ("zb", 1, 0))},
    "groups:more": lambda d: {**d, "nodeGroups": _groups(("za", 1, 0), ("zb", 1, 0), ("zc", 1, 0))},
    "c10dGroups": lambda d: {"nodeGroups": _groups(("za", 2, 0)), **d, "rendezvous": {"mode": "c10d"}},
    "slices": lambda d: {**d, "topology": {"sliceLevel": LEVEL, "sliceSize": 1}},
    "priorityClassName": lambda d: {**d, "priorityClassName": "zprio"},
    "envFromSecrets": lambda d: {**d, "envFromSecrets": ["zsecret"]},
}


def _refusals(target: str) -> list[dict[str, Any]]:
    """The rules `target`'s engine refuses, each with its message, in the order the engine checks
    them (found by breaking two at a time); the group shapes it refuses are one rule, `groups`."""
    base = {"target": target}
    found: dict[str, tuple[tuple[str, str], dict[str, str]]] = {}
    for rule, ask in ENGINE_RULES.items():
        exc = _refusal(ask(base))
        if exc is not None:
            message = _message(ask(base))
            if rule == "slices":  # the key names where the topology was asked for
                message = _message(
                    lambda a: {**_topology_at(a["where"], ENGINE_RULES["slices"]({})["topology"]), **base},
                    TOPOLOGY,
                    GROUP_TOPOLOGY,
                )
            found[rule] = (exc.field, exc.problem), message
    first_of: dict[str, set[str]] = {rule: set() for rule in found}
    for a, b in itertools.combinations(found, 2):
        values = ENGINE_RULES[b](ENGINE_RULES[a](base))
        try:
            JobSpec.from_dict(values)
        except SpecError:
            continue  # a spec cannot ask for both: their order does not matter
        exc = _refusal(values)
        said = None if exc is None else (exc.field, exc.problem)
        if said not in (found[a][0], found[b][0]):
            if a.startswith("groups:") and b.startswith("groups:"):
                continue  # the second shape replaced the first
            raise ValueError(f"{target}: breaking {a} and {b} gives {exc}, neither's error")
        first, second = (a, b) if said == found[a][0] else (b, a)
        first_of[second].add(first)
    ordered: list[str] = []
    while len(ordered) < len(found):
        ordered.append(next(r for r in found if r not in ordered and first_of[r] <= set(ordered)))
    out: list[dict[str, Any]] = []
    for rule in ordered:
        kind, _, shape = rule.partition(":")
        entry = {"rule": kind, **found[rule][1]}
        if shape and out and {k: v for k, v in out[-1].items() if k != "shapes"} == entry:
            out[-1]["shapes"].append(shape)
        else:
            out.append({**entry, "shapes": [shape]} if shape else entry)
    return out


LAYOUTS = ("fixed", "grouped", "elastic")
MODES = ("static", "c10d")
# Two probes of a job, for templates over what the chart knows of it: every value distinct.
PROBES: tuple[Args, Args] = (
    {"name": "zalpha", "group": "zgone", "port": 29517, "join": 601, "lastCall": 31, "maxRestarts": 4, "min": 3}
    | {"nodes": 13, "nproc": 5},
    {"name": "zbeta", "group": "zgtwo", "port": 23456, "join": 901, "lastCall": 17, "maxRestarts": 6, "min": 2}
    | {"nodes": 11, "nproc": 3},
)
CODES: dict[str, dict[str, Any]] = {
    "builtin": {},
    "custom": {"module": "zmod.train"},
}  # the ddpctl trainer, or other code


def _job(target: str, layout: str, mode: str, p: Args, groups: int = 1) -> dict[str, Any]:
    """Probe `p` as a spec dict of `layout`: with node groups, its group last (after a 1-node one)."""
    rdzv = {"mode": mode, "port": p["port"], "joinTimeout": p["join"], "lastCallTimeout": p["lastCall"]}
    values = {"target": target, "name": p["name"], "rendezvous": {**rdzv, "maxRestarts": p["maxRestarts"]}}
    if layout == "grouped":
        first = [{"name": "za", "nodes": 1, "gpusPerNode": 0, "procsPerNode": p["nproc"] + 2}][: groups - 1]
        last = {"name": p["group"], "nodes": p["nodes"] - len(first), "gpusPerNode": 0, "procsPerNode": p["nproc"]}
        return {**values, "nodeGroups": [*first, last]}
    return {
        **values,
        "nodes": f"{p['min']}:{p['nodes']}" if layout == "elastic" else p["nodes"],
        "procsPerNode": p["nproc"],
    }


def _runnable(target: str, layout: str, p: Args = PROBES[0], groups: int = 2, **values: Any) -> Plan | None:
    """The plan of probe `p` in `layout` (with `values`) on `target`, in the first rendezvous mode
    and group count (`groups` or 1) the engine runs; None when it runs none."""
    for mode, count in itertools.product(MODES, (groups, 1)):
        try:
            return _plan({**_job(target, layout, mode, p, count), **values})
        except SpecError:
            continue
    return None


def _names(target: str, layout: str) -> dict[str, Any]:
    """The names `target`'s engine derives in a layout, as templates over the job's and its group's
    name (and, for pods after the first, the pod's index in its group, its node rank and the rank before)."""
    engine = ENGINES[target]

    def plan(a: Args) -> tuple[Plan, NodeGroup]:
        found = _runnable(target, layout, a["_p"], groups=1)
        assert found is not None, f"{target} runs no {layout} layout"
        return found, found.spec.groups[-1]

    def hostname(a: Args) -> str:
        p, group = plan(a)
        return engine.pod_hostname(p, Node(a["rank"], group, 0, a["index"], 0))

    named = [{"name": p["name"], "group": p["group"], "_p": p} for p in PROBES]
    others = [
        {**named[0], "index": 7, "rank": 23, "prevRank": 22},
        {**named[1], "index": 4, "rank": 31, "prevRank": 30},
    ]
    return {
        "hostFirst": derive(lambda a: engine.pod_hostname(plan(a)[0], plan(a)[0].first_node), named),
        "hostOther": derive(hostname, others),
        "rank0": derive(lambda a: plan(a)[0].rank0_host, named),
        "workload": derive(lambda a: engine.workload_name(*plan(a)), named),
        "replicatedJob": derive(lambda a: engine.replicated_job_name(*plan(a)), named),
    }


def _node_rank_entry() -> dict[str, Any]:
    """The env entry that gives PET_NODE_RANK from the completion index (the downward API)."""
    (entry,) = [e for e in view(_plan({"target": "job"}))["env"] if "fieldRef" in e.get("valueFrom", {})]
    return typing.cast(dict[str, Any], entry)


def _wiring(target: str, layout: str, mode: str) -> dict[str, Any] | None:
    """The PET_* env `target`'s engine gives each group's pods in a layout and rendezvous mode
    (Engine.torchrun_env), as templates over what the chart knows of the job and the group, and
    whether PET_NODE_RANK comes from the completion index; None when the engine refuses the case."""
    engine = ENGINES[target]
    for groups in (2, 1) if layout == "grouped" else (1,):
        try:
            plans = [_plan(_job(target, layout, mode, p, groups)) for p in PROBES]
        except SpecError:
            continue
        probes = []
        for p, plan in zip(PROBES, plans):
            for group in plan.spec.groups:
                args = {k: v for k, v in p.items() if k not in ("group", "min", "nodes")}
                args |= {"port": plan.master_port, "rank0": plan.rank0_host, "nproc": group.nproc}
                args |= {"offset": plan.group_offset(group), "_plan": plan, "_group": group}
                # an elastic job's node count is its range
                args |= {"min": p["min"], "max": p["nodes"]} if layout == "elastic" else {"nodes": p["nodes"]}
                probes.append(args)
        return {
            "env": derive(lambda a: engine.torchrun_env(a["_plan"], a["_group"]), probes),
            "nodeRankEntry": _node_rank_entry() in view(plans[0])["env"],
        }
    return None


def _commands(target: str) -> dict[str, Any]:
    """How `target`'s engine changes the pods' command with node groups (Engine.entrypoint), keyed by
    how the command starts: with the launcher of the ddpctl trainer (`builtin`) or of other code
    (`custom`, which a user's own command may start with too). A change puts `prefix` (templates
    over the group's process count) in place of the command's first `drop` words."""
    engine = ENGINES[target]
    user_launcher = list(_plan(CODES["custom"]).launcher)
    kinds: dict[str, list[dict[str, Any]]] = {
        "builtin": [CODES["builtin"]],
        "custom": [{"module": None, "script": "zscript"}, {"module": None, "command": [*user_launcher, "z"]}],
        "": [{"module": None, "command": ["zcmd", "zarg"]}, {"module": None, "command": ["python3", "-m", "x", "z"]}],
    }
    out: dict[str, Any] = {}
    for (kind, entries), layout in itertools.product(kinds.items(), LAYOUTS):
        for values in entries:
            plan = _runnable(target, layout, **values)
            if plan is None:
                continue
            entry, probes = list(plan.entrypoint), []
            for group in plan.spec.groups:
                command = list(engine.entrypoint(plan, group))
                if command != entry:
                    same = [n for n in range(1, min(len(entry), len(command)) + 1) if entry[-n:] == command[-n:]]
                    keep = max(same, default=0)
                    probes.append(
                        {"nproc": group.nproc, "_drop": len(entry) - keep, "_prefix": command[: len(command) - keep]}
                    )
            if probes and (layout != "grouped" or not kind):
                raise ValueError(f"{target}: the {layout} layout changes the command {entry}: teach the chart")
            if probes:
                out[kind] = derive(lambda a: {"drop": a["_drop"], "prefix": a["_prefix"]}, probes)
    return out


def _restarts(target: str) -> dict[str, Any]:
    """The pods' restartPolicy when none is asked for (`default`), and the failure rules `target`'s
    engine renders per restartPolicy (`rules`), each per what the pods run (CODES). A JobSet's
    `failureRules` go with `maxRestarts: backoffLimit`."""
    backoff = 7
    out: dict[str, Any] = {"default": {}, "rules": {}}
    for policy, (code, values) in itertools.product((*RESTART_POLICIES, None), CODES.items()):
        try:
            v = view(_plan({"target": target, "restartPolicy": policy, "backoffLimit": backoff, **values}))
        except SpecError:
            continue
        failure = dict(v.get("failure_policy") or {"maxRestarts": backoff})
        rules = {"podFailurePolicy": v.get("pod_failure_policy"), "failureRules": failure.pop("rules", None)}
        if failure != {"maxRestarts": backoff}:
            raise ValueError(f"{target}: failurePolicy {v['failure_policy']} has more than maxRestarts and rules")
        if policy is not None:
            out["rules"].setdefault(policy, {})[code] = rules
        elif out["rules"][v["restart_policy"]][code] == rules:
            out["default"][code] = v["restart_policy"]
        else:
            raise ValueError(f"{target}: its default restartPolicy has rules of its own: teach the chart")
    return out


def _name_message(target: str) -> dict[str, str]:
    """The error when a name the engine derives from the job's name is longer than a DNS label."""
    probes = []
    for name, nodes in (("za" + "b" * 59, 12), ("zc" + "d" * 60, 120)):
        values = {"target": target, "name": name, "nodes": nodes}
        longest = Plan(JobSpec.from_dict(values), ENGINES[target]).longest_generated_name
        limit = MAX_DNS_LABEL - (len(longest) - len(name))
        probes.append({"name": name, "longest": longest, "length": len(longest), "limit": limit, "_values": values})
    return _message(lambda a: typing.cast(dict[str, Any], a["_values"]), *probes)


def engine_table(target: str) -> dict[str, Any]:
    """What the chart must know of one engine, read off it."""
    engine = ENGINES[target]
    ports = {_plan({"target": target, "rendezvous": {"port": p}}).master_port for p in (1111, 2222)}
    layouts = {}
    for layout in LAYOUTS:
        if _runnable(target, layout) is not None:
            modes = {mode: _wiring(target, layout, mode) for mode in MODES}
            layouts[layout] = {**_names(target, layout), "wiring": {m: w for m, w in modes.items() if w is not None}}
    return {
        "containerName": engine.container_name,
        "portName": engine.port_name,
        "fixedPort": None if ports == {1111, 2222} else ports.pop(),
        "subdomain": derive(lambda a: engine.subdomain(_plan({"target": target, "name": a["name"]})), PROBES),
        "refuses": _refusals(target),
        "nameTooLong": _name_message(target),
        "layouts": layouts,
        "groupCommand": _commands(target),
        "restart": _restarts(target),
    }


# ------------------------------------------------------------------------------------ what every pod gets

FEATURES = ("stall", "gpus", "checkpoints", "collective")  # what the pods' env depends on, besides the engine
ENV_PROBES = (
    {"name": "zalpha", "backend": "gloo", "gpus": 2, "stall": 170, "collective": 950, "grace": 150, "mount": "/zck"},
    {"name": "zbeta", "backend": "nccl", "gpus": 4, "stall": 230, "collective": 880, "grace": 190, "mount": "/zq//"},
)


def _with_features(p: Args, features: Sequence[str]) -> tuple[dict[str, Any], Args]:
    """A spec dict with `features` (from probe `p`), and the env's arguments as the chart has them."""
    values: dict[str, Any] = {"name": p["name"], "gracePeriod": p["grace"]}
    values["backend"] = p["backend"] if "gpus" in features else "gloo"
    if "stall" in features:
        values["stallTimeout"] = p["stall"]
    if "gpus" in features:
        values["gpusPerNode"] = p["gpus"]
    if "checkpoints" in features:
        values["volumes"] = {"checkpoints": {"claimName": "c", "mountPath": p["mount"]}}
    if "collective" in features:
        values["collectiveTimeout"] = p["collective"]
    args = {"name": p["name"], "stall": p["stall"], "collective": p["collective"], "backend": values["backend"]}
    return values, args | {"shutdown": p["grace"] - GRACE_MARGIN, "checkpointMount": p["mount"].rstrip("/")}


def _env(code: str) -> list[dict[str, Any]]:
    """The env ddpctl gives the training container besides the engine's wiring (Plan.container_env)
    for the ddpctl trainer or other code: each variable's template, and the features it needs
    (`when`, all of them; a variable with two entries needs either's)."""

    def env_of(values: dict[str, Any]) -> dict[str, str]:
        plan = _plan({**CODES[code], **values})
        group = plan.spec.groups[0]
        wired = plan.engine.torchrun_env(plan, group)
        return {k: v for k, v in plan.container_env(group).items() if k not in wired}

    probes = [_with_features(p, FEATURES)[1] | {"_values": _with_features(p, FEATURES)[0]} for p in ENV_PROBES]
    templates = derive(lambda a: env_of(a["_values"]), probes)
    subsets = [s for n in range(len(FEATURES) + 1) for s in itertools.combinations(FEATURES, n)]
    present: dict[tuple[str, ...], dict[str, str]] = {}
    for subset in subsets:
        values, args = _with_features(ENV_PROBES[0], subset)
        present[subset] = env = env_of(values)
        if not set(env) <= set(templates) or any(fill(templates[k], args) != v for k, v in env.items()):
            raise ValueError(f"{code} env with {subset}: {env} is not what the templates {templates} make")
    entries = []
    for key, template in templates.items():
        needs = [
            s for s in subsets if key in present[s] and not any(key in present[t] for t in subsets if set(t) < set(s))
        ]
        if any((key in present[s]) != any(set(n) <= set(s) for n in needs) for s in subsets):
            raise ValueError(f"{code} env: {key} goes away with more features: teach the chart")
        entries += [{"name": key, "value": template, "when": list(n)} for n in needs]
    return entries


def _trainer_dirs() -> list[dict[str, str]]:
    """The arguments ddpctl adds for the trainer's volumes (Plan.trainer_args), in their order."""
    paths = {"checkpoints": "/zck", "data": "/zdata"}
    args = _plan({"volumes": {v: {"claimName": "c", "mountPath": p} for v, p in paths.items()}}).trainer_args
    by_path = {p: v for v, p in paths.items()}
    return [{"volume": by_path[path], "flag": flag} for flag, path in zip(args[::2], args[1::2])]


def constants() -> dict[str, Any]:
    trainer, user = _plan({}), _plan(CODES["custom"])
    defaults = JobSpec().to_dict()
    return {
        "maxNodes": MAX_NODES,
        "maxDnsLabel": MAX_DNS_LABEL,
        "graceMargin": GRACE_MARGIN,
        "trainerModule": protocol.TRAINER_MODULE,
        "stallTimeout": protocol.STALL_TIMEOUT_S,
        "collectiveTimeout": protocol.COLLECTIVE_TIMEOUT_S,
        "cpuProcsPerNode": NodeGroup("z", 1, 0).nproc,
        "uniformGroup": JobSpec().groups[0].name,  # the uniform layout's one group
        "backend": {"gpus": _plan({"gpusPerNode": 1}).backend, "cpu": trainer.backend},
        "rendezvous": {"fixed": trainer.rdzv_mode, "elastic": _plan({"nodes": "1:2"}).rdzv_mode},
        "launcher": {"builtin": list(trainer.launcher), "custom": list(user.launcher)},
        "trainerDirs": _trainer_dirs(),
        # with nodeGroups, the uniform layout's keys must stay at their defaults
        "layoutDefaults": [{"key": k, "default": defaults[k]} for k in ("nodes", "gpusPerNode", "procsPerNode")],
    }


def pod_parts() -> dict[str, Any]:
    """What every pod and object carries: labels, Kueue's annotations, security, /dev/shm, env."""
    probes = [
        {"name": p["name"], "group": p["group"], "queue": f"zq-{p['name']}", "size": s} for p, s in zip(PROBES, (2, 3))
    ]
    probes = [p | {"level": f"example.com/{p['name']}"} for p in probes]

    def added(more: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in more.items() if k not in base}

    def group_labels(a: Args) -> dict[str, str]:
        plan = _plan({"name": a["name"], "nodeGroups": _groups((a["group"], 1, 0))})
        return added(plan.groups[0].labels, plan.object_labels)

    return {
        "labels": derive(lambda a: _plan({"name": a["name"]}).object_labels, probes),
        "selector": derive(lambda a: _plan({"name": a["name"]}).selector_labels, probes),
        "groupLabels": derive(group_labels, probes),
        "queueLabels": derive(lambda a: added(_plan({"queue": a["queue"]}).top_labels, _plan({}).top_labels), probes),
        "priorityLabels": derive(
            lambda a: added(_plan({"workloadPriorityClass": a["queue"]}).top_labels, _plan({}).top_labels), probes
        ),
        "topology": {
            "required": derive(lambda a: Topology(required=a["level"]).annotations(), probes),
            "preferred": derive(lambda a: Topology(preferred=a["level"]).annotations(), probes),
            "unconstrained": derive(lambda a: Topology(unconstrained=True).annotations(), probes),
            "slices": derive(lambda a: Topology(slice_level=a["level"], slice_size=a["size"]).annotations(), probes),
            "podsetGroup": kueue.PODSET_GROUP_NAME,
        },
        "security": {
            profile: {k: view(_plan({"podSecurity": profile}))[f"{k}_security_context"] for k in ("pod", "container")}
            for profile in POD_SECURITY
        },
        "shm": derive(
            lambda a: {k: view(_plan({"shmSize": a["size"]}))[k][0] for k in ("volumes", "volume_mounts")},
            [{"size": "3Gi"}, {"size": "700Mi"}],
        ),
        "nodeRankEntry": _node_rank_entry(),
        "gpuToleration": derive(
            lambda a: view(_plan({"gpusPerNode": 1, "resources": {"gpuResource": a["gpu"]}}))["tolerations"][-1],
            [{"gpu": "example.com/zgpu"}, {"gpu": "zother"}],
        ),
        "env": {code: _env(code) for code in CODES},
    }


def generated_data() -> dict[str, Any]:
    return {
        "constants": constants(),
        "pod": pod_parts(),
        "messages": field_messages(),
        "engines": {target: engine_table(target) for target in TARGETS},
    }


def generated_tpl() -> str:
    """templates/_generated.tpl: the data as JSON in a named template (`include ... | fromJson`)."""
    data = json.dumps(generated_data(), indent=2, ensure_ascii=False)
    if "{{" in data or "}}" in data:
        raise ValueError("the generated data holds '{{' or '}}', which Go templates would read as an action")
    return (
        "{{/*\n"
        f"GENERATED from ddpctl's Python by {COMMAND}; do not edit.\n"
        "What _helpers.tpl would otherwise restate: the spec's limits and defaults, the messages of the\n"
        "rules the chart checks at render time, the pods' labels and env, and per engine its names,\n"
        "wiring, failure rules and what it refuses. `%(arg)` in a text is filled by ddp-job.format.\n"
        "*/}}\n"
        '{{- define "ddp-job.generated" -}}\n'
        f"{data}\n"
        "{{- end -}}\n"
    )


def generated(chart_dir: Path = CHART_DIR) -> dict[Path, str]:
    return {
        chart_dir / "values.yaml": values_yaml(),
        chart_dir / "values.schema.json": values_schema_json(),
        chart_dir / "templates" / "_generated.tpl": generated_tpl(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/chart_contract.py", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a committed file differs from the code's")
    mode.add_argument("--write", action="store_true", help="rewrite the files from the code")
    parser.add_argument("--chart-dir", type=Path, default=CHART_DIR, help="the chart whose files to check or write")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated(args.chart_dir).items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        else:
            stale.append(path)
    for path in stale:
        shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        print(f"{shown} is stale: the code it is generated from changed; run {COMMAND}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
