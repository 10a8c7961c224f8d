"""Where a JobSpec comes from, in increasing precedence:

    built-in defaults  <  ddp.yaml (or --config FILE)  <  DDPCTL_* environment  <  command-line flags

Each layer is a camelCase dict like ddp.yaml itself. Layers merge key by key: maps (env, labels,
volumes, ...) merge entry by entry, everything else is replaced by the higher layer. The merged
dict becomes a JobSpec, which validates it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from ddpctl.errors import SpecError, UsageError
from ddpctl.spec.checks import did_you_mean
from ddpctl.spec.fields import Bool, Int, Number, Part, declared
from ddpctl.spec.model import JobSpec

DEFAULT_CONFIG = "ddp.yaml"
ENV_PREFIX = "DDPCTL_"

# Scalar settings readable from the environment: DDPCTL_<UPPER_SNAKE of the camelCase path>,
# for the top-level keys and those of these parts (numbers are read as such).
ENV_PARTS = ("rendezvous", "resources", "preflight", "stragglers")


def _kind(rule: Any) -> str:
    """How a variable's text is read: a whole number, a number, or as it is."""
    return "int" if isinstance(rule, Int) else "number" if isinstance(rule, Number) else "str"


def _env_paths() -> dict[str, tuple[str, str]]:
    """Each DDPCTL_* variable's camelCase path, and how its text is read (`_kind`)."""
    paths: dict[str, tuple[str, str]] = {}
    for key in declared(JobSpec):
        if isinstance(key.rule, Part) and key.name in ENV_PARTS:
            for sub in declared(key.rule.cls):
                name = f"{ENV_PREFIX}{key.name.upper()}_{sub.name.upper()}"
                paths[name] = (f"{key.key}.{sub.key}", _kind(sub.rule))
        elif key.rule.shape == "scalar" and not isinstance(key.rule, Bool):
            paths[f"{ENV_PREFIX}{key.name.upper()}"] = (key.key, _kind(key.rule))
    return paths


_ENV = _env_paths()
ENV_PATHS = {var: path for var, (path, _) in _ENV.items()}


def set_path(target: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted camelCase path (`rendezvous.port`) in a layer, creating the maps above it."""
    node = target
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def parse_int(source: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{source}: {text!r} is not a whole number; give a number such as 4") from None


def parse_number(source: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{source}: {text!r} is not a number; give a number such as 0.6") from None


def layer_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    for var, (path, kind) in _ENV.items():
        if var in environ:
            raw = environ[var]
            value: Any = parse_int(var, raw) if kind == "int" else parse_number(var, raw) if kind == "number" else raw
            set_path(layer, path, value)
    unknown = sorted(k for k in environ if k.startswith(ENV_PREFIX) and k not in ENV_PATHS and k not in _NON_SPEC_ENV)
    if unknown:
        near = did_you_mean(unknown[0], sorted(ENV_PATHS) + sorted(_NON_SPEC_ENV))
        fix = f"did you mean {near}?" if near else f"unset it or use one of {', '.join(sorted(ENV_PATHS))}"
        raise UsageError(f"{unknown[0]}: not a ddpctl setting; {fix}")
    return layer


# DDPCTL_* variables that are not spec fields (read elsewhere) and must not be flagged as typos.
_NON_SPEC_ENV = {"DDPCTL_DEBUG", "DDPCTL_CONFIG", "DDPCTL_NO_COLOR", "DDPCTL_REQUEST_TIMEOUT"}


def layer_from_file(path: Path | None) -> tuple[dict[str, Any], Path | None]:
    """Read --config FILE, else ./ddp.yaml when present; a missing --config FILE is an error."""
    explicit = path is not None
    if path is None:
        env_path = os.environ.get("DDPCTL_CONFIG")
        path = Path(env_path) if env_path else Path(DEFAULT_CONFIG)
        explicit = bool(env_path)
    if not path.exists():
        if explicit:
            raise UsageError(
                f"--config: {path} does not exist; give the path of a ddp.yaml (make one with `ddpctl init`)"
            )
        return {}, None
    not_text = f"{path}: not a text file; --config takes a YAML job spec such as `ddpctl init` writes"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{not_text} (byte {exc.object[exc.start]:#04x} at offset {exc.start} is not UTF-8)") from None
    except OSError as exc:
        raise UsageError(f"--config: cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.reader.ReaderError as exc:  # control characters: a binary file that happens to decode
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise UsageError(f"{not_text} (control character U+{code:04X} at offset {exc.position})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise UsageError(f"{path}:{where} {problem}; fix the YAML syntax") from None
    if data is None:
        return {}, path
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a map of settings at the top level; see `ddpctl init`")
    return data, path


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Higher layer wins; maps merge entry by entry."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


ENTRYPOINT_KEYS = ("module", "script", "command")
UNIFORM_LAYOUT_KEYS = ("nodes", "procsPerNode")


def _resolve_layout(merged: dict[str, Any]) -> None:
    """Groups from --layout leave gpusPerNode open: one GPU per process, or CPU processes when
    gpusPerNode (any layer) is 0. Any other GPU count contradicts the layout."""
    groups = merged.get("nodeGroups")
    if not isinstance(groups, list):
        return
    open_groups = [g for g in groups if isinstance(g, Mapping) and "gpusPerNode" in g and g["gpusPerNode"] is None]
    if not open_groups:
        return
    gpus = merged.pop("gpusPerNode", None)
    if gpus not in (None, 0):
        raise UsageError(
            f"--gpus: {gpus} GPUs per node contradicts --layout, whose numbers are processes per node with one GPU "
            "each; leave --gpus out, or give --gpus 0 for CPU processes"
        )
    merged["nodeGroups"] = [
        {**g, "gpusPerNode": 0 if gpus == 0 else g.get("procsPerNode")} if g in open_groups else g for g in groups
    ]


def merged_layers(
    flags: Mapping[str, Any], config: Path | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What the user set (file < DDPCTL_* env < flags), merged, without the defaults: the file and
    the environment read now (a command reads them once, through `SpecInput`)."""
    layers = read_layers(config, environ)
    return merge_layers(layers.file, layers.env, flags)


def merge_layers(
    file_layer: Mapping[str, Any], env_layer: Mapping[str, Any], flags: Mapping[str, Any]
) -> dict[str, Any]:
    """The layers merged (file < env < flags), without the defaults; reads nothing, changes none.

    module, script and command are one choice: the highest layer that sets any of them decides,
    so `--script train.py` over a ddp.yaml holding `module:` is not a conflict. The layout is one
    choice too: nodeGroups (`--layout`) replaces a lower layer's nodes/procsPerNode, and nodes or
    procsPerNode replace a lower layer's nodeGroups.
    """
    merged: dict[str, Any] = {}
    for layer in (file_layer, env_layer, flags):
        if any(layer.get(key) for key in ENTRYPOINT_KEYS):
            for key in ENTRYPOINT_KEYS:
                merged.pop(key, None)
            merged.update({key: None for key in ENTRYPOINT_KEYS if key not in layer})
        if layer.get("nodeGroups"):
            # A lower layer's gpusPerNode described its uniform layout: --layout's GPUs come
            # from this layer (or a higher one) only.
            for key in (*UNIFORM_LAYOUT_KEYS, "gpusPerNode"):
                merged.pop(key, None)
        elif any(key in layer for key in UNIFORM_LAYOUT_KEYS):
            merged.pop("nodeGroups", None)
        merged = merge(merged, layer)
    _resolve_layout(merged)
    return merged


def load_spec(
    flags: Mapping[str, Any], config: Path | None = None, environ: Mapping[str, str] | None = None
) -> JobSpec:
    """The JobSpec for a command: defaults < file < DDPCTL_* env < flags."""
    return _spec_of(read_layers(config, environ), flags)


class _Layers(NamedTuple):
    """ddp.yaml (or --config's file) and the DDPCTL_* environment as read: `path` is the file's,
    None when there was none."""

    file: dict[str, Any]
    path: Path | None
    env: dict[str, Any]


def read_layers(config: Path | None, environ: Mapping[str, str] | None = None) -> _Layers:
    """Read the spec file (--config, else ./ddp.yaml when present) and the environment."""
    file_layer, path = layer_from_file(config)
    return _Layers(file_layer, path, layer_from_env(os.environ if environ is None else environ))


def _spec_of(layers: _Layers, flags: Mapping[str, Any]) -> JobSpec:
    """The JobSpec of the read layers under `flags`; a SpecError about a value the file set (no
    env var or flag set it) names the file, so the message says which file to edit."""
    try:
        return JobSpec.from_dict(merge_layers(layers.file, layers.env, flags))
    except SpecError as exc:
        keys = [k for k in re.split(r"\.|\[\d+\]", exc.field) if k]

        def has(layer: Mapping[str, Any]) -> bool:
            node: Any = layer
            for key in keys:
                if not isinstance(node, Mapping) or key not in node:
                    return False
                node = node[key]
            return True

        if layers.path is None or not keys or not has(layers.file) or has(layers.env) or has(flags):
            raise
        raise UsageError(f"{layers.path}: {exc.message}") from None


class _Read:
    """The layers a command reads once, on first use, and every SpecInput made from its own shares."""

    __slots__ = ("config", "layers")

    def __init__(self, config: Path | None) -> None:
        self.config = config
        self.layers: _Layers | None = None

    def get(self) -> _Layers:
        if self.layers is None:
            self.layers = read_layers(self.config)
        return self.layers


class SpecInput:
    """What a command received for its spec: the flag layer and --config. ddp.yaml and the
    environment are read once, when first needed, and every spec resolved from here (`spec()`, with
    flag-level overrides: a target, a built image) and `chosen()` merge those same layers; copies
    made with `with_flags` and `deriving` share the read. `derive` maps the user's job to the one
    the command runs (`ddpctl check`'s). (A plain class with slots, not a dataclass: every start-up
    defines it, and a dataclass takes ~0.7 ms longer.)"""

    __slots__ = ("_read", "config", "derive", "flags")

    def __init__(
        self,
        flags: dict[str, Any],
        config: Path | None = None,
        derive: Callable[[JobSpec], JobSpec] | None = None,
        read: _Read | None = None,
    ) -> None:
        self.flags = flags
        self.config = config
        self.derive = derive
        self._read = read if read is not None else _Read(config)

    def with_flags(self, flags: dict[str, Any]) -> SpecInput:
        """The same input under another flag layer (the file and environment not read again)."""
        return SpecInput(flags, self.config, self.derive, self._read)

    def deriving(self, derive: Callable[[JobSpec], JobSpec]) -> SpecInput:
        """The same input, resolving to `derive` of the user's job."""
        return SpecInput(self.flags, self.config, derive, self._read)

    def spec(self, **overrides: Any) -> JobSpec:
        layer = dict(self.flags)
        layer.update(overrides)
        spec = _spec_of(self._read.get(), layer)
        return spec if self.derive is None else self.derive(spec)

    def chosen(self) -> dict[str, Any]:
        """The settings the user gave (file, env, flags) without the defaults: tells "namespace
        not chosen" apart from "chose the default namespace"."""
        layers = self._read.get()
        return merge_layers(layers.file, layers.env, self.flags)


def describe_sources() -> str:
    return "defaults < ddp.yaml (or --config FILE) < DDPCTL_* environment < command-line flags"


__all__ = [
    "ENV_PATHS",
    "SpecError",
    "SpecInput",
    "layer_from_env",
    "layer_from_file",
    "load_spec",
    "merge",
    "merge_layers",
]
