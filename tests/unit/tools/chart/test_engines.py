"""tools/chart/engines.py: each engine's table for the chart, read off the engine. Checked on specs
the tables were not read from: a table that only fits its probes would fail here."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.engines import ENGINES, TARGETS
from ddpctl.errors import SpecError
from ddpctl.plan import Layout
from ddpctl.spec.model import JobSpec
from ddpctl.spec.names import MAX_DNS_LABEL
from tools.chart import engines
from tools.chart.derive import fill
from tools.chart.probes import plan_of, refusal


@pytest.fixture(scope="module", params=TARGETS)
def table(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.param, engines.engine_table(request.param)


def test_the_name_too_long_message_fits_a_fresh_name(table: tuple[str, dict[str, Any]]) -> None:
    target, t = table
    name = "zq" + "x" * 61  # at the DNS label limit: every derived name is longer
    values = {"target": target, "name": name, "nodes": 100}
    longest = ENGINES[target].unchecked_plan(Layout(JobSpec.from_dict(values))).longest_generated_name
    limit = MAX_DNS_LABEL - (len(longest) - len(name))
    exc = refusal(values)
    assert isinstance(exc, SpecError)
    args = {"name": name, "longest": longest, "length": len(longest), "limit": limit}
    assert fill(t["nameTooLong"], args) == {"field": exc.field, "problem": exc.problem, "fix": exc.fix}


def test_the_subdomain_and_port_tables_fit_a_fresh_spec(table: tuple[str, dict[str, Any]]) -> None:
    target, t = table
    plan = plan_of({"target": target, "name": "zomega", "rendezvous": {"port": 3456}})
    assert fill(t["subdomain"], {"name": "zomega"}) == ENGINES[target].subdomain(plan)
    assert plan.master_port == (3456 if t["fixedPort"] is None else t["fixedPort"])


def test_every_refusal_in_the_table_is_the_engines(table: tuple[str, dict[str, Any]]) -> None:
    target, t = table
    refused = {r["rule"] for r in t["refuses"]}
    for rule, ask in engines.ENGINE_RULES.items():
        kind = rule.partition(":")[0]
        if kind.startswith("recovery") and ENGINES[target].pod_recovery_refused:
            kind = "recoveryTarget"  # the target refuses recovery: pod whatever the layout asks
        exc = refusal(ask({"target": target}))
        if exc is not None:
            assert kind in refused, f"{target} refuses {rule}, the table does not say so"
    for entry in t["refuses"]:
        if entry["rule"] != "slices":
            rules = [f"{entry['rule']}:{s}" for s in entry.get("shapes", [])] or [entry["rule"]]
            for rule in rules:
                exc = refusal(engines.ENGINE_RULES[rule]({"target": target}))
                assert exc is not None and (exc.field, exc.problem, exc.fix) == (
                    entry["field"],
                    entry["problem"],
                    entry["fix"],
                )


@pytest.mark.parametrize(
    "values",
    [
        {"nodes": 4, "procsPerNode": 2},
        {"nodeGroups": [{"name": "a", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 3},
                        {"name": "b", "nodes": 3, "gpusPerNode": 0, "procsPerNode": 1}]},
    ],
)  # fmt: skip
@pytest.mark.parametrize("target", ["job", "jobset"])
def test_the_recovery_entry_fills_to_the_engines_env_and_coordinator(target: str, values: dict[str, Any]) -> None:
    r = engines.engine_table(target)["recovery"]
    plan = plan_of({"target": target, "name": "run-7", "recovery": "pod", **values})
    for group in plan.spec.groups:
        offset = plan.group_offset(group)
        args = {"name": "run-7", "nproc": group.nproc, "offset": offset, "nodes": plan.replicas}
        args |= {"rankOffset": plan.nodes[offset].first_rank, "worldSize": plan.world_size}
        assert fill(r["wiring"], args) == ENGINES[target].torchrun_env(plan, group)
    coordinator = fill(r["coordinator"], {"name": "run-7", "worldSize": plan.world_size})
    assert coordinator["longestName"] == plan.coordinator_name
    assert coordinator["command"][-1] == str(plan.world_size)


def test_targets_that_refuse_pod_recovery_have_no_entry() -> None:
    assert {t for t in TARGETS if engines.engine_table(t)["recovery"] is None} == {
        t for t in TARGETS if ENGINES[t].pod_recovery_refused
    }
