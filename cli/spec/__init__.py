"""The job as the user asked for it: the frozen `JobSpec`, its checks, and where it comes from.

`model` holds the dataclasses and their validation (each error names the field and the fix),
`sources` merges a spec from its layers (defaults < ddp.yaml < DDPCTL_* env < flags), `kueue`
names the Kueue API fields a spec can ask for.
"""

from ddpctl.spec.model import JobSpec, NodeGroup, Rendezvous, Resources, SecretKeyRef, Topology, Volume
from ddpctl.spec.schema import TARGETS
from ddpctl.spec.serial import camel

__all__ = ["TARGETS", "JobSpec", "NodeGroup", "Rendezvous", "Resources", "SecretKeyRef", "Topology", "Volume", "camel"]
