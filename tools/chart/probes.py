"""The probe specs the chart's tables are read off with, and the helpers that run ddpctl on them."""

from __future__ import annotations

import itertools
import typing
from collections.abc import Callable, Mapping
from typing import Any

from ddpctl.engines import plan_for
from ddpctl.errors import SpecError
from ddpctl.manifests.render import view
from ddpctl.plan import Plan
from ddpctl.spec import JobSpec
from tools.chart.derive import Args, derive


def spec_of(values: Mapping[str, Any]) -> JobSpec:
    """A probe's spec: recovery gang unless it says otherwise, so that a probe reads what every
    layout renders; the chart adds what recovery pod changes (tools.chart.engines' `recovery`)."""
    return JobSpec.from_dict({"recovery": "gang", **values})


def refusal(values: Mapping[str, Any]) -> SpecError | None:
    """What ddpctl says of a spec dict: None when it renders, else its first error."""
    try:
        plan_for(spec_of(values))
    except SpecError as exc:
        return exc
    return None


def error_message(spec: Callable[[Args], Mapping[str, Any]] | Mapping[str, Any], *probes: Args) -> dict[str, str]:
    """The template of the error ddpctl gives for a spec dict (or the one `spec` makes of each probe)."""

    def error(args: Args) -> dict[str, str]:
        values = spec(args) if callable(spec) else spec
        exc = refusal(values)
        if exc is None:
            raise ValueError(f"probe {dict(values)!r} is not refused: the rule it probes changed")
        return {"field": exc.field, "problem": exc.problem, "fix": exc.fix}

    return typing.cast(dict[str, str], derive(error, probes or [{}]))


def plan_of(values: Mapping[str, Any]) -> Plan:
    return plan_for(spec_of(values))


def group_list(*shapes: tuple[str, int, int] | dict[str, Any]) -> list[dict[str, Any]]:
    """nodeGroups entries from (name, nodes, gpusPerNode) or whole maps."""
    return [s if isinstance(s, dict) else {"name": s[0], "nodes": s[1], "gpusPerNode": s[2]} for s in shapes]


def after(index: int, *groups: dict[str, Any], gpus: int = 1) -> dict[str, Any]:
    """A spec whose groups from number `index` on are `groups`, after groups of `gpus` GPUs each."""
    return {"nodeGroups": [*group_list(*((f"z{i}", 1, gpus) for i in range(index))), *groups]}


LEVEL = "example.com/zone"  # a topology level (a node label key)
TOPOLOGY, GROUP_TOPOLOGY = {"where": "topology"}, {"where": "nodeGroups[0].topology"}


def topology_at(where: str, topology: dict[str, Any], nodes: int = 2) -> dict[str, Any]:
    """A spec with `topology` at `where`: the spec's own, or its one group's."""
    if where == TOPOLOGY["where"]:
        return {"nodes": nodes, "topology": topology}
    return {"nodeGroups": group_list({"name": "za", "nodes": nodes, "gpusPerNode": 0, "topology": topology})}


def listed(a: Args, key: str) -> list[str]:
    return str(a[key]).split(", ")


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


def job_values(target: str, layout: str, mode: str, p: Args, groups: int = 1) -> dict[str, Any]:
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


def runnable(target: str, layout: str, p: Args = PROBES[0], groups: int = 2, **values: Any) -> Plan | None:
    """The plan of probe `p` in `layout` (with `values`) on `target`, in the first rendezvous mode
    and group count (`groups` or 1) the engine runs; None when it runs none."""
    for mode, count in itertools.product(MODES, (groups, 1)):
        try:
            return plan_of({**job_values(target, layout, mode, p, count), **values})
        except SpecError:
            continue
    return None


def node_rank_entry() -> dict[str, Any]:
    """The env entry that gives PET_NODE_RANK from the completion index (the downward API)."""
    plan = plan_of({"target": "job", "stragglers": {"mode": "off"}})  # no pod or node names of the stragglers'
    (entry,) = [e for e in view(plan)["env"] if "fieldRef" in e.get("valueFrom", {})]
    return typing.cast(dict[str, Any], entry)
