"""kwok's simulated GPU nodes, whose pods run, finish or fail by Stages.

Shaped like a small GPU cluster: blocks of 2 racks of 2 nodes of 8 GPUs each. The topology labels
are the ones Kueue's Topology object names (block, rack, host)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from testcluster.kube import Cluster
from testcluster.manifests import Doc, load_docs, module_dir
from testcluster.procs import start, wait_for
from testcluster.settings import HERE, PORTS, STATE, V

BLOCK_LABEL = "cloud.ddpctl.io/topology-block"
RACK_LABEL = "cloud.ddpctl.io/topology-rack"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# Annotations our failure stages (kwok-stages.yaml) act on; upstream's pod-complete must wait for them.
FAILURE_ANNOTATIONS = ("pod-fail-exit-code.stage.kwok.x-k8s.io/exit-code",
                       "pod-disruption-failed.stage.kwok.x-k8s.io/reason")  # fmt: skip
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"


def stages(upstream: list[Doc], ours: list[Doc]) -> list[Doc]:
    """Upstream's node and pod stages, with our pod-complete guard, and our failure stages.

    Upstream's pod-complete finishes every Job-owned pod at once; ours leaves alone a pod that a
    failure stage is about to fail, and waits for the pod's `pod-complete.stage.kwok.x-k8s.io/delay`
    annotation (a Go duration) when it has one, so a test can keep pods running. Upstream's
    pod-delete goes: ours turns a deleted pod Failed first, then deletes it."""
    docs = [d for d in upstream if d["metadata"]["name"] != "pod-delete"]
    for d in docs:
        if d["metadata"]["name"] == "pod-complete":
            d["spec"]["selector"]["matchExpressions"] += [
                {"key": f'.metadata.annotations["{key}"]', "operator": "DoesNotExist"} for key in FAILURE_ANNOTATIONS
            ]
            d["spec"]["delay"] = {
                "durationMilliseconds": 0,
                "durationFrom": {"expressionFrom": f'.metadata.annotations["{COMPLETE_DELAY}"]'},
            }
    return docs + ours


def kwok_stages() -> list[Doc]:
    stage = module_dir("sigs.k8s.io/kwok", V["KWOK_VERSION"]) / "kustomize/stage"
    upstream = load_docs(stage / "node/fast", stage / "node/heartbeat-with-lease", stage / "pod/fast")
    return stages(upstream, load_docs(HERE / "kwok-stages.yaml"))


def kwok_node(name: str, block: int, rack: int) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "nvidia.com/gpu.product": "simulated-H100",
                BLOCK_LABEL: f"block-{block}",
                RACK_LABEL: f"rack-{block}-{rack}",
            },
        },
        "status": {
            "capacity": {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"},
        },
    }


def kwok_nodes(count: int = 8, prefix: str = "gpu-node") -> list[Doc]:
    return [kwok_node(f"{prefix}-{i}", block=i // 4, rack=(i // 2) % 2) for i in range(count)]


def surplus(names: list[str], count: int) -> list[str]:
    """The nodes to delete when the pool shrinks to `count`: those numbered `count` and up."""
    return [n for n in names if int(n.rsplit("-", 1)[1]) >= count]


def set_kwok_nodes(c: Cluster, count: int) -> None:
    """Grow or shrink the simulated nodes to `count` and wait until kwok reports each Ready."""
    have: list[dict[str, Any]] = json.loads(c.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json"))["items"]
    extra = surplus([n["metadata"]["name"] for n in have], count)
    if extra:
        c.kubectl("delete", "node", *extra, "--wait=false")
    c.apply(kwok_nodes(count), "kwok nodes")
    ready = "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Ready')].status}{' '}{end}"
    nodes = ("get", "nodes", "-l", "type=kwok", "-o", ready)
    wait_for(f"{count} kwok nodes Ready", lambda: c.kubectl(*nodes).split() == ["True"] * count, 120)


def kwok(c: Cluster) -> None:
    cfg = STATE / "kwok.yaml"
    cfg.write_text(yaml.safe_dump_all(kwok_stages()))
    start("kwok", [
        c.exe("kwok"), f"--kubeconfig={c.kubeconfig}", f"--config={cfg}",
        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
        f"--server-address=127.0.0.1:{PORTS['kwok']}", "--cidr=10.244.0.0/16",
        "--node-ip=127.0.0.1", f"--node-port={PORTS['kwok-kubelet']}", "--v=WARN",
        # kwok renews each node's Lease, as a kubelet does; without it (the flag's default is 0 here) the
        # heartbeat stage writes status only every ~10 min, the node controller marks every node NotReady
        # after its grace period, and Kueue's TAS moves the workloads placed on them
        "--node-lease-duration-seconds=40",
    ])  # fmt: skip
    set_kwok_nodes(c, 8)
