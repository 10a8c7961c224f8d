"""Field ownership for server-side apply (a simplified structured-merge-diff).

A field set is a set of paths (tuples of map keys) to the *leaves* of an object:
scalars, lists and empty maps. Maps are tracked key by key (so two managers can own
different labels, or different keys of ``spec``); lists are atomic, owned as a
whole (real SSA merges ``x-kubernetes-list-type: map`` lists such as ``containers``
by key; here a list is one field). Sets are stored in ``metadata.managedFields`` in
the real ``FieldsV1`` encoding (``{"f:spec": {"f:replicas": {}}}``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

Path = tuple

#: fields the apiserver owns itself; never tracked per manager
UNTRACKED_METADATA = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
}


def leaf_paths(obj: Any, include_status: bool, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        if not prefix:
            if k in ("apiVersion", "kind"):
                continue
            if k == "status" and not include_status:
                continue
            if k != "status" and include_status:
                continue
        if prefix == ("metadata",) and k in UNTRACKED_METADATA:
            continue
        p = prefix + (k,)
        if isinstance(v, dict) and v:
            out |= leaf_paths(v, include_status, p)
        else:
            out.add(p)
    return out


def get_path(obj: Any, path: Path, default: Any = None) -> Any:
    cur = obj
    for k in path:
        if not isinstance(cur, dict) or k not in cur:
            return default
        cur = cur[k]
    return cur


_MISSING = object()


def overlaps(a: Path, b: Path) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def to_fields_v1(paths: Iterable[Path]) -> dict:
    root: dict = {}
    for p in sorted(paths):
        cur = root
        for k in p:
            cur = cur.setdefault(f"f:{k}", {})
    return root


def from_fields_v1(fv1: dict, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for k, v in (fv1 or {}).items():
        if k == ".":
            continue
        if not k.startswith("f:"):
            # "k:{...}" / "v:..." list keys: this simplified model treats lists as atomic
            out.add(prefix)
            continue
        p = prefix + (k[2:],)
        children = {kk: vv for kk, vv in (v or {}).items() if kk != "."}
        if children:
            out |= from_fields_v1(children, p)
        else:
            out.add(p)
    return out


def remove_path(obj: dict, path: Path) -> None:
    """Delete a leaf and any map above it that becomes empty."""
    stack = []
    cur: Any = obj
    for k in path[:-1]:
        if not isinstance(cur, dict) or k not in cur:
            return
        stack.append((cur, k))
        cur = cur[k]
    if isinstance(cur, dict):
        cur.pop(path[-1], None)
    for parent, k in reversed(stack):
        if isinstance(parent.get(k), dict) and not parent[k]:
            parent.pop(k)
        else:
            break


def deep_merge(base: dict, patch: dict) -> dict:
    """Apply-style merge: maps merge key by key, everything else replaces."""
    out = copy.deepcopy(base)
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and v:
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def json_merge_patch(base: Any, patch: Any) -> Any:
    """RFC 7386 merge patch (``null`` deletes)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(base) if isinstance(base, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = json_merge_patch(out.get(k), v)
    return out


def changed_paths(old: dict, new: dict, include_status: bool) -> tuple[set[Path], set[Path]]:
    """(paths set or changed in ``new``, paths removed from ``old``)."""
    o = leaf_paths(old or {}, include_status)
    n = leaf_paths(new or {}, include_status)
    changed = {p for p in n if get_path(old, p, _MISSING) != get_path(new, p)}
    removed = o - n
    return changed, removed
