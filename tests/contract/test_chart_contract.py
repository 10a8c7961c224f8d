"""charts/ddp-job cannot drift from ddpctl: tools/chart_contract.py (`make chart-contract`)
generates its values.yaml and values.schema.json from the JobSpec's fields, and its
templates/_generated.tpl -- the limits, defaults, error messages, labels, env and per-engine
tables its templates use -- from running ddpctl's own code. The committed files must equal the
generated ones, a change in the code must make them stale, the hand-written helpers must restate
none of it, and the schema must judge single values as JobSpec does."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from ddpctl.engines import ENGINES
from ddpctl.engines.base import NODE_RANK_LAUNCHER, Engine
from ddpctl.errors import SpecError
from ddpctl.spec import model as spec
from ddpctl.spec import names, schema
from ddpctl.spec.model import JobSpec
from ddpctl.spec.serial import camel
from tests.support import REPO
from tools import chart_contract
from tools.chart_contract import derive, fill

HELPERS = REPO / "charts" / "ddp-job" / "templates" / "_helpers.tpl"


def test_committed_chart_files_are_the_generated_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code = chart_contract.main(["--check"])
    assert code == 0, capsys.readouterr().err


def test_check_names_each_stale_file_and_write_repairs_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert chart_contract.main(["--write", "--chart-dir", str(tmp_path)]) == 0
    assert chart_contract.main(["--check", "--chart-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    (tmp_path / "templates" / "_generated.tpl").write_text("{{/* hand-edited */}}\n", encoding="utf-8")
    assert chart_contract.main(["--check", "--chart-dir", str(tmp_path)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(str(tmp_path / "templates" / "_generated.tpl") + " is stale")
    assert "run `make chart-contract`" in line
    assert chart_contract.main(["--write", "--chart-dir", str(tmp_path)]) == 0
    assert chart_contract.main(["--check", "--chart-dir", str(tmp_path)]) == 0


def test_a_change_in_an_engine_makes_the_generated_template_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    before = chart_contract.generated_tpl()
    monkeypatch.setattr(type(ENGINES["jobset"]), "container_name", "worker")
    assert '"containerName": "worker"' in chart_contract.generated_tpl()

    def check_restart_policy(self: Engine, plan: Any) -> None:
        if plan.spec.restart_policy == "ExitCode":
            raise SpecError("restartPolicy", f"{self.target} takes no ExitCode", "say Never")

    monkeypatch.setattr(Engine, "check_restart_policy", check_restart_policy)
    after = chart_contract.generated_tpl()
    assert after != before and '"problem": "job takes no ExitCode"' in after


def test_the_helpers_restate_nothing_the_code_knows() -> None:
    """No target names, limits, env names, label keys, messages or launcher in _helpers.tpl: they
    come from _generated.tpl."""
    data = chart_contract.generated_data()
    words = [*schema.TARGETS, *(e["containerName"] for e in data["engines"].values())]
    texts = [f'"{w}"' for w in words] + [NODE_RANK_LAUNCHER, "app.kubernetes.io", "kueue.x-k8s.io", "PET_", "DDP_"]
    texts += [m["problem"] for m in data["messages"].values()]
    texts += [r["problem"] for e in data["engines"].values() for r in e["refuses"]]
    numbers = [schema.MAX_NODES, names.MAX_DNS_LABEL, 29500, schema.TRAINER_STALL_TIMEOUT, schema.GRACE_MARGIN]
    helpers = HELPERS.read_text(encoding="utf-8")
    assert [t for t in texts if t in helpers] == []
    assert [n for n in numbers if f" {n}" in helpers or f"{n} " in helpers] == []


def test_a_template_is_what_fits_every_probe() -> None:
    probes = [{"n": 3, "w": "a"}, {"n": 5, "w": "b"}]
    assert derive(lambda p: f"{p['n']} of 3 in [{p['w']}]", probes) == "%(n) of 3 in [%(w)]"
    assert derive(lambda p: {"x": [p["w"], "w"]}, probes) == {"x": ["%(w)", "w"]}
    assert fill("%(n) of %(w)", {"n": 4, "w": "c"}) == "4 of c"
    with pytest.raises(ValueError, match="templates fit"):
        derive(lambda p: "3" if p["n"] == 3 else "x", probes)  # not a function of the arguments


@pytest.mark.parametrize("cls", [JobSpec, spec.Rendezvous, spec.Resources, spec.Volume, spec.SecretKeyRef])
def test_every_key_carries_its_doc_on_the_field(cls: type) -> None:
    keys = JobSpec().to_dict() if cls is JobSpec else None
    for f in dataclasses.fields(cls):
        if keys is not None and camel(f.name) not in keys:
            continue  # min_nodes/max_nodes: set from `nodes`, not keys of their own
        assert str(f.metadata.get("doc", "")).strip(), f"{cls.__name__}.{f.name} has no doc (metadata=doc(...))"


def test_values_yaml_documents_each_key_above_it() -> None:
    text = chart_contract.values_yaml()
    name_doc = dataclasses.fields(JobSpec)[0].metadata["doc"]
    assert text.splitlines()[7].startswith("# -- " + name_doc[:40])
    assert "\n  # -- TCP port of rank 0's store" in text and "\n  port: 29500\n" in text


def test_schema_rules_are_the_spec_constants() -> None:
    props = chart_contract.values_schema()["properties"]
    assert props["target"]["enum"] == list(schema.TARGETS)
    assert props["backend"]["enum"] == list(schema.BACKENDS)
    assert props["rendezvous"]["properties"]["mode"]["enum"] == list(schema.RDZV_MODES)
    assert props["tolerations"]["items"]["properties"]["effect"]["enum"] == list(schema.TAINT_EFFECTS)
    assert props["nodes"]["oneOf"][0]["maximum"] == schema.MAX_NODES
    assert props["name"]["pattern"] == names.DNS1035_LABEL.pattern
    assert props["shmSize"]["pattern"] == schema.QUANTITY_PATTERN
    assert set(props["affinity"]["properties"]) == set(schema.AFFINITY_KINDS)


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
    ("nodes", schema.MAX_NODES + 1),
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
    ("podSecurity", "root"),
    ("resources", {"cpuLimit": "2"}),
    ("resources", {"cpuLimit": "two"}),
    ("resources", {"fabricResource": "example.com/rdma", "fabricDevices": 4}),
    ("resources", {"fabricResource": "bad name"}),
    ("resources", {"fabricDevices": 0}),
    ("fabric", "socket"),
    ("fabric", "ib"),
    ("avoidNodes", ["gpu-3", "ip-10-0-0-1.ec2.internal"]),
    ("avoidNodes", ["Bad_Node"]),
    ("avoidNodes", "gpu-3"),
    ("preflight", {"mode": "off", "tolerance": 1, "minBusbw": 1e6}),
    ("preflight", {"mode": "on"}),
    ("preflight", {"tolerance": 0}),
    ("preflight", {"tolerance": 0.01}),
    ("preflight", {"tolerance": 1.01}),
    ("preflight", {"minGflops": -0.5}),
    ("preflight", {"minTflops": 1000001}),
    ("preflight", {"minH2d": "fast"}),
    ("preflight", {"bogus": 1}),
    ("stragglers", {"mode": "off", "tolerance": 0.999, "every": 1, "windows": 1}),
    ("stragglers", {"mode": "fail"}),
    # {"mode": "replace"} needs recovery: pod, a rule across keys: test_chart_parity's breakers check it
    ("stragglers", {"mode": "on"}),
    ("stragglers", {"tolerance": 0}),
    ("stragglers", {"tolerance": 0.001}),
    ("stragglers", {"tolerance": 1}),
    ("stragglers", {"every": 0}),
    ("stragglers", {"every": 1.5}),
    ("stragglers", {"windows": 0}),
    ("stragglers", {"window": 3}),
]


@pytest.mark.parametrize("key,value", AGREE, ids=[f"{k}-{i}" for i, (k, _) in enumerate(AGREE)])
def test_schema_and_jobspec_agree_on_each_key(key: str, value: Any) -> None:
    values = JobSpec().to_dict()
    if isinstance(value, dict) and key in ("rendezvous", "resources", "preflight", "stragglers"):
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
