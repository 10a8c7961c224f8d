"""charts/ddp-job renders exactly what `ddpctl render` renders, through the real Helm engine.

Helm runs in-process through PyPI `helm-python-sdk` (import name `helm_python`: Helm v4's Go SDK
behind a C ABI, no `helm` binary, no cluster, no network): `Chart.load(dir).render(values)` for
`helm template`, `Chart.validate_schema(values)` for values.schema.json and `helm_python.lint(dir,
values)` for `helm lint`. For every spec in the matrix the chart's objects, parsed, equal
`ddpctl.manifests.render.render(spec)` and validate against the same strict schemas as the render tests.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ddpctl.engines import plan_for
from ddpctl.errors import SpecError
from ddpctl.manifests.render import render
from ddpctl.spec.model import TARGETS, JobSpec

from tests.support import REPO, skip_unless
from tests.support.hostile import HOSTILE
from tests.support.k8s_schemas import validate_object

CHART_DIR = REPO / "charts" / "ddp-job"


def _helm() -> Any:
    try:
        import helm_python
    except ImportError as exc:  # pragma: no cover - depends on the environment
        skip_unless(False, f"helm-python-sdk is not importable ({exc}); pip install -e '.[test]'")
    return helm_python


@pytest.fixture(scope="module")
def helm() -> Any:
    return _helm()


@pytest.fixture(scope="module")
def chart(helm: Any) -> Iterator[Any]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


def chart_objects(chart: Any, values: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
    """`helm template`'s objects, parsed, in ddpctl's apply order (Service before the workload)."""
    manifests = chart.render(values, **options)
    objects = [
        doc
        for path, text in sorted(manifests.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    return sorted(objects, key=_apply_order)


def _apply_order(obj: dict[str, Any]) -> tuple[int, str]:
    return (0 if obj["kind"] == "Service" else 1, obj["metadata"]["name"])


def assert_same_objects(chart: Any, spec: JobSpec, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart, given the spec as values, renders the CLI's objects (parsed, compared whole)."""
    expected = render(spec)
    got = chart_objects(chart, spec.to_dict() if values is None else values)
    assert [_apply_order(o) for o in got] == [_apply_order(o) for o in expected]
    for mine, theirs in zip(got, expected):
        assert mine == theirs, f"{mine['kind']} differs from ddpctl render:\n" + _diff(theirs, mine)
    return got


def _diff(expected: Any, got: Any) -> str:
    import difflib

    a = yaml.safe_dump(expected, sort_keys=True).splitlines()
    b = yaml.safe_dump(got, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(a, b, "ddpctl render", "helm template", lineterm=""))


# ----------------------------------------------------------------------------------- the matrix

RICH: dict[str, Any] = {
    "namespace": "research",
    "image": "registry.example.com/team/trainer@sha256:" + "b" * 64,
    "imagePullPolicy": "Always",
    "imagePullSecrets": ["regcred", "mirror"],
    "args": ["--epochs", "3", 'say "hi"\nkind: Pod', "{{ .Values.name }}", "key: value", "", "it's # not a comment"],
    "resources": {"cpu": "16", "memory": "64Gi"},
    "shmSize": "16Gi",
    "env": {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4", "QUOTED": '"a": {{ b }}'},
    "envFromSecrets": ["hf-token"],
    "secretEnv": {
        "WANDB_API_KEY": {"secret": "wandb", "key": "api-key"},
        "AWS_SECRET": {"secret": "aws", "key": "secret.key"},
    },
    "volumes": {
        "data": {"claimName": "imagenet", "mountPath": "/data", "readOnly": True},
        "checkpoints": {"claimName": "ckpt", "mountPath": "/ckpt"},
        "scratch": {"claimName": "scratch.pvc", "mountPath": "/scratch", "readOnly": False},
    },
    "nodeSelector": {"nvidia.com/gpu.product": "H100", "topology.kubernetes.io/zone": "eu-1a"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]
            }
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "x"}},
                    },
                }
            ]
        },
    },
    "serviceAccountName": "trainer",
    "labels": {"team": "vision", "example.com/cost-center": "ml-42"},
    "annotations": {"example.com/owner": "alice", "example.com/note": "multi\nline: {{ x }}"},
    "queue": "team-a",
    "restartPolicy": "OnFailure",
    "backoffLimit": 2,
    "ttlSecondsAfterFinished": None,
    "activeDeadlineSeconds": 7200,
}
LAYOUTS = {"static": {"nodes": 3}, "elastic": {"nodes": "2:5"}}
DEVICES = {"cpu": {"gpusPerNode": 0}, "gpu": {"gpusPerNode": 8}}


def _matrix() -> Iterator[Any]:
    for target in TARGETS:
        for layout_name, layout in LAYOUTS.items():
            if target == "trainjob" and layout_name == "elastic":
                continue  # JobSpec refuses it: Trainer v2 has no elastic policy
            for device_name, device in DEVICES.items():
                for extras_name, extras in (("minimal", {}), ("rich", RICH)):
                    data = {"name": f"m-{target}", "target": target, **layout, **device, **extras}
                    if extras and target != "trainjob":
                        data["priorityClassName"] = "high-priority"
                    if extras and target == "trainjob":
                        del data["envFromSecrets"]  # TrainJob has no envFrom: refused (see INVALID)
                    yield pytest.param(data, id=f"{target}-{layout_name}-{device_name}-{extras_name}")


RACK, BLOCK = "cloud.ddpctl.io/topology-rack", "cloud.ddpctl.io/topology-block"

SPECIAL: dict[str, dict[str, Any]] = {
    "defaults": {},
    "one-node-pytorchjob": {"target": "pytorchjob", "nodes": 1},
    "elastic-same-min-max": {"target": "jobset", "nodes": "4:4"},
    "string-node-count": {"nodes": "4"},
    "leading-zeros": {"nodes": "01:04", "target": "pytorchjob"},
    "script": {"script": "/app/train.py", "module": None, "args": ["--lr", "0.1"]},
    "script-no-module-key": {"script": "train.py", "target": "jobset"},
    "command": {"command": ["python", "-u", "train.py", ""], "module": None, "target": "trainjob"},
    "own-module": {"module": "mypkg.train", "volumes": {"data": {"claimName": "d", "mountPath": "/data"}}},
    "trainer-dirs-given": {
        "args": ["--data-dir", "/elsewhere"],
        "volumes": {
            "data": {"claimName": "d", "mountPath": "/data"},
            "checkpoints": {"claimName": "c", "mountPath": "/c"},
        },
    },
    "static-c10d": {
        "rendezvous": {"mode": "c10d", "port": 23456, "joinTimeout": 900, "lastCallTimeout": 5, "maxRestarts": 3}
    },
    "static-c10d-jobset": {"target": "jobset", "rendezvous": {"mode": "c10d"}},
    "static-c10d-trainjob": {"target": "trainjob", "rendezvous": {"mode": "c10d", "port": 1234}},
    "elastic-c10d-pytorchjob": {
        "target": "pytorchjob",
        "nodes": "1:8",
        "rendezvous": {"mode": "c10d", "port": 30000, "maxRestarts": 2},
    },
    "procs-per-node-cpu": {"nodes": 2, "procsPerNode": 6},
    "procs-per-node-gpu": {"target": "pytorchjob", "gpusPerNode": 8, "procsPerNode": 4},
    "gloo-on-gpus": {"gpusPerNode": 2, "backend": "gloo"},
    "amd-gpus-tolerated": {
        "gpusPerNode": 1,
        "resources": {"gpuResource": "amd.com/gpu", "memory": "1.5Gi"},
        "tolerations": [{"key": "amd.com/gpu", "operator": "Exists"}],
    },
    "user-env-overrides-wiring": {
        "env": {"PET_MAX_RESTARTS": "9", "PYTHONUNBUFFERED": "0", "A_FIRST": "x", "z.lower": "y"}
    },
    "user-label-loses": {"labels": {"app.kubernetes.io/name": "mine", "app.kubernetes.io/part-of": "vision"}},
    "baseline": {"podSecurity": "baseline", "target": "jobset"},
    "deadline-zero-ttl": {"ttlSecondsAfterFinished": 0, "activeDeadlineSeconds": 1, "target": "pytorchjob"},
    "preemption-keys": {"gracePeriod": 15, "collectiveTimeout": 900, "target": "jobset"},
    "collective-timeout-user-script": {"collectiveTimeout": 60, "script": "train.py", "module": None},
    "collective-timeout-watchdog-off": {"collectiveTimeout": 60, "stallTimeout": 0},
    "big-numbers": {
        "ttlSecondsAfterFinished": 10_000_000,
        "activeDeadlineSeconds": 123_456_789,
        "backoffLimit": 1_000_000,
    },
    "max-nodes": {"nodes": 1024, "name": "n" * 50},
    "longest-name-job": {"name": "j" * 61, "nodes": 10},
    "longest-name-pytorchjob": {"name": "p" * 54, "target": "pytorchjob", "nodes": 11},
    "unicode": {"env": {"GREETING": "grüß dich ✓ 🚀"}, "annotations": {"example.com/t": "\u2028\u0085\x7f\x1b"}},
    "stall-timeout": {"stallTimeout": 120, "target": "jobset"},
    "stall-timeout-off": {"stallTimeout": 0},
    # the NCCL flight recorder dumps next to the checkpoints (trailing slash on the mount path)
    "gpu-flight-recorder": {"gpusPerNode": 4, "volumes": {"checkpoints": {"claimName": "c", "mountPath": "/ckpt/"}}},
    # Kueue topology requests: on each PodSet's pod template; Master+Worker as one podset group
    "topology-required-job": {"nodes": 2, "queue": "team", "topology": {"required": RACK}},
    "topology-preferred-slices-jobset": {
        "target": "jobset",
        "nodes": 4,
        "topology": {"preferred": BLOCK, "sliceLevel": RACK, "sliceSize": 2},
    },
    "topology-pytorchjob-grouped": {"target": "pytorchjob", "nodes": 3, "topology": {"required": RACK}},
    "topology-pytorchjob-unconstrained": {"target": "pytorchjob", "nodes": 3, "topology": {"unconstrained": True}},
    "topology-trainjob": {
        "target": "trainjob",
        "nodes": 2,
        "topology": {"required": RACK},
        "annotations": {"example.com/a": "b"},
    },
}


@pytest.mark.parametrize("data", list(_matrix()))
def test_chart_equals_cli_render_matrix(chart: Any, data: dict[str, Any]) -> None:
    spec = JobSpec.from_dict(data)
    objects = assert_same_objects(chart, spec)
    for obj in objects:
        assert validate_object(obj) == [], f"{obj['kind']} from the chart is invalid"


@pytest.mark.parametrize("data", [pytest.param(v, id=k) for k, v in SPECIAL.items()])
def test_chart_equals_cli_render_special_cases(chart: Any, data: dict[str, Any]) -> None:
    spec = JobSpec.from_dict(data)
    objects = assert_same_objects(chart, spec)
    for obj in objects:
        assert validate_object(obj) == [], f"{obj['kind']} from the chart is invalid"


@pytest.mark.parametrize("data", [pytest.param(v, id=k) for k, v in SPECIAL.items()])
def test_a_ddp_yaml_is_a_values_file(chart: Any, data: dict[str, Any]) -> None:
    """A partial ddp.yaml, merged with the chart's defaults by Helm, renders as `ddpctl render` of it."""
    assert_same_objects(chart, JobSpec.from_dict(data), values=copy.deepcopy(data))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_stay_literal(chart: Any, target: str, text: str) -> None:
    data = {
        "target": target,
        "args": [text, "--after"],
        "env": {"HOSTILE": text},
        "annotations": {"example.com/note": text},
        "tolerations": [{"key": "k", "operator": "Equal", "value": text}],
    }
    if target != "trainjob":
        data["command"] = ["python", text]
    assert_same_objects(chart, JobSpec.from_dict(data))


def test_numbers_in_env_are_kept_as_written(chart: Any) -> None:
    """YAML `OMP_NUM_THREADS: 4` is an int (JSON: a float to Helm); both front ends make it "4"."""
    data = {"env": {"OMP_NUM_THREADS": 4, "BIG": 10_000_000, "A": "x"}}
    got = assert_same_objects(chart, JobSpec.from_dict(data), values=data)
    env = {e["name"]: e.get("value") for e in got[-1]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["OMP_NUM_THREADS"] == "4" and env["BIG"] == "10000000"


def test_set_flags_build_the_same_job(chart: Any, helm: Any) -> None:
    """Maps, not lists, so `helm --set` reaches every key the CLI's flags reach."""
    values = helm.parse_set_string(
        "target=jobset,nodes=1:4,gpusPerNode=2,env.NCCL_DEBUG=INFO,"
        "volumes.data.claimName=imagenet,volumes.data.mountPath=/data,volumes.data.readOnly=true,"
        "secretEnv.HF_TOKEN.secret=hf,secretEnv.HF_TOKEN.key=token,nodeSelector.pool=gpu,labels.team=ml"
    )
    assert values["nodes"] == "1:4"
    assert_same_objects(chart, JobSpec.from_dict(values), values=values)


def test_release_name_and_namespace_do_not_change_the_objects(chart: Any) -> None:
    """Objects are named from `.Values.name`/`.Values.namespace`, never from the release."""
    spec = JobSpec(name="resnet", namespace="vision", target="jobset")
    assert chart_objects(chart, spec.to_dict(), name="some-release", namespace="elsewhere") == render(spec)


def test_cli_helm_values_round_trip(cli, chart: Any, helm: Any) -> None:
    """`ddpctl render --helm-values` writes the values that make the chart render `ddpctl render`'s objects."""
    flags = [
        "--name",
        "bert",
        "-t",
        "pytorchjob",
        "--nodes",
        "2:6",
        "--gpus",
        "4",
        "-e",
        "NCCL_DEBUG=INFO",
        "-v",
        "data=corpus:/data:ro",
        "--secret-env",
        "HF_TOKEN=hf:token",
        "--toleration",
        "pool=gpu:NoSchedule",
        "-l",
        "team=nlp",
        "--queue",
        "nlp",
        "--ttl",
        "3600",
    ]
    values_result = cli("render", "--helm-values", *flags)
    assert values_result.code == 0, values_result.err
    rendered = cli("render", *flags)
    assert rendered.code == 0, rendered.err
    values = helm.values_from_yaml(values_result.out)  # read as `helm -f` reads it
    assert values == yaml.safe_load(values_result.out) == JobSpec.from_dict(values).to_dict()
    assert chart_objects(chart, values) == [d for d in yaml.safe_load_all(rendered.out) if d]


AMBIGUOUS = [
    "1e3",
    "0o17",
    "0b101",
    "0x1F",
    "1_000",
    "12:30",
    "y",
    "n",
    "Yes",
    "off",
    "~",
    "null",
    "2024-01-01",
    "+1",
    ".5",
    ".inf",
    "NaN",
    "=",
    "<<",
]


@pytest.mark.parametrize("text", HOSTILE + AMBIGUOUS)
def test_helm_values_file_reads_back_literally_in_helm(chart: Any, helm: Any, text: str) -> None:
    """Helm's Go YAML parser reads `--helm-values` output as the same values PyYAML does
    (`1e3`, `0o17`, `y` stay strings; U+0085 is no line break), so the chart renders the CLI's objects."""
    spec = JobSpec.from_dict(
        {"target": "jobset", "args": [text], "env": {"TEXT": text}, "annotations": {"example.com/t": text}}
    )
    from ddpctl.manifests.helm_values import helm_values_yaml

    text_file = helm_values_yaml(spec)
    values = helm.values_from_yaml(text_file)
    assert values == yaml.safe_load(text_file) == spec.to_dict()
    assert_same_objects(chart, spec, values=values)


def test_ddpctl_init_file_is_a_values_file(cli, chart: Any, tmp_path: Path) -> None:
    """The commented ddp.yaml that `ddpctl init` writes goes into Git and to the chart unchanged."""
    path = tmp_path / "ddp.yaml"
    result = cli("init", "--path", str(path), "--nodes", "1:3", "--gpus", "2", "-t", "jobset", "-e", "A=1")
    assert result.code == 0, result.err
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert_same_objects(chart, JobSpec.from_dict(values), values=values)


def test_helm_values_module_dumps_to_dict() -> None:
    from ddpctl.manifests.helm_values import helm_values, helm_values_yaml

    spec = JobSpec.from_dict({**RICH, "nodes": "1:3", "gpusPerNode": 2})
    assert helm_values(spec) == spec.to_dict()
    assert yaml.safe_load(helm_values_yaml(spec)) == spec.to_dict()
    assert JobSpec.from_dict(yaml.safe_load(helm_values_yaml(spec))) == spec


# ------------------------------------------------------------------------------ values and schema


def test_values_yaml_is_the_jobspec_defaults(chart: Any) -> None:
    text = (CHART_DIR / "values.yaml").read_text(encoding="utf-8")
    assert yaml.safe_load(text) == JobSpec().to_dict()
    assert list(yaml.safe_load(text)) == list(JobSpec().to_dict()), "keep values.yaml in JobSpec's key order"
    defaults = chart.values
    assert {k: v for k, v in defaults.items() if v is not None} == {
        k: v for k, v in JobSpec().to_dict().items() if v is not None
    }


def test_every_values_key_is_commented() -> None:
    lines = (CHART_DIR / "values.yaml").read_text(encoding="utf-8").splitlines()
    keys = 0
    for i, line in enumerate(lines):
        if re.match(r"^\s*[A-Za-z][A-Za-z0-9]*:", line):
            keys += 1
            assert lines[i - 1].lstrip().startswith("#"), (
                f"values.yaml line {i + 1} ({line.strip()}) has no comment above it"
            )
    assert keys >= len(JobSpec().to_dict())


def test_default_values_pass_the_schema_and_render(chart: Any) -> None:
    chart.validate_schema(JobSpec().to_dict())
    assert_same_objects(chart, JobSpec())


def test_schema_is_draft7_with_closed_objects() -> None:
    import jsonschema

    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) - {"global"} == set(JobSpec().to_dict())
    for key in ("rendezvous", "resources"):
        assert schema["properties"][key]["additionalProperties"] is False
        assert set(schema["properties"][key]["properties"]) == set(JobSpec().to_dict()[key])
    for key in ("env", "secretEnv", "volumes", "nodeSelector", "affinity", "labels", "annotations"):
        assert schema["properties"][key]["additionalProperties"] is False, f"{key}: unknown keys must be refused"
    for key in ("volumes", "secretEnv"):
        (item,) = schema["properties"][key]["patternProperties"].values()
        assert item["additionalProperties"] is False
    assert schema["properties"]["tolerations"]["items"]["additionalProperties"] is False


def _names_key(message: str, key: str) -> bool:
    """Helm's schema errors name `/a/b` (a JSON pointer) or "additional properties 'b'"; the
    chart's own checks name `a.b` like ddpctl's SpecError."""
    pointer = "/" + key.replace(".", "/")
    if f"'{pointer}'" in message or f"'{pointer}/" in message or f"{key}:" in message:
        return True
    return f"additional properties '{key.rsplit('.', 1)[-1]}'" in message


# (values, key the error must name). Each is refused by JobSpec AND by the chart: the schema where
# JSON Schema can say it, else a `fail` in the chart's view helper (render time).
INVALID: list[tuple[dict[str, Any], str]] = [
    ({"nodes": 0}, "nodes"),
    ({"nodes": -3}, "nodes"),
    ({"nodes": 1025}, "nodes"),
    ({"nodes": "0"}, "nodes"),
    ({"nodes": "0:4"}, "nodes"),
    ({"nodes": "4:2"}, "nodes"),
    ({"nodes": "1:2000"}, "nodes"),
    ({"nodes": "two"}, "nodes"),
    ({"nodes": True}, "nodes"),
    ({"nodes": "1:4", "target": "trainjob"}, "nodes"),
    ({"name": "Bad_Name"}, "name"),
    ({"name": "1abc"}, "name"),
    ({"name": ""}, "name"),
    ({"name": "a" * 64}, "name"),
    ({"name": "a" * 62}, "name"),  # <name>-1 is 64 characters
    ({"name": "a" * 55, "target": "jobset"}, "name"),  # <name>-node-0-1
    ({"name": "a" * 54, "target": "pytorchjob", "nodes": 64}, "name"),  # <name>-worker-62
    ({"name": "x" * 61, "nodes": 100}, "name"),  # <name>-99
    ({"namespace": "Prod"}, "namespace"),
    ({"target": "slurm"}, "target"),
    ({"image": "bad image"}, "image"),
    ({"image": "img\nkind: Pod"}, "image"),
    ({"imagePullPolicy": "Sometimes"}, "imagePullPolicy"),
    ({"imagePullSecrets": ["Not_A_Name"]}, "imagePullSecrets"),
    ({"gpusPerNode": -1}, "gpusPerNode"),
    ({"gpusPerNode": 2, "procsPerNode": 3}, "procsPerNode"),
    ({"procsPerNode": 0}, "procsPerNode"),
    ({"backend": "mpi"}, "backend"),
    ({"backend": "nccl"}, "backend"),
    ({"module": None}, "module"),
    ({"module": "not a module"}, "module"),
    ({"script": "bad\nscript.py", "module": None}, "script"),
    ({"rendezvous": {"port": 70000}}, "rendezvous.port"),
    ({"rendezvous": {"port": 0}}, "rendezvous.port"),
    ({"rendezvous": {"mode": "static"}, "nodes": "1:3"}, "rendezvous.mode"),
    ({"rendezvous": {"mode": "etcd"}}, "rendezvous.mode"),
    ({"rendezvous": {"bogus": 1}}, "rendezvous"),
    ({"rendezvous": {"joinTimeout": 0}}, "rendezvous.joinTimeout"),
    ({"resources": {"memory": "lots"}}, "resources.memory"),
    ({"resources": {"cpu": "1 000"}}, "resources.cpu"),
    ({"resources": {"gpuResource": "bad resource"}}, "resources.gpuResource"),
    ({"shmSize": "-1Gi"}, "shmSize"),
    ({"env": {"1BAD": "x"}}, "env"),
    ({"env": {"FLAG": True}}, "env.FLAG"),
    ({"envFromSecrets": ["UPPER"]}, "envFromSecrets"),
    ({"secretEnv": {"X": {"secret": "s"}}}, "secretEnv.X"),
    ({"secretEnv": {"X": {"secret": "s", "key": "bad key"}}}, "secretEnv.X.key"),
    ({"secretEnv": {"A": {"secret": "s", "key": "k"}}, "env": {"A": "1"}}, "secretEnv"),
    ({"volumes": {"data": {"claimName": "pvc", "mountPath": "relative"}}}, "volumes.data.mountPath"),
    ({"volumes": {"data": {"claimName": "pvc", "mountPath": "/dev/shm"}}}, "volumes.data.mountPath"),
    ({"volumes": {"Data": {"claimName": "pvc", "mountPath": "/data"}}}, "volumes"),
    ({"volumes": {"dshm": {"claimName": "pvc", "mountPath": "/x"}}}, "volumes"),
    (
        {"volumes": {"a": {"claimName": "p", "mountPath": "/x"}, "b": {"claimName": "q", "mountPath": "/x"}}},
        "volumes.b.mountPath",
    ),
    ({"volumes": {"data": {"claimName": "pvc"}}}, "volumes.data"),
    ({"nodeSelector": {"pool": "a b"}}, "nodeSelector.pool"),
    ({"tolerations": [{"key": "k", "operator": "Maybe"}]}, "tolerations.0.operator"),
    ({"tolerations": [{"key": "k", "colour": "red"}]}, "tolerations.0"),
    ({"affinity": {"nodeAfinity": {}}}, "affinity"),
    ({"priorityClassName": "High Priority"}, "priorityClassName"),
    ({"priorityClassName": "high", "target": "trainjob"}, "priorityClassName"),
    ({"envFromSecrets": ["hf-token"], "target": "trainjob"}, "envFromSecrets"),
    ({"labels": {"team": "a b"}}, "labels.team"),
    ({"labels": {"bad key!": "a"}}, "labels"),
    ({"annotations": {"": "a"}}, "annotations"),
    ({"queue": ""}, "queue"),
    ({"topology": {"required": RACK, "preferred": BLOCK}}, "topology"),
    ({"topology": {"preferred": BLOCK, "unconstrained": True}}, "topology"),
    ({"topology": {"sliceLevel": RACK}}, "topology.sliceSize"),
    ({"topology": {"sliceSize": 2}}, "topology.sliceLevel"),
    ({"nodes": 4, "topology": {"sliceLevel": RACK, "sliceSize": 3}}, "topology.sliceSize"),
    ({"nodes": "2:4", "topology": {"sliceLevel": RACK, "sliceSize": 2}}, "topology.sliceSize"),
    ({"target": "pytorchjob", "nodes": 4, "topology": {"sliceLevel": RACK, "sliceSize": 2}}, "topology.sliceLevel"),
    ({"topology": {"required": "not a label"}}, "topology.required"),
    ({"topology": {"rack": RACK}}, "topology"),
    ({"restartPolicy": "Always"}, "restartPolicy"),
    ({"backoffLimit": -1}, "backoffLimit"),
    ({"ttlSecondsAfterFinished": -1}, "ttlSecondsAfterFinished"),
    ({"activeDeadlineSeconds": 0}, "activeDeadlineSeconds"),
    ({"podSecurity": "privileged"}, "podSecurity"),
    ({"stallTimeout": -5}, "stallTimeout"),
    ({"collectiveTimeout": 300}, "collectiveTimeout"),  # not above the trainer's default stall watchdog
    ({"collectiveTimeout": 120, "stallTimeout": 120}, "collectiveTimeout"),
    ({"stallTimeout": 600}, "stallTimeout"),
    ({"unknownKey": 1}, "unknownKey"),
]


@pytest.mark.parametrize("data,key", INVALID, ids=[f"{k}-{i}" for i, (_, k) in enumerate(INVALID)])
def test_invalid_values_are_refused_by_jobspec_and_chart(chart: Any, helm: Any, data: dict[str, Any], key: str) -> None:
    with pytest.raises(SpecError):
        render(JobSpec.from_dict(data))  # JobSpec's checks, and render's (trainjob + priorityClassName)
    with pytest.raises(helm.HelmError) as refused:
        chart.render(copy.deepcopy(data))
    assert _names_key(str(refused.value), key), f"the error does not name {key}: {refused.value}"


# Cases JSON Schema itself must refuse (not only the chart's render-time checks): the issue's three.
SCHEMA_INVALID = [
    ({"nodes": 0}, "nodes"),
    ({"name": "Bad_Name"}, "name"),
    ({"gpusPerNode": -1}, "gpusPerNode"),
    ({"nodes": "1:4", "target": "trainjob"}, "nodes"),
    ({"backend": "nccl"}, "backend"),
    ({"volumes": {"data": {"claimName": "p", "mountPath": "/d", "readonly": True}}}, "volumes.data"),
]


@pytest.mark.parametrize("data,key", SCHEMA_INVALID, ids=[k for _, k in SCHEMA_INVALID])
def test_schema_and_lint_refuse_invalid_values_naming_the_key(
    chart: Any, helm: Any, data: dict[str, Any], key: str
) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        chart.validate_schema(chart.merge_values(data))
    assert _names_key(str(refused.value), key), str(refused.value)
    report = helm.lint(CHART_DIR, data)
    errors = [m["error"] for m in report["messages"] if m["severity"] == 3]
    assert errors and any(_names_key(e, key) for e in errors), report


VALID_CROSS = [
    {},
    {"nodes": "1:1"},
    {"nodes": 1024},
    {"gpusPerNode": 2, "procsPerNode": 2, "backend": "nccl"},
    {"name": "a" * 61},
    {"name": "a" * 54, "target": "trainjob", "nodes": 10},
    {"script": "train.py", "module": None},
    {"command": ["bash", "-c", "echo hi"], "module": None},
    {"env": {"N": 4}},
    {"env": None, "labels": None, "tolerations": None, "args": None},
    {"volumes": {"data": {"claimName": "a.b-c", "mountPath": "/dev/shmx"}}},
    {"tolerations": [{"operator": "Exists"}]},
    {"labels": {"example.com/a_b.c": "", "x": "Y-1_2.3"}},
    {"resources": {"cpu": "500m", "memory": "1e3", "gpuResource": "gpu"}},
    {"rendezvous": {"mode": "c10d"}, "nodes": "2:2"},
]


@pytest.mark.parametrize("data", VALID_CROSS, ids=[str(i) for i in range(len(VALID_CROSS))])
def test_valid_values_pass_jobspec_and_chart(chart: Any, data: dict[str, Any]) -> None:
    spec = JobSpec.from_dict(data)
    chart.validate_schema(chart.merge_values(copy.deepcopy(data)))
    assert_same_objects(chart, spec, values=copy.deepcopy(data))


# ----------------------------------------------------------------------------------------- lint


LINT_VALUES = {
    "default": {},
    "gpu-elastic": {"target": "pytorchjob", "nodes": "2:8", "gpusPerNode": 8, **RICH},
    "gpu-jobset": {"target": "jobset", "nodes": 16, "gpusPerNode": 8, **RICH},
    "trainjob": {"target": "trainjob", "nodes": 4, "gpusPerNode": 4},
}


@pytest.mark.parametrize("name", LINT_VALUES)
def test_helm_lint_reports_no_errors(helm: Any, name: str, tmp_path: Path) -> None:
    values = LINT_VALUES[name]
    report = helm.lint(CHART_DIR, values, strict=True)
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report
    # The same values as a file, as Argo CD / Flux would pass them.
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values), encoding="utf-8")
    assert helm.values_from_yaml((tmp_path / "values.yaml").read_text(encoding="utf-8")) == json.loads(
        json.dumps(values)
    )


# ------------------------------------------------------------------------------ chart structure


def test_chart_metadata(chart: Any) -> None:
    meta = chart.metadata
    assert meta["name"] == "ddp-job" and meta["apiVersion"] == "v2" and meta.get("type", "application") == "application"
    assert chart.schema == json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))


def test_helpers_are_prefixed_and_one_template_per_kind() -> None:
    templates = CHART_DIR / "templates"
    defines = re.findall(r'define\s+"([^"]+)"', "".join(p.read_text(encoding="utf-8") for p in templates.iterdir()))
    assert defines and all(d.startswith("ddp-job.") for d in defines), defines
    assert {p.name for p in templates.glob("*.yaml")} == {
        "service.yaml",
        "job.yaml",
        "pytorchjob.yaml",
        "jobset.yaml",
        "trainjob.yaml",
    }
    # Every value reaches YAML through ddp-job.json (toJson), never printed raw.
    for path in templates.glob("*.yaml"):
        for line in path.read_text(encoding="utf-8").splitlines():
            for action in re.findall(r"{{-?\s*(.*?)\s*-?}}", line):
                if action.startswith(("$v.", ".Values")):
                    pytest.fail(f"{path.name}: raw value printed: {line.strip()}")


@pytest.mark.parametrize("target", TARGETS)
def test_notes_tell_how_to_follow_logs(chart: Any, target: str) -> None:
    data = {"name": "bert", "namespace": "nlp", "target": target, "nodes": 3 if target == "trainjob" else "2:6"}
    notes = chart.render(data, namespace="nlp")["ddp-job/templates/NOTES.txt"]
    replicas = 3 if target == "trainjob" else 6
    assert f"kubectl logs -f -n nlp -l app.kubernetes.io/instance=bert --prefix --max-log-requests {replicas}" in notes
    assert "ddpctl logs bert -n nlp -f" in notes
    kinds = {
        "job": ["Service/bert", "Job/bert"],
        "pytorchjob": ["PyTorchJob/bert"],
        "jobset": ["JobSet/bert"],
        "trainjob": ["TrainJob/bert"],
    }[target]
    assert all(k in notes for k in kinds)
    assert "release namespace" not in notes
    assert "release namespace" in chart.render(data, namespace="other")["ddp-job/templates/NOTES.txt"]


GROUPS = [{"name": "a", "nodes": 1, "gpusPerNode": 4}, {"name": "b", "nodes": 1, "gpusPerNode": 3}]


def test_trainjob_with_node_groups_is_refused_by_jobspec_and_chart(chart: Any, helm: Any) -> None:
    data = {"target": "trainjob", "nodeGroups": copy.deepcopy(GROUPS)}
    with pytest.raises(SpecError, match=r"^nodeGroups: .*single numProcPerNode"):
        plan_for(JobSpec.from_dict(data))
    chart.validate_schema(chart.merge_values(copy.deepcopy(data)))  # the schema takes groups ...
    with pytest.raises(helm.HelmError) as refused:
        chart.render(copy.deepcopy(data))  # ... and the chart refuses them for trainjob, as ddpctl does
    assert "nodeGroups: the trainjob target cannot run node groups" in str(refused.value)


GROUP_SPECS = [
    {"nodeGroups": GROUPS},
    {"nodeGroups": [{"name": "solo", "nodes": 3, "gpusPerNode": 2, "nodeSelector": {"gpu": "x"}}]},
    {"nodeGroups": [{"name": "g0", "nodes": 1, "gpusPerNode": 1}, {"name": "g1", "nodes": 3, "gpusPerNode": 2}]},
    {
        "nodeGroups": [
            {"name": "g0", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 2},
            {"name": "g1", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 1},
        ]
    },
    {
        "name": "mixed",
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "spot", "operator": "Exists"}],
        "resources": {"cpu": "4", "memory": "16Gi"},
        "env": {"NCCL_DEBUG": "INFO", "PET_NPROC_PER_NODE": "9"},
        "secretEnv": {"TOKEN": {"secret": "s", "key": "k"}},
        "labels": {"team": "a", "ddpctl.io/node-group": "user"},
        "queue": "q",
        "activeDeadlineSeconds": 600,
        "volumes": {"checkpoints": {"claimName": "ck", "mountPath": "/ckpt"}},
        "nodeGroups": [
            {
                "name": "a100",
                "nodes": 1,
                "gpusPerNode": 4,
                "procsPerNode": 2,
                "nodeSelector": {"gpu": "a100", "pool": "big"},
            },
            {
                "name": "l4",
                "nodes": 2,
                "gpusPerNode": 3,
                "tolerations": [{"key": "l4", "operator": "Exists"}],
                "resources": {"memory": "8Gi"},
                "gpuResource": "example.com/gpu",
            },
        ],
    },
    # a topology per group over the spec's: the 1-node group anywhere, the other in one rack
    {
        "topology": {"preferred": BLOCK},
        "nodeGroups": [
            {"name": "g0", "nodes": 1, "gpusPerNode": 4, "topology": {"unconstrained": True}},
            {"name": "g1", "nodes": 2, "gpusPerNode": 4, "topology": {"required": RACK}},
        ],
    },
    # the same level on both groups: a PyTorchJob's Master and Worker become one podset group
    {
        "topology": {"required": RACK},
        "nodeGroups": [{"name": "g0", "nodes": 1, "gpusPerNode": 4}, {"name": "g1", "nodes": 2, "gpusPerNode": 3}],
    },
    # a group's slices must divide that group's nodes (refused on every target)
    {
        "nodeGroups": [
            {"name": "g0", "nodes": 1, "gpusPerNode": 4},
            {"name": "g1", "nodes": 3, "gpusPerNode": 4, "topology": {"sliceLevel": RACK, "sliceSize": 2}},
        ],
    },
]


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob", "trainjob"])
@pytest.mark.parametrize("data", GROUP_SPECS, ids=[str(i) for i in range(len(GROUP_SPECS))])
def test_chart_equals_cli_render_for_node_groups(chart: Any, helm: Any, target: str, data: dict[str, Any]) -> None:
    """Node groups through the real Helm engine: the same objects as `ddpctl render`, or the same refusal."""
    values = {**copy.deepcopy(data), "target": target}
    try:
        spec = JobSpec.from_dict(values)
        plan_for(spec)
    except SpecError as exc:
        with pytest.raises(helm.HelmError) as refused:
            chart.render(copy.deepcopy(values))
        assert _names_key(str(refused.value), exc.field), str(refused.value)
        return
    assert_same_objects(chart, spec, values=copy.deepcopy(values))
    assert_same_objects(chart, spec)  # from --helm-values (spec.to_dict()) too


@pytest.mark.parametrize(
    "groups,target,key",
    [
        (
            [{"name": "a", "nodes": 1, "gpusPerNode": 4}, {"name": "a", "nodes": 1, "gpusPerNode": 2}],
            "job",
            "nodeGroups[1].name",
        ),
        (
            [{"name": "a", "nodes": 1, "gpusPerNode": 4}, {"name": "b", "nodes": 1, "gpusPerNode": 0}],
            "job",
            "nodeGroups[1].gpusPerNode",
        ),
        ([{"name": "a", "nodes": 1, "gpusPerNode": 2, "procsPerNode": 3}], "jobset", "nodeGroups[0].procsPerNode"),
        (
            [{"name": "a", "nodes": 2, "gpusPerNode": 1}, {"name": "b", "nodes": 1, "gpusPerNode": 1}],
            "pytorchjob",
            "nodeGroups",
        ),
        ([{"name": "a" * 60, "nodes": 1, "gpusPerNode": 1}], "job", "name"),
    ],
)
def test_invalid_node_groups_are_refused_by_jobspec_and_chart(
    chart: Any, helm: Any, groups: list[dict[str, Any]], target: str, key: str
) -> None:
    data = {"target": target, "nodeGroups": groups}
    with pytest.raises(SpecError) as info:
        plan_for(JobSpec.from_dict(copy.deepcopy(data)))
    assert info.value.field == key
    with pytest.raises(helm.HelmError) as refused:
        chart.render(copy.deepcopy(data))
    assert _names_key(str(refused.value), key), str(refused.value)


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob"])
def test_notes_name_each_node_group(chart: Any, target: str) -> None:
    notes = chart.render({"name": "bert", "target": target, "nodeGroups": copy.deepcopy(GROUPS)})[
        "ddp-job/templates/NOTES.txt"
    ]
    if target == "job":
        assert "Job/bert-a      Indexed Job of node group a, 1 pods x 4 processes" in notes
        assert "Job/bert-b      Indexed Job of node group b, 1 pods x 3 processes" in notes
        assert "(rank 0: bert-a-0.bert)" in notes
    else:
        assert "Node groups: a 1 x 4 + b 1 x 3 processes." in notes
    assert "--max-log-requests 2" in notes


@pytest.mark.parametrize(
    ("data", "warned"),
    [
        ({}, True),  # the trainer, checkpoints in the container: a restart starts from scratch
        ({"volumes": {"checkpoints": {"claimName": "c", "mountPath": "/c"}}}, False),
        (
            {"args": ["--checkpoint-dir", "/data/ckpt"], "volumes": {"data": {"claimName": "d", "mountPath": "/data"}}},
            False,
        ),
        ({"module": None, "script": "train.py"}, False),  # the user's script keeps its own state
    ],
)
def test_notes_warn_when_a_restart_starts_from_scratch(chart: Any, data: dict[str, Any], warned: bool) -> None:
    from ddpctl.spec.model import JobSpec

    notes = chart.render(data)["ddp-job/templates/NOTES.txt"]
    assert ("a restart (preemption, node loss) starts from scratch" in " ".join(notes.split())) is warned, notes
    assert (plan_for(JobSpec.from_dict(data)).restart_starts_from_scratch is not None) is warned
