"""ddpctl.spec.fields: a rule's two faces agree. For each rule, values it takes and values it
refuses: its check (the SpecError JobSpec raises) and its JSON Schema (what values.schema.json
holds) give the same verdict. And what is derived from a declaration: nullability, a flag's help."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jsonschema
import pytest

from ddpctl.errors import SpecError
from ddpctl.spec.fields import (
    NODE_COUNT,
    Affinity,
    Bool,
    CheckpointURL,
    DnsLabel,
    DnsSubdomain,
    EnvValue,
    FrozenDict,
    GroupResources,
    Int,
    LabelKey,
    LabelValue,
    ListOf,
    MapOf,
    Matches,
    MountPath,
    Number,
    OneOf,
    Quantity,
    Rule,
    Text,
    Tolerations,
    declared,
    declared_at,
    doc,
    freeze,
    json_schema,
)
from ddpctl.spec.model import JobSpec
from ddpctl.spec.names import IMAGE

# (rule, value, accepted): every rule, on both sides of its edge
CASES: list[tuple[Rule, Any, bool]] = [
    (OneOf(("a", "b")), "a", True),
    (OneOf(("a", "b")), "c", False),
    (OneOf(("a", "b"), refused={"b": ("not yet", "use a")}), "a", True),
    (OneOf(("a", "b"), refused={"b": ("not yet", "use a")}), "b", False),
    (Int(1), 1, True),
    (Int(1), 0, False),
    (Int(0), True, False),  # YAML's true is not a number
    (Int(1, 65535), 65535, True),
    (Int(1, 65535), 65536, False),
    (NODE_COUNT, 1025, False),
    (Number(0.01, 1), 0.01, True),
    (Number(0.01, 1), 1, True),  # a whole number is a number
    (Number(0.01, 1), 0.0099, False),
    (Number(0.01, 1), 1.0001, False),
    (Number(0, 10), True, False),  # YAML's true is not a number
    (Number(0, 10), "5", False),
    (Number(0, 10), float("inf"), False),
    (Number(0, 1, exclusive=True), 0.0001, True),
    (Number(0, 1, exclusive=True), 0.9999, True),
    (Number(0, 1, exclusive=True), 0, False),
    (Number(0, 1, exclusive=True), 1, False),
    (Bool(), False, True),
    (Bool(), "yes", False),
    (DnsLabel(), "a-1", True),
    (DnsLabel(), "A", False),
    (DnsLabel(), "a" * 64, False),
    (DnsLabel(), "", False),
    (DnsLabel(rfc1035=True), "a1", True),
    (DnsLabel(rfc1035=True), "1a", False),
    (DnsSubdomain(), "a.b-c", True),
    (DnsSubdomain(), "a_b", False),
    (DnsSubdomain(), "a" * 254, False),
    (Matches(IMAGE, "{value!r} is not an image", "fix"), "reg.io/a:1", True),
    (Matches(IMAGE, "{value!r} is not an image", "fix"), "a b", False),
    (Quantity(), "500m", True),
    (Quantity(), "2GB", False),
    (LabelKey(), "example.com/rack", True),
    (LabelKey(), "a/b/c", False),
    (LabelKey(), "", False),
    (LabelValue(), "", True),
    (LabelValue(), "a b", False),
    (LabelValue(empty_fix="name one"), "", False),
    (Text(), "any\nthing", True),
    (Text(), "nul\x00", False),
    (Text(nonempty=True), "", False),
    (Text(nonempty=True, control=False), "train.py", True),
    (Text(nonempty=True, control=False), "a\tb", False),
    (MountPath(), "/data", True),
    (MountPath(), "data", False),
    (MountPath(), "/dev/shm/", False),
    (MountPath(), "/a:b", False),
    (CheckpointURL(), "s3://bucket/run", True),
    (CheckpointURL(), "s3://Bucket/run", False),
    (CheckpointURL(), "/mnt/ckpt", False),
    (ListOf(DnsLabel()), ["a", "b"], True),
    (ListOf(DnsLabel()), ["a", "B"], False),
    (ListOf(Text(), first=Text(nonempty=True)), ["python", ""], True),
    (ListOf(Text(), first=Text(nonempty=True)), ["", "x"], False),
    (Tolerations(), [{"key": "k", "operator": "Exists"}], True),
    (Tolerations(), [{"key": "k", "operator": "Maybe"}], False),
    (MapOf(LabelKey(), LabelValue()), {"example.com/team": "a"}, True),
    (MapOf(LabelKey(), LabelValue()), {"team": "a b"}, False),
    (MapOf(LabelKey(), LabelValue()), {"bad key!": "a"}, False),
    (MapOf(DnsLabel(), Text(), reserved={"dshm": ("reserved", "pick another")}), {"dshm": "x"}, False),
    (MapOf(DnsLabel(), EnvValue()), {"a": "1"}, True),
    (Affinity(), {"nodeAffinity": {"x": [1]}}, True),
    (Affinity(), {"friendship": {}}, False),
    (GroupResources(), {"cpu": "8", "memory": "64Gi"}, True),
    (GroupResources(), {"gpu": "1"}, False),
    (GroupResources(), {"cpu": "lots"}, False),
]


@pytest.mark.parametrize(
    ("rule", "value", "accepted"), CASES, ids=[f"{type(c[0]).__name__}-{i}" for i, c in enumerate(CASES)]
)
def test_a_rules_check_and_schema_agree(rule: Rule, value: Any, accepted: bool) -> None:
    try:
        rule.check("key", tuple(value) if rule.shape == "list" else value)  # a spec holds its lists as tuples
        checked = True
    except SpecError as exc:
        checked = False
        assert exc.field.startswith("key") and exc.fix, str(exc)
    schema = rule.item_schema()
    assert checked == accepted
    assert jsonschema.Draft7Validator(schema).is_valid(value) == accepted, f"{schema} on {value!r}"


@dataclass(frozen=True)
class _Part:
    """A spec part for the tests below."""

    size: int = field(metadata=doc("Size. More words.", Int(1)))
    label: str | None = field(default=None, metadata=doc("A label; null: none.", OneOf(("x", "y"))))
    tags: tuple[str, ...] = field(default=(), metadata=doc("Tags.", ListOf(Text())))
    extra: int = 0  # not a key: no doc


def test_a_declaration_says_the_key_its_nullability_and_whether_it_is_required() -> None:
    keys = {k.key: (k.nullable, k.required) for k in declared(_Part)}
    assert keys == {"size": (False, True), "label": (True, False), "tags": (False, False)}
    assert json_schema(_Part, "label") == {"enum": ("x", "y", None)}, "a nullable enum takes null"
    assert declared_at(JobSpec, "rendezvous.port").rule.schema() == {"minimum": 1, "maximum": 65535}


def test_freeze_makes_lists_tuples_and_maps_read_only() -> None:
    @dataclass(frozen=True)
    class Holder:
        items: tuple[str, ...] = field(default=(), metadata=doc("Items.", ListOf(Text())))
        labels: Any = field(default_factory=dict, metadata=doc("Labels.", MapOf(LabelKey(), Text())))

    holder = Holder(["a"], {"b": "2", "a": "1"})  # type: ignore[arg-type]
    freeze(holder)
    assert holder.items == ("a",) and list(holder.labels) == ["a", "b"] and isinstance(holder.labels, FrozenDict)
    with pytest.raises(TypeError, match="read-only"):
        holder.labels.update(c="3")
    with pytest.raises(SpecError, match=r"^items: expected a list, got str"):
        freeze(Holder("ab"))  # type: ignore[arg-type]
