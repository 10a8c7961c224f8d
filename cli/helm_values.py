"""`ddpctl render --helm-values`: the spec as values for charts/ddp-job, so a CLI spec moves into Git.

The chart's values are the JobSpec's camelCase dict (the keys of ddp.yaml): one schema, two front
ends. Helm reads values files with a Go YAML parser whose rules differ from PyYAML's: `1e3`,
`0o17`, `y` and `n` are numbers or booleans to Go but plain strings to PyYAML, and a raw U+0085 is a
line break to one and not the other. So every string that is not plainly a word or a path is
written double-quoted, with escapes, and reads back identically with either parser.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ddpctl.spec import JobSpec

# Plain scalars only for strings no YAML 1.1/1.2 parser can take for anything but a string.
_PLAIN_SAFE = re.compile(r"^[A-Za-z_/][-A-Za-z0-9_./@]*$")
_YAML_WORDS = frozenset({"y", "yes", "n", "no", "true", "false", "on", "off", "null"})


class _ValuesDumper(yaml.SafeDumper):
    """Block-style values; ambiguous strings double-quoted."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> Any:
    plain = bool(_PLAIN_SAFE.match(data)) and data.lower() not in _YAML_WORDS
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=None if plain else '"')


_ValuesDumper.add_representer(str, _represent_str)


def helm_values(spec: JobSpec) -> dict[str, Any]:
    """The chart's values: exactly `spec.to_dict()` (camelCase, every key, the defaults included)."""
    return spec.to_dict()


def helm_values_yaml(spec: JobSpec) -> str:
    """The values file, in JobSpec's key order; Helm and PyYAML both read it back as `helm_values(spec)`."""
    header = (
        "# Values for charts/ddp-job, written by `ddpctl render --helm-values`.\n"
        "# `helm template charts/ddp-job -f THIS_FILE` renders the same objects as `ddpctl render`.\n"
    )
    body = yaml.dump(
        helm_values(spec),
        Dumper=_ValuesDumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=4096,
    )
    return header + body
