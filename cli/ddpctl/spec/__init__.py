"""The job as the user asked for it: the frozen `JobSpec`, its checks, and where it comes from.

`model` declares the JobSpec's keys and `parts` those of its nested parts (each key's type, default,
doc and rule, stated once with `fields`), `rules` checks what spans keys, `serial` reads and writes
the camelCase form, `sources` merges a spec from its layers (defaults < ddp.yaml < DDPCTL_* env <
flags), `kueue` names the Kueue API fields a spec can ask for.
"""

from ddpctl.spec.model import (
    JobSpec,
    NodeGroup,
    Preflight,
    Rendezvous,
    Resources,
    SecretKeyRef,
    Stragglers,
    Topology,
    Volume,
)
from ddpctl.spec.schema import TARGETS
from ddpctl.spec.serial import camel

__all__ = [
    "TARGETS",
    "JobSpec",
    "NodeGroup",
    "Preflight",
    "Rendezvous",
    "Resources",
    "SecretKeyRef",
    "Stragglers",
    "Topology",
    "Volume",
    "camel",
]
