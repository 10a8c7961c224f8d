"""The Helm chart and `ddpctl render` are one product with two front ends: for any spec ddpctl
renders, charts/ddp-job (through the real Helm v4 engine) renders exactly the same objects; for
any spec ddpctl refuses, the chart refuses it too and names the same key -- in ddpctl's own words
where the refusal is the chart's check rather than values.schema.json's.

Hypothesis draws the specs: valid ones across the four targets and every layout (uniform, elastic,
node groups) with GPUs, resources, volumes, env and secrets, labels and annotations (hostile
strings included), tolerations, Kueue queues and topology, restart policies, pod security and the
trainer's timeouts, given to the chart as a partial ddp.yaml or as `--helm-values` would write
them; and invalid ones, each a valid spec with one rule broken. The settings are fixed
(`derandomize`): CI runs the same examples every time.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpctl.engines import ENGINES, plan_for
from ddpctl.errors import SpecError
from ddpctl.manifests.render import render
from ddpctl.spec import TARGETS, JobSpec
from ddpctl.spec.names import MAX_DNS_LABEL
from ddpctl.spec.schema import (
    FABRICS,
    MAX_NODES,
    POD_SECURITY,
    PREFLIGHT_MODES,
    PULL_POLICIES,
    STRAGGLER_MODES,
    STRAGGLER_REFUSED,
    TAINT_EFFECTS,
)
from tests.contract import test_helm_chart
from tests.contract.test_helm_chart import chart_objects, diff, names_key
from tests.support.hostile import HOSTILE

helm, chart = test_helm_chart.helm, test_helm_chart.chart  # its fixtures: the Helm SDK and the loaded chart
SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}

# ------------------------------------------------------------------------------------ the pieces


def regex(pattern: str) -> st.SearchStrategy[str]:
    return st.from_regex(rf"\A(?:{pattern})\Z")


def dns_label(longest: int = 12) -> st.SearchStrategy[str]:
    return regex(rf"[a-z0-9]([-a-z0-9]{{0,{longest - 2}}}[a-z0-9])?")


SUBDOMAIN = regex(r"[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?(\.[a-z0-9]{1,4}){0,2}")
# printable or not, any script: all a value may hold but NUL (and surrogates, which YAML cannot hold)
TEXT = st.sampled_from([*HOSTILE, "\ufffe\uffff", "\ufeffbom", "\U0010ffff"]) | st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12
)
LABEL_VALUE = regex(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,10})?[A-Za-z0-9])?")
LABEL_KEY = st.sampled_from(["app.kubernetes.io/name", "ddpctl.io/node-group", "kueue.x-k8s.io/queue-name"]) | (
    st.builds(
        str.__add__,
        st.sampled_from(["", "example.com/", "a-b.c0.io/"]),
        regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,8}[A-Za-z0-9])?"),
    )
)
ENV_NAME = st.sampled_from(["PET_MAX_RESTARTS", "PYTHONUNBUFFERED", "DDP_TRAINER_BACKEND"]) | regex(
    r"[-._a-zA-Z][-._a-zA-Z0-9]{0,8}"
)
# env values are strings; YAML numbers are kept as written (ints, and floats Go prints the same way)
ENV_VALUE = TEXT | st.integers(-(10**9), 10**9) | st.floats(0.001, 1e9, allow_nan=False).filter(lambda x: x != int(x))
QUANTITY = st.sampled_from(["1", "500m", "1.5", ".5", "+2", "1e3", "64Mi", "16Gi", "2k"]) | st.builds(
    "{}{}".format, st.integers(0, 4096), st.sampled_from(["", "m", "Ki", "Mi", "Gi", "M", "G"])
)
RESOURCE = st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "gpu", "example.com/a_B.1"])
LEVEL = st.sampled_from(["example.com/rack", "example.com/block", "topology.kubernetes.io/zone"])
MOUNT_PATH = st.sampled_from(["/", "/dev/shmx", "/dev/shm2/", "/data//", "/a b/ü"]) | st.builds(
    str.__add__,
    st.just("/"),
    st.text(
        st.characters(exclude_characters=":", exclude_categories=["Cc", "Cs"]) | st.sampled_from("/-_."), max_size=12
    ),
).filter(lambda p: p.rstrip("/") != "/dev/shm")
JSON_LIKE = st.recursive(
    st.integers(-1000, 1000) | TEXT | st.booleans(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(regex(r"[a-zA-Z]{1,8}"), inner, max_size=3),
    max_leaves=6,
)


def tolerations() -> st.SearchStrategy[list[dict[str, Any]]]:
    one = st.fixed_dictionaries(
        {},
        optional={
            "key": RESOURCE | TEXT,
            "operator": st.sampled_from(["Equal", "Exists"]),
            "value": TEXT,
            "effect": st.sampled_from(TAINT_EFFECTS),
            "tolerationSeconds": st.integers(0, 10**6),
        },
    )
    return st.lists(one, max_size=2)


def maybe(values: dict[str, Any], key: str, draw: Any, strategy: st.SearchStrategy[Any]) -> None:
    """Give `key` a drawn value, or leave it out (the chart's default, ddpctl's default)."""
    if draw(st.booleans()):
        values[key] = draw(strategy)


def topology(draw: Any, pods: list[int] | None, slices: bool = True) -> dict[str, Any]:
    """A Kueue topology request; slices (when allowed) divide every group in `pods`."""
    out: dict[str, Any] = {}
    mode = draw(st.sampled_from(["required", "preferred", "unconstrained", None]))
    if mode == "unconstrained":
        out[mode] = True
    elif mode:
        out[mode] = draw(LEVEL)
    if slices and pods and draw(st.booleans()):
        common = math.gcd(*pods)
        out["sliceLevel"] = draw(LEVEL)
        out["sliceSize"] = draw(st.sampled_from([d for d in range(1, common + 1) if common % d == 0]))
    return out


# ------------------------------------------------------------------------------------ valid specs


def layout(draw: Any, values: dict[str, Any]) -> list[int]:
    """nodes, gpusPerNode, procsPerNode or nodeGroups for values' target: the pods of each group."""
    target = values["target"]
    kind = draw(st.sampled_from(["fixed", "groups"] if target == "trainjob" else ["fixed", "elastic", "groups"]))
    gpus = draw(st.sampled_from([0, 0, 1, 2, 8]))
    if kind == "groups":
        count = draw(st.integers(1, 1 if target == "trainjob" else 2 if target == "pytorchjob" else 4))
        names = draw(st.lists(dns_label(10), min_size=count, max_size=count, unique=True))
        groups = []
        for i, group_name in enumerate(names):
            group_gpus = draw(st.integers(1, 8)) if gpus else 0
            nodes = 1 if target == "pytorchjob" and count == 2 and i == 0 else draw(st.integers(1, 5))
            group: dict[str, Any] = {"name": group_name, "nodes": nodes, "gpusPerNode": group_gpus}
            maybe(group, "procsPerNode", draw, st.integers(1, group_gpus or 6))
            maybe(group, "nodeSelector", draw, st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=2))
            maybe(group, "tolerations", draw, tolerations())
            maybe(
                group,
                "resources",
                draw,
                st.fixed_dictionaries({}, optional={"cpu": QUANTITY, "memory": QUANTITY, "cpuLimit": QUANTITY}),
            )
            maybe(group, "gpuResource", draw, RESOURCE)
            if draw(st.booleans()):
                group["topology"] = topology(draw, [nodes], slices=target != "pytorchjob")
            groups.append(group)
        values["nodeGroups"] = groups
        return [g["nodes"] for g in groups if "topology" not in g]
    if gpus or draw(st.booleans()):
        values["gpusPerNode"] = gpus
    maybe(values, "procsPerNode", draw, st.integers(1, gpus or 6))
    if kind == "elastic":
        low = draw(st.integers(1, 4))
        high = draw(st.integers(low, 9))
        values["nodes"] = draw(st.sampled_from([f"{low}:{high}", f"0{low}:{high}"]))
        return []
    nodes = draw(st.integers(1, 6) | st.sampled_from([16, 100, MAX_NODES]))
    values["nodes"] = draw(st.sampled_from([nodes, str(nodes)]))
    return [nodes]


def entrypoint(draw: Any, values: dict[str, Any]) -> None:
    """module (ddpctl's trainer, by default or by name, or the user's), script or command, with args."""
    kind = draw(st.sampled_from(["default", "trainer", "module", "script", "command"]))
    if kind == "trainer":
        values["module"] = "ddpctl_trainer"
    elif kind == "module":
        values["module"] = draw(regex(r"[a-z_][a-z0-9_]{0,6}(\.[a-z_][a-z0-9_]{0,6}){0,2}"))
    elif kind != "default":
        if draw(st.booleans()):
            values["module"] = None  # else left to the default, which a script or command replaces
        if kind == "script":
            values["script"] = draw(st.text(st.characters(exclude_categories=["Cc", "Cs"]), min_size=1, max_size=12))
        else:
            first = draw(st.sampled_from(["torchrun", "python3", "bash"]) | TEXT.filter(bool))
            values["command"] = [first, *draw(st.lists(TEXT, max_size=3))]
    arg = TEXT | st.sampled_from(["--checkpoint-dir", "--data-dir", "--epochs", "3"])
    maybe(values, "args", draw, st.lists(arg, max_size=4))


def timeouts(draw: Any, values: dict[str, Any]) -> None:
    """stallTimeout and collectiveTimeout as the trainer takes them (any, for other code)."""
    trainer = values.get("module", "ddpctl_trainer") == "ddpctl_trainer" and not (
        values.get("script") or values.get("command")
    )
    stall = draw(st.none() | st.just(0) | st.integers(1, 1000))
    if stall is not None:
        values["stallTimeout"] = stall
    effective = 300 if stall is None else stall
    if draw(st.booleans()):
        low = effective + 1 if trainer and effective else 1
        values["collectiveTimeout"] = draw(st.integers(low, low + 2000))
    elif trainer and stall and stall >= 600:
        values["stallTimeout"] = draw(st.integers(1, 599))


@st.composite
def valid_values(draw: Any, target: str) -> dict[str, Any]:
    """A spec dict ddpctl renders on `target` (as a partial ddp.yaml: what it leaves out is the default)."""
    values: dict[str, Any] = {"target": target}
    pods = layout(draw, values)
    elastic = ":" in str(values.get("nodes", ""))
    entrypoint(draw, values)
    timeouts(draw, values)
    rdzv = st.fixed_dictionaries(
        {},
        optional={
            "mode": st.sampled_from(
                ["auto", "c10d"]
                if elastic
                else ["auto", "static"]
                if "nodeGroups" in values
                else ["auto", "static", "c10d"]
            ),
            "port": st.integers(1, 65535),
            "joinTimeout": st.integers(1, 5000),
            "lastCallTimeout": st.integers(1, 500),
            "maxRestarts": st.integers(0, 9),
        },
    )
    maybe(values, "rendezvous", draw, rdzv)
    gpus = values.get("gpusPerNode", 0) or any(g["gpusPerNode"] for g in values.get("nodeGroups", []))
    maybe(values, "backend", draw, st.sampled_from(["auto", "gloo", "nccl"] if gpus else ["auto", "gloo"]))
    maybe(values, "namespace", draw, dns_label())
    maybe(values, "image", draw, regex(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,20}"))
    maybe(values, "imagePullPolicy", draw, st.sampled_from(PULL_POLICIES))
    maybe(values, "imagePullSecrets", draw, st.lists(dns_label(), max_size=2))
    maybe(
        values,
        "resources",
        draw,
        st.fixed_dictionaries(
            {},
            optional={
                "cpu": QUANTITY,
                "memory": QUANTITY,
                "gpuResource": RESOURCE,
                "cpuLimit": QUANTITY,
                "fabricResource": RESOURCE,
                "fabricDevices": st.integers(1, 32),
            },
        ),
    )
    maybe(values, "shmSize", draw, QUANTITY)
    maybe(values, "env", draw, st.dictionaries(ENV_NAME, ENV_VALUE, max_size=3))
    secret_ref = st.fixed_dictionaries({"secret": dns_label(), "key": regex(r"[-._a-zA-Z0-9]{1,8}")})
    secrets = st.dictionaries(ENV_NAME, secret_ref, max_size=2)
    maybe(
        values, "secretEnv", draw, secrets.map(lambda s: {k: v for k, v in s.items() if k not in values.get("env", {})})
    )
    volume = st.fixed_dictionaries(
        {"claimName": SUBDOMAIN, "mountPath": MOUNT_PATH}, optional={"readOnly": st.booleans()}
    )
    volumes = st.dictionaries(st.sampled_from(["data", "checkpoints"]) | dns_label(), volume, max_size=3)
    maybe(values, "volumes", draw, volumes.filter(lambda v: "dshm" not in v).filter(_distinct_paths))
    trainer = values.get("module", "ddpctl_trainer") == "ddpctl_trainer" and not (
        values.get("script") or values.get("command")
    )
    by_arg = any(str(a).startswith("--checkpoint-dir") for a in values.get("args") or [])
    if trainer and not by_arg and "checkpoints" not in (values.get("volumes") or {}):
        maybe(values, "checkpoints", draw, CHECKPOINT_URL)
    maybe(values, "nodeSelector", draw, st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=2))
    maybe(values, "tolerations", draw, tolerations())
    maybe(
        values,
        "affinity",
        draw,
        st.dictionaries(
            st.sampled_from(["nodeAffinity", "podAffinity", "podAntiAffinity"]),
            st.dictionaries(regex(r"[a-zA-Z]{1,12}"), JSON_LIKE, max_size=2),
            max_size=2,
        )
        | REQUIRED_NODE_AFFINITY,
    )
    maybe(values, "avoidNodes", draw, st.lists(SUBDOMAIN, max_size=3))
    maybe(values, "serviceAccountName", draw, SUBDOMAIN)
    maybe(values, "labels", draw, st.dictionaries(LABEL_KEY, LABEL_VALUE, max_size=3))
    maybe(values, "annotations", draw, st.dictionaries(LABEL_KEY, TEXT, max_size=3))
    maybe(values, "queue", draw, LABEL_VALUE.filter(bool))
    maybe(values, "workloadPriorityClass", draw, LABEL_VALUE.filter(bool))
    if draw(st.booleans()):
        values["topology"] = topology(draw, None if elastic else pods, slices=target != "pytorchjob")
    policies = ["Never", "OnFailure"] + (["ExitCode"] if target in ("pytorchjob", "trainjob") else [])
    maybe(values, "restartPolicy", draw, st.sampled_from(policies))
    maybe(values, "backoffLimit", draw, st.integers(0, 10) | st.just(10**6))
    maybe(values, "ttlSecondsAfterFinished", draw, st.none() | st.integers(0, 10**7))
    maybe(values, "activeDeadlineSeconds", draw, st.none() | st.integers(1, 10**7))
    maybe(values, "gracePeriod", draw, st.integers(15, 3600))
    maybe(values, "podSecurity", draw, st.sampled_from(POD_SECURITY))
    if gpus and values.get("backend", "auto") != "gloo":
        maybe(values, "fabric", draw, st.sampled_from(FABRICS))
        if values.get("fabric", "socket") != "socket":
            values["podSecurity"] = "privileged"  # what its IPC_LOCK needs
    if trainer:
        maybe(values, "preflight", draw, PREFLIGHT)
    maybe(values, "stragglers", draw, STRAGGLERS)  # for a script of one's own too: its pods get the settings
    if target in ("job", "jobset") and draw(st.booleans()):
        asked = {**values, "recovery": "pod", "name": "n"}
        if _renders(asked):  # the layout and entrypoint allow it: a coordinator and per-index limits
            values["recovery"] = draw(st.sampled_from(["pod", "auto"]))
            if draw(st.booleans()):
                values["stragglers"] = {**(values.get("stragglers") or {}), "mode": "replace"}
    else:  # auto: pod where nothing blocks it (the chart resolves it as Engine.layout does), else gang
        maybe(values, "recovery", draw, st.sampled_from(["gang", "auto"]))
    if target != "trainjob":
        maybe(values, "priorityClassName", draw, SUBDOMAIN)
        maybe(values, "envFromSecrets", draw, st.lists(dns_label(), max_size=2))
    for key in draw(st.sets(st.sampled_from(NULLABLE))):
        values.setdefault(key, None)  # null, as a YAML file may say: the empty list or map
    values["name"] = fitting_name(values, draw(regex(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")))
    return values


CHECKPOINT_URL = st.builds(
    "{}://{}{}".format,
    st.sampled_from(["s3", "gs", "az"]),
    regex(r"[a-z0-9]([a-z0-9._-]{0,10}[a-z0-9])?"),
    st.sampled_from(["", "/", "/runs/r-1", "/a.b_c/d"]),
)

NULLABLE = ("args", "env", "secretEnv", "volumes", "nodeSelector", "tolerations", "labels", "annotations")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# a node affinity as Kubernetes takes it, which avoidNodes joins (each required term gets its matchFields)
REQUIRED_NODE_AFFINITY = st.fixed_dictionaries(
    {
        "nodeAffinity": st.fixed_dictionaries(
            {
                REQUIRED: st.fixed_dictionaries(
                    {
                        "nodeSelectorTerms": st.lists(
                            st.fixed_dictionaries(
                                {},
                                optional={
                                    "matchExpressions": st.just([{"key": "pool", "operator": "In", "values": ["a"]}]),
                                    "matchFields": st.just(
                                        [{"key": "metadata.name", "operator": "In", "values": ["x"]}]
                                    ),
                                },
                            ),
                            min_size=1,
                            max_size=2,
                        )
                    }
                )
            }
        )
    }
)
SHARE = st.sampled_from([0.01, 0.25, 0.5, 0.6, 0.75, 0.8, 0.333, 1, 0.95])
FLOOR = st.sampled_from([0, 0, 1, 12.5, 300, 0.05, 1000000, 2.75])
PREFLIGHT = st.fixed_dictionaries(
    {"mode": st.sampled_from(PREFLIGHT_MODES)},
    optional={
        "tolerance": SHARE,
        "minGflops": FLOOR,
        "minTflops": FLOOR,
        "minBusbw": FLOOR,
        "minH2d": FLOOR,
    },
)

STRAGGLERS = st.fixed_dictionaries(
    {},
    optional={
        # replace needs recovery: pod: drawn with it (valid_values)
        "mode": st.sampled_from([m for m in STRAGGLER_MODES if m not in STRAGGLER_REFUSED and m != "replace"]),
        "tolerance": st.sampled_from([0.001, 0.25, 0.45, 0.6, 0.333, 0.95, 0.999]),
        "every": st.sampled_from([1, 2, 10, 25, 1000]),
        "windows": st.sampled_from([1, 3, 7]),
    },
)


def _renders(values: dict[str, Any]) -> bool:
    try:
        plan_for(JobSpec.from_dict(copy.deepcopy(values)))
    except SpecError:
        return False
    return True


def _distinct_paths(volumes: dict[str, Any]) -> bool:
    return len({v["mountPath"] for v in volumes.values()}) == len(volumes)


def fitting_name(values: dict[str, Any], name: str) -> str:
    """`name`, cut to what the names its engine derives leave of a DNS label."""
    spec = JobSpec.from_dict({**values, "name": "n"})
    room = MAX_DNS_LABEL - (
        len(ENGINES[spec.target].unchecked_plan(ENGINES[spec.target].layout(spec)).longest_generated_name) - 1
    )
    return name[:room].rstrip("-")


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=60, **SETTINGS)
@given(data=st.data(), as_helm_values=st.booleans())
def test_the_chart_renders_what_ddpctl_renders(
    chart: Any, target: str, data: st.DataObject, as_helm_values: bool
) -> None:
    values = data.draw(valid_values(target), label="values")
    spec = JobSpec.from_dict(copy.deepcopy(values))
    expected = sorted(render(spec), key=_order)
    # a ddp.yaml given as it is, or the values `ddpctl render --helm-values` writes of it
    got = sorted(chart_objects(chart, spec.to_dict() if as_helm_values else copy.deepcopy(values)), key=_order)
    assert [_order(o) for o in got] == [_order(o) for o in expected]
    for mine, theirs in zip(got, expected):
        assert mine == theirs, f"{mine['kind']} differs from ddpctl render:\n" + diff(theirs, mine)


def _order(obj: dict[str, Any]) -> tuple[str, str]:
    return (obj["kind"], obj["metadata"]["name"])


# ------------------------------------------------------------------------------------ invalid specs

Breaker = Callable[[Any, dict[str, Any]], dict[str, Any]]
# what a spec's layout, target and entrypoint are made of: replaced whole by a breaker's context
CONTEXT_KEYS = frozenset(
    {"target", "nodes", "gpusPerNode", "procsPerNode", "nodeGroups", "topology", "backend", "rendezvous"}
    | {"restartPolicy", "priorityClassName", "envFromSecrets", "module", "script", "command", "stallTimeout"}
    | {"collectiveTimeout", "fabric"}  # a fast fabric needs the GPUs of the layout a context replaces
)


def _in(context: dict[str, Any] | None = None, *either: dict[str, Any], **broken: Any) -> Breaker:
    """Break a rule with `broken` (values, or strategies to draw them from) or with one of the
    changes `either`: in the drawn spec, or first put in `context` (a target, layout and entrypoint
    of its own)."""

    def apply(draw: Any, values: dict[str, Any]) -> dict[str, Any]:
        if context is not None:
            values = {k: v for k, v in values.items() if k not in CONTEXT_KEYS} | copy.deepcopy(context)
            values["name"] = values["name"][:8].rstrip("-")  # short: the derived names fit any layout
        drawn = {k: draw(v) if isinstance(v, st.SearchStrategy) else v for k, v in broken.items()}
        return {**values, **copy.deepcopy(drawn), **copy.deepcopy(draw(st.sampled_from(either)) if either else {})}

    return apply


def _g(name: str, nodes: int = 1, gpus: int = 0, **more: Any) -> dict[str, Any]:
    return {"name": name, "nodes": nodes, "gpusPerNode": gpus, **more}


def _groups(*groups: dict[str, Any], target: str = "job") -> dict[str, Any]:
    return {"target": target, "nodeGroups": list(groups)}


def _one_of(*values: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from(values)


JOB, TRAINER = {"target": "job"}, {}
RACK = "example.com/rack"

# One rule broken at a time: the keys JSON Schema checks, the rules across keys the chart checks at
# render time (JobSpec's), what an engine cannot run (Engine.check), and the names it derives.
BREAKERS: dict[str, Breaker] = {
    "name": _in(name=_one_of("Bad_Name", "1abc", "", "a" * 64)),
    "namespace": _in(namespace="Prod"),
    "target": _in(target="slurm"),
    "image": _in(image=_one_of("bad image", "img\nkind: Pod")),
    "imagePullPolicy": _in(imagePullPolicy="Sometimes"),
    "imagePullSecrets": _in(imagePullSecrets=["Not_A_Name"]),
    "nodes": _in(JOB, nodes=_one_of(0, -3, MAX_NODES + 1, "0", "0:4", "two", True)),
    "gpusPerNode": _in(JOB, gpusPerNode=-1),
    "procsPerNode": _in(JOB, procsPerNode=0),
    "backend": _in(backend="mpi"),
    "module": _in(TRAINER, module="not a module"),
    "script": _in(TRAINER, module=None, script="bad\nscript.py"),
    "rendezvous": _in(
        JOB, rendezvous=_one_of({"port": 0}, {"port": 70000}, {"mode": "etcd"}, {"bogus": 1}, {"joinTimeout": 0})
    ),
    "resources": _in(
        resources=_one_of(
            {"memory": "lots"},
            {"cpu": "1 000"},
            {"gpuResource": "bad resource"},
            {"cpuLimit": "-1"},
            {"fabricDevices": 0},
            {"fabricResource": "a b"},
        )
    ),
    "shmSize": _in(shmSize="-1Gi"),
    "env": _in(env=_one_of({"1BAD": "x"}, {"FLAG": True}, {"AWS_SECRET_ACCESS_KEY": "x"}), secretEnv={}),
    "envFromSecrets": _in(JOB, envFromSecrets=["UPPER"]),
    "secretEnv": _in(secretEnv=_one_of({"X": {"secret": "s"}}, {"X": {"secret": "s", "key": "bad key"}}), env={}),
    "volumes": _in(
        volumes=_one_of(
            {"data": {"claimName": "pvc", "mountPath": "relative"}},
            {"data": {"claimName": "pvc", "mountPath": "/dev/shm/"}},
            {"Data": {"claimName": "pvc", "mountPath": "/data"}},
            {"dshm": {"claimName": "pvc", "mountPath": "/x"}},
            {"data": {"claimName": "pvc"}},
            {"data": {"claimName": "pvc", "mountPath": "/d", "readonly": True}},
        )
    ),
    "checkpoints": _in(
        TRAINER,
        {"checkpoints": "s3://b/run", "module": "mypkg.train"},
        {"checkpoints": "s3://b/run", "volumes": {"checkpoints": {"claimName": "pvc", "mountPath": "/ckpt"}}},
        {"checkpoints": "s3://b/run", "args": ["--checkpoint-dir", "/ckpt"]},
        {"checkpoints": "s3://b/run", "args": ["--checkpoint-dir=/ckpt"]},
        checkpoints=_one_of(
            "ftp://b/run", "s3://", "s3://Bucket/run", "s3://key:secret@b/run", "/ckpt", "s3://b/a b", "s3://b/r?x=1"
        ),
    ),
    "nodeSelector": _in(nodeSelector={"pool": "a b"}),
    "tolerations": _in(
        tolerations=_one_of(
            [{"key": "k", "operator": "Maybe"}],
            [{"colour": "red"}],
            [{"effect": "Now"}],
            [{"key": "k", "tolerationSeconds": -1}],
        )
    ),
    "affinity": _in(affinity={"nodeAfinity": {}}),
    "priorityClassName": _in(JOB, priorityClassName="High Priority"),
    "labels": _in(labels=_one_of({"team": "a b"}, {"bad key!": "a"}, {"a" * 64: "x"})),
    "annotations": _in(annotations={"": "a"}),
    "queue": _in(queue=_one_of("", "a b")),
    "topology": _in(JOB, topology=_one_of({"rack": "x"}, {"required": "not a label"})),
    "restartPolicy": _in(restartPolicy="Always"),
    "numbers": _in(None, {"backoffLimit": -1}, {"ttlSecondsAfterFinished": -1}, {"stallTimeout": -1}),
    "activeDeadlineSeconds": _in(activeDeadlineSeconds=0),
    "gracePeriod": _in(gracePeriod=14),
    "collectiveTimeout": _in(collectiveTimeout=0),
    "podSecurity": _in(podSecurity="root"),
    "fabric": _in(fabric=_one_of("ib", "tcp", "")),
    "avoidNodes": _in(avoidNodes=_one_of(["Bad_Node"], "gpu-3", [""])),
    "preflight": _in(
        preflight=_one_of({"mode": "on"}, {"tolerance": 0}, {"tolerance": 2}, {"minBusbw": -1}, {"bogus": 1})
    ),
    "stragglers": _in(
        recovery="gang",  # replace is refused without recovery: pod
        stragglers=_one_of(
            {"mode": "replace"},
            {"mode": "on"},
            {"tolerance": 0},
            {"tolerance": 1},
            {"every": 0},
            {"windows": 0},
            {"every": 2.5},
            {"bogus": 1},
        ),
    ),
    "recovery": _in(recovery=_one_of("Pod", "none", True)),
    # auto resolved to gang: replace has no pod recovery to replace the straggler's pod with
    "recovery.auto": lambda draw, v: _in(
        {"target": draw(_one_of(*TARGETS))},
        {"target": draw(_one_of("pytorchjob", "trainjob"))},
        {"module": "mine.train"},
        {"nodes": "1:3"},
        {"restartPolicy": "OnFailure"},
        recovery="auto",
        stragglers={"mode": "replace"},
    )(draw, v),
    "recovery.target": lambda draw, v: _in({"target": draw(_one_of("pytorchjob", "trainjob"))}, recovery="pod")(
        draw, v
    ),
    "recovery.layout": lambda draw, v: _in(
        {"target": draw(_one_of("job", "jobset"))},
        {"module": "mine.train"},
        {"module": None, "script": "train.py"},
        {"nodes": "1:3"},
        {"gpusPerNode": 2},
        {"args": ["--strategy", "fsdp"]},
        {"args": ["--epochs", "2", "--strategy=fsdp"]},
        {"env": {"DDP_TRAINER_STRATEGY": "fsdp"}, "secretEnv": {}},
        {"restartPolicy": "OnFailure"},
        {"nodeGroups": [_g("coordinator", 2)]},
        recovery="pod",
    )(draw, v),
    "unknown key": _in(unknownKey=1),
    "nodeGroups": _in(
        JOB,
        nodeGroups=_one_of(
            [_g("a", colour="red")],
            [_g("A_B")],
            [{"name": "a", "nodes": 1}],
            [_g("a", 0)],
            [_g("a", resources={"gpu": "1"})],
        ),
    ),
    # the rules across keys: the chart's own checks at render time
    "nodes.range": _in(JOB, nodes=_one_of("5:3", "1:2000", "2000")),
    "procs": _in(JOB, gpusPerNode=2, procsPerNode=3),
    "groups.procs": _in(_groups(_g("a", 1, 2, procsPerNode=1), _g("b", 1, 2, procsPerNode=3))),
    "groups.name": _in(_groups(_g("a"), _g("b"), _g("a"), target="jobset")),
    "groups.gpus": _in(_groups(_g("a", 1, 4), _g("b", 1, 0))),
    "groups.nodes": _in(_groups(_g("a", 1000), _g("b", 25)), name="n"),
    "groups.layout": _in(_groups(_g("a")), {"nodes": 3}, {"nodes": "1:4"}, {"gpusPerNode": 1}),
    "entrypoint": _in(TRAINER, module=None),
    "entrypoint.two": _in(TRAINER, module=None, script="train.py", command=["python"]),
    "entrypoint.module": _in(TRAINER, module="mine.train", script="train.py"),
    "backend.nccl": _in(JOB, backend="nccl"),
    "backend.groups": _in(_groups(_g("a"), _g("b")), backend="nccl"),
    "elastic.static": _in({"target": "jobset", "nodes": "1:3"}, rendezvous={"mode": "static"}),
    "secretEnv.clash": _in(env={"A": "1", "B": "2"}, secretEnv={"A": {"secret": "s", "key": "k"}}),
    "volumes.clash": _in(
        volumes={"a": {"claimName": "p", "mountPath": "/x"}, "b": {"claimName": "q", "mountPath": "/x"}}
    ),
    "topology.rules": _in(
        {"target": "job", "nodes": 4},
        topology=_one_of(
            {"required": "example.com/a", "preferred": "example.com/b"},
            {"preferred": "example.com/b", "unconstrained": True},
            {"required": "example.com/a", "preferred": "example.com/b", "unconstrained": True},
            {"sliceLevel": RACK},
            {"sliceSize": 2},
            {"sliceLevel": RACK, "sliceSize": 3},
        ),
    ),
    "topology.elastic": _in({"target": "job", "nodes": "2:4"}, topology={"sliceLevel": RACK, "sliceSize": 2}),
    "groups.topology": _in(
        _groups(
            _g("a", 1, 4, topology={"unconstrained": True, "required": RACK}),
            _g("b", 3, 4, topology={"sliceLevel": RACK, "sliceSize": 2}),
        )
    ),
    "groups.slices": lambda draw, v: _in(
        _groups(
            _g("a", 1, 4),
            _g("b", 3, 4, topology={"sliceLevel": RACK, "sliceSize": 2}),
            target=draw(st.sampled_from(TARGETS)),
        )
    )(draw, v),
    "collectiveTimeout.stall": _in(
        TRAINER, {"collectiveTimeout": 300}, {"collectiveTimeout": 120, "stallTimeout": 120}
    ),
    "stallTimeout": _in(TRAINER, stallTimeout=_one_of(600, 601)),
    "preflight.trainer": _in(
        TRAINER,
        {"module": "mine.train"},
        {"module": None, "script": "train.py"},
        {"module": None, "command": ["python", "t.py"]},
        preflight=_one_of({"mode": "warn"}, {"mode": "fail"}),
    ),
    "fabric.gloo": _in(
        {"target": "job"},
        {"gpusPerNode": 0},
        {"gpusPerNode": 2, "backend": "gloo"},
        fabric=_one_of("infiniband", "roce", "efa"),
    ),
    "fabric.privileged": lambda draw, v: _in(
        {"target": draw(_one_of(*TARGETS)), "gpusPerNode": 4},
        fabric=_one_of("infiniband", "roce", "efa"),
        podSecurity=_one_of("restricted", "baseline"),
    )(draw, v),
    "avoidNodes.affinity": _in(
        avoidNodes=["gpu-3"],
        affinity=_one_of(
            {"nodeAffinity": {REQUIRED: {}}},
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}},
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": ["x"]}}},
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchFields": {"key": "x"}}]}}},
            {"nodeAffinity": {REQUIRED: "all"}},
        ),
    ),
    # what an engine cannot run
    "exitCode": lambda draw, v: _in({"target": draw(_one_of("job", "jobset"))}, restartPolicy="ExitCode")(draw, v),
    "trainjob": _in(
        {"target": "trainjob"},
        {"nodes": "1:4"},
        {"nodeGroups": [_g("a", 1, 4), _g("b", 1, 3)]},
        {"priorityClassName": "high"},
        {"envFromSecrets": ["hf-token"]},
    ),
    "pytorchjob": _in(
        {"target": "pytorchjob"},
        {"nodeGroups": [_g("a", 2), _g("b")]},
        {"nodeGroups": [_g("a"), _g("b"), _g("c")]},
        {"nodes": 4, "topology": {"sliceLevel": RACK, "sliceSize": 2}},
    ),
    "groups.c10d": lambda draw, v: _in(
        _groups(_g("a"), _g("b"), target=draw(_one_of("job", "jobset"))), rendezvous={"mode": "c10d"}
    )(draw, v),
    # the names the engine derives: one character too many
    "name.length": lambda draw, v: {**v, "name": "b" * (len(fitting_name(v, "b" * MAX_DNS_LABEL)) + 1)},
}


@pytest.mark.parametrize("rule", sorted(BREAKERS))
@settings(max_examples=5, **SETTINGS)
@given(target=st.sampled_from(TARGETS), data=st.data())
def test_what_ddpctl_refuses_the_chart_refuses_naming_the_key(
    chart: Any, helm: Any, rule: str, target: str, data: st.DataObject
) -> None:
    broken = BREAKERS[rule](data.draw, data.draw(valid_values(target), label="valid"))
    try:
        plan_for(JobSpec.from_dict(copy.deepcopy(broken)))
    except SpecError as exc:
        refused = exc
    else:
        pytest.fail(f"the {rule} breaker did not break {broken!r}")
    with pytest.raises(helm.HelmError) as chart_refused:
        chart.render(copy.deepcopy(broken))
    message = str(chart_refused.value)
    if "execution error" in message:  # the chart's own check: ddpctl's words
        words = f"{refused.field}: {refused.problem}" + (f"; {refused.fix}" if refused.fix else "")
        assert words in message, f"ddpctl says {words!r}, the chart {message!r}"
    else:  # values.schema.json
        assert names_key(message, refused.field, broken), f"{message!r} does not name {refused.field}"
