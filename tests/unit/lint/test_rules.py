"""rules.py: every rule has an id, a one-line why and fix; errors are kept to what is certain; a
layout-dependent severity says how; TorchFix's codes map to our severities."""

from __future__ import annotations

import pytest

from ddpctl.lint.rules import BY_ID, RULES, Severity, torchfix_severity


def test_ids_are_unique_and_in_order() -> None:
    ids = [r.id for r in RULES]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and set(BY_ID) == set(ids)


def test_each_rule_reads_as_one_line() -> None:
    for rule in RULES:
        assert rule.why and rule.fix and "\n" not in rule.why + rule.fix, rule.id
        assert not rule.why.endswith(".") and not rule.fix.endswith("."), rule.id


def test_errors_are_the_certain_failures_only() -> None:
    errors = {r.id for r in RULES if r.severity is Severity.error}
    assert errors == {"DDP001", "DDP002", "DDP003", "DDP006", "DDP014"}
    assert {r.id for r in RULES if r.when} == {"DDP001", "DDP014"}


@pytest.mark.parametrize(
    "code,severity",
    [
        ("TOR001", Severity.error),
        ("TOR003", Severity.warning),
        ("TOR102", Severity.warning),
        ("TOR203", Severity.warning),
        ("TOR401", Severity.info),
    ],
)
def test_torchfix_codes_by_family(code: str, severity: Severity) -> None:
    assert torchfix_severity(code) is severity
