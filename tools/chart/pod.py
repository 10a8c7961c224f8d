"""What every pod and object carries (labels, Kueue's annotations, security, /dev/shm, env) and the
spec's constants, read off ddpctl."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from ddpctl.manifests.render import view
from ddpctl.spec import JobSpec, NodeGroup, Preflight, Stragglers, Topology, kueue
from ddpctl.spec.fabrics import PROFILES
from ddpctl.spec.fields import number_text
from ddpctl.spec.names import MAX_DNS_LABEL
from ddpctl.spec.schema import GRACE_MARGIN, MAX_NODES, POD_SECURITY
from ddpctl.spec.serial import part_dict
from ddpctl_trainer import protocol
from tools.chart.derive import Args, derive, fill
from tools.chart.probes import (
    CODES,
    PROBES,
    group_list,
    node_rank_entry,
    plan_of,
)

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
    """The env ddpctl gives the training container besides the engine's wiring (Layout.container_env)
    for the ddpctl trainer or other code: each variable's template, and the features it needs
    (`when`, all of them; a variable with two entries needs either's)."""

    def env_of(values: dict[str, Any]) -> dict[str, str]:
        plan = plan_of({**CODES[code], **values})
        group = plan.spec.groups[0]
        unwired = plan.container_env(group, {})  # without the engine's wiring
        return {k: v for k, v in unwired.items() if k not in plan.stragglers_env}  # the stragglers' are their own

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
    args = plan_of({"volumes": {v: {"claimName": "c", "mountPath": p} for v, p in paths.items()}}).trainer_args
    by_path = {p: v for v, p in paths.items()}
    return [{"volume": by_path[path], "flag": flag} for flag, path in zip(args[::2], args[1::2])]


def constants() -> dict[str, Any]:
    trainer, user = plan_of({}), plan_of(CODES["custom"])
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
        "backend": {"gpus": plan_of({"gpusPerNode": 1}).backend, "cpu": trainer.backend},
        "rendezvous": {"fixed": trainer.rdzv_mode, "elastic": plan_of({"nodes": "1:2"}).rdzv_mode},
        "launcher": {"builtin": list(trainer.launcher), "custom": list(user.launcher)},
        "trainerDirs": _trainer_dirs(),
        # with nodeGroups, the uniform layout's keys must stay at their defaults
        "layoutDefaults": [{"key": k, "default": defaults[k]} for k in ("nodes", "gpusPerNode", "procsPerNode")],
        "fabrics": {
            name: {"resource": f.resource, "env": dict(f.env), "capabilities": list(f.capabilities)}
            for name, f in PROFILES.items()
        },
        "preflight": _preflight(),
        "stragglers": _stragglers(),
    }


def _preflight() -> dict[str, Any]:
    """The preflight's part of the pods (Plan.preflight_env, Plan.downward_env): its defaults, the
    variable of each of its keys, and the downward-API entries a job with the checks on gets."""
    checks = Preflight(mode="warn", min_gflops=1, min_tflops=2, min_busbw=3, min_h2d=4)
    plan = plan_of({"target": "pytorchjob", "gpusPerNode": 1, "preflight": part_dict(checks)})
    env = plan.preflight_env
    by_value = {value: name for name, value in env.items()}
    keys = {
        "mode": checks.mode,
        "tolerance": number_text(checks.tolerance),
        **{k: str(v) for k, v in checks.floors().items()},
    }
    if set(by_value) != set(keys.values()) or len(keys) != len(env):
        raise ValueError(f"the preflight's env {env} is not one variable per key of {keys}: teach the chart")
    fabric = plan_of({"gpusPerNode": 1, "fabric": "efa", "podSecurity": "privileged", "preflight": {"mode": "warn"}})
    (fabric_env,) = set(fabric.preflight_env) - set(plan.preflight_env)
    downward = [e for e in view(plan)["env"] if "fieldRef" in e.get("valueFrom", {})]
    return {
        "defaults": part_dict(Preflight()),
        "env": {key: by_value[value] for key, value in keys.items()},
        "fabricEnv": fabric_env,
        "downward": downward,
    }


def _stragglers() -> dict[str, Any]:
    """The straggler detector's part of the pods (Plan.stragglers_env): its defaults, the variable
    of each of its keys, those set even when it is off (`always`), and that a job with it on gets
    the preflight's downward-API entries (Plan.downward_env)."""
    watch = Stragglers(mode="fail", tolerance=0.45, every=7, windows=5)
    plan = plan_of({"target": "pytorchjob", "stragglers": part_dict(watch)})  # no PET_NODE_RANK entry of its own
    env = plan.stragglers_env
    by_value = {value: name for name, value in env.items()}
    keys = {
        "mode": watch.mode,
        "tolerance": number_text(watch.tolerance),
        "every": number_text(watch.every),
        "windows": number_text(watch.windows),
    }
    if set(by_value) != set(keys.values()) or len(keys) != len(env):
        raise ValueError(f"the stragglers' env {env} is not one variable per key of {keys}: teach the chart")
    off = plan_of({"target": "pytorchjob", "stragglers": {"mode": "off"}})
    always = [key for key, value in keys.items() if by_value[value] in off.stragglers_env]
    if any(name not in env or value != "off" for name, value in off.stragglers_env.items()) or always != ["mode"]:
        raise ValueError(f"with stragglers off the pods get {off.stragglers_env}, not the mode alone: teach the chart")
    downward = [e for e in view(plan)["env"] if "fieldRef" in e.get("valueFrom", {})]
    if downward != _preflight()["downward"] or any("fieldRef" in e.get("valueFrom", {}) for e in view(off)["env"]):
        raise ValueError(f"with stragglers on, the pods' downward-API env is {downward}, not the preflight's: teach it")
    return {
        "defaults": part_dict(Stragglers()),
        "env": {key: by_value[value] for key, value in keys.items()},
        "groupEnv": _group_env(),
    }


def _group_env() -> str:
    """The variable that carries a pod's node-group name with node groups and the detector on
    (Plan.group_env), the one that differs by group and is absent with the detector off."""
    groups = {"nodeGroups": group_list(("zalpha", 1, 0), ("zbeta", 2, 0))}
    on, off = plan_of(groups), plan_of({**groups, "stragglers": {"mode": "off"}})
    found = set()
    for group, other in zip(on.spec.groups, off.spec.groups):
        env, quiet = on.group_of(group).env, off.group_of(other).env
        found.add(frozenset(k for k, v in env.items() if v == group.name and k not in quiet))
    uniform = plan_of({})
    if len(found) != 1 or len(names := next(iter(found))) != 1 or uniform.group_env(uniform.spec.groups[0]):
        raise ValueError(
            f"the pods' node-group name is not one variable set only with groups and the detector: {found}"
        )
    return next(iter(names))


def pod_parts() -> dict[str, Any]:
    """What every pod and object carries: labels, Kueue's annotations, security, /dev/shm, env."""
    probes = [
        {"name": p["name"], "group": p["group"], "queue": f"zq-{p['name']}", "size": s} for p, s in zip(PROBES, (2, 3))
    ]
    probes = [p | {"level": f"example.com/{p['name']}"} for p in probes]

    def added(more: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in more.items() if k not in base}

    def group_labels(a: Args) -> dict[str, str]:
        plan = plan_of({"name": a["name"], "nodeGroups": group_list((a["group"], 1, 0))})
        return added(plan.groups[0].labels, plan.object_labels)

    return {
        "labels": derive(lambda a: plan_of({"name": a["name"]}).object_labels, probes),
        "selector": derive(lambda a: plan_of({"name": a["name"]}).selector_labels, probes),
        "groupLabels": derive(group_labels, probes),
        "queueLabels": derive(
            lambda a: added(plan_of({"queue": a["queue"]}).top_labels, plan_of({}).top_labels), probes
        ),
        "priorityLabels": derive(
            lambda a: added(plan_of({"workloadPriorityClass": a["queue"]}).top_labels, plan_of({}).top_labels), probes
        ),
        "topology": {
            "required": derive(lambda a: Topology(required=a["level"]).annotations(), probes),
            "preferred": derive(lambda a: Topology(preferred=a["level"]).annotations(), probes),
            "unconstrained": derive(lambda a: Topology(unconstrained=True).annotations(), probes),
            "slices": derive(lambda a: Topology(slice_level=a["level"], slice_size=a["size"]).annotations(), probes),
            "podsetGroup": kueue.PODSET_GROUP_NAME,
        },
        "security": {
            profile: {k: view(plan_of({"podSecurity": profile}))[f"{k}_security_context"] for k in ("pod", "container")}
            for profile in POD_SECURITY
        },
        "shm": derive(
            lambda a: {k: view(plan_of({"shmSize": a["size"]}))[k][0] for k in ("volumes", "volume_mounts")},
            [{"size": "3Gi"}, {"size": "700Mi"}],
        ),
        "nodeRankEntry": node_rank_entry(),
        "gpuToleration": derive(
            lambda a: view(plan_of({"gpusPerNode": 1, "resources": {"gpuResource": a["gpu"]}}))["tolerations"][-1],
            [{"gpu": "example.com/zgpu"}, {"gpu": "zother"}],
        ),
        "env": {code: _env(code) for code in CODES},
    }
