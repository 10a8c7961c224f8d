"""The commented ddp.yaml that `ddpctl init` writes; its keys are JobSpec's camelCase form."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Mapping
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
# the kubeconfig context's namespace.
CONTEXT_DEPENDENT = {
    "target": "unset: `submit` picks the engine the cluster has, `render` uses job",
    "namespace": "unset: the kubeconfig context's namespace (`render` uses default)",
}


def commented_spec_yaml(spec: JobSpec, chosen: Mapping[str, Any] | None = None) -> str:
    """Every key with its comment; only the keys the user chose (`chosen`, the flags and files
    given: for a map such as rendezvous, only its keys given) are live, the rest are their
    defaults commented out, so the file pins nothing the user did not choose (a default port or
    module stays a default, and adding `script:` needs no `module: null`)."""
    chosen = chosen or {}
    lines = [
        "# ddpctl job spec. Precedence: " + describe_sources() + ".",
        "# Render with `ddpctl render`, run here with `ddpctl run --local`, submit with `ddpctl submit`.",
        "# Only what was chosen is set; the other keys show their defaults, commented out.",
        "",
    ]
    docs = field_docs()
    for key, value in spec.to_dict().items():
        lines += textwrap.wrap(docs[key], WRAP, initial_indent="# ", subsequent_indent="# ")
        if key in chosen:
            given = chosen[key]
            if isinstance(value, dict) and isinstance(given, Mapping) and key not in FREE_MAPS:
                value = {k: v for k, v in value.items() if k in given}
            lines.append(_dump(key, value).rstrip("\n"))
            continue
        if key in CONTEXT_DEPENDENT:
            lines.append(f"# ({CONTEXT_DEPENDENT[key]})")
        lines += ["# " + line for line in _dump(key, value).rstrip("\n").splitlines()]
    return "\n".join(lines) + "\n"


# Maps whose keys are the user's own (env, labels, ...): chosen whole, not key by key.
FREE_MAPS = frozenset({"env", "secretEnv", "volumes", "nodeSelector", "affinity", "labels", "annotations"})
