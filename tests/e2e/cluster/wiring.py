"""Read a DDP layout back from the pod objects the real controllers made: no value computed by ddpctl.

Each pod's environment is resolved as the kubelet would (values, and field references to the pod's
own annotations and labels), then the launcher's one rule is applied (node rank = offset + the
Job's completion index where an offset is given). The rank-0 address must name a Service that
reaches the rank-0 pod.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tests.support.cluster import RealCluster

FIELD = re.compile(r"metadata\.(annotations|labels)\['([^']+)'\]")


def resolved_env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
            continue
        ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        m = FIELD.fullmatch(ref)
        if m:
            value = (pod["metadata"].get(m.group(1)) or {}).get(m.group(2))
            if value is not None:
                env[e["name"]] = value
    return env


@dataclass(frozen=True)
class PodWiring:
    pod: str
    node_name: str | None
    nnodes: int
    nproc: int
    node_rank: int
    master_addr: str
    master_port: int
    gpus: int


def trainer_container(pod: dict[str, Any]) -> dict[str, Any]:
    containers = pod["spec"]["containers"]
    launchers = [c for c in containers if "ddpctl_trainer.launch" in " ".join(c.get("command") or [])]
    assert len(launchers) == 1, [c["name"] for c in containers]
    return launchers[0]


def wiring_of(pod: dict[str, Any]) -> PodWiring:
    c = trainer_container(pod)
    env = resolved_env(pod, c)
    args = list(c.get("command") or []) + list(c.get("args") or [])
    nproc = env.get("PET_NPROC_PER_NODE")
    for i, a in enumerate(args):  # a command-line --nproc-per-node wins over the env, as in torchrun
        if a == "--nproc-per-node":
            nproc = args[i + 1]
        elif a.startswith("--nproc-per-node="):
            nproc = a.split("=", 1)[1]
    if "PET_NODE_RANK_OFFSET" in env:
        node_rank = int(env["PET_NODE_RANK_OFFSET"]) + int(env["JOB_COMPLETION_INDEX"])
    else:
        node_rank = int(env["PET_NODE_RANK"])
    gpus = int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
    return PodWiring(
        pod=pod["metadata"]["name"],
        node_name=pod["spec"].get("nodeName"),
        nnodes=int(env["PET_NNODES"]),
        nproc=int(str(nproc)),
        node_rank=node_rank,
        master_addr=env.get("PET_MASTER_ADDR") or env["MASTER_ADDR"],
        master_port=int(env.get("PET_MASTER_PORT") or env["MASTER_PORT"]),
        gpus=gpus,
    )


def layout(kube: RealCluster, ns: str, pods: list[dict[str, Any]]) -> list[PodWiring]:
    """The pods' wiring in node-rank order, after checking what must hold for any DDP job."""
    wired = sorted((wiring_of(p) for p in pods), key=lambda w: w.node_rank)
    assert [w.node_rank for w in wired] == list(range(len(wired))), wired
    assert {w.nnodes for w in wired} == {len(wired)}, wired
    assert len({(w.master_addr, w.master_port) for w in wired}) == 1, wired
    rank0 = next(p for p in pods if p["metadata"]["name"] == wired[0].pod)
    assert reaches(kube, ns, wired[0].master_addr, rank0), (wired[0].master_addr, rank0["metadata"]["name"])
    return wired


def reaches(kube: RealCluster, ns: str, address: str, pod: dict[str, Any]) -> bool:
    """`host.service` is the pod's own DNS name under a headless Service; `service` alone is a Service
    whose selector matches the pod. Either way the Service must exist."""
    host, _, service = address.partition(".")
    service = service.split(".")[0] if service else host
    svc = kube.get("service", service, "-n", ns)
    labels = pod["metadata"].get("labels") or {}
    selected = all(labels.get(k) == v for k, v in (svc["spec"].get("selector") or {}).items())
    if "." in address:
        return bool(pod["spec"].get("hostname") == host and pod["spec"].get("subdomain") == service and selected)
    return bool(svc["spec"].get("selector")) and selected
