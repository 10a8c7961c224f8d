"""`ddpctl render --explain`: the layout in words, so a user can check the wiring before paying for it."""

from __future__ import annotations

from ddpctl.console import plural
from ddpctl.spec import JobSpec

ENGINE_NAMES = {
    "job": "Indexed Job + headless Service (no operator needed)",
    "pytorchjob": "Kubeflow PyTorchJob (training operator v1)",
    "jobset": "JobSet (jobset.x-k8s.io)",
    "trainjob": "Kubeflow Trainer v2 TrainJob (torch-distributed runtime)",
}

# Settings a target leaves to its engine (the spec refuses those it cannot honour at all).
LEFT_TO_ENGINE = {
    "trainjob": ("imagePullPolicy", "restartPolicy", "backoffLimit", "ttlSecondsAfterFinished"),
}


def explain(spec: JobSpec) -> str:
    hosts = spec.pod_hostnames
    nproc = spec.nproc_per_node
    device = f"{plural(spec.gpus_per_node, 'GPU')} per node" if spec.gpus_per_node else "CPU only"
    if spec.min_nodes is not None:  # elastic
        nodes = f"elastic {spec.min_nodes} to {spec.max_nodes} nodes (pods), {spec.replicas} created"
        world = f"{spec.min_nodes * nproc} to {spec.world_size} = nodes x {plural(nproc, 'process', 'processes')}"
    else:
        nodes = f"{plural(spec.nodes, 'node')} (pods)"
        world = f"{spec.world_size} = {plural(spec.nodes, 'node')} x {plural(nproc, 'process', 'processes')}"
    if spec.rdzv_mode == "static":
        rdzv = f"static: every node connects to MASTER_ADDR={spec.rank0_host} MASTER_PORT={spec.master_port}"
    else:
        rdzv = f"c10d: every node joins the store at {spec.rdzv_endpoint} (rendezvous id {spec.name})"
    shown = ", ".join(hosts[:3]) + (f", ..., {hosts[-1]}" if len(hosts) > 3 else "")
    lines = [
        f"job {spec.name} in namespace {spec.namespace}: {ENGINE_NAMES[spec.target]}",
        f"  nodes:              {nodes}: {shown}",
        f"  processes per node: {nproc} ({device}, backend {spec.resolved_backend})",
        f"  world size:         {world}",
        f"  rank 0:             node rank 0 = pod {hosts[0]}, local rank 0",
        f"  rendezvous:         {rdzv}",
        f"  node rank from:     {spec.node_rank_source}",
        f"  global rank:        node_rank x {nproc} + local_rank (LOCAL_RANK picks the device)",
        f"  command:            {' '.join(spec.entrypoint + spec.trainer_args)}",
    ]
    ignored = LEFT_TO_ENGINE.get(spec.target, ())
    if ignored:
        lines.append(f"  note:               {spec.target} leaves {', '.join(ignored)} to the training runtime")
    return "\n".join(lines) + "\n"
