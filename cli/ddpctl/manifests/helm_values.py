"""`ddpctl render --helm-values`: the spec as values for charts/ddp-job, so a CLI spec moves into Git.

The chart's values are the JobSpec's camelCase dict (the keys of ddp.yaml): one schema, two front
ends. `dump_portable` writes it so that Helm's Go YAML parser reads it back as PyYAML does.
"""

from __future__ import annotations

from typing import Any

from ddpctl.manifests.yamlsafe import dump_portable
from ddpctl.spec.model import JobSpec


def helm_values(spec: JobSpec) -> dict[str, Any]:
    """The chart's values: exactly `spec.to_dict()` (camelCase, every key, the defaults included)."""
    return spec.to_dict()


def helm_values_yaml(spec: JobSpec) -> str:
    """The values file, in JobSpec's key order; Helm and PyYAML both read it back as `helm_values(spec)`."""
    header = (
        "# Values for charts/ddp-job, written by `ddpctl render --helm-values`.\n"
        "# `helm template charts/ddp-job -f THIS_FILE` renders the same objects as `ddpctl render`.\n"
    )
    return header + dump_portable(helm_values(spec))
