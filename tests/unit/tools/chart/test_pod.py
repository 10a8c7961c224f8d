"""tools/chart/pod.py: what every pod carries, read off ddpctl for the chart. Each table is checked
here on a spec none of its probes used: a table that only fits its probes would fail."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.engines import engine_for
from tools.chart import pod
from tools.chart.derive import fill
from tools.chart.probes import CODES, plan_of

FRESH = {"name": "zgamma", "backend": "nccl", "gpus": 3, "stall": 311, "collective": 733, "grace": 171, "mount": "/zk/"}


@pytest.fixture(scope="module")
def parts() -> dict[str, Any]:
    return pod.pod_parts()


@pytest.mark.parametrize("code", sorted(CODES))
@pytest.mark.parametrize("features", [(), ("stall",), ("gpus", "checkpoints"), pod.FEATURES])
def test_the_env_table_gives_a_fresh_specs_env(parts: dict[str, Any], code: str, features: tuple[str, ...]) -> None:
    values, args = pod._with_features(FRESH, features)
    plan = plan_of({**CODES[code], **values})
    group = plan.spec.groups[0]
    wired = {**engine_for(plan.target).torchrun_env(plan, group), **plan.stragglers_env}
    expected = {k: v for k, v in plan.group_of(group).env.items() if k not in wired}
    table = {
        e["name"]: fill(e["value"], args) for e in parts["env"][code] if set(e["when"]) <= set(features)
    }  # fmt: skip
    assert table == expected


def test_the_restricted_profile_meets_pod_security_restricted(parts: dict[str, Any]) -> None:
    """The Pod Security Standard's "restricted" rules, as Kubernetes states them."""
    restricted = parts["security"]["restricted"]
    pod_ctx, container = restricted["pod"], restricted["container"]
    assert pod_ctx["runAsNonRoot"] is True and pod_ctx["seccompProfile"]["type"] in ("RuntimeDefault", "Localhost")
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"]["drop"] == ["ALL"]


def test_the_trainer_dirs_follow_the_plans_arguments() -> None:
    dirs = pod.constants()["trainerDirs"]
    mounts = {"checkpoints": "/zz/ck", "data": "/zz/in"}
    args = plan_of({"volumes": {v: {"claimName": "c", "mountPath": p} for v, p in mounts.items()}}).trainer_args
    assert list(args) == [a for d in dirs for a in (d["flag"], mounts[d["volume"]])]


def test_the_group_variable_carries_each_groups_name() -> None:
    name = pod._group_env()
    plan = plan_of(
        {"nodeGroups": [{"name": "zq1", "nodes": 1, "gpusPerNode": 0}, {"name": "zq2", "nodes": 2, "gpusPerNode": 0}]}
    )
    assert [plan.group_of(g).env[name] for g in plan.spec.groups] == ["zq1", "zq2"]


def test_the_labels_table_gives_a_fresh_names_labels(parts: dict[str, Any]) -> None:
    plan = plan_of({"name": "zdelta"})
    assert fill(parts["labels"], {"name": "zdelta"}) == plan.object_labels
    assert fill(parts["selector"], {"name": "zdelta"}) == plan.selector_labels
