"""The spec's serialised form (ddp.yaml, Helm values, `ddpctl init`): camelCase keys, node counts
as `N` or `MIN:MAX`, env values as strings, a null list or map as empty.

Both directions follow the declared fields (spec/fields): a key's rule says whether it is a
scalar, a list, a map or a nested part, and parts are read and written key by key. An unknown key
is refused with the nearest known one (`rendezvous.prot: is not a known key; did you mean port?`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ddpctl.errors import SpecError
from ddpctl.spec.checks import did_you_mean
from ddpctl.spec.fields import Declared, EnvValue, NodeCount, Part, declared
from ddpctl.spec.fields import camel as camel

# With node groups, the uniform layout's keys are the groups' to say.
UNIFORM_LAYOUT = ("nodes", "gpusPerNode", "procsPerNode")


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def key_fix(key: str, known: Any) -> str:
    near = did_you_mean(key, known)
    return f"did you mean {near}?" if near else f"use one of {', '.join(known)}"


def parse_nodes(value: Any, field_name: str = "nodes") -> tuple[int, int | None, int | None]:
    """`2` -> fixed; `"1:4"` -> elastic. Returns (nodes, min_nodes, max_nodes)."""
    if isinstance(value, bool):
        raise SpecError(field_name, f"{value!r} is not a node count", "use a number like 2 or a range like 1:4")
    if isinstance(value, int):
        return value, None, None
    text = str(value).strip()
    if re.fullmatch(r"[0-9]+", text):
        return int(text), None, None
    match = re.fullmatch(r"([0-9]+):([0-9]+)", text)
    if not match:
        raise SpecError(field_name, f"{value!r} is not a node count", "use a number like 2 or a range like 1:4")
    low, high = int(match.group(1)), int(match.group(2))
    return high, low, high


def env_value(field_name: str, value: Any) -> Any:
    """YAML turns `OMP_NUM_THREADS: 4` into an int; env values are strings, so numbers are kept
    as written. Booleans are refused: YAML's `yes`/`on` would silently become 'True'."""
    if isinstance(value, bool):
        raise SpecError(field_name, f"{value!r} is a boolean", "quote it, e.g. \"true\"")
    if isinstance(value, (int, float)):
        return str(value)
    return value


def plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


# ------------------------------------------------------------------------------------ reading


def _under(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def read_keys(cls: type, where: str, data: Any, fix: str) -> dict[str, Any]:
    """The field values of spec part `cls` from its camelCase map `data` at `where`."""
    if not isinstance(data, Mapping):
        raise SpecError(where, f"expected a map, got {type(data).__name__}", fix)
    keys = {k.key: k for k in declared(cls)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in keys:
            raise SpecError(_under(where, key), "is not a known key", key_fix(str(key), sorted(keys)))
        values[keys[key].name] = read_value(keys[key], _under(where, key), value)
    for k in keys.values():
        if k.required and k.key not in data:
            raise SpecError(_under(where, k.key), "is missing", fix)
    return values


def read_value(key: Declared, where: str, value: Any) -> Any:
    """One key's value as its field holds it; a value of the wrong shape is refused here, with its path."""
    rule = key.rule
    if isinstance(rule, Part):
        if value is None and key.nullable:
            return None
        if value is None and rule.null_is_empty:
            return rule.cls()
        return rule.cls(**read_keys(rule.cls, where, value, rule.fix))
    if rule.shape == "list":
        if value is None:
            return ()
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise SpecError(where, f"expected a list, got {type(value).__name__}", "write it as a YAML list")
        item = getattr(rule, "item", None)
        if isinstance(item, Part):
            return tuple(item.cls(**read_keys(item.cls, f"{where}[{i}]", v, item.fix)) for i, v in enumerate(value))
        return value
    if rule.shape == "map":
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise SpecError(where, f"expected a map, got {type(value).__name__}", "write it as key: value pairs")
        entry = getattr(rule, "values", None)
        if isinstance(entry, Part):
            return {k: entry.cls(**read_keys(entry.cls, f"{where}.{k}", v, entry.fix)) for k, v in value.items()}
        if isinstance(entry, EnvValue):
            return {k: env_value(f"{where}.{k}", v) for k, v in value.items()}
    return value


def spec_kwargs(cls: type, data: Any) -> dict[str, Any]:
    """A JobSpec's field values from its camelCase map: `nodes` becomes nodes, minNodes and maxNodes;
    node groups replace the uniform layout's keys; a script or command replaces the default module."""
    if not isinstance(data, Mapping):
        raise SpecError(
            "spec", f"expected a map at the top level, got {type(data).__name__}", "see `ddpctl init` for an example"
        )
    nodes = next(k.key for k in declared(cls) if isinstance(k.rule, NodeCount))
    kwargs = read_keys(cls, "", {k: v for k, v in data.items() if k != nodes}, "see `ddpctl init` for an example")
    if nodes in data:
        kwargs["nodes"], kwargs["min_nodes"], kwargs["max_nodes"] = parse_nodes(data[nodes], nodes)
    if kwargs.get("node_groups"):
        both = [k for k in UNIFORM_LAYOUT if k in data]
        if both:
            raise SpecError(
                "nodeGroups",
                f"is set together with {', '.join(both)}",
                "give nodes, gpusPerNode and procsPerNode in each group, or drop nodeGroups",
            )
    if kwargs.get("command") or kwargs.get("script"):
        kwargs.setdefault("module", None)  # a file that names a script/command replaces the default module
    return kwargs


# ------------------------------------------------------------------------------------ writing


def part_dict(part: Any, *, compact: bool = False) -> dict[str, Any]:
    """A spec part's camelCase map, every key in field order; `compact` leaves out a null or empty
    one (a node group says only what it sets)."""
    out: dict[str, Any] = {}
    for key in declared(type(part)):
        value = getattr(part, key.name)
        if compact and (value is None or (isinstance(value, (tuple, Mapping)) and not value)):
            continue
        out[key.key] = _written(key, value)
    return out


def _written(key: Declared, value: Any) -> Any:
    rule = key.rule
    if isinstance(rule, Part):
        return None if value is None else part_dict(value)
    item = getattr(rule, "item", None) or getattr(rule, "values", None)
    if isinstance(item, Part):
        if rule.shape == "list":
            return [part_dict(v, compact=True) for v in value]
        return {k: part_dict(v) for k, v in value.items()}
    return plain(value)


def spec_dict(spec: Any) -> dict[str, Any]:
    """A JobSpec's camelCase map (what `init` and Helm values hold): an elastic `nodes` as MIN:MAX,
    and with node groups no uniform layout keys."""
    out = part_dict(spec)
    if spec.min_nodes is not None:
        out["nodes"] = f"{spec.min_nodes}:{spec.max_nodes}"
    if spec.node_groups:
        for key in UNIFORM_LAYOUT:
            del out[key]
    return out
