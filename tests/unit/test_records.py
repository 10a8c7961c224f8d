"""A record behaves as the frozen dataclass it replaces: the same class body made both ways answers
every question (construction, defaults, equality, hashing, repr, freezing, `dataclasses` helpers,
copies) alike, so the CLI's classes kept their behaviour when they stopped generating code."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from ddpctl.records import record


def _body() -> dict[str, Any]:
    """One class body, used for both kinds: a required field, a plain default, a factory, a field
    left out of comparison, a keyword-only field and a __post_init__ that checks."""

    def __post_init__(self: Any) -> None:
        if self.count < 0:
            raise ValueError("count must be >= 0")

    return {
        "__annotations__": {
            "name": "str",
            "count": "int",
            "tags": "tuple[str, ...]",
            "extra": "dict[str, int]",
            "note": "str",
            "late": "int",
        },
        "count": 0,
        "tags": (),
        "extra": field(default_factory=dict, hash=False),
        "note": field(default="", compare=False),
        "late": field(default=1, kw_only=True),
        "__post_init__": __post_init__,
        "__module__": __name__,
    }


def _made(kind: str, eq: bool = True) -> type[Any]:
    cls = type(f"{kind.title()}Thing", (), _body())
    if kind == "dataclass":
        return dataclass(frozen=True, eq=eq)(cls)
    return record(eq=eq)(cls)


KINDS = ("dataclass", "record")
# module globals under their own names, as classes are
DataclassThing, RecordThing = THINGS = (_made("dataclass"), _made("record"))


def _shown(thing: object) -> str:
    """The repr without the class's name, which differs between the two kinds."""
    return repr(thing).split("(", 1)[1]


CASES: list[tuple[str, Callable[[type[Any]], object]]] = [
    ("defaults", lambda c: _shown(c("a"))),
    ("positional and keyword", lambda c: _shown(c("a", 2, ("x",), late=5))),
    ("factory is fresh per instance", lambda c: c("a").extra is not c("a").extra),
    ("equal values", lambda c: c("a", 1) == c("a", 1)),
    ("unequal values", lambda c: c("a", 1) == c("a", 2)),
    ("compare=False is ignored", lambda c: c("a", note="x") == c("a", note="y")),
    ("equal hashes", lambda c: hash(c("a", 1, ("t",))) == hash(c("a", 1, ("t",)))),
    ("other types", lambda c: c("a") == ("a", 0)),
    ("replace", lambda c: _shown(dataclasses.replace(c("a"), count=3))),
    ("fields", lambda c: [(f.name, f.compare, f.kw_only) for f in dataclasses.fields(c)]),
    ("asdict", lambda c: dataclasses.asdict(c("a", extra={"k": 1}))),
    ("match args", lambda c: c.__match_args__),
    ("is a dataclass", lambda c: dataclasses.is_dataclass(c)),
    ("deep copies", lambda c: copy.deepcopy(c("a", extra={"k": 1})) == c("a", extra={"k": 1})),
]


@pytest.mark.parametrize(("what", "ask"), CASES, ids=[c[0] for c in CASES])
def test_a_record_answers_as_the_frozen_dataclass(what: str, ask: Callable[[type[Any]], object]) -> None:
    answers = {kind: ask(cls) for kind, cls in zip(KINDS, THINGS, strict=True)}
    assert answers["record"] == answers["dataclass"], what


ERRORS: list[tuple[str, Callable[[type[Any]], object], type[Exception], str]] = [
    ("missing", lambda c: c(), TypeError, "missing required argument: 'name'"),
    ("unknown keyword", lambda c: c("a", size=1), TypeError, "unexpected keyword argument 'size'"),
    ("too many positional", lambda c: c("a", 1, (), {}, "n", 1), TypeError, "takes 5 positional arguments"),
    ("twice", lambda c: c("a", name="b"), TypeError, "multiple values for argument 'name'"),
    ("post_init", lambda c: c("a", -1), ValueError, "count must be >= 0"),
]


@pytest.mark.parametrize(("what", "call", "error", "says"), ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_construction_fails_as_a_dataclass_does(
    what: str, call: Callable[[type[Any]], object], error: type[Exception], says: str
) -> None:
    for kind in KINDS:
        with pytest.raises(error):
            call(_made(kind))
    with pytest.raises(error, match=says):
        call(_made("record"))


@pytest.mark.parametrize("eq", [True, False])
def test_it_is_frozen(eq: bool) -> None:
    thing = _made("record", eq=eq)("a")
    with pytest.raises(dataclasses.FrozenInstanceError, match="'count'"):
        thing.count = 2
    with pytest.raises(dataclasses.FrozenInstanceError, match="'name'"):
        del thing.name
    assert thing.count == 0


def test_eq_false_compares_and_hashes_by_identity() -> None:
    cls = _made("record", eq=False)
    one, same = cls("a"), cls("a")
    assert one != same and one == one
    assert hash(one) == object.__hash__(one)
    assert {one, same} == {one, same} and len({one, same}) == 2


def test_a_method_of_the_class_is_kept() -> None:
    @record
    class Named:
        name: str

        def __repr__(self) -> str:
            return f"<{self.name}>"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Named) and other.name.lower() == self.name.lower()

        def __hash__(self) -> int:
            return hash(self.name.lower())

    assert repr(Named("A")) == "<A>"
    assert Named("A") == Named("a") and hash(Named("A")) == hash(Named("a"))


def test_a_subclass_record_extends_its_base() -> None:
    @record(eq=False)
    class Base:
        size: int

    @record(eq=False)
    class Child(Base):
        name: str = "c"

    child = Child(3)
    assert (child.size, child.name) == (3, "c")
    assert [f.name for f in dataclasses.fields(Child)] == ["size", "name"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        child.size = 4


def test_it_refuses_what_would_make_it_mutable() -> None:
    @dataclass
    class Mutable:
        size: int

    with pytest.raises(TypeError, match="cannot extend the mutable dataclass Mutable"):

        @record
        class Frozen(Mutable):
            name: str = ""

    with pytest.raises(TypeError, match="cannot define __setattr__"):

        @record
        class Settable:
            size: int

            def __setattr__(self, name: str, value: object) -> None:
                object.__setattr__(self, name, value)


def test_a_class_without_a_docstring_is_named_by_its_fields() -> None:
    @record
    class Bare:
        size: int
        name: str = ""

    assert Bare.__doc__ == "Bare(size, name)"
