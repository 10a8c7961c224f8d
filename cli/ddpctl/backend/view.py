"""How a `JobStatus` and a list of `JobSummary` look: one view for every backend."""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import Enum

import yaml

from ddpctl.backend.base import JobStatus, JobSummary
from ddpctl.backend.stragglers import recovered
from ddpctl_trainer.protocol import current_stragglers, duration_text, preflight_line

LABEL_WIDTH = 13  # `Name:        ` : kubectl describe's column


class ListFormat(str, Enum):
    table = "table"
    wide = "wide"
    yaml = "yaml"
    json = "json"
    name = "name"


def field_line(label: str, value: str) -> str:
    return f"{label + ':':<{LABEL_WIDTH}}{value}"


def progress_phrase(status: JobStatus) -> str | None:
    """`epoch 3/3 step 254/313 (94%), loss 0.1234, 424.6 samples/s, ETA 2m05s (rank 0, 12s ago)`."""
    p = status.progress
    if p is None:
        return None
    parts = [f"epoch {p.epoch}/{p.epochs} step {p.step}/{p.steps} ({p.percent:.0f}%)"]
    if p.loss is not None:
        parts.append(f"loss {p.loss:.4f}")
    if p.samples_per_s is not None:
        parts.append(f"{p.samples_per_s:.1f} samples/s")
    eta = status.eta_s
    if eta is not None and status.state not in ("Succeeded", "Failed"):
        parts.append(f"ETA {duration_text(eta)}")
    seen = "rank 0" + (f", {duration_text(status.progress_age_s)} ago" if status.progress_age_s is not None else "")
    return ", ".join(parts) + f" ({seen})"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["   ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    return "\n".join(lines)


def status_text(status: JobStatus) -> list[str]:
    """The lines of `ddpctl status NAME`: the same fields in the same order for every backend (rank
    0's preflight report and straggler lines among them), then a row per node."""
    out = [field_line("Name", status.name)]
    out += [field_line(k, v) for k, v in status.head]
    out.append(field_line("Backend", f"{status.backend.value}: {status.where}"))
    out.append(field_line("State", status.state))
    out.append(field_line("Nodes", status.nodes))
    phrase = progress_phrase(status)
    if phrase:
        out.append(field_line("Progress", phrase))
    out += [field_line(k, v) for k, v in status.lines]
    out += preflight_lines(status.preflight)
    out += straggler_lines(status.stragglers)
    if status.rows:
        out.append("")
        out.append(
            table(
                ["NODE", status.name_column, "PHASE", "RESTARTS", "REASON"],
                [
                    [
                        "?" if r.node is None else str(r.node),
                        r.name,
                        r.phase,
                        str(r.restarts) + (f" (last: {r.last})" if r.last else ""),
                        r.reason,
                    ]
                    for r in status.rows
                ],
            )
        )
    elif status.no_rows:
        out.append("")
        out.append(status.no_rows)
    return out


def preflight_lines(report: Sequence[str]) -> list[str]:
    """The preflight report under `Preflight:` (its verdict), then its table, figures and findings
    in the value's column, as rank 0 printed them (without its tags)."""
    parsed = [found for found in map(preflight_line, report) if found is not None]
    if not parsed:
        return []
    verdict = next((body for kind, body in reversed(parsed) if kind == "verdict"), "(the report is incomplete)")
    out = [field_line("Preflight", verdict)]
    indent = " " * LABEL_WIDTH
    out += [indent + ("finding: " if kind == "finding" else "") + body for kind, body in parsed if kind != "verdict"]
    return out


def straggler_lines(lines: Sequence[str]) -> list[str]:
    """The nodes rank 0 names as stragglers now, under `Stragglers:` (`none now` when every one it
    named recovered), then those that recovered, one line each."""
    current, back = current_stragglers(lines), recovered(lines)
    if not current and not back:
        return []
    texts = [n.text for n in current] or ["none now"]
    texts += [f"recovered: {n.text}" for n in back]
    indent = " " * LABEL_WIDTH
    return [field_line("Stragglers", texts[0]), *(indent + t for t in texts[1:])]


def machine(data: object, as_json: bool) -> str:
    """`-o json` / `-o yaml` of any plain structure."""
    if as_json:
        return json.dumps(data, indent=2)
    return yaml.safe_dump(data, sort_keys=False).rstrip("\n")


def list_text(jobs: Sequence[JobSummary], output: ListFormat, *, all_namespaces: bool, empty: str) -> str:
    """`ddpctl list` in each of its formats; `empty` is the line for no jobs (table formats)."""
    if output in (ListFormat.json, ListFormat.yaml):
        return machine(
            {"apiVersion": "v1", "kind": "List", "items": [dict(j.raw) for j in jobs], "metadata": {}},
            output is ListFormat.json,
        )
    if output is ListFormat.name:
        return "\n".join(j.ref for j in jobs)
    if not jobs:
        return empty
    queued = any(j.admission is not None for j in jobs)
    recovered = any(j.recoveries for j in jobs)
    header = (
        (["NAMESPACE"] if all_namespaces else [])
        + ["NAME", "TARGET", "NODES", "STATE"]
        + (["ADMISSION"] if queued else [])
        + (["RECOVERIES"] if recovered else [])
        + ["AGE"]
    )
    if output is ListFormat.wide:
        header += ["KIND", "IMAGE"]
    rows = []
    for j in jobs:
        row = [*([j.namespace] if all_namespaces else []), j.name, j.target, j.nodes, j.state]
        row += [j.admission or "-"] if queued else []
        row += [str(j.recoveries) if j.recoveries is not None else "-"] if recovered else []
        row.append(j.age)
        if output is ListFormat.wide:
            row += [j.ref, j.image]
        rows.append(row)
    return table(header, rows)
