"""charts/ddp-job's values.yaml and values.schema.json are generated from the JobSpec's fields
(`make chart-contract`), so the chart cannot drift from the spec: the committed files must equal
the generated ones, and the schema must judge single values as JobSpec does."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ddpctl import chart_contract
from ddpctl.errors import SpecError
from ddpctl.spec import model as spec
from ddpctl.spec.model import JobSpec

from tests.support import REPO


def test_committed_chart_files_are_the_generated_ones() -> None:
    for path, text in chart_contract.generated().items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(REPO)} is not what cli/spec.py generates: run `make chart-contract` "
            "(python -m ddpctl.chart_contract --write) and review the diff"
        )


def test_check_fails_on_a_stale_file_and_write_repairs_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path, text in chart_contract.generated(tmp_path).items():
        path.write_text(text, encoding="utf-8")
    assert chart_contract.main(["--check", "--chart-dir", str(tmp_path)]) == 0
    (tmp_path / "values.yaml").write_text("name: hand-edited\n", encoding="utf-8")
    assert chart_contract.main(["--check", "--chart-dir", str(tmp_path)]) == 1
    assert "values.yaml differs from cli/spec.py: run `make chart-contract`" in capsys.readouterr().err
    assert chart_contract.main(["--write", "--chart-dir", str(tmp_path)]) == 0
    assert chart_contract.main(["--check", "--chart-dir", str(tmp_path)]) == 0


@pytest.mark.parametrize("cls", [JobSpec, spec.Rendezvous, spec.Resources, spec.Volume, spec.SecretKeyRef])
def test_every_key_carries_its_doc_on_the_field(cls: type) -> None:
    keys = JobSpec().to_dict() if cls is JobSpec else None
    for f in dataclasses.fields(cls):
        if keys is not None and spec.camel(f.name) not in keys:
            continue  # min_nodes/max_nodes: set from `nodes`, not keys of their own
        assert str(f.metadata.get("doc", "")).strip(), f"{cls.__name__}.{f.name} has no doc (metadata=doc(...))"


def test_values_yaml_documents_each_key_above_it() -> None:
    text = chart_contract.values_yaml()
    name_doc = dataclasses.fields(JobSpec)[0].metadata["doc"]
    assert text.splitlines()[7].startswith("# -- " + name_doc[:40])
    assert "\n  # -- TCP port of rank 0's store" in text and "\n  port: 29500\n" in text


def test_schema_rules_are_the_spec_constants() -> None:
    props = chart_contract.values_schema()["properties"]
    assert props["target"]["enum"] == list(spec.TARGETS)
    assert props["backend"]["enum"] == list(spec.BACKENDS)
    assert props["rendezvous"]["properties"]["mode"]["enum"] == list(spec.RDZV_MODES)
    assert props["tolerations"]["items"]["properties"]["effect"]["enum"] == list(spec.TAINT_EFFECTS)
    assert props["nodes"]["oneOf"][0]["maximum"] == spec.MAX_NODES
    assert props["name"]["pattern"] == spec._DNS1035_LABEL.pattern
    assert props["shmSize"]["pattern"] == spec._QUANTITY_PATTERN
    assert set(props["affinity"]["properties"]) == set(spec.AFFINITY_KINDS)


# One key at a time, valid and invalid: the schema and JobSpec must give the same verdict.
AGREE: list[tuple[str, Any]] = [
    ("name", "resnet"),
    ("name", "Bad_Name"),
    ("name", "a" * 64),
    ("target", "jobset"),
    ("target", "slurm"),
    ("imagePullPolicy", "Never"),
    ("imagePullPolicy", "Sometimes"),
    ("nodes", 4),
    ("nodes", 0),
    ("nodes", spec.MAX_NODES + 1),
    ("nodes", "1:4"),
    ("nodes", "two"),
    ("gpusPerNode", -1),
    ("procsPerNode", 0),
    ("backend", "mpi"),
    ("module", "not a module"),
    ("shmSize", "16Gi"),
    ("shmSize", "-1Gi"),
    ("rendezvous", {"port": 70000}),
    ("rendezvous", {"mode": "etcd"}),
    ("rendezvous", {"bogus": 1}),
    ("resources", {"cpu": "500m", "memory": "64Gi"}),
    ("resources", {"memory": "lots"}),
    ("env", {"NCCL_DEBUG": "INFO"}),
    ("env", {"1BAD": "x"}),
    ("secretEnv", {"TOKEN": {"secret": "hf", "key": "token"}}),
    ("secretEnv", {"TOKEN": {"secret": "hf"}}),
    ("secretEnv", {"TOKEN": {"secret": "hf", "key": "bad key"}}),
    ("secretEnv", None),
    ("volumes", {"data": {"claimName": "imagenet", "mountPath": "/data", "readOnly": True}}),
    ("volumes", {"data": {"claimName": "pvc", "mountPath": "relative"}}),
    ("volumes", {"dshm": {"claimName": "pvc", "mountPath": "/x"}}),
    ("tolerations", [{"key": "k", "operator": "Maybe"}]),
    ("affinity", {"nodeAfinity": {}}),
    ("labels", {"example.com/team": "vision"}),
    ("labels", {"team": "a b"}),
    ("queue", ""),
    ("restartPolicy", "Always"),
    ("ttlSecondsAfterFinished", None),
    ("activeDeadlineSeconds", 0),
    ("podSecurity", "privileged"),
]


@pytest.mark.parametrize("key,value", AGREE, ids=[f"{k}-{i}" for i, (k, _) in enumerate(AGREE)])
def test_schema_and_jobspec_agree_on_each_key(key: str, value: Any) -> None:
    values = JobSpec().to_dict()
    if isinstance(value, dict) and key in ("rendezvous", "resources"):
        values[key] = {**values[key], **value}  # Helm merges a partial map over the chart's defaults
    else:
        values[key] = value
    schema_ok = jsonschema.Draft7Validator(chart_contract.values_schema()).is_valid(json.loads(json.dumps(values)))
    try:
        JobSpec.from_dict(values)
        spec_ok = True
    except SpecError:
        spec_ok = False
    assert schema_ok == spec_ok, f"{key}={value!r}: schema says {schema_ok}, JobSpec says {spec_ok}"
