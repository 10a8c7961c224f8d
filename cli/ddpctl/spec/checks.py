"""Small value checks the spec's rules are written with (and the CLI's flag parsers reuse): each
raises a SpecError naming the field, the problem and the fix."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ddpctl.errors import SpecError
from ddpctl.spec.names import QUANTITY
from ddpctl.spec.schema import TAINT_EFFECTS, TOLERATION_OPERATORS


def yaml_spelling(value: Any) -> str:
    """A value as the user wrote it in YAML (`true`, `null`), not as Python prints it (`True`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return repr(value)


def did_you_mean(word: str, choices: Any) -> str | None:
    """The closest of `choices` to a misspelt `word`, if one is close."""
    import difflib

    found = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return found[0] if found else None


def check_quantity(field_name: str, value: str) -> None:
    if not isinstance(value, str) or not QUANTITY.fullmatch(value):
        raise SpecError(field_name, f"{yaml_spelling(value)} is not a Kubernetes quantity", quantity_fix(value))


def quantity_fix(value: Any) -> str:
    """The fix for a size written the way other tools write it: `2GB`, `2g`, `512 MiB` -> 2Gi, 512Mi."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtTpPeE])(i?)[bB]?\s*", str(value))
    if match:
        return f"write it as {match.group(1)}{match.group(2).upper()}i (Kubernetes units: Ki, Mi, Gi)"
    return "use values like '500m', '4', '16Gi'"


def check_plain_string(field_name: str, value: Any, *, allow_empty: bool = True) -> None:
    """Free text (args, env values, annotations) may hold anything printable, newlines included."""
    if not isinstance(value, str):
        raise SpecError(field_name, f"expected a string, got {type(value).__name__}", "quote the value")
    if not allow_empty and not value:
        raise SpecError(field_name, "must not be empty", "give a value")
    if "\x00" in value:
        raise SpecError(field_name, "contains a NUL character", "remove it")


def check_json_like(field_name: str, value: Any) -> None:
    """Free-form structures (affinity) hold only what a manifest can: maps, lists, scalars.
    YAML turns `2024-01-01` into a date; that must be a field error, not a render crash."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            require(isinstance(key, str), field_name, f"key {key!r} is not a string", "quote the key")
            check_json_like(f"{field_name}.{key}", item)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_json_like(f"{field_name}[{i}]", item)
    else:
        require(
            value is None or isinstance(value, (str, int, float, bool)),
            field_name,
            f"a {type(value).__name__} cannot go into a manifest",
            "quote the value",
        )


def require(cond: bool, field_name: str, problem: str, fix: str = "") -> None:
    if not cond:
        raise SpecError(field_name, problem, fix)


def positive_int(field_name: str, value: Any, *, minimum: int = 1, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    require(
        isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
        field_name,
        f"{yaml_spelling(value)} must be an integer >= {minimum}",
        f"set {field_name} to a whole number of at least {minimum}",
    )


def one_of(field_name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value in allowed:
        return
    near = did_you_mean(str(value), allowed) if isinstance(value, str) else None
    hint = f"did you mean {near}? " if near else ""
    raise SpecError(
        field_name, f"{yaml_spelling(value)} is not a valid value", f"{hint}choose one of {', '.join(allowed)}"
    )


def str_map(field_name: str, value: Any) -> None:
    require(
        isinstance(value, Mapping),
        field_name,
        f"expected a map of strings, got {type(value).__name__}",
        "write it as key: value pairs",
    )
    for key, val in value.items():
        require(
            isinstance(key, str) and isinstance(val, str),
            f"{field_name}.{key}",
            "keys and values must be strings",
            "quote the value",
        )


def check_tolerations(field_name: str, tolerations: Any) -> None:
    """Tolerations as the pod takes them: key, operator, value, effect, tolerationSeconds."""
    require(isinstance(tolerations, tuple), field_name, "expected a list", "write it as a YAML list")
    for i, tol in enumerate(tolerations):
        require(
            isinstance(tol, Mapping), f"{field_name}[{i}]", "must be a map", "use keys key, operator, value, effect"
        )
        unknown = set(tol) - {"key", "operator", "value", "effect", "tolerationSeconds"}
        require(
            not unknown,
            f"{field_name}[{i}]",
            f"unknown key {', '.join(sorted(unknown))}",
            "use keys key, operator, value, effect, tolerationSeconds",
        )
        require(
            tol.get("operator", "Equal") in TOLERATION_OPERATORS,
            f"{field_name}[{i}].operator",
            f"{tol.get('operator')!r} is not Equal or Exists",
            "use Equal or Exists",
        )
        require(
            tol.get("effect", "NoSchedule") in TAINT_EFFECTS,
            f"{field_name}[{i}].effect",
            f"{tol.get('effect')!r} is not a taint effect",
            "use NoSchedule, PreferNoSchedule or NoExecute",
        )
        for key in ("key", "value", "operator", "effect"):
            if key in tol:
                check_plain_string(f"{field_name}[{i}].{key}", tol[key])
        if "tolerationSeconds" in tol:
            positive_int(f"{field_name}[{i}].tolerationSeconds", tol["tolerationSeconds"], minimum=0)
