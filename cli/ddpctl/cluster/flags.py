"""Typer options shared by the cluster commands (kubectl's names), and how their durations read.

Each `*_option()` returns Typer's option marker (Any), used as a parameter's default value."""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

import typer

from ddpctl.errors import UsageError
from ddpctl.records import record

PANEL = "Cluster"


def kubeconfig_option() -> Any:
    return typer.Option(
        None,
        "--kubeconfig",
        help="Path of the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config; in a pod: in-cluster config).",
        rich_help_panel=PANEL,
        show_default=False,
    )


def context_option() -> Any:
    return typer.Option(
        None,
        "--context",
        help="kubeconfig context to use (default: its current-context).",
        rich_help_panel=PANEL,
        show_default=False,
    )


def namespace_option() -> Any:
    return typer.Option(
        None,
        "--namespace",
        "-n",
        help="Namespace (default: DDPCTL_NAMESPACE or ddp.yaml's namespace, else the context's).",
        rich_help_panel=PANEL,
        show_default=False,
    )


def rank_option(precondition: str = "") -> Any:
    """--rank of `logs` and `submit --follow`: one text, so both say what a node rank is."""
    return typer.Option(
        None,
        "--rank",
        help=f"{precondition + 'only' if precondition else 'Only'} node N's logs: N is the node rank, the pod's "
        "index in the job (node N runs the ranks after those of nodes 0..N-1: N*P to N*P+P-1 with P processes "
        "per node, --procs or --gpus; with --layout, each group's own P); in an elastic (c10d rendezvous) job "
        "it is only the pod index: torchrun numbers the nodes at rendezvous.",
        show_default=False,
    )


def request_timeout_option() -> Any:
    return typer.Option(
        None,
        "--request-timeout",
        help="How long to wait for the API server to answer a request (e.g. 10s, 2m; default "
        "$DDPCTL_REQUEST_TIMEOUT, else 30s).",
        rich_help_panel=PANEL,
        show_default=False,
    )


def timeout_option() -> Any:
    return typer.Option(
        None,
        "--timeout",
        help="Give up waiting after this long (90s, 30m, 1h30m) and exit 3; the job keeps running.",
        show_default=False,
    )


class Format(str, Enum):
    yaml = "yaml"
    json = "json"


class ListFormat(str, Enum):
    table = "table"
    wide = "wide"
    yaml = "yaml"
    json = "json"
    name = "name"


class DryRun(str, Enum):
    none = "none"
    client = "client"
    server = "server"


@record
class SubmitOptions:
    """`ddpctl submit`'s own flags (the spec's come with the SpecInput), as one value."""

    dry_run: DryRun = DryRun.none
    output: Format | None = None
    build: bool = False
    replace: bool = False
    wait: bool = False
    follow: bool = False
    rank: int | None = None
    timeout: str | None = None


def parse_duration(text: str | None, flag: str = "--timeout") -> float | None:
    """`90`, `90s`, `5m`, `1h30m`, `0.5s`, `500ms` -> seconds; None/empty/0 -> no limit."""
    if text is None or str(text).strip() in ("", "0"):
        return None
    t = str(text).strip()
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", t):
        return float(t)
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)(ms|h|m|s)", t)  # `ms` before `m`: 500ms is not 500m + s
    if not parts or "".join(n + u for n, u in parts) != t:
        raise UsageError(f"{flag}: {text!r} is not a duration; write it like 90s, 30m or 1h30m")
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * scale[u] for n, u in parts)
