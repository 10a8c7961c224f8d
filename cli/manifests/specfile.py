"""The commented ddp.yaml that `ddpctl init` writes; its keys are JobSpec's camelCase form."""

from __future__ import annotations

from typing import Any

from ddpctl.engines import TARGETS
from ddpctl.manifests.yamlsafe import dump_portable
from ddpctl.spec.model import JobSpec
from ddpctl.spec.sources import describe_sources

FIELD_DOCS: dict[str, str] = {
    "name": "Job name: a DNS-1035 label; pods and Services are named after it.",
    "namespace": "Namespace of every object.",
    "target": f"Engine: {', '.join(TARGETS)} (job: Indexed Job + headless Service, no operator).",
    "image": "Trainer image (`ddpctl build` makes one from the Dockerfile).",
    "imagePullPolicy": "Always, IfNotPresent or Never.",
    "imagePullSecrets": "Names of Secrets used to pull the image.",
    "module": "Python module torchrun runs on every node (default: the ddpctl trainer).",
    "script": "Or a script path inside the image (set module: null).",
    "command": "Or a full container command that replaces torchrun (set module: null).",
    "args": "Arguments for the module/script, e.g. [--epochs, '10'].",
    "nodes": "Nodes (pods): N, or \"MIN:MAX\" for an elastic job (c10d rendezvous).",
    "gpusPerNode": "GPUs per node; 0 runs on CPU with gloo.",
    "procsPerNode": "Processes per node; null = one per GPU (2 on CPU).",
    "nodeGroups": (
        "Node groups of different shapes instead of nodes/gpusPerNode/procsPerNode: [{name, nodes, "
        "gpusPerNode, procsPerNode?, nodeSelector?, tolerations?, resources?, gpuResource?, topology?}] "
        "(or --layout 4+3)."
    ),
    "backend": "auto (nccl with GPUs, gloo without), nccl or gloo.",
    "rendezvous": "How ranks find rank 0: mode auto|static|c10d, port, timeouts (s), torchrun maxRestarts.",
    "resources": "Per-pod cpu and memory requests (memory is also the limit); gpuResource names the GPU.",
    "shmSize": "Size of the memory-backed /dev/shm (DataLoader workers need more than 64M).",
    "env": "Environment variables (map of NAME: value).",
    "envFromSecrets": "Secrets whose keys all become env variables (referenced, never inlined).",
    "secretEnv": "Env variables read from Secrets: {VAR: {secret: NAME, key: KEY}}.",
    "volumes": "PVC mounts: {NAME: {claimName, mountPath, readOnly}}; `data` and `checkpoints` feed the trainer.",
    "nodeSelector": "Node labels the pods need.",
    "tolerations": "Taints the pods tolerate (a GPU toleration is added when gpusPerNode > 0).",
    "affinity": "Pod affinity rules (nodeAffinity, podAffinity, podAntiAffinity).",
    "priorityClassName": "PriorityClass of the pods.",
    "serviceAccountName": "ServiceAccount of the pods.",
    "labels": "Labels on every object and pod.",
    "annotations": "Annotations on every object and pod.",
    "queue": "Kueue LocalQueue (sets kueue.x-k8s.io/queue-name).",
    "workloadPriorityClass": "Kueue WorkloadPriorityClass (sets kueue.x-k8s.io/priority-class).",
    "topology": "Kueue topology: one of required|preferred (a node label level) or unconstrained; slices optional.",
    "restartPolicy": "Never, OnFailure or ExitCode (pytorchjob); null: the target's, with failure rules (--explain).",
    "backoffLimit": "Restarts after failures before the job fails (preemptions do not count).",
    "ttlSecondsAfterFinished": "Seconds a finished job is kept before cleanup (null: forever).",
    "activeDeadlineSeconds": "Seconds before a running job is stopped (null: no limit).",
    "gracePeriod": "Seconds from a pod's SIGTERM to its SIGKILL (time to write a checkpoint).",
    "collectiveTimeout": "Seconds a trainer rank waits in a collective before failing (null: the trainer's 600).",
    "podSecurity": "Pod Security profile the pods meet: restricted (default) or baseline.",
    "stallTimeout": "Seconds without progress on any rank before the trainer stops a hung job (null: 300, 0: off).",
}


def _dump(key: str, value: Any) -> str:
    # Portable quoting: a ddp.yaml may also be used as Helm values for charts/ddp-job.
    return dump_portable({key: value})


# Keys whose absence means something: `submit` picks the engine the cluster has (target) and uses
# the kubeconfig context's namespace. `init` leaves them commented out unless they were given.
CONTEXT_DEPENDENT = {
    "target": "unset: `submit` picks the engine the cluster has, `render` uses job",
    "namespace": "unset: the kubeconfig context's namespace (`render` uses default)",
}


def commented_spec_yaml(spec: JobSpec, explicit: frozenset[str] = frozenset()) -> str:
    """Every key with its comment; `explicit` names the keys the user gave (kept live)."""
    lines = [
        "# ddpctl job spec. Precedence: " + describe_sources() + ".",
        "# Render with `ddpctl render`, run here with `ddpctl run --local`, submit with `ddpctl submit`.",
        "",
    ]
    for key, value in spec.to_dict().items():
        lines.append(f"# {FIELD_DOCS[key]}")
        text = _dump(key, value).rstrip("\n")
        if key in CONTEXT_DEPENDENT and key not in explicit:
            lines.append(f"# ({CONTEXT_DEPENDENT[key]})")
            text = "\n".join("# " + line for line in text.splitlines())
        lines.append(text)
    return "\n".join(lines) + "\n"
