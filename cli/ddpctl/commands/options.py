"""The spec flags shared by `render`, `run` and `submit`, declared once.

`spec_options` adds every flag below to a Typer command and hands the command one `SpecInput`
(the flags as a camelCase layer, plus --config), so the commands stay thin and agree on flags.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from ddpctl.errors import UsageError
from ddpctl.spec.fields import REPEATABLE, Declared, Flag, Int, Number, Part, declared, declared_at
from ddpctl.spec.model import JobSpec
from ddpctl.spec.sources import SpecInput, set_path


def _split_pair(flag: str, text: str, sep: str = "=") -> tuple[str, str]:
    key, found, value = text.partition(sep)
    if not found or not key:
        raise UsageError(f"{flag}: {text!r} is not KEY{sep}VALUE; write it like {flag} KEY{sep}VALUE")
    return key, value


def _volume(flag: str, text: str) -> tuple[str, dict[str, Any]]:
    """NAME=CLAIM:/mount/path[:ro]"""
    name, rest = _split_pair(flag, text)
    parts = rest.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1] or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise UsageError(f"{flag}: {text!r} is not NAME=CLAIM:/mount/path[:ro]; e.g. {flag} data=imagenet-pvc:/data:ro")
    return name, {"claimName": parts[0], "mountPath": parts[1], "readOnly": len(parts) == 3 and parts[2] == "ro"}


def _secret_env(flag: str, text: str) -> tuple[str, dict[str, str]]:
    """VAR=SECRET:KEY"""
    var, ref = _split_pair(flag, text)
    secret, found, key = ref.partition(":")
    if not found or not secret or not key:
        raise UsageError(f"{flag}: {text!r} is not VAR=SECRET:KEY; e.g. {flag} WANDB_API_KEY=wandb:api-key")
    return var, {"secret": secret, "key": key}


def _toleration(flag: str, text: str) -> dict[str, str]:
    """KEY[=VALUE][:EFFECT]; without a value the operator is Exists."""
    body, _, effect = text.partition(":")
    key, has_value, value = body.partition("=")
    if not key:
        raise UsageError(f"{flag}: {text!r} has no key; write it like {flag} gpu=true:NoSchedule")
    tol = {"key": key, "operator": "Equal" if has_value else "Exists"}
    if has_value:
        tol["value"] = value
    if effect:
        tol["effect"] = effect
    return tol


def _topology(flag: str, text: str) -> dict[str, Any]:
    """required:LEVEL, preferred:LEVEL or unconstrained; sets all three, so it replaces a file's mode."""
    mode, _, level = text.partition(":")
    if mode == "unconstrained" and not level:
        return {"required": None, "preferred": None, "unconstrained": True}
    if mode in ("required", "preferred") and level:
        return {"required": None, "preferred": None, "unconstrained": False, mode: level}
    raise UsageError(
        f"{flag}: {text!r} is not required:LEVEL, preferred:LEVEL or unconstrained; "
        f"e.g. {flag} required:cloud.google.com/gce-topology-block (LEVEL: a node label of Kueue's Topology)"
    )


def _topology_slice(flag: str, text: str) -> dict[str, Any]:
    """LEVEL:SIZE, slices of SIZE pods each in one domain of LEVEL."""
    level, _, size = text.rpartition(":")
    if not level or not size.isdigit():
        raise UsageError(f"{flag}: {text!r} is not LEVEL:SIZE; e.g. {flag} cloud.google.com/gce-topology-host:2")
    return {"sliceLevel": level, "sliceSize": int(size)}


_LAYOUT_TERM = re.compile(r"(?:([0-9]+)x)?([0-9]+)")


def parse_layout(flag: str, text: str) -> list[dict[str, Any]]:
    """`4+3` (a node of 4 processes and one of 3) or `2x8+1x4` (two nodes of 8, one of 4): one
    node group per term, named g0, g1, ... `gpusPerNode` is left open (None): one GPU per process
    unless --gpus 0 says CPU processes, decided once every layer is merged (config.merged_layers)."""
    groups: list[dict[str, Any]] = []
    for i, term in enumerate(text.replace(" ", "").split("+")):
        match = _LAYOUT_TERM.fullmatch(term)
        nodes, procs = (int(match.group(1) or 1), int(match.group(2))) if match else (0, 0)
        if not match or nodes < 1 or procs < 1:
            raise UsageError(
                f"{flag}: {text!r} is not a layout; write processes per node joined by '+', "
                f"e.g. {flag} 4+3 (one node of 4, one of 3) or {flag} 2x8+1x4 (two nodes of 8, one of 4)"
            )
        groups.append({"name": f"g{i}", "nodes": nodes, "gpusPerNode": None, "procsPerNode": procs})
    return groups


# How a flag of each kind spells its value, where that is not the YAML's.
SYNTAX = {
    "map": "KEY=VALUE",
    "volumes": "NAME=CLAIM:/path[:ro]",
    "secretEnv": "VAR=SECRET:KEY",
    "tolerations": "KEY[=VALUE][:EFFECT]",
    "shell": "one shell-quoted string",
}


def summary(key: Declared) -> str:
    """A key's doc's first sentence without its remark on null (a flag cannot say null): its flag's help."""
    text = str(key.field.metadata["doc"])
    end = text.find(". ")
    while end >= 0 and not _ends_sentence(text, end):
        end = text.find(". ", end + 1)
    first = (text if end < 0 else text[:end]).rstrip(".")
    for remark in ("; null", ", null"):
        if remark in first:
            first = first[: first.index(remark)]
    return first + "."


def _ends_sentence(text: str, at: int) -> bool:
    """Whether the ". " at `at` ends a sentence: a capital or a backtick follows, and it is no "e.g."."""
    after = text[at + 2 : at + 3]
    return (after.isupper() or after == "`") and not text[: at + 1].endswith(("e.g.", "i.e."))


def _resolved(flag: Flag) -> Flag:
    """`flag` with its kind and help filled in from the declaration of the key it sets."""
    key = declared_at(JobSpec, flag.path)
    kind = flag.kind or (
        "int"
        if isinstance(key.rule, Int)
        else "number"
        if isinstance(key.rule, Number)
        else key.rule.shape
        if key.rule.shape in ("list", "map")
        else "str"
    )
    if flag.help:
        return flag._replace(kind=kind)
    text = " ".join(t for t in (summary(key), flag.note) if t)
    how = ", ".join([*([SYNTAX[kind]] if kind in SYNTAX else []), *(["repeatable"] if kind in REPEATABLE else [])])
    if how:
        text += f" {how[0].upper()}{how[1:]}."
    if kind in ("int", "number") and isinstance(key.field.default, (int, float)):
        text += f" Default: {key.field.default}."
    return flag._replace(kind=kind, help=text)


def _declared_flags(part: type = JobSpec, prefix: str = "") -> Iterator[Flag]:
    """The flags each key declares with itself (`doc(..., flag(...))`), in declaration order, its
    parts' keys at their place, each with the path of the key it sets."""
    for key in declared(part):
        path = prefix + key.key
        for f in key.field.metadata.get("flags", ()):
            yield f._replace(path=path)
        if isinstance(key.rule, Part):
            yield from _declared_flags(key.rule.cls, path + ".")


SPEC_FLAGS: tuple[Flag, ...] = tuple(_resolved(f) for f in _declared_flags())


# The --help panels, in this order after the command's own options (--config goes first in Job).
HELP_PANELS = (
    "Job",
    "Image and entrypoint",
    "Layout",
    "Resources",
    "Environment and volumes",
    "Placement",
    "Lifecycle",
    "Security",
)
TRAINER_ARGS_HELP = (
    "Arguments for the training module or script, after -- (e.g. -- --epochs 10 --lr 0.1); "
    "`python -m ddpctl_trainer --help` lists the built-in trainer's."
)


def flags_to_layer(values: dict[str, Any], args: list[str] | None) -> dict[str, Any]:
    """Turn the parsed flag values into a camelCase layer (flags that were not given are absent)."""
    layer: dict[str, Any] = {}
    for flag in SPEC_FLAGS:
        raw = values.get(flag.param)
        if raw is None or raw == []:
            continue
        name = flag.names[0]
        if flag.kind not in REPEATABLE:
            if len(raw) > 1:
                given = " ".join(f"{name} {v}" for v in raw)
                raise UsageError(f"{name} was given {len(raw)} times ({given}); give it once")
            raw = raw[0]
        if flag.kind == "layout":
            value: Any = parse_layout(name, raw)
        elif flag.kind == "map":
            value = dict(_split_pair(name, item) for item in raw)
        elif flag.kind == "volumes":
            value = dict(_volume(name, item) for item in raw)
        elif flag.kind == "secretEnv":
            value = dict(_secret_env(name, item) for item in raw)
        elif flag.kind == "tolerations":
            value = [_toleration(name, item) for item in raw]
        elif flag.kind in ("topology", "topologySlice"):
            parsed = (_topology if flag.kind == "topology" else _topology_slice)(name, raw)
            layer.setdefault("topology", {}).update(parsed)  # --topology and --topology-slice share the map
            continue
        elif flag.kind == "shell":
            import shlex  # only --command needs it

            try:
                value = shlex.split(raw)
            except ValueError as exc:
                raise UsageError(f"{name}: cannot split {raw!r}: {exc}; quote it as you would in a shell") from None
        else:
            value = raw
        set_path(layer, flag.path, value)
    if args:
        layer["args"] = list(args)
    return layer


class SpecCommand(TyperCommand):
    """A command with the spec flags. Click >= 8.3 sets `help` in Parameter.__init__ and so wipes
    what Typer < 0.23 set on its arguments just before: put TRAINER_ARGS' help back."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.name == "trainer_args" and not getattr(param, "help", None):
                param.help = TRAINER_ARGS_HELP


IMAGE_WORKDIR = "/workspace"  # the Dockerfile's WORKDIR, where the pods start


def host_script_warning(script: str | None) -> str | None:
    """A warning when `script` names a file on this machine that the pods cannot see: torchrun
    runs it inside the image, so a host path (e.g. /tmp/train.py) must be copied into the image."""
    if not script or not script.startswith("/") or script.startswith(IMAGE_WORKDIR + "/"):
        return None
    if not Path(script).is_file():
        return None  # most likely a path inside the image
    return (
        f"warning: script: {script} is a file on this machine, but the pods run the script inside the image; "
        f"COPY it into the image (e.g. `COPY train.py {IMAGE_WORKDIR}/` in the Dockerfile, then `ddpctl build`) "
        f"and give its path there (--script {IMAGE_WORKDIR}/{Path(script).name})"
    )


def _panel_order(flag: Flag) -> int:
    return HELP_PANELS.index(flag.panel)


def _typer_param(flag: Flag) -> inspect.Parameter:
    # Scalar flags are taken as lists too, so that one given twice (`--gpus 4 --gpus 3`) is an
    # error (flags_to_layer), not silently the last value.
    annotation: Any = {"int": list[int] | None, "number": list[float] | None}.get(flag.kind, list[str] | None)
    option = typer.Option(None, *flag.names, help=flag.help, rich_help_panel=flag.panel, show_default=False)
    return inspect.Parameter(flag.param, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)


def spec_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a command taking `spec_input: SpecInput`: adds --config, every spec flag and ARGS."""
    sig = inspect.signature(func, eval_str=True)  # the command module may use postponed annotations
    own = [p for p in sig.parameters.values() if p.name != "spec_input"]
    extra = [
        inspect.Parameter(
            "config",
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(
                None,
                "--config",
                "-f",
                help="Spec file (default ./ddp.yaml when present).",
                rich_help_panel=HELP_PANELS[0],
                exists=False,
                dir_okay=False,
            ),
            annotation=Path | None,
        ),
        *(_typer_param(f) for f in sorted(SPEC_FLAGS, key=_panel_order)),
        inspect.Parameter(
            "trainer_args",
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Argument(None, help=TRAINER_ARGS_HELP, show_default=False, metavar="[-- TRAINER_ARGS...]"),
            annotation=list[str] | None,
        ),
    ]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        config = kwargs.pop("config", None)
        trainer_args = kwargs.pop("trainer_args", None)
        values = {f.param: kwargs.pop(f.param, None) for f in SPEC_FLAGS}
        spec_input = SpecInput(flags=flags_to_layer(values, trainer_args), config=config)
        return func(*args, spec_input=spec_input, **kwargs)

    positional = [p for p in own if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = [p for p in own if p.kind == p.KEYWORD_ONLY]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in positional + keyword] + extra
    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]  # read by inspect (PEP 362)
    # Typer takes each parameter's type from __signature__ (resolved above) unless the function's
    # type hints name it: none, rather than the wrapped module's strings (which do not resolve
    # here) or the resolved types again (which get_type_hints would walk once more: ~1 ms for ~50).
    wrapper.__annotations__ = {}
    del wrapper.__wrapped__  # make inspect use __signature__, not the wrapped function's
    return wrapper
