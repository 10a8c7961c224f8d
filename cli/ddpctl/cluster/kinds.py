"""The kinds ddpctl creates and reads; a workload kind's engine (`Kind.engine`, ddpctl.engines) has
the static facts that ddpctl.cluster.workloads reads its live objects and pods by."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ddpctl.console import age_text
from ddpctl.engines import AUTO_PREFERENCE, engine_for
from ddpctl.engines.base import INSTANCE as INSTANCE
from ddpctl.engines.base import MANAGED_BY as MANAGED_BY
from ddpctl.engines.base import Engine
from ddpctl.plan.layout import COMPONENT_LABEL
from ddpctl.records import record
from ddpctl_trainer import protocol


@record
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool = True
    target: str | None = None  # the ddpctl target whose workload this is
    installed_by: str = ""  # what installs it, for messages
    success: tuple[str, ...] = ()  # condition types that mean "finished well"
    failure: tuple[str, ...] = ()  # ... and "finished badly"

    @property
    def engine(self) -> Engine:
        """The engine of a workload kind: the labels its pods carry, where its object keeps its node count."""
        if self.target is None:
            raise TypeError(f"{self.kind} is not the workload of an engine")
        return engine_for(self.target)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """`jobs.batch`, `pods`: how kube names the resource in messages and RBAC."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def ref_kind(self) -> str:
        """`job.batch`, `service`: the `TYPE` kubectl prints in `TYPE/NAME`."""
        return f"{self.kind.lower()}.{self.group}" if self.group else self.kind.lower()

    def ref(self, name: str) -> str:
        return f"{self.ref_kind}/{name}"

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else "/api/v1"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        if sub:
            base += f"/{sub}"
        return base


def _workload(target: str) -> Kind:
    """The Kind of an engine's workload object (the facts live in ddpctl.engines)."""
    w = engine_for(target).workload
    return Kind(
        w.kind,
        w.group,
        w.version,
        w.plural,
        target=target,
        installed_by=w.installed_by,
        success=w.success,
        failure=w.failure,
    )


JOB = _workload("job")
PYTORCHJOB = _workload("pytorchjob")
JOBSET = _workload("jobset")
TRAINJOB = _workload("trainjob")
RUNTIME = Kind(
    "ClusterTrainingRuntime",
    "trainer.kubeflow.org",
    "v1alpha1",
    "clustertrainingruntimes",
    namespaced=False,
    installed_by="Kubeflow Trainer v2",
)
SERVICE = Kind("Service", "", "v1", "services")
SECRET = Kind("Secret", "", "v1", "secrets")  # the workspace's, when the job ships one
POD = Kind("Pod", "", "v1", "pods")
EVENT = Kind("Event", "", "v1", "events")
NAMESPACE = Kind("Namespace", "", "v1", "namespaces", namespaced=False)
WORKLOAD = Kind("Workload", "kueue.x-k8s.io", "v1beta2", "workloads", installed_by="Kueue")
LOCALQUEUE = Kind("LocalQueue", "kueue.x-k8s.io", "v1beta2", "localqueues", installed_by="Kueue")
PRIORITY = Kind(
    "WorkloadPriorityClass",
    "kueue.x-k8s.io",
    "v1beta2",
    "workloadpriorityclasses",
    namespaced=False,
    installed_by="Kueue",
)

BY_TARGET = {k.target: k for k in (JOB, PYTORCHJOB, JOBSET, TRAINJOB)}
#: the workloads, in the order `--target auto` prefers them (job last: always served)
WORKLOADS: tuple[Kind, ...] = tuple(BY_TARGET[t] for t in AUTO_PREFERENCE)
#: every kind a job's top-level objects can have (`delete`, `--replace`)
JOB_OBJECT_KINDS: tuple[Kind, ...] = WORKLOADS + (SERVICE, SECRET)


def kind_of(obj: dict[str, Any]) -> Kind:
    for k in JOB_OBJECT_KINDS + (POD, RUNTIME, EVENT, NAMESPACE):
        if (k.api_version, k.kind) == (obj.get("apiVersion"), obj.get("kind")):
            return k
    raise KeyError(f"{obj.get('apiVersion')}/{obj.get('kind')}")


def job_selector(name: str) -> str:
    """Labels every object ddpctl made for job NAME carries (spec.selector_labels)."""
    return f"{INSTANCE}={name},{MANAGED_BY}"


# a pod-recovery job's coordinator trains nothing
NOT_COORDINATOR = f"{COMPONENT_LABEL}!={protocol.COORDINATOR_COMPONENT}"


def is_coordinator(obj: dict[str, Any]) -> bool:
    """Whether `obj` is a pod-recovery job's coordinator (its Job or pod), not a training object."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(COMPONENT_LABEL) == protocol.COORDINATOR_COMPONENT


def trainer_selector(name: str) -> str:
    """job NAME's training objects and pods: every object ddpctl made for it but its coordinator's."""
    return f"{job_selector(name)},{NOT_COORDINATOR}"


def job_name_of(obj: dict[str, Any]) -> str:
    """The ddpctl job a workload object belongs to: its instance label (with node groups, the
    `job` target makes one Job per group, `<job>-<group>`), else its own name."""
    md = obj.get("metadata") or {}
    return str((md.get("labels") or {}).get(INSTANCE) or md["name"])


def rank_notice(job: dict[str, Any], name: str, rank: int) -> str | None:
    """What `--rank N` picks in a c10d job (`logs` and `submit --follow` say it alike); None otherwise."""
    if not c10d_rendezvous(job):
        return None
    return (
        f"ddpctl: {name} uses c10d rendezvous: --rank {rank} picks pod index {rank}; torchrun numbers the nodes at "
        "rendezvous, so that pod's own [rank R] lines say which global ranks it runs"
    )


def c10d_rendezvous(job: dict[str, Any]) -> bool:
    """Nodes meet through c10d rendezvous (elastic jobs, rendezvous.mode c10d): torchrun then numbers
    the nodes itself, so a pod's index is not necessarily its node rank."""

    def walk(o: Any) -> bool:
        if isinstance(o, dict):
            if "elasticPolicy" in o or (o.get("name") == "PET_RDZV_BACKEND" and o.get("value") == "c10d"):
                return True
            return any(walk(v) for v in o.values())
        if isinstance(o, list):
            return any(walk(v) for v in o)
        return False

    return walk(job.get("spec") or {})


def finished(kind: Kind, job: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """("Succeeded" | "Failed" | None, the condition that says so)."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") in kind.failure:
            return "Failed", cond
        if cond.get("type") in kind.success:
            return "Succeeded", cond
    return None, None


def age(timestamp: str | None, now: float | None = None) -> str:
    """kubectl's AGE column: 45s, 12m, 3h, 2d."""
    import datetime as dt
    import time

    if not timestamp:
        return "<unknown>"
    try:
        t = dt.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return "<unknown>"
    return age_text((now if now is not None else time.time()) - t)
