"""tools/chart/values.py: the chart's values.yaml and values.schema.json, made from the JobSpec's
declared fields (their agreement with JobSpec key by key is tests/contract/test_chart_contract.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jsonschema
import pytest
import yaml

from ddpctl.spec.model import JobSpec
from tools.chart import values


def test_values_yaml_holds_every_key_at_its_default_under_its_doc() -> None:
    text = values.values_yaml()
    assert yaml.safe_load(text) == JobSpec().to_dict()
    lines = text.removeprefix(values._HEADER).splitlines()
    assert all(len(line) <= values.WRAP for line in lines if line.lstrip().startswith("#"))
    for key in JobSpec().to_dict():
        at = lines.index(next(line for line in lines if line.startswith(f"{key}:")))
        assert lines[at - 1].startswith("# "), f"{key} has no doc comment above it"


def test_the_schema_takes_the_defaults_and_refuses_an_unknown_key() -> None:
    schema = jsonschema.Draft7Validator(values.values_schema())
    defaults = JobSpec().to_dict()
    assert schema.is_valid(defaults)
    assert not schema.is_valid({**defaults, "nodez": 2})
    assert values.values_schema_json().endswith("}\n")


@pytest.mark.parametrize(
    ("annotation", "types"),
    [
        (int, ["integer"]),
        (float, ["number"]),
        (bool, ["boolean"]),
        (str | None, ["string", "null"]),
        (int | str, ["integer", "string"]),
        (tuple[str, ...], ["array", "null"]),  # from_dict reads a null list as empty
        (Mapping[str, str], ["object", "null"]),
        (dict[str, int] | None, ["object", "null"]),
    ],
)
def test_json_types_of_an_annotation(annotation: Any, types: list[str]) -> None:
    assert values._json_types(annotation) == types


def test_an_annotation_without_a_json_type_is_refused_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"teach tools/chart/values\.py"):
        values._json_types(bytes)


def test_a_field_without_a_doc_is_refused() -> None:
    @dataclasses.dataclass
    class Part:
        bare: int = 1

    (f,) = dataclasses.fields(Part)
    with pytest.raises(ValueError, match="bare: give the field a doc"):
        values._doc(f, "bare")


def test_comments_wrap_at_the_column_limit_under_their_indent() -> None:
    lines = values._comment("word " * 60, "  ")
    assert len(lines) > 1 and lines[0].startswith("  # -- ")
    assert all(line.startswith("  # ") and len(line) <= values.WRAP for line in lines)
