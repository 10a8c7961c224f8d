"""One module per engine (job, pytorchjob, jobset, trainjob) behind one interface (`base.Engine`).

`engine_for(target)` is the only way the rest of ddpctl learns how a target names, wires, ranks
and finds its pods. Adding an engine: a module here with an `Engine` subclass and `ENGINE`, its
entry in `ENGINES`, and its template `templates/<target>.yaml.j2` (plus the chart's copy).
"""

from __future__ import annotations

from ddpctl.engines import job, jobset, pytorchjob, trainjob
from ddpctl.engines.base import Engine, WorkloadKind

#: every engine by target name; the order is the order `--help` and the docs list them
ENGINES: dict[str, Engine] = {e.target: e for e in (job.ENGINE, pytorchjob.ENGINE, jobset.ENGINE, trainjob.ENGINE)}
TARGETS: tuple[str, ...] = tuple(ENGINES)
#: the order `--target auto` prefers engines in: the most capable operator first, the plain Job last
AUTO_PREFERENCE: tuple[str, ...] = ("trainjob", "pytorchjob", "jobset", "job")


def engine_for(target: str) -> Engine:
    """The engine of a (validated) target name."""
    return ENGINES[target]


__all__ = ["AUTO_PREFERENCE", "ENGINES", "TARGETS", "Engine", "WorkloadKind", "engine_for"]
