"""ddpctl.spec.serial: the camelCase form reads into a JobSpec and writes back to the same dict;
an unknown key names its nearest known one; a value of the wrong shape names its place."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.errors import SpecError
from ddpctl.spec.model import JobSpec
from ddpctl.spec.serial import camel, parse_nodes, snake

ROUND_TRIPS: list[dict[str, Any]] = [
    {},
    {"nodes": "2:8", "gpusPerNode": 4, "target": "jobset", "queue": "team-a"},
    {
        "name": "resnet",
        "target": "pytorchjob",
        "env": {"A": "1", "OMP_NUM_THREADS": 4},
        "volumes": {"data": {"claimName": "imagenet", "mountPath": "/data", "readOnly": True}},
        "secretEnv": {"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}},
        "tolerations": [{"key": "x", "operator": "Exists"}],
        "resources": {"cpu": "8", "memory": "32Gi"},
        "affinity": {"podAntiAffinity": {"x": [1, "a"]}, "nodeAffinity": {}},
    },
    {"module": None, "script": "train.py", "args": ["--lr", "0.1"]},
    {"secretEnv": None, "volumes": None, "env": None, "args": None, "topology": None, "nodeGroups": None},
    {
        "topology": {"preferred": "example.com/rack"},
        "nodeGroups": [
            {"name": "a", "nodes": 2, "gpusPerNode": 1, "topology": {"sliceLevel": "example.com/rack", "sliceSize": 2}},
            {"name": "b", "nodes": 1, "gpusPerNode": 1, "nodeSelector": {"pool": "l4"}, "resources": {"cpu": "4"}},
        ],
    },
]


@pytest.mark.parametrize("data", ROUND_TRIPS)
def test_to_dict_round_trips(data: dict[str, Any]) -> None:
    spec = JobSpec.from_dict(data)
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert list(spec.to_dict()) == list(JobSpec().to_dict()) or spec.node_groups


def test_to_dict_writes_the_forms_a_file_uses() -> None:
    elastic = JobSpec.from_dict({"nodes": "2:8", "env": {"N": 4}}).to_dict()
    assert elastic["nodes"] == "2:8" and elastic["env"] == {"N": "4"}, "env values are strings, numbers as written"
    grouped = JobSpec.from_dict({"nodeGroups": [{"name": "a", "nodes": 2, "gpusPerNode": 1}]}).to_dict()
    assert grouped["nodeGroups"] == [{"name": "a", "nodes": 2, "gpusPerNode": 1}], "a group says only what it sets"
    assert not {"nodes", "gpusPerNode", "procsPerNode"} & set(grouped), "the groups say the layout"
    assert JobSpec().to_dict()["rendezvous"] == {
        "mode": "auto",
        "port": 29500,
        "joinTimeout": 600,
        "lastCallTimeout": 30,
        "maxRestarts": 0,
    }


def test_a_script_or_command_in_a_file_replaces_the_default_module() -> None:
    assert JobSpec.from_dict({"script": "train.py"}).module is None
    assert JobSpec.from_dict({"command": ["python", "t.py"]}).module is None


REFUSED: list[tuple[Any, str, str, str]] = [
    ({"bogusKey": 1}, "bogusKey", "is not a known key", "use one of"),
    ({"nodez": 2}, "nodez", "is not a known key", "did you mean nodes?"),
    ({"gpus_per_node": 1}, "gpus_per_node", "is not a known key", "did you mean gpusPerNode?"),
    ({"minNodes": 1}, "minNodes", "is not a known key", ""),  # set from nodes: MIN:MAX only
    ({"rendezvous": {"prot": 3}}, "rendezvous.prot", "is not a known key", "did you mean port?"),
    ({"topology": {"level": "x"}}, "topology.level", "is not a known key", ""),
    ({"rendezvous": 3}, "rendezvous", "expected a map, got int", ""),
    ({"rendezvous": None}, "rendezvous", "expected a map, got NoneType", ""),
    ({"nodes": "two"}, "nodes", "'two' is not a node count", "1:4"),
    ({"nodes": True}, "nodes", "True is not a node count", ""),
    ({"env": {"FLAG": True}}, "env.FLAG", "is a boolean", "quote it"),
    ({"env": []}, "env", "expected a map, got list", ""),
    ({"imagePullSecrets": "x"}, "imagePullSecrets", "expected a list, got str", ""),
    ({"volumes": {"data": {"claimName": "pvc"}}}, "volumes.data.mountPath", "is missing", "claimName"),
    ({"volumes": {"data": "pvc"}}, "volumes.data", "expected a map, got str", "claimName"),
    ({"secretEnv": {"T": {"secret": "s"}}}, "secretEnv.T.key", "is missing", "{secret: NAME, key: KEY}"),
    ({"nodeGroups": "x"}, "nodeGroups", "expected a list, got str", ""),
    ({"nodeGroups": [3]}, "nodeGroups[0]", "expected a map, got int", "{name, nodes, gpusPerNode}"),
    ({"nodeGroups": [{"name": "a", "nodes": 1}]}, "nodeGroups[0].gpusPerNode", "is missing", ""),
    ({"nodeGroups": [{"name": "a", "nodes": 1, "gpusPerNode": 0, "colour": 1}]}, "nodeGroups[0].colour", "", ""),
    (
        {"nodeGroups": [{"name": "a", "nodes": 1, "gpusPerNode": 0, "nodeSelector": "x"}]},
        "nodeGroups[0].nodeSelector",
        "expected a map, got str",
        "",
    ),
    (
        {"nodes": 3, "nodeGroups": [{"name": "a", "nodes": 1, "gpusPerNode": 0}]},
        "nodeGroups",
        "is set together with nodes",
        "",
    ),
    ([1], "spec", "expected a map at the top level, got list", "ddpctl init"),
]


@pytest.mark.parametrize(("data", "field", "problem", "fix"), REFUSED, ids=[r[1] for r in REFUSED])
def test_a_file_that_cannot_be_read_names_the_place(data: Any, field: str, problem: str, fix: str) -> None:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict(data)
    assert (info.value.field, problem in info.value.problem, fix in info.value.fix) == (field, True, True), str(
        info.value
    )


@pytest.mark.parametrize(
    ("value", "parsed"), [(2, (2, None, None)), ("3", (3, None, None)), ("1:4", (4, 1, 4)), (" 2:2 ", (2, 2, 2))]
)
def test_nodes_is_a_count_or_an_elastic_range(value: Any, parsed: tuple[int, int | None, int | None]) -> None:
    assert parse_nodes(value) == parsed


@pytest.mark.parametrize(
    ("name", "key"),
    [("gpus_per_node", "gpusPerNode"), ("name", "name"), ("ttl_seconds_after_finished", "ttlSecondsAfterFinished")],
)
def test_a_field_is_its_camel_case_key(name: str, key: str) -> None:
    assert camel(name) == key and snake(key) == name
