"""The double's storage: objects, resourceVersions, watch history, field managers, GC.

One lock guards everything; a ``threading.Condition`` on it wakes watchers and log
followers whenever anything changes (no polling).
"""

from __future__ import annotations

import copy
import datetime as dt
import ipaddress
import itertools
import random
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import fields as F
from . import status as S
from .resources import Registry, ResourceType

ALNUM = "bcdfghjklmnpqrstvwxz2456789"  # kube's utilrand alphabet (no vowels, no confusables)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def iso(t: dt.datetime | None = None) -> str:
    return (t or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def rand_suffix(n: int = 5, rng: random.Random | None = None) -> str:
    r = rng or random
    return "".join(r.choice(ALNUM) for _ in range(n))


@dataclass
class WatchEvent:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    rt: ResourceType
    obj: dict
    prev: dict | None  # the object before a MODIFIED (for selector transitions)


def _key(rt: ResourceType) -> tuple:
    return (rt.group, rt.plural)


class Store:
    def __init__(self, registry: Registry, validate: Callable[[ResourceType, dict], None] | None = None):
        self.registry = registry
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.rv = 0
        self.objects: dict[tuple, dict] = {}  # ((group, plural), ns, name) -> obj
        self.history: list[WatchEvent] = []
        self.compacted_rv = 0
        self.closed = False
        self.validate = validate or (lambda rt, obj: None)
        self._ips = itertools.count(10)
        self.on_remove: list[Callable[[ResourceType, dict], None]] = []

    # ------------------------------------------------------------------ basics

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, type_: str, rt: ResourceType, obj: dict, prev: dict | None = None) -> None:
        self.history.append(
            WatchEvent(
                int(obj["metadata"]["resourceVersion"]),
                type_,
                rt,
                copy.deepcopy(obj),
                copy.deepcopy(prev) if prev is not None else None,
            )
        )
        self.cond.notify_all()

    def notify(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def compact(self) -> int:
        """Forget the watch history up to now (watches from older RVs then get 410 Expired)."""
        with self.lock:
            self.history.clear()
            self.compacted_rv = self.rv
            return self.rv

    def namespace_exists(self, ns: str) -> bool:
        return (("", "namespaces"), None, ns) in self.objects

    def _require_ns(self, rt: ResourceType, ns: str | None) -> None:
        if rt.namespaced and not self.namespace_exists(ns or ""):
            raise S.namespace_not_found(ns or "")

    def peek(self, rt: ResourceType, ns: str | None, name: str) -> dict | None:
        with self.lock:
            obj = self.objects.get((_key(rt), ns if rt.namespaced else None, name))
            return copy.deepcopy(obj) if obj is not None else None

    def get(self, rt: ResourceType, ns: str | None, name: str) -> dict:
        obj = self.peek(rt, ns, name)
        if obj is None:
            raise S.not_found(rt, name)
        return obj

    def list(
        self, rt: ResourceType, ns: str | None, match: Callable[[dict], bool] = lambda o: True
    ) -> tuple[list[dict], int]:
        with self.lock:
            items = [
                copy.deepcopy(o)
                for (k, ons, _), o in self.objects.items()
                if k == _key(rt) and (ns is None or ons == ns) and match(o)
            ]
            items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
            return items, self.rv

    def all_objects(self) -> list[tuple[ResourceType, dict]]:
        with self.lock:
            out = []
            for (k, _, _), o in self.objects.items():
                rt = next(r for r in self.registry.all_known() if _key(r) == k)
                out.append((rt, copy.deepcopy(o)))
            return out

    # ------------------------------------------------------------------ writes

    def _stamp_new(self, rt: ResourceType, ns: str | None, obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        md = obj.setdefault("metadata", {})
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + rand_suffix()
        if rt.namespaced:
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = iso()
        if rt.kind not in ("ConfigMap", "Namespace", "Event", "Service"):
            md["generation"] = 1
        for k in ("resourceVersion", "deletionTimestamp", "selfLink"):
            md.pop(k, None)
        self._defaults_on_create(rt, obj)
        return obj

    def _defaults_on_create(self, rt: ResourceType, obj: dict) -> None:
        """The few server-side defaults ddpctl can observe (documented in the package docstring)."""
        md = obj["metadata"]
        if rt.kind == "Job" and rt.group == "batch":
            spec = obj.setdefault("spec", {})
            if not spec.get("manualSelector"):
                # the apiserver generates the selector and stamps the pod template's labels
                uid = md["uid"]
                spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
                tl = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
                tl.update(
                    {
                        "batch.kubernetes.io/controller-uid": uid,
                        "batch.kubernetes.io/job-name": md["name"],
                        "controller-uid": uid,
                        "job-name": md["name"],
                    }
                )
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("completionMode", "NonIndexed")
            spec.setdefault("suspend", False)
            if spec.get("completionMode") == "Indexed":
                spec.setdefault("completions", 1)
            spec.setdefault("parallelism", 1)
            obj.setdefault("status", {})
        elif rt.kind == "Service":
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            if spec.get("clusterIP") in (None, ""):
                ip = str(ipaddress.ip_address("10.96.0.0") + next(self._ips))
                spec["clusterIP"] = ip
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
            for p in spec.get("ports", []) or []:
                p.setdefault("protocol", "TCP")
                p.setdefault("targetPort", p.get("port"))
            spec.setdefault("sessionAffinity", "None")
            obj.setdefault("status", {"loadBalancer": {}})
        elif rt.kind == "Namespace":
            md.setdefault("labels", {})["kubernetes.io/metadata.name"] = md["name"]
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        elif rt.kind == "Pod":
            obj.setdefault("status", {"phase": "Pending", "qosClass": "BestEffort"})

    def _check_immutable(self, rt: ResourceType, old: dict, new: dict) -> None:
        if rt.kind == "Job" and rt.group == "batch":
            errs = []
            for f in ("template", "selector", "completionMode"):
                if (old.get("spec") or {}).get(f) != (new.get("spec") or {}).get(f):
                    errs.append(F_err(f"spec.{f}", "field is immutable"))
            if errs:
                raise S.invalid_for(rt, old["metadata"]["name"], errs)

    def _write(self, rt: ResourceType, obj: dict, prev: dict | None, dry_run: bool) -> dict:
        """Store ``obj`` (already merged/validated) with a new resourceVersion; emit the watch event."""
        if dry_run:
            out = copy.deepcopy(obj)
            if prev is None:
                out["metadata"].pop("resourceVersion", None)
            return out
        obj["metadata"]["resourceVersion"] = self._next_rv()
        ns = obj["metadata"].get("namespace") if rt.namespaced else None
        self.objects[(_key(rt), ns, obj["metadata"]["name"])] = obj
        self._emit("ADDED" if prev is None else "MODIFIED", rt, obj, prev)
        return copy.deepcopy(obj)

    @staticmethod
    def _bump_generation(old: dict, new: dict) -> None:
        strip = lambda o: {k: v for k, v in o.items() if k not in ("metadata", "status")}
        if "generation" in old["metadata"] and strip(old) != strip(new):
            new["metadata"]["generation"] = old["metadata"]["generation"] + 1

    # managedFields -----------------------------------------------------

    @staticmethod
    def _mf(obj: dict) -> list[dict]:
        return obj.setdefault("metadata", {}).setdefault("managedFields", [])

    @staticmethod
    def _entry_paths(e: dict) -> set:
        return F.from_fields_v1(e.get("fieldsV1") or {})

    def _set_entry(
        self, obj: dict, rt: ResourceType, manager: str, operation: str, subresource: str | None, paths: set
    ) -> None:
        mf = self._mf(obj)
        same = lambda e: e["manager"] == manager and e["operation"] == operation and e.get("subresource") == subresource
        pos = next((i for i, e in enumerate(mf) if same(e)), len(mf))
        mf[:] = [e for e in mf if not same(e)]
        if paths:
            e = {
                "manager": manager,
                "operation": operation,
                "apiVersion": rt.api_version,
                "time": iso(),
                "fieldsType": "FieldsV1",
                "fieldsV1": F.to_fields_v1(paths),
            }
            if subresource:
                e["subresource"] = subresource
            mf.insert(pos, e)  # an entry keeps its place in the list

    def _strip_from_others(self, obj: dict, manager: str, operation: str, subresource: str | None, paths: set) -> None:
        mf = self._mf(obj)
        keep = []
        for e in mf:
            if e["manager"] == manager and e["operation"] == operation and e.get("subresource") == subresource:
                keep.append(e)
                continue
            own = self._entry_paths(e)
            left = {p for p in own if not any(F.overlaps(p, q) for q in paths)}
            if left != own:
                e = dict(e, fieldsV1=F.to_fields_v1(left), time=e["time"])
            if left:
                keep.append(e)
        mf[:] = keep

    def _record_update(
        self, rt: ResourceType, old: dict | None, new: dict, manager: str, subresource: str | None
    ) -> None:
        status = subresource == "status"
        changed, removed = F.changed_paths(old or {}, new, include_status=status)
        if old is not None:
            new["metadata"]["managedFields"] = copy.deepcopy(old["metadata"].get("managedFields") or [])
        if not changed and not removed:
            return
        self._strip_from_others(new, manager, "Update", subresource, changed | removed)
        mine = next(
            (
                self._entry_paths(e)
                for e in self._mf(new)
                if e["manager"] == manager and e["operation"] == "Update" and e.get("subresource") == subresource
            ),
            set(),
        )
        mine = {p for p in mine if not any(F.overlaps(p, r) for r in removed)} | changed
        mine = {p for p in mine if F.get_path(new, p, F._MISSING) is not F._MISSING}
        self._set_entry(new, rt, manager, "Update", subresource, mine)

    # operations --------------------------------------------------------

    def create(
        self, rt: ResourceType, ns: str | None, body: dict, manager: str, dry_run: bool = False, validate: bool = True
    ) -> dict:
        with self.lock:
            self._require_ns(rt, ns)
            obj = self._stamp_new(rt, ns, body)
            name = obj["metadata"].get("name")
            if not name:
                raise S.invalid_for(
                    rt,
                    "",
                    [F_err("metadata.name", "Required value: name or generateName is required", "FieldValueRequired")],
                )
            if (_key(rt), ns if rt.namespaced else None, name) in self.objects:
                raise S.already_exists(rt, name)
            if validate:
                self.validate(rt, obj)
            obj["metadata"].pop("managedFields", None)
            self._record_update(rt, None, obj, manager, None)
            return self._write(rt, obj, None, dry_run)

    def replace(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        body: dict,
        manager: str,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict:
        with self.lock:
            self._require_ns(rt, ns)
            old = self.peek(rt, ns, name)
            if old is None:
                raise S.not_found(rt, name)
            md = body.get("metadata") or {}
            if md.get("name") != name:
                raise S.bad_request(
                    f"the name of the object ({md.get('name')}) does not match the name on the URL ({name})"
                )
            rv = md.get("resourceVersion")
            if rv in (None, "") and rt.is_custom:
                raise S.invalid_for(
                    rt, name, [F_err("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")]
                )
            if rv not in (None, "") and rv != old["metadata"]["resourceVersion"]:
                raise S.rv_conflict(rt, name)
            new = self._merge_update(rt, old, copy.deepcopy(body), subresource)
            return self._finish_update(rt, old, new, manager, subresource, dry_run)

    def _merge_update(self, rt: ResourceType, old: dict, body: dict, subresource: str | None) -> dict:
        """The object a full replacement produces: server-owned metadata and the other half kept."""
        new = body
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        keep_md = ("uid", "creationTimestamp", "generation", "namespace", "managedFields", "deletionTimestamp")
        new.setdefault("metadata", {})
        for k in keep_md:
            if k in old["metadata"]:
                new["metadata"][k] = copy.deepcopy(old["metadata"][k])
            else:
                new["metadata"].pop(k, None)
        if subresource == "status":
            status = new.get("status")
            new = copy.deepcopy(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif "status" in old or "status" in new:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        return new

    def _finish_update(
        self,
        rt: ResourceType,
        old: dict,
        new: dict,
        manager: str,
        subresource: str | None,
        dry_run: bool,
        validate: bool = True,
    ) -> dict:
        if subresource != "status":
            self._check_immutable(rt, old, new)
        self._bump_generation(old, new)
        if validate:
            self.validate(rt, new)
        self._record_update(rt, old, new, manager, subresource)
        cmp = lambda o: (
            {k: v for k, v in o.items() if k != "metadata"}
            | {"md": {k: v for k, v in o["metadata"].items() if k not in ("managedFields", "resourceVersion")}}
        )
        if cmp(old) == cmp(new):
            return old  # a no-op update does not bump the resourceVersion
        return self._write(rt, new, old, dry_run)

    def merge_patch(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        patch: Any,
        manager: str,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict:
        with self.lock:
            self._require_ns(rt, ns)
            old = self.peek(rt, ns, name)
            if old is None:
                raise S.not_found(rt, name)
            if not isinstance(patch, dict):
                raise S.bad_request(
                    "the body of the request was in an unknown format - accepted media types "
                    "include: application/json-patch+json, application/merge-patch+json, "
                    "application/apply-patch+yaml"
                )
            rv = (patch.get("metadata") or {}).get("resourceVersion")
            if rv not in (None, "") and rv != old["metadata"]["resourceVersion"]:
                raise S.rv_conflict(rt, name)
            merged = F.json_merge_patch(old, patch)
            new = self._merge_update(rt, old, merged, subresource)
            return self._finish_update(rt, old, new, manager, subresource, dry_run)

    def apply(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        config: dict,
        manager: str,
        force: bool,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> tuple[dict, bool]:
        """Server-side apply. Returns (object, created)."""
        with self.lock:
            self._require_ns(rt, ns)
            if not isinstance(config, dict):
                raise S.bad_request("error decoding YAML: the apply configuration is not an object")
            md = config.get("metadata") or {}
            if config.get("apiVersion") != rt.api_version or config.get("kind") != rt.kind:
                raise S.bad_request(
                    f"the API version in the data ({config.get('apiVersion')}) does not match the expected API "
                    f"version ({rt.api_version})"
                    if config.get("apiVersion") != rt.api_version
                    else f"the kind in the data ({config.get('kind')}) does not match the expected kind ({rt.kind})"
                )
            if md.get("name") != name:
                raise S.bad_request(
                    f"the name of the object ({md.get('name')}) does not match the name on the URL ({name})"
                )
            if rt.namespaced and md.get("namespace") not in (None, ns):
                raise S.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            if md.get("managedFields"):
                raise S.bad_request("metadata.managedFields must be nil")
            status = subresource == "status"
            cfg = copy.deepcopy(config)
            applied = F.leaf_paths(cfg, include_status=status)
            old = self.peek(rt, ns, name)
            if old is None:
                if status:
                    raise S.not_found(rt, name)
                body = copy.deepcopy(cfg)
                obj = self._stamp_new(rt, ns, body)
                self.validate(rt, obj)
                obj["metadata"].pop("managedFields", None)
                self._set_entry(
                    obj,
                    rt,
                    manager,
                    "Apply",
                    None,
                    {p for p in applied if F.get_path(obj, p, F._MISSING) is not F._MISSING},
                )
                return self._write(rt, obj, None, dry_run), True
            rv = md.get("resourceVersion")
            if rv not in (None, "") and rv != old["metadata"]["resourceVersion"]:
                raise S.rv_conflict(rt, name)
            new = copy.deepcopy(old)
            entries = new["metadata"].get("managedFields") or []
            # conflicts: a field owned by another manager, set here to a different value
            conflicts: dict[str, list[str]] = {}
            taken: set = set()
            if status:
                tentative = dict(old, status=F.deep_merge(old.get("status") or {}, cfg.get("status") or {}))
            else:
                body = {k: v for k, v in cfg.items() if k not in ("status", "apiVersion", "kind")}
                tentative = F.deep_merge(old, body)
            for e in entries:
                if e["manager"] == manager and e["operation"] == "Apply" and e.get("subresource") == subresource:
                    continue
                for q in sorted(self._entry_paths(e)):
                    if not any(F.overlaps(p, q) for p in applied):
                        continue
                    if F.get_path(tentative, q, F._MISSING) != F.get_path(old, q, F._MISSING):
                        field = "." + ".".join(map(str, q))
                        conflicts.setdefault(e["manager"], []).append(field)
                        taken.add(q)
            if conflicts and not force:
                raise S.apply_conflict(conflicts, rt.api_version)
            previously = next(
                (
                    self._entry_paths(e)
                    for e in entries
                    if e["manager"] == manager and e["operation"] == "Apply" and e.get("subresource") == subresource
                ),
                set(),
            )
            others = set()
            for e in entries:
                if not (e["manager"] == manager and e["operation"] == "Apply" and e.get("subresource") == subresource):
                    others |= self._entry_paths(e)
            if force and taken:
                others = {q for q in others if q not in taken}
            # fields this manager stops applying, that no one else owns, are removed
            for p in sorted(previously - applied, key=len, reverse=True):
                if not any(F.overlaps(p, q) for q in others) and not any(F.overlaps(p, a) for a in applied):
                    F.remove_path(new, p)
            if status:
                new["status"] = F.deep_merge(new.get("status") or {}, cfg.get("status") or {})
            else:
                body = {k: v for k, v in cfg.items() if k not in ("status", "apiVersion", "kind")}
                body_md = {k: v for k, v in (body.pop("metadata", None) or {}).items() if k not in F.UNTRACKED_METADATA}
                new = F.deep_merge(new, body)
                new["metadata"] = F.deep_merge(new["metadata"], body_md)
            if force and taken:
                self._strip_from_others(new, manager, "Apply", subresource, taken)
            self._set_entry(
                new,
                rt,
                manager,
                "Apply",
                subresource,
                {p for p in applied if F.get_path(new, p, F._MISSING) is not F._MISSING},
            )
            if subresource != "status":
                self._check_immutable(rt, old, new)
            self._bump_generation(old, new)
            self.validate(rt, new)
            cmp = lambda o: (
                {k: v for k, v in o.items() if k != "metadata"}
                | {"md": {k: v for k, v in o["metadata"].items() if k not in ("resourceVersion",)}}
            )
            mf_times = lambda o: [dict(e, time="") for e in o["metadata"].get("managedFields") or []]
            if cmp(dict(old, metadata=dict(old["metadata"], managedFields=mf_times(old)))) == cmp(
                dict(new, metadata=dict(new["metadata"], managedFields=mf_times(new)))
            ):
                return old, False  # idempotent re-apply: nothing changes, same resourceVersion
            return self._write(rt, new, old, dry_run), False

    # internal writes for controllers / scenario helpers ------------------

    def put(
        self, rt: ResourceType, obj: dict, manager: str = "kube-controller-manager", subresource: str | None = None
    ) -> dict:
        """Create or update ``obj`` without validation (what controllers do)."""
        with self.lock:
            ns = obj["metadata"].get("namespace") if rt.namespaced else None
            old = self.peek(rt, ns, obj["metadata"]["name"])
            if old is None:
                new = self._stamp_new(rt, ns, obj)
                for k in ("uid", "creationTimestamp"):
                    if k in obj["metadata"]:
                        new["metadata"][k] = obj["metadata"][k]
                self._record_update(rt, None, new, manager, None)
                return self._write(rt, new, None, False)
            new = self._merge_update(rt, old, copy.deepcopy(obj), None)
            if (subresource == "status" or "status" in obj) and "status" in obj:
                new["status"] = copy.deepcopy(obj["status"])
            return self._finish_update(rt, old, new, manager, subresource, False, validate=False)

    def mutate(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        fn: Callable[[dict], None],
        manager: str = "kubelet",
        subresource: str | None = "status",
    ) -> dict:
        with self.lock:
            obj = self.get(rt, ns, name)
            fn(obj)
            return self.put(rt, obj, manager=manager, subresource=subresource)

    # deletion -----------------------------------------------------------

    def delete(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        propagation: str | None,
        dry_run: bool = False,
        preconditions: dict | None = None,
    ) -> dict:
        with self.lock:
            obj = self.peek(rt, ns, name)
            if obj is None:
                raise S.not_found(rt, name)
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"]:
                raise S.KubeError(
                    409,
                    "Conflict",
                    (
                        f'Operation cannot be fulfilled on {rt.group_resource} "{name}": Precondition failed: '
                        f'UID in precondition: {pre["uid"]}, UID in object meta: {obj["metadata"]["uid"]}'
                    ),
                    {"name": name, **({"group": rt.group} if rt.group else {}), "kind": rt.plural},
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"]["resourceVersion"]:
                raise S.rv_conflict(rt, name)
            if propagation is None:
                # batch/v1 Jobs still default to orphaning their pods, for compatibility
                propagation = "Orphan" if (rt.group, rt.kind) == ("batch", "Job") else "Background"
            if propagation not in ("Orphan", "Background", "Foreground"):
                raise S.invalid(
                    "DeleteOptions.meta.k8s.io",
                    "meta.k8s.io",
                    "DeleteOptions",
                    "",
                    [
                        F_err(
                            "propagationPolicy",
                            f'Unsupported value: "{propagation}": supported values: '
                            '"Foreground", "Background", "Orphan", "nil"',
                            "FieldValueNotSupported",
                        )
                    ],
                )
            if dry_run:
                return obj
            if propagation == "Foreground":
                # the owner is marked first (as the apiserver does), then dependents go, then the owner
                obj["metadata"]["deletionTimestamp"] = iso()
                obj["metadata"]["deletionGracePeriodSeconds"] = 0
                obj["metadata"].setdefault("finalizers", [])
                if "foregroundDeletion" not in obj["metadata"]["finalizers"]:
                    obj["metadata"]["finalizers"].append("foregroundDeletion")
                prev = self.peek(rt, ns, name)
                marked = self._write(rt, obj, prev, False)
                self._delete_dependents(obj["metadata"]["uid"], "Foreground")
                self._remove(rt, marked)
                return marked
            if propagation == "Orphan":
                self._orphan_dependents(obj["metadata"]["uid"])
            removed = self._remove(rt, obj)
            if propagation == "Background":
                self._delete_dependents(obj["metadata"]["uid"], "Background")
            return removed

    def _remove(self, rt: ResourceType, obj: dict) -> dict:
        ns = obj["metadata"].get("namespace") if rt.namespaced else None
        key = (_key(rt), ns, obj["metadata"]["name"])
        cur = self.objects.pop(key, None)
        if cur is None:
            return obj
        cur = copy.deepcopy(cur)
        cur["metadata"]["resourceVersion"] = self._next_rv()
        self._emit("DELETED", rt, cur)
        for hook in self.on_remove:
            hook(rt, cur)
        if rt.kind == "Namespace":
            for k in [k for k in self.objects if k[1] == obj["metadata"]["name"]]:
                child_rt = next(r for r in self.registry.all_known() if _key(r) == k[0])
                self._remove(child_rt, self.objects[k])
        return cur

    def dependents(self, uid: str) -> list[tuple[ResourceType, dict]]:
        out = []
        for (k, _, _), o in list(self.objects.items()):
            if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or []):
                rt = next(r for r in self.registry.all_known() if _key(r) == k)
                out.append((rt, o))
        return out

    def _delete_dependents(self, uid: str, policy: str) -> None:
        for rt, o in self.dependents(uid):
            self._delete_dependents(o["metadata"]["uid"], policy)
            self._remove(rt, o)

    def _orphan_dependents(self, uid: str) -> None:
        for rt, o in self.dependents(uid):
            prev = copy.deepcopy(o)
            o = copy.deepcopy(o)
            refs = [r for r in o["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                o["metadata"]["ownerReferences"] = refs
            else:
                o["metadata"].pop("ownerReferences", None)
            self._write(rt, o, prev, False)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def F_err(field: str, message: str, reason: str = "FieldValueInvalid"):
    from .validation import FieldError

    if (
        not message.startswith(("Invalid value", "Required value", "Unsupported value", "Forbidden"))
        and reason == "FieldValueInvalid"
    ):
        message = f"Invalid value: {message}" if message != "field is immutable" else message
    return FieldError(field, reason, message)
