"""charts/ddp-job through the real Helm engine: what the properties of test_chart_parity.py do not
cover -- values files and `--set` as Helm reads them, the release's name and namespace, the values'
defaults and schema, `helm lint`, the chart's layout and NOTES.txt -- and the helpers both use.

Helm runs in-process through PyPI `helm-python-sdk` (import name `helm_python`: Helm v4's Go SDK
behind a C ABI, no `helm` binary, no cluster, no network): `Chart.load(dir).render(values)` for
`helm template`, `Chart.validate_schema(values)` for values.schema.json and `helm_python.lint(dir,
values)` for `helm lint`.
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
from ddpctl.spec.model import JobSpec
from ddpctl.spec.schema import TARGETS
from tests.support import REPO, skip_unless
from tests.support.hostile import HOSTILE

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
    expected = sorted(render(spec), key=_apply_order)
    got = chart_objects(chart, spec.to_dict() if values is None else values)
    assert [_apply_order(o) for o in got] == [_apply_order(o) for o in expected]
    for mine, theirs in zip(got, expected):
        assert mine == theirs, f"{mine['kind']} differs from ddpctl render:\n" + diff(theirs, mine)
    return got


def diff(expected: Any, got: Any) -> str:
    import difflib

    a = yaml.safe_dump(expected, sort_keys=True).splitlines()
    b = yaml.safe_dump(got, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(a, b, "ddpctl render", "helm template", lineterm=""))


# --------------------------------------------------------------------- values files and --set

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


def names_key(message: str, field: str, values: dict[str, Any]) -> bool:
    """Whether a schema error names `field` (ddpctl's `a.b[1].c`, read against `values` to tell
    its keys from dots inside them): its JSON pointer `/a/b/1/c`, or its parent's with the key
    itself (`additional properties 'c'`, `missing property 'c'`)."""
    segments: list[str] = []
    node: Any = values
    rest = field
    while rest:
        segment: str | int
        if rest.startswith("["):
            segment, rest = int(rest[1 : rest.index("]")]), rest[rest.index("]") + 1 :]
        else:
            keys = (
                [k for k in node if rest == k or rest.startswith((f"{k}.", f"{k}["))] if isinstance(node, dict) else []
            )
            segment = max(keys, key=len) if keys else re.split(r"[.\[]", rest)[0]
            rest = rest[len(segment) :]
        rest = rest.removeprefix(".")
        segments.append(str(segment).replace("~", "~0").replace("/", "~1"))
        inside = node if isinstance(node, dict) else dict(enumerate(node)) if isinstance(node, list) else {}
        node = inside.get(segment)
    pointer = "/" + "/".join(segments)
    parent = pointer.rsplit("/", 1)[0]
    named = f"'{pointer}'" in message or f"'{pointer}/" in message
    return named or (f"'{parent}'" in message and f"'{segments[-1]}'" in message)


# Cases JSON Schema itself must refuse (not only the chart's render-time checks), by lint too.
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
    assert names_key(str(refused.value), key, data), str(refused.value)
    report = helm.lint(CHART_DIR, data)
    errors = [m["error"] for m in report["messages"] if m["severity"] == 3]
    assert errors and any(names_key(e, key, data) for e in errors), report


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


def test_the_chart_refuses_a_workspace_naming_the_fix(chart: Any, helm: Any) -> None:
    """The chart cannot pack a folder (and GitOps keeps what runs in Git): one line, the way out."""
    with pytest.raises(helm.HelmError) as refused:
        chart.render({"workspace": {"dir": "."}})
    message = str(refused.value)
    assert "workspace: the chart ships no code from a folder" in message and "ddpctl build" in message
    assert chart.render({"workspace": {"dir": None}})  # the default (nothing shipped) renders


RECOVERY_SPECS = {
    "job": {"target": "job", "nodes": 3, "gpusPerNode": 0, "recovery": "pod", "backoffLimit": 4},
    "jobset": {"target": "jobset", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 3, "recovery": "pod"},
    "groups": {
        "target": "job",
        "recovery": "pod",
        "nodeGroups": [
            {"name": "big", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 4},
            {"name": "small", "nodes": 3, "gpusPerNode": 0, "procsPerNode": 1},
        ],
        "tolerations": [{"key": "pool", "operator": "Exists"}],
        "stragglers": {"mode": "replace"},
    },
    "jobset-groups": {
        "target": "jobset",
        "recovery": "pod",
        "nodeGroups": [
            {"name": "a", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 2},
            {"name": "b", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 1},
        ],
        "ttlSecondsAfterFinished": 60,
        "activeDeadlineSeconds": 3600,
    },
}


@pytest.mark.parametrize("case", sorted(RECOVERY_SPECS))
def test_the_chart_renders_pod_recovery_as_ddpctl_does(chart: Any, case: str) -> None:
    """recovery: pod: the coordinator (a Job, or a replicatedJob), per-index limits and each group's
    torchrun-alone env, node groups included; the object set is ddpctl's (compared whole)."""
    got = assert_same_objects(chart, JobSpec.from_dict(RECOVERY_SPECS[case]))
    assert any(o["metadata"]["labels"].get("app.kubernetes.io/component") == "coordinator" for o in got) or any(
        r["name"] == "coordinator" for o in got for r in o["spec"].get("replicatedJobs", [])
    )


@pytest.mark.parametrize("target", ["job", "jobset"])
def test_the_chart_refuses_a_group_named_like_the_coordinator(chart: Any, helm: Any, target: str) -> None:
    values = {
        "target": target,
        "recovery": "pod",
        "nodeGroups": [{"name": "coordinator", "nodes": 2, "gpusPerNode": 0}],
    }
    with pytest.raises(SpecError) as ddpctl_refused:
        plan_for(JobSpec.from_dict(values))
    with pytest.raises(helm.HelmError) as refused:
        chart.render(values)
    assert f"nodeGroups: {ddpctl_refused.value.problem}" in str(refused.value)
