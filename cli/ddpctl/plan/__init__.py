"""What a spec plus its engine derive: the `Plan` (world size, the node table, names, the rank-0
address, each pod's env and entrypoint, failure rules), made by `engine.plan(spec)` from the
spec's `Layout` (what it derives on any engine).

Render, explain, the runners and the cluster commands read the Plan; none of them derives a value
of its own or asks the target by name.
"""

from ddpctl.plan.layout import GroupPlan, Layout, Node
from ddpctl.plan.plan import NEVER, Plan, RetryRule

__all__ = ["NEVER", "GroupPlan", "Layout", "Node", "Plan", "RetryRule"]
