"""What the chart must know of each engine (names, wiring, commands, failure rules, refusals), read off it."""

from __future__ import annotations

import itertools
import typing
from collections.abc import Callable
from typing import Any

from ddpctl.engines import ENGINES
from ddpctl.engines.base import COORDINATOR
from ddpctl.errors import SpecError
from ddpctl.manifests.render import view
from ddpctl.plan import Layout, Node, Plan
from ddpctl.spec import JobSpec, NodeGroup
from ddpctl.spec.names import MAX_DNS_LABEL
from ddpctl.spec.schema import RESTART_POLICIES
from ddpctl_trainer import protocol
from tools.chart.derive import Args, derive
from tools.chart.probes import (
    CODES,
    GROUP_TOPOLOGY,
    LAYOUTS,
    LEVEL,
    MODES,
    PROBES,
    TOPOLOGY,
    error_message,
    group_list,
    job_values,
    node_rank_entry,
    plan_of,
    refusal,
    runnable,
    topology_at,
)

# What an engine may refuse (its `check`), each as a change to a spec dict that asks for it; the
# group rules are the shapes of node groups an engine may or may not lay out.
ENGINE_RULES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "exitCode": lambda d: {**d, "restartPolicy": "ExitCode"},
    "elastic": lambda d: {**d, "nodes": "1:3"},
    "groups:one": lambda d: {**d, "nodeGroups": group_list(("za", 2, 0))},
    "groups:pairSingleFirst": lambda d: {**d, "nodeGroups": group_list(("za", 1, 0), ("zb", 2, 0))},
    "groups:pair": lambda d: {**d, "nodeGroups": group_list(("za", 2, 0), ("zb", 1, 0))},
    "groups:more": lambda d: {**d, "nodeGroups": group_list(("za", 1, 0), ("zb", 1, 0), ("zc", 1, 0))},
    "c10dGroups": lambda d: {"nodeGroups": group_list(("za", 2, 0)), **d, "rendezvous": {"mode": "c10d"}},
    "slices": lambda d: {**d, "topology": {"sliceLevel": LEVEL, "sliceSize": 1}},
    "priorityClassName": lambda d: {**d, "priorityClassName": "zprio"},
    "envFromSecrets": lambda d: {**d, "envFromSecrets": ["zsecret"]},
    # recovery: pod, where the target or the layout cannot replace a lost pod alone
    "recoveryTarget": lambda d: {**d, "recovery": "pod"},
    "recoveryOnFailure": lambda d: {**d, "recovery": "pod", "restartPolicy": "OnFailure"},
    "recoveryGroupName": lambda d: {**d, "recovery": "pod", "nodeGroups": group_list((COORDINATOR, 2, 0))},
    "recoveryCustom": lambda d: {**d, "recovery": "pod", "module": "zmod.train"},
    "recoveryElastic": lambda d: {**d, "recovery": "pod", "nodes": "1:3"},
    "recoveryBackend": lambda d: {**d, "recovery": "pod", "gpusPerNode": 1},
    "recoveryStrategy": lambda d: {**d, "recovery": "pod", "args": ["--strategy", "fsdp"]},
}


def _refusals(target: str) -> list[dict[str, Any]]:
    """The rules `target`'s engine refuses, each with its message, in the order the engine checks
    them (found by breaking two at a time); the group shapes it refuses are one rule, `groups`."""
    base = {"target": target}
    found: dict[str, tuple[tuple[str, str], dict[str, str]]] = {}
    for rule, ask in ENGINE_RULES.items():
        if rule.startswith("recovery") and rule != "recoveryTarget" and ENGINES[target].pod_recovery_refused:
            continue  # the target refuses recovery: pod before any layout could
        exc = refusal(ask(base))
        if exc is not None:
            message = error_message(ask(base))
            if rule == "slices":  # the key names where the topology was asked for
                message = error_message(
                    lambda a: {**topology_at(a["where"], ENGINE_RULES["slices"]({})["topology"]), **base},
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
        exc = refusal(values)
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


def _names(target: str, layout: str) -> dict[str, Any]:
    """The names `target`'s engine derives in a layout, as templates over the job's and its group's
    name (and, for pods after the first, the pod's index in its group, its node rank and the rank before)."""
    engine = ENGINES[target]

    def plan(a: Args) -> tuple[Plan, NodeGroup]:
        found = runnable(target, layout, a["_p"], groups=1)
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


def _wiring(target: str, layout: str, mode: str) -> dict[str, Any] | None:
    """The PET_* env `target`'s engine gives each group's pods in a layout and rendezvous mode
    (Engine.torchrun_env), as templates over what the chart knows of the job and the group, and
    whether PET_NODE_RANK comes from the completion index; None when the engine refuses the case."""
    engine = ENGINES[target]
    for groups in (2, 1) if layout == "grouped" else (1,):
        try:
            plans = [plan_of(job_values(target, layout, mode, p, groups)) for p in PROBES]
        except SpecError:
            continue
        probes = []
        for p, plan in zip(PROBES, plans):
            for group in plan.spec.groups:
                args = {k: v for k, v in p.items() if k not in ("group", "min", "nodes")}
                args |= {"port": plan.master_port, "rank0": plan.rank0_host, "nproc": group.nproc}
                args |= {"offset": plan.group_offset(group), "plan_of": plan, "_group": group}
                # an elastic job's node count is its range
                args |= {"min": p["min"], "max": p["nodes"]} if layout == "elastic" else {"nodes": p["nodes"]}
                probes.append(args)
        return {
            "env": derive(lambda a: engine.torchrun_env(a["plan_of"], a["_group"]), probes),
            "nodeRankEntry": node_rank_entry() in view(plans[0])["env"],
        }
    return None


def _commands(target: str) -> dict[str, Any]:
    """How `target`'s engine changes the pods' command with node groups (Engine.entrypoint), keyed by
    how the command starts: with the launcher of the ddpctl trainer (`builtin`) or of other code
    (`custom`, which a user's own command may start with too). A change puts `prefix` (templates
    over the group's process count) in place of the command's first `drop` words."""
    engine = ENGINES[target]
    user_launcher = list(plan_of(CODES["custom"]).launcher)
    kinds: dict[str, list[dict[str, Any]]] = {
        "builtin": [CODES["builtin"]],
        "custom": [{"module": None, "script": "zscript"}, {"module": None, "command": [*user_launcher, "z"]}],
        "": [{"module": None, "command": ["zcmd", "zarg"]}, {"module": None, "command": ["python3", "-m", "x", "z"]}],
    }
    out: dict[str, Any] = {}
    for (kind, entries), layout in itertools.product(kinds.items(), LAYOUTS):
        for values in entries:
            plan = runnable(target, layout, **values)
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
            v = view(plan_of({"target": target, "restartPolicy": policy, "backoffLimit": backoff, **values}))
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
        longest = ENGINES[target].unchecked_plan(Layout(JobSpec.from_dict(values))).longest_generated_name
        limit = MAX_DNS_LABEL - (len(longest) - len(name))
        probes.append({"name": name, "longest": longest, "length": len(longest), "limit": limit, "_values": values})
    return error_message(lambda a: typing.cast(dict[str, Any], a["_values"]), *probes)


def _recovery(target: str) -> dict[str, Any] | None:
    """What `recovery: pod` renders on `target` (None: the engine refuses it): each group's torchrun
    and coordinator env (Engine.torchrun_env), the coordinator's pod (render's view), the failure
    rules, and what the chart needs to check the strategy the trainer is given."""
    engine = ENGINES[target]
    if engine.pod_recovery_refused:
        return None
    probes = []
    for layout, p in itertools.product(("grouped", "fixed"), PROBES):
        plan = plan_of({**job_values(target, layout, "static", p, 2 if layout == "grouped" else 1), "recovery": "pod"})
        for group in reversed(plan.spec.groups):  # the last group first: its offsets are not 0
            offset = plan.group_offset(group)
            args = {"name": p["name"], "nproc": group.nproc, "offset": offset, "nodes": plan.replicas}
            args |= {"rankOffset": plan.nodes[offset].first_rank, "worldSize": plan.world_size}
            probes.append(args | {"_plan": plan, "_group": group})

    def coordinator(a: Args) -> dict[str, Any]:
        plan = a["_plan"]
        c = view(plan)["coordinator"]
        keys = ("name", "hostname", "container_name", "command", "args", "env", "port", "port_name", "resources")
        out = {k: c[k] for k in keys}
        out["labels"] = {k: v for k, v in c["labels"].items() if plan.object_labels.get(k) != v}
        out["rjob"] = view(plan).get("coordinator_rjob")
        out["longestName"] = engine.coordinator_name(plan)
        return out

    rules = []
    for backoff in (3, 7):
        v = view(plan_of({"target": target, "recovery": "pod", "backoffLimit": backoff}))
        rules.append({"podFailurePolicy": v["pod_failure_policy"], "failurePolicy": v.get("failure_policy")})
    if rules[0] != rules[1]:
        raise ValueError(f"{target}: the failure rules of recovery: pod depend on backoffLimit: teach the chart")
    return {
        "wiring": derive(lambda a: engine.torchrun_env(a["_plan"], a["_group"]), probes),
        "coordinator": derive(coordinator, probes),
        "rules": rules[0],
        "strategyEnv": protocol.flag_env("--strategy"),
        "groupName": COORDINATOR,  # a node group may not take the coordinator's name
    }


def engine_table(target: str) -> dict[str, Any]:
    """What the chart must know of one engine, read off it."""
    engine = ENGINES[target]
    ports = {plan_of({"target": target, "rendezvous": {"port": p}}).master_port for p in (1111, 2222)}
    layouts = {}
    for layout in LAYOUTS:
        if runnable(target, layout) is not None:
            modes = {mode: _wiring(target, layout, mode) for mode in MODES}
            layouts[layout] = {**_names(target, layout), "wiring": {m: w for m, w in modes.items() if w is not None}}
    return {
        "containerName": engine.container_name,
        "portName": engine.port_name,
        "fixedPort": None if ports == {1111, 2222} else ports.pop(),
        "subdomain": derive(lambda a: engine.subdomain(plan_of({"target": target, "name": a["name"]})), PROBES),
        "refuses": _refusals(target),
        "nameTooLong": _name_message(target),
        "layouts": layouts,
        "groupCommand": _commands(target),
        "restart": _restarts(target),
        "recovery": _recovery(target),
    }
