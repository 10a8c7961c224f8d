"""Which training engines the cluster serves, and `--target auto`.

Preference (ddpctl.engines.AUTO_PREFERENCE): TrainJob when trainer.kubeflow.org/v1alpha1
trainjobs are served AND the `torch-distributed` ClusterTrainingRuntime exists; else PyTorchJob
(kubeflow.org/v1); else JobSet (jobset.x-k8s.io/v1alpha2); else the plain Indexed Job, which every
cluster serves. What each engine needs (its kind, a runtime object, nothing) is asked of its engine.
"""

from __future__ import annotations

from ddpctl.cluster import errors as E
from ddpctl.cluster.config import Cluster
from ddpctl.cluster.kinds import BY_TARGET, RUNTIME, WORKLOADS, Kind
from ddpctl.engines import AUTO_PREFERENCE, engine_for
from ddpctl.records import record


@record
class Engines:
    """What discovery found: the workload kinds served and whether the runtime an engine needs exists."""

    served: frozenset[str]  # targets
    runtime: bool | None  # the needed runtime (torch-distributed) exists (None: could not tell)

    def usable(self, target: str) -> bool:
        if engine_for(target).runtime:
            return target in self.served and self.runtime is True
        return target in self.served


def discover(cluster: Cluster) -> Engines:
    op = E.Op("discover", None)
    _, groups = cluster.call("GET", "/apis", op)
    versions = {
        g.get("name"): {v.get("version") for v in g.get("versions") or []} for g in (groups or {}).get("groups") or []
    }
    served = {t for t in AUTO_PREFERENCE if engine_for(t).builtin}
    for target in AUTO_PREFERENCE:
        kind = BY_TARGET[target]
        if target in served or kind.version not in versions.get(kind.group, set()):
            continue
        try:
            _, resources = cluster.call("GET", f"/apis/{kind.group}/{kind.version}", op)
        except E.ApiError as exc:
            if exc.code == 404:
                continue
            raise
        if any(r.get("name") == kind.plural for r in (resources or {}).get("resources") or []):
            served.add(target)
    runtime: bool | None = False
    needed = [r for r in (engine_for(t).runtime for t in served) if r]
    if needed:
        try:
            runtime = cluster.get_or_none(RUNTIME, needed[0], None) is not None
        except E.ApiError as exc:
            if exc.code != 403:
                raise
            runtime = None  # not allowed to read cluster-scoped runtimes: cannot tell
    return Engines(frozenset(served), runtime)


def _runtime_missing(engines: Engines, target: str) -> str:
    name = engine_for(target).runtime
    return f"the {name} ClusterTrainingRuntime " + ("was not found" if engines.runtime is False else "cannot be read")


def pick(engines: Engines) -> tuple[str, str]:
    """(target, why) for `--target auto`: the first usable engine in AUTO_PREFERENCE."""
    skipped: list[str] = []
    for target in AUTO_PREFERENCE:
        engine, kind = engine_for(target), BY_TARGET[target]
        if engines.usable(target):
            if engine.runtime:
                why = (
                    f"{kind.resource}/{kind.version} is served and the {engine.runtime} "
                    f"ClusterTrainingRuntime exists ({kind.installed_by})"
                )
            elif engine.builtin:
                crds = ", ".join(k.kind for k in WORKLOADS if not engine_for(k.target).builtin)  # type: ignore[arg-type]
                why = f"no training CRD ({crds}) is served, so a plain Indexed Job and headless Service"
            else:
                why = f"{kind.resource}/{kind.version} is served ({kind.installed_by})"
            return target, why + (f"; {skipped[0]}" if skipped else "")
        if engine.runtime and target in engines.served:
            skipped.append(f"{kind.resource} is served but {_runtime_missing(engines, target)}")
    raise AssertionError("an engine that every cluster serves is always usable")


def candidates(engines: Engines) -> list[tuple[str, str]]:
    """Every usable target, best first, each with why (`--target auto` takes the first the spec fits)."""
    first, why = pick(engines)
    out = [(first, why)]
    for target in AUTO_PREFERENCE[AUTO_PREFERENCE.index(first) + 1 :]:  # each target once, only those after the first
        if engines.usable(target):
            out.append((target, f"the next engine this cluster serves ({target})"))
    return out


def require(engines: Engines, target: str) -> None:
    """An explicitly chosen target must be served: say which one would work instead."""
    if engines.usable(target):
        return
    from ddpctl.errors import ClusterError

    kind: Kind = BY_TARGET[target]
    runtime = engine_for(target).runtime
    alternative, _ = pick(engines)
    if runtime and target in engines.served:
        problem = (
            f"the {runtime} ClusterTrainingRuntime "
            + ("does not exist" if engines.runtime is False else "cannot be read")
            + f" ({kind.installed_by} installs it with its runtimes)"
        )
    else:
        problem = f"the cluster does not serve {kind.resource}/{kind.version} ({kind.installed_by} is not installed)"
    raise ClusterError(
        f"--target {target}: {problem}; use --target {alternative}, which this cluster supports, or --target auto"
    )


__all__ = ["Engines", "candidates", "discover", "pick", "require"]
