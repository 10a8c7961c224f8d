"""The reference pages under docs/ that code can write, generated so they cannot drift from it.

- docs/spec-reference.md, whole: every ddp.yaml key (camelCase) with its type, default and doc,
  read from the declared fields of `ddpctl.spec` (each carries `metadata=doc(text, rule)`, the
  same source as the Helm chart's values.yaml and values.schema.json).
- docs/trainer.md, between its GENERATED markers: every flag of the trainer
  (`python -m ddpctl_trainer`) with its environment variable, default and help, read from
  `ddpctl_trainer.config.build_parser()` (torch-free). The rest of that page is written by hand.

    python tools/docs_reference.py --check   # exit 1 naming the stale file (a test runs it)
    python tools/docs_reference.py --write   # regenerate (`make docs`)
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ddpctl.spec import (
    JobSpec,
    NodeGroup,
    Preflight,
    Rendezvous,
    Resources,
    SecretKeyRef,
    Stragglers,
    Topology,
    Volume,
)
from ddpctl.spec.fields import Part, declared, json_schema
from ddpctl.spec.parts import Workspace
from ddpctl_trainer.config import build_parser

REPO = Path(__file__).resolve().parents[1]
COMMAND = "`make docs` (python tools/docs_reference.py --write)"
SPEC_REFERENCE = Path("docs/spec-reference.md")
TRAINER_PAGE = Path("docs/trainer.md")
TRAINER_ENV_PREFIX = "DDP_TRAINER_"  # the trainer reads DDP_TRAINER_<DEST> for every flag
BEGIN = "<!-- BEGIN GENERATED: trainer flags, by " + COMMAND + " from ddpctl_trainer's argparse help; not by hand -->"
END = "<!-- END GENERATED: trainer flags -->"


# ------------------------------------------------------------------------------------ shared


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lowercase, punctuation dropped, spaces to dashes."""
    kept = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def cell(text: str) -> str:
    """One table cell: a single line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def code(text: str) -> str:
    """Inline code, with a fence long enough for backticks inside."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def yaml_value(value: Any) -> str:
    """A default as it is written in ddp.yaml (flow style)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    return str(value)


# ------------------------------------------------------------------------------------ the spec

# The parts of a spec, where each sits in ddp.yaml (in the order the page lists them).
PARTS: tuple[tuple[type, str], ...] = (
    (Rendezvous, "rendezvous"),
    (Resources, "resources"),
    (NodeGroup, "nodeGroups[]"),
    (Topology, "topology, nodeGroups[].topology"),
    (Volume, "volumes.<NAME>"),
    (SecretKeyRef, "secretEnv.<VAR>"),
    (Workspace, "workspace"),
    (Preflight, "preflight"),
    (Stragglers, "stragglers"),
)

_SPEC_INTRO = """\
# ddp.yaml reference

Every key of a job spec: `ddp.yaml` (`ddpctl init` writes one with every key commented), the
values of the Helm chart `charts/ddp-job` (the same keys), and the fields of ddpctl's frozen
`JobSpec`. Keys are camelCase. A spec comes from, in increasing precedence:

    built-in defaults  <  ddp.yaml (or --config FILE)  <  DDPCTL_* environment  <  command-line flags

Maps merge across those layers; other values are replaced. Scalar top-level keys are read from
`DDPCTL_<KEY>` (upper snake case: `DDPCTL_GPUS_PER_NODE=8`), the `rendezvous`, `resources`,
`preflight` and `stragglers` keys from `DDPCTL_RENDEZVOUS_PORT`-style names. The command-line
flags are in `ddpctl render --help`.
A value outside the rules below is refused with one line naming the key; the full JSON Schema
(patterns included) is `charts/ddp-job/values.schema.json`.
"""


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _part_link(tp: type) -> str:
    return f"[{tp.__name__}](#{anchor(tp.__name__)})"


def type_text(tp: Any) -> str:
    """A field's annotation in words: `string or null`, `list of string`, `map of Volume`."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return " or ".join("null" if arg is type(None) else type_text(arg) for arg in typing.get_args(tp))
    if _is_dataclass_type(tp):
        return _part_link(tp)
    origin = typing.get_origin(tp) or tp
    args = typing.get_args(tp)
    if origin is bool:
        return "boolean"
    if origin is int:
        return "integer"
    if origin is float:
        return "number"
    if origin is str:
        return "string"
    if origin is tuple:
        return "list of " + type_text(args[0]) if args else "list"
    if isinstance(origin, type) and issubclass(origin, Mapping):
        if len(args) == 2 and args[1] is not Any:
            return "map of " + type_text(args[1])
        return "map"
    return "any"


def _field_type(tp: Any, schema: Mapping[str, Any]) -> str:
    """The annotation's words, unless the schema takes several JSON types (`nodes`: 2 or "1:4")."""
    alternatives = schema.get("oneOf")
    if isinstance(alternatives, list) and all(isinstance(a, Mapping) and "type" in a for a in alternatives):
        return " or ".join(str(a["type"]) for a in alternatives)
    return type_text(tp)


def _rules(schema: Mapping[str, Any]) -> str:
    """The schema's simple rules, in words (patterns stay in values.schema.json)."""
    out = []
    if "enum" in schema:
        out.append("one of " + ", ".join(code(yaml_value(v)) for v in schema["enum"]))
    bounds = [schema]
    if isinstance(schema.get("oneOf"), list):
        bounds += [a for a in schema["oneOf"] if isinstance(a, Mapping)]
    for rules in bounds:
        low, high = rules.get("minimum"), rules.get("maximum")
        above, below = rules.get("exclusiveMinimum"), rules.get("exclusiveMaximum")
        if above is not None and below is not None:
            out.append(f"above {above}, below {below}")
        elif low is not None and high is not None:
            out.append(f"{low} to {high}")
        elif low is not None:
            out.append(f"at least {low}")
        elif high is not None:
            out.append(f"at most {high}")
    if "maxLength" in schema:
        out.append(f"at most {schema['maxLength']} characters")
    return "; ".join(out)


def _doc(cls: type, f: dataclasses.Field[Any]) -> str:
    if "doc" not in f.metadata:
        raise ValueError(f"{cls.__name__}.{f.name} has no doc: give the field metadata=doc(text, rule) in ddpctl.spec")
    return str(f.metadata["doc"])


def _default(f: dataclasses.Field[Any], tp: Any) -> str:
    if _is_dataclass_type(tp):
        return "see " + _part_link(tp)
    if f.default is not dataclasses.MISSING:
        return code(yaml_value(f.default))
    factory: Any = f.default_factory
    if factory is not dataclasses.MISSING:
        return code(yaml_value(factory()))
    return "required"


def _keyed_fields(cls: type) -> list[tuple[str, dataclasses.Field[Any], Any]]:
    """(key, field, resolved annotation) of each key a part of the spec declares, in field order
    (min_nodes/max_nodes come from `nodes`, not keys of their own)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    return [(k.key, fields[k.name], hints[k.name]) for k in declared(cls)]


def _table(cls: type) -> list[str]:
    lines = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    defaults = JobSpec().to_dict() if cls is JobSpec else None
    for key, f, tp in _keyed_fields(cls):
        schema = json_schema(cls, f.name)
        doc = _doc(cls, f)
        rules = _rules(schema)
        if rules:
            doc = f"{doc} *Rules:* {rules}."
        if defaults is not None and not _is_dataclass_type(tp):
            default = code(yaml_value(defaults[key]))
        else:
            default = _default(f, tp)
        lines.append(f"| {code(key)} | {cell(_field_type(tp, schema))} | {cell(default)} | {cell(doc)} |")
    return lines


def nested_parts(cls: type = JobSpec) -> list[type]:
    """The spec parts reachable from `cls` through its keys' rules (a part, a list or map of parts)."""
    found: list[type] = []
    for key in declared(cls):
        rule = key.rule
        for inner in (rule, getattr(rule, "item", None), getattr(rule, "values", None)):
            if isinstance(inner, Part) and inner.cls not in found:
                found += [inner.cls, *(p for p in nested_parts(inner.cls) if p not in found)]
    return found


def spec_reference() -> str:
    """docs/spec-reference.md: the top-level keys, then each nested part of the spec."""
    missing = [p.__name__ for p in nested_parts() if p not in dict(PARTS)]
    if missing:
        raise ValueError(f"teach tools/docs_reference.py PARTS where {', '.join(missing)} sits in ddp.yaml")
    lines = [f"<!-- GENERATED by {COMMAND} from the field docs of ddpctl.spec: edit those, not this file. -->"]
    lines += [_SPEC_INTRO, "## Top-level keys", "", *_table(JobSpec)]
    for cls, where in PARTS:
        places = ", ".join(code(p.strip()) for p in where.split(","))
        doc = " ".join((inspect.getdoc(cls) or "").split())
        lines += ["", f"## {cls.__name__}", "", f"At {places}. {doc}", "", *_table(cls)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ the trainer


def trainer_env(action: argparse.Action) -> str:
    return TRAINER_ENV_PREFIX + action.dest.upper()


def _flag(action: argparse.Action) -> str:
    flags = [f for f in action.option_strings if not f.startswith("--no-")]
    text = " ".join(code(f) for f in flags)
    if isinstance(action, argparse.BooleanOptionalAction):
        text += " / " + " ".join(code(f) for f in action.option_strings if f.startswith("--no-"))
    elif action.nargs != 0:
        text += " " + ("N" if action.type is int else "X" if action.type is float else "TEXT")
    return text


def _help(action: argparse.Action) -> str:
    """The help text without the `(default: X)` tail --help adds (the table has a column for it)."""
    text = (action.help or "").replace("%%", "%")
    for tail in (f" (default: {action.default})", f"(default: {action.default})"):
        if text.endswith(tail):
            text = text[: -len(tail)]
    if action.choices is not None:
        text = text.rstrip(".")
        choices = ", ".join(code(str(c)) for c in action.choices)
        text = f"{text}; one of {choices}" if text else f"one of {choices}"
    return text


def _flag_default(action: argparse.Action) -> str:
    if action.default is None or action.default is argparse.SUPPRESS:
        return "none"
    if isinstance(action.default, bool):
        return code("true" if action.default else "false")
    return code(str(action.default))


def trainer_flags(parser_factory: Callable[[], argparse.ArgumentParser] | None = None) -> str:
    """The trainer's flags, one table per argparse group, in --help order."""
    parser = (parser_factory or build_parser)()
    lines = [BEGIN, ""]
    for group in parser._action_groups:  # argparse has no public iterator over its groups
        actions = [a for a in group._group_actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        lines += [f"### {group.title}", "", "| flag | environment | default | meaning |", "| --- | --- | --- | --- |"]
        for action in actions:
            row = [_flag(action), code(trainer_env(action)), _flag_default(action), _help(action)]
            lines.append("| " + " | ".join(cell(c) for c in row) + " |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def splice(page: str, region: str) -> str:
    """`page` with the text between its GENERATED markers replaced by `region` (markers included)."""
    begin = page.find("<!-- BEGIN GENERATED: trainer flags")
    end = page.find(END)
    if begin < 0 or end < begin:
        raise ValueError(f"{TRAINER_PAGE} has no GENERATED markers: put {BEGIN!r} ... {END!r} where the flags go")
    return page[:begin] + region + page[end + len(END) :]


# ------------------------------------------------------------------------------------ files


def generated(root: Path = REPO) -> dict[Path, str]:
    """Each generated page's path under `root` and the text it must hold."""
    trainer_page = root / TRAINER_PAGE
    return {
        root / SPEC_REFERENCE: spec_reference(),
        trainer_page: splice(trainer_page.read_text(encoding="utf-8"), trainer_flags()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/docs_reference.py", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a committed page differs from the code's")
    mode.add_argument("--write", action="store_true", help="rewrite the generated pages and regions")
    parser.add_argument("--root", type=Path, default=REPO, help="the repository whose docs/ to check or write")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated(args.root).items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.write:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        else:
            stale.append(path)
    for path in stale:
        shown = path.relative_to(args.root) if path.is_relative_to(args.root) else path
        print(f"{shown} is stale: the code it documents changed; run {COMMAND} and commit it", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
