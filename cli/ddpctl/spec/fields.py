"""Declared fields: each key of a spec stated once, on its dataclass field.

    gpus_per_node: int = field(default=0, metadata=doc("GPUs per node; 0 runs on CPU with gloo.", Int(0)))

The annotation gives the key's type (and `| None` that null is allowed: a null skips the check),
`default` its default, `doc(text, rule, *flags)` its documentation, its single-field rule and its
command-line flags. A rule is a small object with two faces: `check(where, value)` raises the
one-line SpecError JobSpec gives (`gpusPerNode: -1 must be an integer >= 0; set gpusPerNode to a
whole number of at least 0`), and `schema()` returns the JSON-Schema keywords tools/chart writes
into the chart's values.schema.json. Its `shape` (scalar, list, map, part) tells spec/serial how
to read and write the key.

The doc's first sentence is also the help of the key's command-line flag (commands/options.py),
so it says what the key is, not how YAML spells it; a remark on null (`; null: none`) ends that
sentence or follows it. Rules that span keys live in spec/rules.py, the camelCase form in spec/serial.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

from ddpctl.errors import SpecError
from ddpctl.spec.checks import (
    check_json_like,
    check_plain_string,
    check_quantity,
    check_tolerations,
    one_of,
    positive_int,
    require,
    str_map,
    yaml_spelling,
)
from ddpctl.spec.names import (
    CONTROL_CHARS,
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    LABEL_VALUE,
    MAX_DNS_LABEL,
    LazyPattern,
    check_dns_label,
    check_dns_subdomain,
    check_label_key,
    check_label_value,
)
from ddpctl.spec.schema import (
    AFFINITY_KINDS,
    CHECKPOINT_URL_PATTERN,
    CONTROL_CLASS,
    LABEL_KEY_PATTERN,
    MAX_NODES,
    NO_NUL,
    QUANTITY_PATTERN,
    SHM_MOUNT,
    TOLERATION,
    bounded,
    no_chars,
)
from ddpctl_trainer import protocol


def doc(text: str, rule: Rule, *flags: Flag) -> dict[str, Any]:
    """A key's declaration, kept in its field's metadata: `text` documents it (values.yaml, the
    spec reference, `ddpctl init`'s comments, the flag's help), `rule` checks it, and `flags`
    (`flag("--nodes", panel="Layout")`) are the command-line flags that set it."""
    return {"doc": text, "rule": rule, "flags": flags}


class Flag(NamedTuple):
    """A key's command-line flag (`flag(...)` in its `doc`): option names, the spec path it sets
    (filled in by the commands' options) and --help panel. Its `kind` (how to read it) and help
    follow from the key's rule and doc; a flag states them only where its syntax is its own
    (`--layout 4+3`); `note` adds what only the flag means. (A NamedTuple: cheaper than a dataclass.)"""

    names: tuple[str, ...]
    path: str
    panel: str
    kind: str = ""  # int | str | list | map from the rule; or volumes, secretEnv, tolerations, shell, layout, topology
    help: str = ""
    note: str = ""

    @property
    def param(self) -> str:
        return "flag_" + self.names[0].lstrip("-").replace("-", "_")


REPEATABLE = frozenset({"list", "map", "volumes", "secretEnv", "tolerations"})


def flag(*names: str, panel: str, kind: str = "", help: str = "", note: str = "") -> Flag:
    return Flag(names, "", panel, kind, help, note)


def camel(snake: str) -> str:
    """The spec file's (camelCase) name of a field: `gpus_per_node` -> `gpusPerNode`."""
    head, *rest = snake.split("_")
    return head + "".join(p.capitalize() for p in rest)


# ------------------------------------------------------------------------------------ the rules


class Rule:
    """One key's rule: `check` refuses a value with a SpecError naming `where`, `schema` states the
    same rule in JSON Schema. A key's own JSON type comes from its annotation; `json_type` is the
    type of a list item or map value under this rule, which no annotation names."""

    shape: ClassVar[str] = "scalar"  # scalar | list | map | part (a nested dataclass)
    json_type: ClassVar[str | list[str]] = "string"

    def check(self, where: str, value: Any) -> None:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        return {}

    def item_schema(self) -> Any:
        """This rule as the schema of a list item or map value."""
        return {"type": self.json_type, **self.schema()}

    def key_pattern(self) -> str:
        """This rule as the pattern of a map's keys (JSON Schema's patternProperties)."""
        raise TypeError(f"{type(self).__name__} cannot check a map's keys")


class OneOf(Rule):
    """One of `choices` (a nullable key also takes null). A `refused` value is one the key names
    but does not take yet: it is refused in its own words (problem, fix), and the schema leaves it out."""

    def __init__(self, choices: tuple[str, ...], *, refused: Mapping[str, tuple[str, str]] | None = None) -> None:
        self.refused = dict(refused or {})
        self.choices = tuple(c for c in choices if c not in self.refused)

    def check(self, where: str, value: Any) -> None:
        if isinstance(value, str) and value in self.refused:
            raise SpecError(where, *self.refused[value])
        one_of(where, value, self.choices)

    def schema(self) -> dict[str, Any]:
        return {"enum": self.choices}


class Int(Rule):
    """A whole number of at least `minimum` (and at most `maximum`: `above` words the error)."""

    json_type = "integer"

    def __init__(
        self,
        minimum: int,
        maximum: int | None = None,
        *,
        above: tuple[str, str] = ("{value} is more than {maximum}", "use at most {maximum}"),
    ) -> None:
        self.minimum, self.maximum, self.above = minimum, maximum, above

    def check(self, where: str, value: Any) -> None:
        positive_int(where, value, minimum=self.minimum)
        if self.maximum is not None and value > self.maximum:
            problem, fix = (text.format(value=value, maximum=self.maximum) for text in self.above)
            raise SpecError(where, problem, fix)

    def schema(self) -> dict[str, Any]:
        return {"minimum": self.minimum} | ({} if self.maximum is None else {"maximum": self.maximum})


NODE_COUNT = Int(1, MAX_NODES, above=("{value} is more than {maximum}", "use at most {maximum} nodes"))


class Number(Rule):
    """A number (a whole one too) from `minimum` to `maximum`, both included: a floor; with
    `exclusive`, strictly between them: a share that is neither none nor all."""

    json_type = "number"

    def __init__(self, minimum: float, maximum: float, *, exclusive: bool = False) -> None:
        self.minimum, self.maximum, self.exclusive = minimum, maximum, exclusive

    def check(self, where: str, value: Any) -> None:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        low, high = number_text(self.minimum), number_text(self.maximum)
        if self.exclusive:
            inside = number and self.minimum < value < self.maximum  # NaN fails both comparisons
            span = f"above {low} and below {high}"
        else:
            inside = number and self.minimum <= value <= self.maximum
            span = f"from {low} to {high}"
        require(inside, where, f"{yaml_spelling(value)} is not a number {span}", f"set {where} to a number {span}")

    def schema(self) -> dict[str, Any]:
        if self.exclusive:
            return {"exclusiveMinimum": self.minimum, "exclusiveMaximum": self.maximum}
        return {"minimum": self.minimum, "maximum": self.maximum}


def number_text(value: float) -> str:
    """A number as an env value or a message writes it: `0.6`, `2` (not `2.0`), `1000000`,
    `0.00001` (never an exponent between 1e-6 and 1e21): what the chart's templates write of the
    same YAML number (a whole one as an integer, else Go's JSON form, its shortest digits)."""
    if float(value).is_integer():
        return str(int(value))
    text = repr(float(value))  # the shortest digits that read back the same
    if "e" not in text:
        return text
    from decimal import Decimal  # an exponent to write out (only then: decimal takes ~1 ms to import)

    return format(Decimal(text), "f")


class NodeCount(Rule):
    """`nodes`: N (NODE_COUNT), or "MIN:MAX" for an elastic job. spec/serial reads it into nodes,
    minNodes and maxNodes, which rules.layout checks together (the bounds are not keys of their own)."""

    def check(self, where: str, value: Any) -> None:
        pass

    def schema(self) -> dict[str, Any]:
        whole = "0*[1-9][0-9]*"
        return {"oneOf": [NODE_COUNT.item_schema(), {"type": "string", "pattern": f"^{whole}(:{whole})?$"}]}


class Bool(Rule):
    json_type = "boolean"

    def check(self, where: str, value: Any) -> None:
        require(isinstance(value, bool), where, f"{value!r} is not a boolean", "write true or false")


class DnsLabel(Rule):
    """A Kubernetes name that becomes a hostname or Service name: DNS-1123 (or DNS-1035) label."""

    def __init__(self, *, rfc1035: bool = False) -> None:
        self.rfc1035 = rfc1035

    @property
    def regex(self) -> LazyPattern:
        return DNS1035_LABEL if self.rfc1035 else DNS1123_LABEL

    def check(self, where: str, value: Any) -> None:
        check_dns_label(where, value, rfc1035=self.rfc1035)

    def schema(self) -> dict[str, Any]:
        return {"minLength": 1, "maxLength": MAX_DNS_LABEL, "pattern": self.regex.pattern}

    def key_pattern(self) -> str:
        return bounded(self.regex)


class DnsSubdomain(Rule):
    """The name of a PVC, PriorityClass or ServiceAccount."""

    def check(self, where: str, value: Any) -> None:
        check_dns_subdomain(where, value)

    def schema(self) -> dict[str, Any]:
        return {"maxLength": 253, "pattern": DNS1123_SUBDOMAIN.pattern}


class Matches(Rule):
    """A string `regex` matches whole; `problem` may name the value as {value!r}."""

    def __init__(self, regex: LazyPattern, problem: str, fix: str) -> None:
        self.regex, self.problem, self.fix = regex, problem, fix

    def check(self, where: str, value: Any) -> None:
        ok = isinstance(value, str) and bool(self.regex.fullmatch(value))
        require(ok, where, self.problem.format(value=value), self.fix)

    def schema(self) -> dict[str, Any]:
        return {"pattern": self.regex.pattern}

    def key_pattern(self) -> str:
        return self.regex.pattern


class Quantity(Rule):
    """A Kubernetes resource quantity (`500m`, `64Gi`)."""

    def check(self, where: str, value: Any) -> None:
        check_quantity(where, value)

    def schema(self) -> dict[str, Any]:
        return {"pattern": QUANTITY_PATTERN}


class LabelKey(Rule):
    """A label key (an optional DNS-subdomain prefix and a name): labels, annotations, topology levels."""

    def check(self, where: str, value: Any) -> None:
        check_label_key(where, value)

    def schema(self) -> dict[str, Any]:
        return {"minLength": 1, "pattern": LABEL_KEY_PATTERN}

    def key_pattern(self) -> str:
        return LABEL_KEY_PATTERN


class LabelValue(Rule):
    """A label value; with `empty_fix`, an empty one is refused with that fix."""

    def __init__(self, *, empty_fix: str | None = None) -> None:
        self.empty_fix = empty_fix

    def check(self, where: str, value: Any) -> None:
        check_label_value(where, value)
        if self.empty_fix is not None:
            require(bool(value), where, "must not be empty", self.empty_fix)

    def schema(self) -> dict[str, Any]:
        return ({} if self.empty_fix is None else {"minLength": 1}) | {"pattern": bounded(LABEL_VALUE)}


class Text(Rule):
    """Free text (args, annotations): anything but NUL, or with `control=False` no control
    characters at all (a path); `nonempty` refuses ""."""

    def __init__(self, *, nonempty: bool = False, control: bool = True) -> None:
        self.nonempty, self.control = nonempty, control

    def check(self, where: str, value: Any) -> None:
        check_plain_string(where, value, allow_empty=not self.nonempty)
        if not self.control:
            require(not CONTROL_CHARS.search(value), where, "contains control characters", "give a plain file path")

    def schema(self) -> dict[str, Any]:
        pattern = NO_NUL if self.control else no_chars(CONTROL_CLASS, min_one=self.nonempty)
        return ({"minLength": 1} if self.nonempty else {}) | {"pattern": pattern}


class EnvValue(Text):
    """An env value: a string; spec/serial keeps a YAML number as written (`4` -> "4")."""

    json_type: ClassVar[str | list[str]] = ["string", "number"]


class MountPath(Rule):
    """An absolute path in the pod; /dev/shm is shmSize's."""

    def check(self, where: str, value: Any) -> None:
        absolute = isinstance(value, str) and value.startswith("/")
        require(
            absolute and not CONTROL_CHARS.search(value) and ":" not in value,
            where,
            f"{value!r} is not an absolute path",
            "use a path like /data",
        )
        require(
            value.rstrip("/") != SHM_MOUNT,
            where,
            "/dev/shm is managed by shmSize",  # noqa: S108 - a message, not a path
            "mount the volume elsewhere",
        )

    def schema(self) -> dict[str, Any]:
        return {"pattern": f"^/[^:{CONTROL_CLASS}]*$", "not": {"pattern": f"^{SHM_MOUNT}/*$"}}


class CheckpointURL(Rule):
    """An object store URL the trainer reads (`s3://BUCKET/PREFIX`), with no credentials in it."""

    def check(self, where: str, value: Any) -> None:
        check_plain_string(where, value, allow_empty=False)
        wrong = protocol.checkpoint_url_problem(value)
        if wrong is not None:
            raise SpecError(where, *wrong)

    def schema(self) -> dict[str, Any]:
        return {"pattern": CHECKPOINT_URL_PATTERN}


class ListOf(Rule):
    """A list whose items follow `item` (the first item `first`, when given)."""

    shape = "list"
    json_type = "array"

    def __init__(self, item: Rule, *, first: Rule | None = None) -> None:
        self.item, self.first = item, first

    def check(self, where: str, value: Any) -> None:
        for i, entry in enumerate(value):
            (self.first if i == 0 and self.first is not None else self.item).check(f"{where}[{i}]", entry)

    def schema(self) -> dict[str, Any]:
        if self.first is None:
            return {"items": self.item.item_schema()}
        return {"items": [self.first.item_schema()], "additionalItems": self.item.item_schema()}


class Tolerations(Rule):
    """Tolerations as a pod takes them: key, operator, value, effect, tolerationSeconds."""

    shape = "list"
    json_type = "array"

    def check(self, where: str, value: Any) -> None:
        check_tolerations(where, value)

    def schema(self) -> dict[str, Any]:
        return {"items": TOLERATION}


# A map key no entry may have: (problem, fix), and the fix may name the key as {key}.
Reserved = tuple[str, str]


class MapOf(Rule):
    """A map whose keys follow `keys` and values follow `values`; `reserved` keys are refused
    first, and `strings` refuses a value that is not a string before any other check."""

    shape = "map"
    json_type = "object"

    def __init__(
        self, keys: Rule, values: Rule, *, reserved: Mapping[str, Reserved] | None = None, strings: bool = False
    ) -> None:
        self.keys, self.values, self.reserved, self.strings = keys, values, dict(reserved or {}), strings

    def check(self, where: str, value: Any) -> None:
        if self.strings:
            str_map(where, value)
        for key, entry in value.items():
            here = f"{where}.{key}"
            if key in self.reserved:
                problem, fix = self.reserved[key]
                raise SpecError(here, problem, fix.format(key=key))
            self.keys.check(here, key)
            self.values.check(here, entry)

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"patternProperties": {self.keys.key_pattern(): self.values.item_schema()}}
        out["additionalProperties"] = False
        if self.reserved:
            out["properties"] = dict.fromkeys(self.reserved, False)
        return out


class Affinity(Rule):
    """A pod's affinity: nodeAffinity, podAffinity and/or podAntiAffinity, as the pod API takes them
    (kept in the user's order)."""

    shape = "map"
    json_type = "object"

    def check(self, where: str, value: Any) -> None:
        for key in value:
            require(
                key in AFFINITY_KINDS,
                f"{where}.{key}",
                "is not an affinity kind",
                "use nodeAffinity, podAffinity or podAntiAffinity",
            )
        check_json_like(where, value)

    def schema(self) -> dict[str, Any]:
        return {"properties": {kind: {"type": "object"} for kind in AFFINITY_KINDS}, "additionalProperties": False}


class GroupResources(Rule):
    """A node group's cpu, memory and cpuLimit (its GPUs come from gpusPerNode)."""

    shape = "map"
    json_type = "object"
    KEYS = ("cpu", "memory", "cpuLimit")

    def check(self, where: str, value: Any) -> None:
        require(
            set(value) <= set(self.KEYS),
            where,
            "only cpu, memory and cpuLimit can be set per group",
            "write it as {cpu: '8', memory: 64Gi}; GPUs come from gpusPerNode and gpuResource",
        )
        for key, quantity in value.items():
            check_quantity(f"{where}.{key}", quantity)

    def schema(self) -> dict[str, Any]:
        quantity = {"type": "string", **Quantity().schema()}
        return {"properties": dict.fromkeys(self.KEYS, quantity), "additionalProperties": False}


class Part(Rule):
    """A nested part of the spec (a dataclass of declared fields, such as Rendezvous): checked key
    by key under `where`. `problem` and `fix` word the error when the value is not such a part;
    `null_is_empty` reads a null as the part's defaults (a map whose keys are all commented out)."""

    shape = "part"
    json_type = "object"

    def __init__(
        self,
        cls: type,
        *,
        problem: str = "must be a map",
        fix: str = "see `ddpctl init` for its keys",
        null_is_empty: bool = False,
    ) -> None:
        self.cls, self.problem, self.fix, self.null_is_empty = cls, problem, fix, null_is_empty

    def check(self, where: str, value: Any) -> None:
        require(isinstance(value, self.cls), where, self.problem, self.fix)
        check_fields(value, where)

    def item_schema(self) -> Any:
        return self.cls  # tools/chart expands a part into its object schema


# ------------------------------------------------------------------------------------ using them


class Declared:
    """One declared key of a spec part: its field name, camelCase key, rule, whether null is allowed
    and whether it has no default, and the field itself (its doc: `field.metadata["doc"]`). (A
    plain class: every start-up defines it, and a NamedTuple takes ~0.2 ms longer.)"""

    __slots__ = ("field", "key", "name", "nullable", "required", "rule")

    def __init__(self, f: dataclasses.Field[Any]) -> None:
        self.name, self.key, self.field = f.name, camel(f.name), f
        self.rule: Rule = f.metadata["rule"]
        self.nullable = "None" in str(f.type).replace(" ", "").split("|")
        self.required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


_DECLARED: dict[type, tuple[Declared, ...]] = {}


def declared(cls: type) -> tuple[Declared, ...]:
    """The declared keys of a spec part, in field order (fields without a doc are not keys)."""
    if cls in _DECLARED:
        return _DECLARED[cls]
    _DECLARED[cls] = tuple(Declared(f) for f in dataclasses.fields(cls) if "doc" in f.metadata)
    return _DECLARED[cls]


def check_fields(part: Any, where: str = "") -> None:
    """Check each declared key of `part` by its rule, naming it under `where`."""
    for key in declared(type(part)):
        value = getattr(part, key.name)
        if value is None and key.nullable:
            continue
        key.rule.check(f"{where}.{key.key}" if where else key.key, value)


class FrozenDict(dict[str, Any]):
    """A dict that refuses mutation, so a frozen JobSpec stays frozen all the way down."""

    def _refuse(self, *_: Any, **__: Any) -> None:
        raise TypeError("JobSpec maps are read-only; use JobSpec.replace")

    # one refusing method stands in for every mutator, whatever its signature
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]  # dict sets __hash__ = None; a frozen map can hash
        return hash(tuple(sorted((k, repr(v)) for k, v in self.items())))


def freeze(part: Any) -> None:
    """Make `part`'s lists tuples and its maps FrozenDicts (sorted, so that equal specs render
    byte-identically; affinity keeps its order), refusing a value of the wrong shape."""
    for key in declared(type(part)):
        value = getattr(part, key.name)
        if key.rule.shape == "list":
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise SpecError(key.key, f"expected a list, got {type(value).__name__}", "write it as a YAML list")
            object.__setattr__(part, key.name, tuple(value))
        elif key.rule.shape == "map":
            if not isinstance(value, Mapping):
                raise SpecError(key.key, f"expected a map, got {type(value).__name__}", "write it as key: value pairs")
            items = value.items() if isinstance(key.rule, Affinity) else sorted(value.items())
            object.__setattr__(part, key.name, FrozenDict(items))


def json_schema(part: type, name: str) -> dict[str, Any]:
    """The JSON-Schema keywords of one declared key, as values.schema.json states them: its rule's,
    with null added where the annotation allows it and the rule would not (an enum, a part)."""
    key = next(k for k in declared(part) if k.name == name)
    out = key.rule.schema()
    if key.nullable and "enum" in out:
        out["enum"] = (*out["enum"], None)
    if key.nullable and isinstance(key.rule, Part):
        out = {"anyOf": [{"type": "null"}, key.rule.cls]}
    return out


# ------------------------------------------------------------------------------------ flag help


def declared_at(part: type, path: str) -> Declared:
    """The declared key at a dotted camelCase path (`rendezvous.port`), from `part` down through its parts."""
    head, _, rest = path.partition(".")
    key = next(k for k in declared(part) if k.key == head)
    if not rest:
        return key
    assert isinstance(key.rule, Part), path
    return declared_at(key.rule.cls, rest)
