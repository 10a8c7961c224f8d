"""Label and field selectors with the apiserver's syntax."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .status import KubeError, bad_request

Matcher = Callable[[dict], bool]

_KEY_RE = re.compile(r"^(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _check_key(key: str, selector: str) -> None:
    if not _KEY_RE.match(key) or len(key.split("/")[-1]) > 63:
        raise bad_request(
            f'unable to parse requirement: invalid label key "{key}": name part must consist of '
            "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
            "character"
        )


def _check_value(value: str) -> None:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise bad_request(
            f'unable to parse requirement: invalid label value: "{value}": at key: must be no more '
            "than 63 characters and consist of alphanumeric characters, '-', '_' or '.'"
        )


def parse_label_selector(selector: str | None) -> Matcher:
    """``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``, comma = AND."""
    if not selector or not selector.strip():
        return lambda labels: True
    reqs: list[Matcher] = []
    for part in _split_top(selector):
        m = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", part)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
            _check_key(key, selector)
            for v in values:
                _check_value(v)
            if op == "in":
                reqs.append(lambda l, k=key, vs=values: k in l and l[k] in vs)
            else:
                reqs.append(lambda l, k=key, vs=values: k not in l or l[k] not in vs)
            continue
        m = re.match(r"^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$", part)
        if m:
            key, op, value = m.groups()
            _check_key(key, selector)
            _check_value(value)
            if op == "!=":
                reqs.append(lambda l, k=key, v=value: l.get(k) != v)
            else:
                reqs.append(lambda l, k=key, v=value: l.get(k) == v)
            continue
        m = re.match(r"^(!?)\s*([^=!\s()]+)$", part)
        if m:
            neg, key = m.groups()
            _check_key(key, selector)
            if neg:
                reqs.append(lambda l, k=key: k not in l)
            else:
                reqs.append(lambda l, k=key: k in l)
            continue
        raise bad_request(f'unable to parse requirement: found \'{part}\', expected: in, notin, =, ==, !=, gt, lt')
    return lambda labels: all(r(labels or {}) for r in reqs)


def _field_value(obj: dict, path: str) -> str:
    if path == "source":
        return str((obj.get("source") or {}).get("component", ""))
    cur: Any = obj
    for k in path.split("."):
        cur = cur.get(k) if isinstance(cur, dict) else None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(selector: str | None, allowed: tuple, resource: str) -> Callable[[dict], bool]:
    if not selector or not selector.strip():
        return lambda obj: True
    reqs = []
    for part in _split_top(selector):
        m = re.match(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$", part)
        if not m:
            raise bad_request(f'invalid selector: \'{selector}\'; can\'t understand \'{part}\'')
        key, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if key not in ("metadata.name", "metadata.namespace") + tuple(allowed):
            raise bad_request(f'field label not supported: {key}')
        if op == "!=":
            reqs.append(lambda o, k=key, v=value: _field_value(o, k) != v)
        else:
            reqs.append(lambda o, k=key, v=value: _field_value(o, k) == v)
    return lambda obj: all(r(obj) for r in reqs)


__all__ = ["KubeError", "parse_field_selector", "parse_label_selector"]
