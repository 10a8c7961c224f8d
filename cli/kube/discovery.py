"""Which training engines the cluster serves, and `--target auto`.

Preference: TrainJob when trainer.kubeflow.org/v1alpha1 trainjobs are served AND the
`torch-distributed` ClusterTrainingRuntime exists; else PyTorchJob (kubeflow.org/v1); else JobSet
(jobset.x-k8s.io/v1alpha2); else the plain Indexed Job, which every cluster serves.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpctl.kube import errors as E
from ddpctl.kube.config import Cluster
from ddpctl.kube.kinds import JOBSET, PYTORCHJOB, RUNTIME, TORCH_RUNTIME, TRAINJOB, WORKLOADS, Kind


@dataclass(frozen=True)
class Engines:
    """What discovery found: the workload kinds served and whether the torch runtime exists."""

    served: frozenset[str]  # targets
    runtime: bool | None  # the torch-distributed ClusterTrainingRuntime exists (None: could not tell)

    def usable(self, target: str) -> bool:
        if target == "trainjob":
            return "trainjob" in self.served and self.runtime is True
        return target in self.served


def discover(cluster: Cluster) -> Engines:
    op = E.Op("discover", None)
    _, groups = cluster.call("GET", "/apis", op)
    versions = {
        g.get("name"): {v.get("version") for v in g.get("versions") or []} for g in (groups or {}).get("groups") or []
    }
    served = {"job"}
    for kind in (TRAINJOB, PYTORCHJOB, JOBSET):
        if kind.version not in versions.get(kind.group, set()):
            continue
        try:
            _, resources = cluster.call("GET", f"/apis/{kind.group}/{kind.version}", op)
        except E.ApiError as exc:
            if exc.code == 404:
                continue
            raise
        if kind.target and any(r.get("name") == kind.plural for r in (resources or {}).get("resources") or []):
            served.add(kind.target)
    runtime: bool | None = False
    if "trainjob" in served:
        try:
            runtime = cluster.get_or_none(RUNTIME, TORCH_RUNTIME, None) is not None
        except E.ApiError as exc:
            if exc.code != 403:
                raise
            runtime = None  # not allowed to read cluster-scoped runtimes: cannot tell
    return Engines(frozenset(served), runtime)


def pick(engines: Engines) -> tuple[str, str]:
    """(target, why) for `--target auto`."""
    if engines.usable("trainjob"):
        return "trainjob", (
            f"{TRAINJOB.resource}/{TRAINJOB.version} is served and the {TORCH_RUNTIME} "
            "ClusterTrainingRuntime exists (Kubeflow Trainer v2)"
        )
    skipped = []
    if "trainjob" in engines.served:
        skipped.append(
            f"{TRAINJOB.resource} is served but the {TORCH_RUNTIME} ClusterTrainingRuntime "
            + ("was not found" if engines.runtime is False else "cannot be read")
        )
    for kind in (PYTORCHJOB, JOBSET):
        if kind.target and kind.target in engines.served:
            why = f"{kind.resource}/{kind.version} is served ({kind.engine})"
            return kind.target, why + (f"; {skipped[0]}" if skipped else "")
    return "job", (
        "no training CRD (TrainJob, PyTorchJob, JobSet) is served, so a plain Indexed Job and "
        "headless Service" + (f"; {skipped[0]}" if skipped else "")
    )


def candidates(engines: Engines) -> list[tuple[str, str]]:
    """Every usable target, best first, each with why (`--target auto` takes the first the spec fits)."""
    order = ["trainjob", "pytorchjob", "jobset", "job"]
    first, why = pick(engines)
    out = [(first, why)]
    for target in order[order.index(first) + 1 :]:  # each target once, only those after the first
        if engines.usable(target):
            out.append((target, f"the next engine this cluster serves ({target})"))
    return out


def require(engines: Engines, target: str) -> None:
    """An explicitly chosen target must be served: say which one would work instead."""
    if engines.usable(target):
        return
    from ddpctl.errors import ClusterError

    kind: Kind = next(k for k in WORKLOADS if k.target == target)
    alternative, _ = pick(engines)
    if target == "trainjob" and "trainjob" in engines.served:
        problem = (
            f"the {TORCH_RUNTIME} ClusterTrainingRuntime "
            + ("does not exist" if engines.runtime is False else "cannot be read")
            + " (Kubeflow Trainer v2 installs it with its runtimes)"
        )
    else:
        problem = f"the cluster does not serve {kind.resource}/{kind.version} ({kind.engine} is not installed)"
    raise ClusterError(
        f"--target {target}: {problem}; use --target {alternative}, which this cluster supports, or --target auto"
    )


__all__ = ["Engines", "candidates", "discover", "pick", "require"]
