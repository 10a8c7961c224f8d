"""The spec's serialised form (ddp.yaml, Helm values): camelCase keys, node counts as `N` or
`MIN:MAX`, env values as strings; the pieces `JobSpec.from_dict` and `to_dict` are made of."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from ddpctl.errors import SpecError
from ddpctl.spec.checks import did_you_mean


def plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def camel(snake: str) -> str:
    """The spec file's (camelCase) name of a JobSpec field: `gpus_per_node` -> `gpusPerNode`."""
    head, *rest = snake.split("_")
    return head + "".join(p.capitalize() for p in rest)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


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


def sub_dataclass(cls: type, field_name: str, data: Any) -> Any:
    if not isinstance(data, Mapping):
        raise SpecError(field_name, f"expected a map, got {type(data).__name__}", "write it as key: value pairs")
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if snake(key) not in known or key != camel(snake(key)):
            raise SpecError(
                f"{field_name}.{key}", "is not a known key", key_fix(str(key), sorted(camel(k) for k in known))
            )
        kwargs[snake(key)] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise SpecError(field_name, str(exc), "see `ddpctl init` for the keys") from None


def env_value(field_name: str, value: Any) -> Any:
    """YAML turns `OMP_NUM_THREADS: 4` into an int; env values are strings, so numbers are kept
    as written. Booleans are refused: YAML's `yes`/`on` would silently become 'True'."""
    if isinstance(value, bool):
        raise SpecError(field_name, f"{value!r} is a boolean", "quote it, e.g. \"true\"")
    if isinstance(value, (int, float)):
        return str(value)
    return value


def key_fix(key: str, known: Any) -> str:
    near = did_you_mean(key, known)
    return f"did you mean {near}?" if near else f"use one of {', '.join(known)}"
