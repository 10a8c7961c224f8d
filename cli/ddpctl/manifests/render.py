"""Render a JobSpec into Kubernetes objects: pure and deterministic.

`render(spec)` = the view of the spec's Plan (every derived value comes from the plan, computed in
Python) laid out by the Jinja2 template of the spec's target, parsed back into plain objects.
Output helpers turn objects into multi-document YAML, a JSON `List`, or a kustomize directory.
"""

from __future__ import annotations

import copy
import functools
import os
from typing import TYPE_CHECKING, Any

import yaml

from ddpctl.engines import engine_of, plan_for
from ddpctl.engines.base import COMPLETION_INDEX as COMPLETION_INDEX_ANNOTATION
from ddpctl.manifests.yamlsafe import finalize, to_yaml
from ddpctl.plan import GroupPlan, Plan
from ddpctl.plan.layout import COMPONENT_LABEL, NODE_GROUP_LABEL
from ddpctl.spec.model import JobSpec, NodeGroup
from ddpctl.spec.schema import SHM_MOUNT
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    import jinja2

    from ddpctl.workspace.ship import Shipment


def _bytecode_cache(jinja2: Any) -> Any:
    """Compiled templates cached per user (keyed by template source checksum): saves most of a
    `ddpctl render`'s time. The cache holds code, so it is used only in a directory that this user
    owns and nobody else can write; otherwise templates are compiled each time."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.path.join(base, "ddpctl", "jinja")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.stat(directory)
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    return jinja2.FileSystemBytecodeCache(directory)


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    import jinja2

    import ddpctl.templates

    # templates/ is installed as the package `ddpctl.templates` (see pyproject.toml); its folder is
    # found from the package itself, which costs less than importlib.resources (and zipfile).
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(os.path.dirname(ddpctl.templates.__file__ or "")),
        bytecode_cache=_bytecode_cache(jinja2),
        undefined=jinja2.StrictUndefined,
        autoescape=True,  # with `finalize`, only `y`-filtered text can be printed
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=finalize,
    )
    env.filters["y"] = to_yaml
    return env


def _env_list(plan: Plan, group: GroupPlan) -> list[dict[str, Any]]:
    spec = plan.spec
    env: list[dict[str, Any]] = []
    if plan.node_rank_from_index and not spec.node_groups:
        env.append(
            {
                "name": "PET_NODE_RANK",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}},
            }
        )
    env += [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": path}}} for k, path in plan.downward_env.items()]
    env += [{"name": k, "value": v} for k, v in group.env.items()]
    env += [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}}
        for k, ref in spec.secret_env.items()
    ]
    return env


def _gpu_resource(spec: JobSpec, group: NodeGroup) -> str:
    return group.gpu_resource or spec.resources.gpu_resource


def _resources(plan: Plan, group: NodeGroup) -> dict[str, Any]:
    spec = plan.spec
    requests: dict[str, str] = {}
    limits: dict[str, Any] = {}
    cpu = group.resources.get("cpu", spec.resources.cpu)
    memory = group.resources.get("memory", spec.resources.memory)
    cpu_limit = group.resources.get("cpuLimit", spec.resources.cpu_limit)
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = limits["memory"] = memory
    if cpu_limit:
        limits["cpu"] = cpu_limit
    if group.gpus_per_node:
        limits[_gpu_resource(spec, group)] = group.gpus_per_node
    if plan.fabric_resource:
        limits[plan.fabric_resource] = spec.resources.fabric_devices
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def _tolerations(spec: JobSpec, group: NodeGroup) -> list[dict[str, Any]]:
    tolerations = [dict(t) for t in spec.tolerations] + [dict(t) for t in group.tolerations]
    gpu_key = _gpu_resource(spec, group)
    if group.gpus_per_node and not any(t.get("key") == gpu_key for t in tolerations):
        tolerations.append({"key": gpu_key, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def _security(plan: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    """Pod and container securityContext: Pod Security 'restricted' unless asked for baseline, or
    privileged, which adds only what the fabric's transport needs (IPC_LOCK) to baseline's."""
    spec = plan.spec
    if spec.pod_security in ("baseline", "privileged"):
        container: dict[str, Any] = {"allowPrivilegeEscalation": False}
        if plan.fabric.capabilities:  # the spec's rules allow them only under privileged
            container["capabilities"] = {"add": list(plan.fabric.capabilities)}
        return {"seccompProfile": {"type": "RuntimeDefault"}}, container
    pod = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    container = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return pod, container


def view(plan: Plan, shipment: Shipment | None = None) -> dict[str, Any]:
    """Everything a template needs, read from the plan: the job-wide values, and under `groups`
    one complete view per node group (the uniform layout is the one group; its view is the
    job-wide view itself, so single-group output is what it always was). A `shipment` (the
    workspace the job ships) adds its volumes, mounts and env to every pod, and its unpacker
    before each pod's command (the built-in trainer's launcher unpacks by itself)."""
    spec, engine = plan.spec, engine_of(plan)
    pod_sc, container_sc = _security(plan)
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": SHM_MOUNT}]
    for vname, vol in spec.volumes.items():
        volumes.append(
            {"name": vname, "persistentVolumeClaim": {"claimName": vol.claim_name, "readOnly": vol.read_only}}
        )
        mounts.append({"name": vname, "mountPath": vol.mount_path, "readOnly": vol.read_only})
    if shipment is not None:
        volumes += shipment.volumes()
        mounts += shipment.mounts()
    base = {
        "name": spec.name,
        "namespace": spec.namespace,
        "top_labels": plan.top_labels,
        "labels": plan.object_labels,
        "annotations": dict(spec.annotations),
        "selector": plan.selector_labels,
        "container_name": engine.container_name,
        "image": spec.image,
        "pull_policy": spec.image_pull_policy,
        "image_pull_secrets": [{"name": s} for s in spec.image_pull_secrets],
        "args": list(plan.trainer_args),
        "env_from": [{"secretRef": {"name": s}} for s in spec.env_from_secrets],
        "port": plan.master_port,
        "port_name": engine.port_name,
        "pod_security_context": pod_sc,
        "container_security_context": container_sc,
        "volumes": volumes,
        "volume_mounts": mounts,
        "affinity": plan.affinity,
        "priority_class": spec.priority_class_name,
        "service_account": spec.service_account_name,
        "restart_policy": plan.pod_restart_policy,
        "backoff_limit": spec.backoff_limit,
        "ttl": spec.ttl_seconds_after_finished,
        "deadline": spec.active_deadline_seconds,
        "grace_period": spec.grace_period,
        "replicas": plan.replicas,
        "elastic": spec.elastic,
        "min_nodes": spec.min_nodes,
        "max_nodes": spec.max_nodes,
        "nproc": plan.nproc_per_node,
        "max_restarts": spec.rendezvous.max_restarts,
        "service_name": plan.service_name,
        "subdomain": engine.subdomain(plan),
        "hostname": None,
        # A new key's template reads its plan entry (or the spec) here, with no entry of its own above.
        "plan": plan,
        "spec": spec,
    }
    group_views = [_group_view(plan, base, group, shipment) for group in plan.groups]
    v = dict(base)
    v["groups"] = group_views
    v.update({k: val for k, val in group_views[0].items() if k not in ("name", "replicas", "top_labels")})
    v.update(engine.template_values(plan, {g.name: gv for g, gv in zip(plan.groups, group_views)}))
    v["coordinator"] = _coordinator_view(plan, base) if plan.coordinator_name else None
    return v


# a store on one TCP port: no GPU, a little CPU, torch's import in memory
COORDINATOR_RESOURCES = {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}


def _coordinator_view(plan: Plan, base: dict[str, Any]) -> dict[str, Any]:
    """The view of the coordinator's pod (pod recovery): the store the trainer pods meet in, in the
    trainer image, named by the headless Service, on the nodes the job may use; no GPU, no volume,
    no Secret, no Kueue queue (it trains nothing)."""
    spec = plan.spec
    assert plan.coordinator_name is not None
    labels = {**plan.object_labels, COMPONENT_LABEL: protocol.COORDINATOR_COMPONENT}
    out = dict(base)
    out.update(
        {
            "name": plan.coordinator_name,
            "hostname": plan.coordinator_name,
            "subdomain": plan.service_name,  # the headless Service names the pod <hostname>.<subdomain>
            "top_labels": dict(sorted(labels.items())),
            "labels": dict(sorted(labels.items())),
            "annotations": dict(spec.annotations),
            "pod_annotations": {},
            "container_name": protocol.COORDINATOR_COMPONENT,
            "command": [
                protocol.LAUNCHER_PYTHON,
                "-m",
                protocol.COORDINATOR_MODULE,
                "--port",
                str(protocol.COORDINATOR_PORT),
                "--world-size",
                str(plan.world_size),
            ],
            "args": [],
            "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
            "env_from": [],
            "port": protocol.COORDINATOR_PORT,
            "port_name": protocol.COORDINATOR_COMPONENT,
            "resources": dict(COORDINATOR_RESOURCES),
            "volumes": [],
            "volume_mounts": [],
            "tolerations": [dict(t) for t in spec.tolerations],
            "node_selector": dict(sorted(spec.node_selector.items())),
            "restart_policy": "Never",
            "replicas": 1,
        }
    )
    return out


def _group_view(plan: Plan, base: dict[str, Any], group: GroupPlan, shipment: Shipment | None) -> dict[str, Any]:
    """The view of one group's workload and pods: its object name, node count, command, env,
    resources and scheduling fields."""
    spec = plan.spec
    top_labels = dict(base["top_labels"])
    if spec.node_groups:
        top_labels[NODE_GROUP_LABEL] = group.name
    node_selector = dict(spec.node_selector)
    node_selector.update(group.group.node_selector)
    out = dict(base)
    out.update(
        {
            "name": group.workload_name,
            "top_labels": dict(sorted(top_labels.items())),
            "labels": dict(group.labels),
            "group": group.name,
            "replicas": group.pods,
            "command": list(
                shipment.wrap(group.command) if shipment is not None and not plan.uses_launcher else group.command
            ),
            "env": _env_list(plan, group)
            + ([{"name": k, "value": v} for k, v in shipment.env().items()] if shipment is not None else []),
            "resources": _resources(plan, group.group),
            "tolerations": _tolerations(spec, group.group),
            "node_selector": dict(sorted(node_selector.items())),
            "nproc": group.nproc,
            "rjob": group.replicated_job,
            "pod_annotations": dict(group.pod_annotations),
        }
    )
    return out


def render(spec: JobSpec) -> list[dict[str, Any]]:
    """The spec's objects, in apply order (Services before the workloads that need their DNS)."""
    return render_plan(plan_for(spec))


def render_plan(plan: Plan, shipment: Shipment | None = None) -> list[dict[str, Any]]:
    """The plan's objects, in apply order: the workspace's Secret first (no pod starts without it)."""
    text = render_text(plan, shipment)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same result, faster
    objects = [doc for doc in yaml.load_all(text, Loader=loader) if doc]
    if shipment is not None and shipment.secret is not None:
        objects.insert(0, copy.deepcopy(dict(shipment.secret)))
    return objects


def render_text(plan: Plan | JobSpec, shipment: Shipment | None = None) -> str:
    """The raw template output (YAML) of a plan (or a spec, planned here); `render` parses it."""
    if not isinstance(plan, Plan):
        plan = plan_for(plan)
    return _environment().get_template(engine_of(plan).template).render(v=view(plan, shipment))
