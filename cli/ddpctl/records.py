"""`@record`: a frozen dataclass whose methods are shared, not generated.

`@dataclass(frozen=True)` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__`,
`__setattr__` and `__delattr__` as source text and compiles it when the class is made: on Python
3.11, ~0.5 ms a class, and more than half of what importing the spec, the plan and the lint costs
(`ddpctl render` makes 25 such classes before it renders anything). A record is the same dataclass
(`dataclasses.fields`, `replace` and `asdict` work on it; mypy reads it as a frozen dataclass)
whose methods are one set of functions that read the class's fields, so making a class compiles
nothing. It takes the one option the CLI uses: `eq=False` keeps identity equality and hashing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast, dataclass_transform, overload

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_T = TypeVar("_T")


@overload
def record(cls: type[_T], /) -> type[_T]: ...
@overload
def record(*, eq: bool = True) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: type[_T] | None = None, /, *, eq: bool = True) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """Make `cls` a frozen dataclass with shared methods (`eq=False`: compared by identity)."""

    def wrap(cls: type[_T]) -> type[_T]:
        return _make(cls, eq=eq)

    return wrap if cls is None else wrap(cls)


def _make(cls: type[_T], *, eq: bool) -> type[_T]:
    # A dataclass with none of its methods generated: fields, defaults and __match_args__ only. A
    # class with no docstring would get one from inspect.signature (slow, and of no __init__ yet).
    documented = cls.__doc__ is not None
    if not documented:
        cls.__doc__ = cls.__name__  # replaced below: dataclasses compute one only where it is empty
    cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    fields = dataclasses.fields(cast("type[DataclassInstance]", cls))
    names = tuple(f.name for f in fields)
    if not documented:
        cls.__doc__ = f"{cls.__name__}({', '.join(names)})"
    for base in cls.__mro__[1:]:
        params = getattr(base, "__dataclass_params__", None)
        if params is not None and not params.frozen and not hasattr(base, "__record__"):
            raise TypeError(f"record {cls.__name__} cannot extend the mutable dataclass {base.__name__}")
    if "__setattr__" in cls.__dict__ or "__delattr__" in cls.__dict__:
        raise TypeError(f"record {cls.__name__} cannot define __setattr__ or __delattr__: it is frozen")
    own = cls.__dict__
    methods: dict[str, object] = {
        "__record__": names,
        "__init__": _init_of(cls, fields),
        "__repr__": _repr_of(tuple(f.name for f in fields if f.repr)),
        "__setattr__": _frozen_setattr,
        "__delattr__": _frozen_delattr,
    }
    if eq:
        methods["__eq__"] = _eq_of(tuple(f.name for f in fields if f.compare))
        # as dataclasses do: a __hash__ of the class's own stays, the None that defining __eq__ implies does not
        if own.get("__hash__", dataclasses.MISSING) in (dataclasses.MISSING, None):
            methods["__hash__"] = _hash_of(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))
    for name, method in methods.items():
        if name not in own or name == "__hash__":
            setattr(cls, name, method)
    return cls


def _init_of(cls: type[Any], fields: tuple[dataclasses.Field[Any], ...]) -> Callable[..., None]:
    init = [f for f in fields if f.init]
    positional = tuple(f.name for f in init if not f.kw_only)
    accepted = frozenset(f.name for f in init)
    post_init = hasattr(cls, "__post_init__")
    missing = dataclasses.MISSING

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(positional):
            raise TypeError(f"{cls.__qualname__}() takes {len(positional)} positional arguments, {len(args)} given")
        values = dict(zip(positional, args))
        for name in kwargs:
            if name not in accepted:
                raise TypeError(f"{cls.__qualname__}() got an unexpected keyword argument {name!r}")
            if name in values:
                raise TypeError(f"{cls.__qualname__}() got multiple values for argument {name!r}")
        values.update(kwargs)
        for f in fields:
            if f.init and f.name in values:
                value = values[f.name]
            elif f.default is not missing:
                value = f.default
            elif f.default_factory is not missing:
                value = f.default_factory()
            elif f.init:
                raise TypeError(f"{cls.__qualname__}() missing required argument: {f.name!r}")
            else:
                continue
            object.__setattr__(self, f.name, value)
        if post_init:
            self.__post_init__()

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _repr_of(names: tuple[str, ...]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__qualname__}({shown})"

    return __repr__


def _eq_of(names: tuple[str, ...]) -> Callable[[Any, object], bool]:
    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        # tuples, as dataclasses compare: an item is equal to itself (a NaN too)
        return tuple(getattr(self, name) for name in names) == tuple(getattr(other, name) for name in names)

    return __eq__


def _hash_of(names: tuple[str, ...]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, name) for name in names))

    return __hash__


def _frozen_setattr(self: Any, name: str, value: object) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
