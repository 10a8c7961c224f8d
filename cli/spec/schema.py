"""The spec's vocabulary: the values a key may take, its limits and defaults, and the JSON-Schema
pieces each field's contract is written with (`doc`). The chart's values.yaml and
values.schema.json and the docs' spec reference are generated from these (tools/)."""

from __future__ import annotations

import re
from typing import Any

from ddpctl.spec.names import (
    CONTROL_CHARS,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    LABEL_NAME,
    MAX_DNS_LABEL,
    QUANTITY,
    LazyPattern,
)
from ddpctl_trainer import protocol

# The engines a spec may name, in the order `--help` and the docs list them; each is described by
# its module in ddpctl.engines, which a test keeps in step with this tuple.
TARGETS: tuple[str, ...] = ("job", "pytorchjob", "jobset", "trainjob")


BACKENDS: tuple[str, ...] = ("auto", "nccl", "gloo")
RDZV_MODES: tuple[str, ...] = ("auto", "static", "c10d")
PULL_POLICIES: tuple[str, ...] = ("Always", "IfNotPresent", "Never")
RESTART_POLICIES: tuple[str, ...] = ("Never", "OnFailure", "ExitCode")
POD_SECURITY: tuple[str, ...] = ("restricted", "baseline")
TRAINER_MODULE = protocol.TRAINER_MODULE
DEFAULT_BACKOFF_LIMIT = 3
DEFAULT_IMAGE = "ddpctl-trainer:latest"
MAX_NODES = 1024
TOLERATION_OPERATORS: tuple[str, ...] = ("Equal", "Exists")
TAINT_EFFECTS: tuple[str, ...] = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
AFFINITY_KINDS: tuple[str, ...] = ("nodeAffinity", "podAffinity", "podAntiAffinity")
SHM_MOUNT = "/dev/shm"  # noqa: S108 - a mount path in the pod, not a temporary file


# Preemption: the pods' grace period by default, its least value, and how much of it
# torchrun leaves for itself after its workers' shutdown wait.
DEFAULT_GRACE_PERIOD = 120


TRAINER_STALL_TIMEOUT = protocol.STALL_TIMEOUT_S  # --stall-timeout's default: collectiveTimeout must exceed it
TRAINER_COLLECTIVE_TIMEOUT = protocol.COLLECTIVE_TIMEOUT_S  # --timeout-s's default: stallTimeout must stay below it
GRACE_MARGIN = 10
MIN_GRACE_PERIOD = GRACE_MARGIN + 5


def doc(text: str, **schema: Any) -> dict[str, Any]:
    """A field's contract, kept on the field: `text` documents the key (the comments of
    charts/ddp-job/values.yaml) and `schema` holds its JSON-Schema keywords (values.schema.json),
    written with the constants `_validate` checks against. `tools/chart_contract.py` generates both
    files from these (`make chart-contract`); the JSON type comes from the field's annotation."""
    return {"doc": text, "schema": schema}


def no_chars(chars: str, *, min_one: bool = False) -> str:
    """A JSON-Schema pattern for a string without any of the regex class `chars`."""
    return f"^[^{chars}]{'+' if min_one else '*'}$"


NO_NUL = no_chars(r"\x00")
QUANTITY_PATTERN = re.sub(r"\(\?P<\w+>", "(", QUANTITY.pattern)  # JSON Schema (ECMA 262) has no (?P<name>...)
CONTROL_CLASS = CONTROL_CHARS.pattern[1:-1]
SECRET_NAME = {"type": "string", "maxLength": MAX_DNS_LABEL, "pattern": DNS1123_LABEL.pattern}


def bounded(regex: LazyPattern) -> str:
    """`regex` as a JSON-Schema pattern of at most MAX_DNS_LABEL characters, where no maxLength can
    say so (map keys): its one `*` becomes `{0,61}` (the first and last characters are fixed)."""
    assert regex.pattern.count("*") == 1, regex.pattern
    return regex.pattern.replace("*", f"{{0,{MAX_DNS_LABEL - 2}}}")


LABEL_KEY_PATTERN = f"^({DNS1123_SUBDOMAIN.pattern[1:-1]}/)?{bounded(LABEL_NAME)[1:-1]}$"


TOLERATION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "key": {"type": "string", "pattern": NO_NUL},
        "operator": {"type": "string", "enum": TOLERATION_OPERATORS},
        "value": {"type": "string", "pattern": NO_NUL},
        "effect": {"type": "string", "enum": TAINT_EFFECTS},
        "tolerationSeconds": {"type": "integer", "minimum": 0},
    },
}


def string_map(value: dict[str, Any], keys: str = LABEL_KEY_PATTERN) -> dict[str, Any]:
    """A map whose keys match `keys` and whose values match `value`; any other key is refused."""
    return {"patternProperties": {keys: value}, "additionalProperties": False}


# Where the ddpctl trainer's checkpoints may go besides a volume: an object store URL whose scheme the
# trainer's client reads (`scheme://BUCKET/PREFIX`: no credentials, query or spaces in it).
CHECKPOINT_URL_PATTERN = (
    rf"^({'|'.join(protocol.CHECKPOINT_URL_SCHEMES)})://{protocol.BUCKET.pattern[1:-1]}(/[^\s{CONTROL_CLASS}?#@]*)?$"
)
