"""What a spec plus its engine derive: the `Plan` (world size, the node table, names, the rank-0
address, each pod's env and entrypoint, failure rules), made by `engine.plan(spec)`.

Render, explain, the runners and the cluster commands read the Plan; none of them derives a value
of its own or asks the target by name.
"""

from ddpctl.plan.layout import GroupPlan, Node
from ddpctl.plan.plan import Plan

__all__ = ["GroupPlan", "Node", "Plan"]
