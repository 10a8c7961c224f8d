"""ddpctl.spec.rules: the rules that span keys, one broken at a time, each refused naming the key
to change; and the trainer's timeout defaults the timeouts rule reasons with."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.errors import SpecError
from ddpctl.spec import rules
from ddpctl.spec.model import JobSpec

RACK = "cloud.ddpctl.io/topology-rack"


def _groups(*groups: tuple[str, int, int], **more: Any) -> dict[str, Any]:
    return {"nodeGroups": [{"name": n, "nodes": c, "gpusPerNode": g} for n, c, g in groups], **more}


# (spec dict, the rule, the field named, words of the problem)
BROKEN: list[tuple[dict[str, Any], str, str, str]] = [
    ({"nodes": 0}, "layout", "nodes", "0 must be an integer >= 1"),
    ({"nodes": 1025}, "layout", "nodes", "1025 is more than 1024"),
    ({"nodes": "0:4"}, "layout", "nodes", "the elastic minimum 0 is not a node count"),
    ({"nodes": "4:2"}, "layout", "nodes", "min 4 is more than max 2"),
    ({"nodes": "1:2000"}, "layout", "nodes", "max 2000 is more than 1024"),
    ({"gpusPerNode": 2, "procsPerNode": 3}, "layout", "procsPerNode", "3 processes cannot share 2 GPUs"),
    (_groups(("a", 1, 0), ("a", 1, 0)), "node_groups", "nodeGroups[1].name", "'a' is used twice"),
    (
        {"nodeGroups": [{"name": "a", "nodes": 1, "gpusPerNode": 2, "procsPerNode": 3}]},
        "node_groups",
        "nodeGroups[0].procsPerNode",
        "3 processes cannot share 2 GPUs",
    ),
    (_groups(("a", 1, 4), ("b", 1, 0)), "node_groups", "nodeGroups[1].gpusPerNode", "one backend serves"),
    (_groups(("a", 1000, 0), ("b", 25, 0)), "node_groups", "nodeGroups", "1025 nodes in all is more than 1024"),
    ({"module": None}, "entrypoint", "module", "got none"),
    ({"module": None, "script": "train.py", "command": ["python"]}, "entrypoint", "module", "got script, command"),
    ({"backend": "nccl"}, "backend", "backend", "nccl needs GPUs"),
    ({"nodes": "1:3", "rendezvous": {"mode": "static"}}, "rendezvous", "rendezvous.mode", "cannot use static"),
    (
        {"env": {"TOKEN": "x"}, "secretEnv": {"TOKEN": {"secret": "s", "key": "k"}}},
        "env",
        "secretEnv",
        "TOKEN is also set in env",
    ),
    (
        {"volumes": {"a": {"claimName": "p", "mountPath": "/x"}, "b": {"claimName": "q", "mountPath": "/x"}}},
        "volumes",
        "volumes.b.mountPath",
        "/x is also used by volume a",
    ),
    ({"checkpoints": "s3://bucket/run", "module": "mypkg.train"}, "checkpoints", "checkpoints", "trainer only"),
    (
        {"checkpoints": "s3://b/run", "volumes": {"checkpoints": {"claimName": "c", "mountPath": "/c"}}},
        "checkpoints",
        "checkpoints",
        "a volume named checkpoints",
    ),
    ({"checkpoints": "s3://b/run", "args": ["--checkpoint-dir=/c"]}, "checkpoints", "checkpoints", "--checkpoint-dir"),
    ({"topology": {"required": RACK, "preferred": RACK}}, "topology", "topology", "sets both required and preferred"),
    (
        {"topology": {"required": RACK, "unconstrained": True}},
        "topology",
        "topology",
        "sets both required and unconstrained",
    ),
    ({"topology": {"sliceLevel": RACK}}, "topology", "topology.sliceSize", "is missing (with sliceLevel)"),
    ({"topology": {"sliceSize": 2}}, "topology", "topology.sliceLevel", "is missing (with sliceSize)"),
    ({"nodes": 6, "topology": {"sliceLevel": RACK, "sliceSize": 4}}, "topology", "topology.sliceSize", "4 does not"),
    ({"nodes": "1:4", "topology": {"sliceLevel": RACK, "sliceSize": 1}}, "topology", "topology.sliceSize", "elastic"),
    (
        {"nodeGroups": [{"name": "a", "nodes": 3, "gpusPerNode": 1, "topology": {"sliceLevel": RACK, "sliceSize": 2}}]},
        "topology",
        "nodeGroups[0].topology.sliceSize",
        "2 does not divide the group's 3 nodes",
    ),
    ({"collectiveTimeout": 300}, "timeouts", "collectiveTimeout", "not above the stall watchdog's 300 s"),
    ({"collectiveTimeout": 120, "stallTimeout": 120}, "timeouts", "collectiveTimeout", "120 s"),
    ({"stallTimeout": 600}, "timeouts", "stallTimeout", "not below the trainer's process-group timeout"),
]


@pytest.mark.parametrize(
    ("data", "rule", "field", "problem"), BROKEN, ids=[f"{r[1]}-{i}" for i, r in enumerate(BROKEN)]
)
def test_a_broken_rule_names_the_key_to_change(data: dict[str, Any], rule: str, field: str, problem: str) -> None:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict(data)
    assert info.value.field == field and problem in info.value.problem, str(info.value)
    assert info.value.fix
    assert rule == "node_groups" or getattr(rules, rule) in rules.RULES


@pytest.mark.parametrize(
    "data",
    [
        {"collectiveTimeout": 301},
        {"collectiveTimeout": 100, "stallTimeout": 0},  # the watchdog is off
        {"collectiveTimeout": 5, "module": "mine.train"},  # not the ddpctl trainer: its own timeouts
        {"stallTimeout": 599},
        {"nodes": 6, "topology": {"sliceLevel": RACK, "sliceSize": 3, "required": RACK}},
        _groups(("a", 1024, 0)),
    ],
)
def test_what_the_rules_allow(data: dict[str, Any]) -> None:
    JobSpec.from_dict(data)


def test_the_rules_know_the_trainers_timeout_defaults() -> None:
    """The timeouts rule checks stallTimeout against collectiveTimeout with the trainer's own defaults."""
    from ddpctl.spec.schema import TRAINER_COLLECTIVE_TIMEOUT, TRAINER_STALL_TIMEOUT
    from ddpctl_trainer.config import TrainConfig

    defaults = TrainConfig()
    assert (defaults.timeout_s, defaults.stall_timeout) == (TRAINER_COLLECTIVE_TIMEOUT, TRAINER_STALL_TIMEOUT)
