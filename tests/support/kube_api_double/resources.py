"""The API resources the double serves, as discovery describes them."""

from __future__ import annotations

from dataclasses import dataclass, field

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple = ()
    categories: tuple = ()
    subresources: tuple = ("status",)  # ("status",) and/or ("log",)
    engine: str = ""  # crd engine key ("pytorchjob", "jobset", "trainjob") or "" for built-ins
    field_selectors: tuple = ()  # extra field labels beyond metadata.name / metadata.namespace

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """``jobs.batch`` / ``pods``: how kube names the resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """``Job.batch`` / ``Pod``: how kube names the kind in Invalid messages."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def is_custom(self) -> bool:
        return bool(self.engine)


CORE = [
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        "namespace",
        ("ns",),
        (),
        ("status",),
        field_selectors=("status.phase",),
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        "pod",
        ("po",),
        ("all",),
        ("status", "log"),
        field_selectors=(
            "status.phase",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.podIP",
            "status.nominatedNodeName",
            "spec.hostNetwork",
        ),
    ),
    ResourceType(
        "",
        "v1",
        "services",
        "Service",
        True,
        "service",
        ("svc",),
        ("all",),
        ("status",),
        field_selectors=("spec.clusterIP", "spec.type"),
    ),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",), (), ()),
    ResourceType("", "v1", "secrets", "Secret", True, "secret", (), (), (), field_selectors=("type",)),
    ResourceType(
        "",
        "v1",
        "events",
        "Event",
        True,
        "event",
        ("ev",),
        (),
        (),
        field_selectors=(
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ),
    ),
    ResourceType(
        "batch", "v1", "jobs", "Job", True, "job", (), ("all",), ("status",), field_selectors=("status.successful",)
    ),
]

# kept in step with tests/contract/schemas/crds (a test checks the names against the files)
CUSTOM = [
    ResourceType(
        "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", True, "pytorchjob", (), (), ("status",), engine="pytorchjob"
    ),
    ResourceType(
        "jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True, "jobset", (), (), ("status",), engine="jobset"
    ),
    ResourceType(
        "trainer.kubeflow.org",
        "v1alpha1",
        "trainjobs",
        "TrainJob",
        True,
        "trainjob",
        (),
        (),
        ("status",),
        engine="trainjob",
    ),
    ResourceType(
        "trainer.kubeflow.org",
        "v1alpha1",
        "clustertrainingruntimes",
        "ClusterTrainingRuntime",
        False,
        "clustertrainingruntime",
        (),
        (),
        (),
        engine="trainjob",
    ),
]

#: engine key -> the groups that installing it adds
ENGINES = {"pytorchjob": "kubeflow.org", "jobset": "jobset.x-k8s.io", "trainjob": "trainer.kubeflow.org"}


@dataclass
class Registry:
    installed: frozenset = field(default_factory=frozenset)

    def all(self) -> list[ResourceType]:
        return CORE + [r for r in CUSTOM if r.engine in self.installed]

    def all_known(self) -> list[ResourceType]:
        return CORE + CUSTOM

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        for r in self.all():
            if (r.group, r.version, r.plural) == (group, version, plural):
                return r
        return None

    def by_kind(self, kind_or_plural: str) -> ResourceType:
        """Resource type by kind (``Job``), plural (``jobs``) or singular; any installed or not."""
        k = kind_or_plural.lower()
        for r in CORE + CUSTOM:
            if k in (r.kind.lower(), r.plural, r.singular):
                return r
        raise KeyError(kind_or_plural)

    def by_api_version_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for r in CORE + CUSTOM:
            if r.api_version == api_version and r.kind == kind:
                return r
        return None

    def groups(self) -> dict[str, list[str]]:
        """{group: [versions]} of the named groups served (not the core group)."""
        out: dict[str, list[str]] = {}
        for r in self.all():
            if r.group and r.version not in out.setdefault(r.group, []):
                out[r.group].append(r.version)
        return out
