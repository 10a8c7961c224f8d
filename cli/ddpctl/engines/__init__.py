"""One module per engine (job, pytorchjob, jobset, trainjob) behind one interface (`base.Engine`).

`engine_for(target)` is the only way the rest of ddpctl learns how a target names, wires, ranks
and finds its pods, and `plan_for(spec)` the way it gets a spec's Plan. Adding an engine: a module
here with an `Engine` subclass and `ENGINE`, its entry in `ENGINES` and the spec's `TARGETS`, and
its template `templates/<target>.yaml.j2` (plus the chart's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpctl.engines import job, jobset, pytorchjob, trainjob
from ddpctl.engines.base import Engine, WorkloadKind
from ddpctl.spec.schema import TARGETS

if TYPE_CHECKING:
    from ddpctl.plan import Plan
    from ddpctl.spec.model import JobSpec

#: every engine by target name, in the spec's order of TARGETS (the order `--help` and the docs list them)
ENGINES: dict[str, Engine] = {e.target: e for e in (job.ENGINE, pytorchjob.ENGINE, jobset.ENGINE, trainjob.ENGINE)}
#: the order `--target auto` prefers engines in: the most capable operator first, the plain Job last
AUTO_PREFERENCE: tuple[str, ...] = ("trainjob", "pytorchjob", "jobset", "job")


def engine_for(target: str) -> Engine:
    """The engine of a (validated) target name."""
    return ENGINES[target]


def engine_of(plan: Plan) -> Engine:
    """The engine a plan was made by (for rendering and `--explain`; the Plan holds no reference to it)."""
    return ENGINES[plan.spec.target]


def plan_for(spec: JobSpec) -> Plan:
    """The spec's Plan on its target's engine (a SpecError when the engine cannot run the spec)."""
    return ENGINES[spec.target].plan(spec)


__all__ = ["AUTO_PREFERENCE", "ENGINES", "TARGETS", "Engine", "WorkloadKind", "engine_for", "engine_of", "plan_for"]
