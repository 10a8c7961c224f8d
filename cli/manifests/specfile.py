"""The commented ddp.yaml that `ddpctl init` writes; its keys are JobSpec's camelCase form."""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

from ddpctl.manifests.yamlsafe import dump_portable
from ddpctl.spec.model import JobSpec
from ddpctl.spec.serial import camel
from ddpctl.spec.sources import describe_sources

WRAP = 100  # columns of the comments, as in the chart's values.yaml


def field_docs() -> dict[str, str]:
    """Each key's comment: the doc its JobSpec field carries (the chart's values.yaml says the same)."""
    return {camel(f.name): str(f.metadata["doc"]) for f in dataclasses.fields(JobSpec) if "doc" in f.metadata}


def _dump(key: str, value: Any) -> str:
    # Portable quoting: a ddp.yaml may also be used as Helm values for charts/ddp-job.
    return dump_portable({key: value})


# Keys whose absence means something: `submit` picks the engine the cluster has (target) and uses
# the kubeconfig context's namespace. `init` leaves them commented out unless they were given.
CONTEXT_DEPENDENT = {
    "target": "unset: `submit` picks the engine the cluster has, `render` uses job",
    "namespace": "unset: the kubeconfig context's namespace (`render` uses default)",
}


def commented_spec_yaml(spec: JobSpec, explicit: frozenset[str] = frozenset()) -> str:
    """Every key with its comment; `explicit` names the keys the user gave (kept live)."""
    lines = [
        "# ddpctl job spec. Precedence: " + describe_sources() + ".",
        "# Render with `ddpctl render`, run here with `ddpctl run --local`, submit with `ddpctl submit`.",
        "",
    ]
    docs = field_docs()
    for key, value in spec.to_dict().items():
        lines += textwrap.wrap(docs[key], WRAP, initial_indent="# ", subsequent_indent="# ")
        text = _dump(key, value).rstrip("\n")
        if key in CONTEXT_DEPENDENT and key not in explicit:
            lines.append(f"# ({CONTEXT_DEPENDENT[key]})")
            text = "\n".join("# " + line for line in text.splitlines())
        lines.append(text)
    return "\n".join(lines) + "\n"
