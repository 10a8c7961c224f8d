"""ddpctl.spec.checks: the small value checks the rules are written with, and the words they use
(a value as YAML spells it, the nearest choice, a size written another tool's way)."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.errors import SpecError
from ddpctl.spec.checks import (
    check_json_like,
    check_plain_string,
    check_quantity,
    check_tolerations,
    did_you_mean,
    one_of,
    positive_int,
    quantity_fix,
    str_map,
    yaml_spelling,
)


@pytest.mark.parametrize(("value", "spelt"), [(True, "true"), (False, "false"), (None, "null"), ("x", "'x'"), (3, "3")])
def test_a_value_is_named_as_yaml_spells_it(value: Any, spelt: str) -> None:
    assert yaml_spelling(value) == spelt


@pytest.mark.parametrize(
    ("word", "near"), [("jobst", "jobset"), ("pytorch", "pytorchjob"), ("slurm", None), ("JOB", None)]
)
def test_the_nearest_choice_is_suggested_when_close(word: str, near: str | None) -> None:
    assert did_you_mean(word, ["job", "pytorchjob", "jobset", "trainjob"]) == near


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        ("2GB", "write it as 2Gi"),
        ("512 MiB", "write it as 512Mi"),
        ("1.5g", "write it as 1.5Gi"),
        ("lots", "use values like '500m', '4', '16Gi'"),
    ],
)
def test_a_size_written_another_tools_way_gets_kubernetes_units(value: str, fix: str) -> None:
    assert quantity_fix(value).startswith(fix)
    with pytest.raises(SpecError) as info:
        check_quantity("shmSize", value)
    assert info.value.fix == quantity_fix(value)


# (check, value, field named or None when accepted)
CASES: list[tuple[Any, Any, str | None]] = [
    (lambda v: positive_int("n", v, minimum=0), 0, None),
    (lambda v: positive_int("n", v), 0, "n"),
    (lambda v: positive_int("n", v, allow_none=True), None, None),
    (lambda v: one_of("t", v, ("a", "b")), "b", None),
    (lambda v: one_of("t", v, ("a", "b")), None, "t"),
    (lambda v: check_plain_string("s", v), "line\nline", None),
    (lambda v: check_plain_string("s", v, allow_empty=False), "", "s"),
    (lambda v: check_plain_string("s", v), 3, "s"),
    (lambda v: str_map("m", v), {"a": "b"}, None),
    (lambda v: str_map("m", v), {"a": 1}, "m.a"),
    (lambda v: str_map("m", v), ["a"], "m"),
    (lambda v: check_json_like("a", v), {"k": [1, "x", None, {"n": True}]}, None),
    (lambda v: check_json_like("a", v), {"k": [object()]}, "a.k[0]"),
    (lambda v: check_json_like("a", v), {1: "x"}, "a"),
    (lambda v: check_tolerations("t", v), ({"key": "k", "operator": "Exists", "effect": "NoSchedule"},), None),
    (lambda v: check_tolerations("t", v), [{"key": "k"}], "t"),  # a spec holds its lists as tuples
    (lambda v: check_tolerations("t", v), ({"key": "k", "effect": "Now"},), "t[0].effect"),
    (lambda v: check_tolerations("t", v), ({"value": "a\x00"},), "t[0].value"),
]


@pytest.mark.parametrize(("check", "value", "field"), CASES)
def test_a_check_names_the_field_and_a_fix(check: Any, value: Any, field: str | None) -> None:
    try:
        check(value)
    except SpecError as exc:
        assert (exc.field, bool(exc.fix)) == (field, True), str(exc)
    else:
        assert field is None, f"{value!r} was accepted"
