"""`ddpctl render --helm-values`: the spec as values for charts/ddp-job, so a CLI spec moves into Git."""

from __future__ import annotations

import yaml

from ddpctl.spec import JobSpec


def helm_values(spec: JobSpec) -> dict:
    """The chart's values use the same camelCase keys as ddp.yaml: one schema, two front ends."""
    return spec.to_dict()


def helm_values_yaml(spec: JobSpec) -> str:
    return yaml.safe_dump(helm_values(spec), sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096)
