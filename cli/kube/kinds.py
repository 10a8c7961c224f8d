"""The kinds ddpctl creates and reads, and how each engine names and ranks its pods."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

MANAGED_BY = "app.kubernetes.io/managed-by=ddpctl"
INSTANCE = "app.kubernetes.io/instance"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
KF_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KF_REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool = True
    target: str | None = None  # the ddpctl target whose workload this is
    engine: str = ""  # what installs it, for messages
    success: tuple[str, ...] = ()  # condition types that mean "finished well"
    failure: tuple[str, ...] = ()  # ... and "finished badly"

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


JOB = Kind(
    "Job",
    "batch",
    "v1",
    "jobs",
    target="job",
    engine="Kubernetes (batch/v1)",
    success=("Complete",),
    failure=("Failed",),
)
PYTORCHJOB = Kind(
    "PyTorchJob",
    "kubeflow.org",
    "v1",
    "pytorchjobs",
    target="pytorchjob",
    engine="the Kubeflow Training Operator v1",
    success=("Succeeded",),
    failure=("Failed",),
)
JOBSET = Kind(
    "JobSet",
    "jobset.x-k8s.io",
    "v1alpha2",
    "jobsets",
    target="jobset",
    engine="JobSet",
    success=("Completed",),
    failure=("Failed",),
)
TRAINJOB = Kind(
    "TrainJob",
    "trainer.kubeflow.org",
    "v1alpha1",
    "trainjobs",
    target="trainjob",
    engine="Kubeflow Trainer v2",
    success=("Complete",),
    failure=("Failed",),
)
RUNTIME = Kind(
    "ClusterTrainingRuntime",
    "trainer.kubeflow.org",
    "v1alpha1",
    "clustertrainingruntimes",
    namespaced=False,
    engine="Kubeflow Trainer v2",
)
SERVICE = Kind("Service", "", "v1", "services")
POD = Kind("Pod", "", "v1", "pods")
EVENT = Kind("Event", "", "v1", "events")
NAMESPACE = Kind("Namespace", "", "v1", "namespaces", namespaced=False)

#: the workloads, in the order `--target auto` prefers them (job last: always served)
WORKLOADS: tuple[Kind, ...] = (TRAINJOB, PYTORCHJOB, JOBSET, JOB)
BY_TARGET = {k.target: k for k in WORKLOADS}
#: every kind a job's top-level objects can have (`delete`, `--replace`)
JOB_OBJECT_KINDS: tuple[Kind, ...] = WORKLOADS + (SERVICE,)
TORCH_RUNTIME = "torch-distributed"


def kind_of(obj: dict[str, Any]) -> Kind:
    for k in JOB_OBJECT_KINDS + (POD, RUNTIME, EVENT, NAMESPACE):
        if (k.api_version, k.kind) == (obj.get("apiVersion"), obj.get("kind")):
            return k
    raise KeyError(f"{obj.get('apiVersion')}/{obj.get('kind')}")


def job_selector(name: str) -> str:
    """Labels every object ddpctl made for job NAME carries (spec.selector_labels)."""
    return f"{INSTANCE}={name},{MANAGED_BY}"


def pod_selector(kind: Kind, name: str) -> str:
    """How to find a job's pods. Our labels are on the pod template of job, jobset and pytorchjob;
    a TrainJob's pods come from its runtime's template, and carry the JobSet (= TrainJob) name."""
    if kind is TRAINJOB:
        return f"{JOBSET_NAME}={name}"
    return job_selector(name)


def container_name(kind: Kind) -> str:
    return {"Job": "trainer", "JobSet": "trainer", "PyTorchJob": "pytorch", "TrainJob": "node"}[kind.kind]


def replica_type(kind: Kind, pod: dict[str, Any]) -> str:
    if kind is PYTORCHJOB:
        replica: str = (pod["metadata"].get("labels") or {}).get(KF_REPLICA_TYPE, "worker")
        return replica
    return "node"


def _int(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def rank_of(kind: Kind, job: dict[str, Any] | None, pod: dict[str, Any]) -> int | None:
    """Node rank of a pod: the completion index (job, jobset, trainjob); for a PyTorchJob master 0,
    worker i -> i+1 (i when the job has no Master: elastic)."""
    md = pod.get("metadata") or {}
    labels, annotations = md.get("labels") or {}, md.get("annotations") or {}
    if kind is PYTORCHJOB:
        index = _int(labels.get(KF_REPLICA_INDEX))
        if index is None:
            return None
        if labels.get(KF_REPLICA_TYPE) == "master":
            return index
        specs = ((job or {}).get("spec") or {}).get("pytorchReplicaSpecs") or {}
        has_master = "Master" in specs if job else True
        return index + (1 if has_master else 0)
    return _int(labels.get(COMPLETION_INDEX, annotations.get(COMPLETION_INDEX)))


def expected_nodes(kind: Kind, job: dict[str, Any]) -> int | None:
    spec = job.get("spec") or {}
    if kind is JOB:
        return _int(spec.get("completions"))
    if kind is PYTORCHJOB:
        specs = spec.get("pytorchReplicaSpecs") or {}
        return sum(_int((specs.get(r) or {}).get("replicas", 1)) or 0 for r in ("Master", "Worker") if r in specs)
    if kind is JOBSET:
        total = 0
        for rj in spec.get("replicatedJobs") or []:
            jspec = (rj.get("template") or {}).get("spec") or {}
            total += (_int(rj.get("replicas", 1)) or 0) * (
                _int(jspec.get("completions", jspec.get("parallelism", 1))) or 0
            )
        return total
    if kind is TRAINJOB:
        return _int((spec.get("trainer") or {}).get("numNodes"))
    return None


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
    secs = max(0, int((now if now is not None else time.time()) - t))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size * (2 if unit != "m" else 1):
            return f"{secs // size}{unit}"
    return f"{secs}s"
