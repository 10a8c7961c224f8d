"""What each engine does with our manifests, written from the engines' documented contracts
(summarised, with links, in the docstrings of cli/ddpctl/engines/*.py), independently of ddpctl's own
derived values: this file reads only the rendered objects.

The real controllers make the pods in tests/e2e/cluster/test_engines.py (marker `cluster`), which is
the check that counts; this offline model stays for the fast suite (`make test-fast`, no Go), for
layouts the cluster tests do not repeat (`2x8+1x4`, `1x1+3x2`) and for running the node-rank
launcher on each simulated pod's env.

`launch(objects)` returns, per pod the engine would create, its DNS name, the env the container
would see (ours plus whatever the operator injects, with downward-API fields resolved) and the
torchrun settings that env and the container's arguments give. The wiring tests then check world
size, node ranks and the master address against these, not against the spec's properties.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
PYTORCHJOB_DEFAULT_PORT = 23456
TRAINER_V2_PORT = 29500


@dataclass(frozen=True)
class Pod:
    hostname: str
    dns_name: str  # the name other pods resolve: <hostname>.<subdomain>, or the per-pod Service
    env: dict[str, str]
    command: list[str]
    args: list[str]
    ports: dict[str, int]
    gpus: int = 0  # the container's GPU limit
    owner: str = ""  # the object (Job, replicatedJob, replica type) whose template made it
    index: int = 0  # its index within that object


@dataclass(frozen=True)
class Torchrun:
    nnodes: str
    nproc_per_node: int
    node_rank: int | None
    master_addr: str | None
    master_port: int | None
    rdzv_backend: str
    rdzv_endpoint: str | None

    @property
    def max_nodes(self) -> int:
        return int(self.nnodes.split(":")[-1])


# The pod's own fields the downward API gives (the preflight's and the straggler detector's names):
# the pod's name is its hostname here, and every simulated pod runs on one node.
POD_FIELDS = {"spec.nodeName": "node-1"}


def _resolve_env(container: dict[str, Any], annotations: dict[str, str], pod_name: str) -> dict[str, str]:
    env: dict[str, str] = {}
    fields = {**POD_FIELDS, "metadata.name": pod_name}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        ref = item["valueFrom"].get("fieldRef")
        if ref:
            if ref["fieldPath"] in fields:
                env[item["name"]] = fields[ref["fieldPath"]]
                continue
            match = re.fullmatch(r"metadata\.annotations\['(.+)'\]", ref["fieldPath"])
            assert match, f"unsupported fieldRef {ref}"
            env[item["name"]] = annotations[match.group(1)]
    return env


def _gpus(container: dict[str, Any]) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    return sum(int(v) for k, v in limits.items() if k.endswith("/gpu"))


def _ports(container: dict[str, Any]) -> dict[str, int]:
    return {p.get("name", ""): p["containerPort"] for p in container.get("ports", [])}


def _indexed_pods(
    job_name: str, job_spec: dict[str, Any], subdomain: str, extra_env: dict[str, str] | None = None, owner: str = ""
) -> list[Pod]:
    assert job_spec["completionMode"] == "Indexed"
    assert job_spec["completions"] == job_spec["parallelism"], "every node must run at once"
    pod_spec = job_spec["template"]["spec"]
    (container,) = pod_spec["containers"]
    pods = []
    for index in range(job_spec["completions"]):
        annotations = {COMPLETION_INDEX: str(index)}
        hostname = f"{job_name}-{index}"
        env = {
            "JOB_COMPLETION_INDEX": str(index),
            **_resolve_env(container, annotations, hostname),
            **(extra_env or {}),
        }
        pods.append(
            Pod(
                hostname,
                f"{hostname}.{subdomain}",
                env,
                container["command"],
                container.get("args", []),
                _ports(container),
                _gpus(container),
                owner or job_name,
                index,
            )
        )
    return pods


def _job_pods(objects: list[dict[str, Any]]) -> list[Pod]:
    (service,) = [o for o in objects if o["kind"] == "Service"]
    jobs = [o for o in objects if o["kind"] == "Job"]
    assert jobs
    pods: list[Pod] = []
    for job in jobs:  # one Indexed Job per node group, all behind the one headless Service
        pod_template = job["spec"]["template"]
        subdomain = pod_template["spec"]["subdomain"]
        # A pod gets <hostname>.<subdomain> DNS only through a headless Service of that name that selects it.
        assert service["metadata"]["name"] == subdomain
        assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
        assert service["spec"]["selector"].items() <= pod_template["metadata"]["labels"].items()
        pods += _indexed_pods(job["metadata"]["name"], job["spec"], subdomain)
    return pods


def _jobset_pods(objects: list[dict[str, Any]]) -> list[Pod]:
    (jobset,) = objects
    name = jobset["metadata"]["name"]
    network = jobset["spec"].get("network", {})
    subdomain = network.get("subdomain") or name
    assert network.get("enableDNSHostnames", True)
    pods: list[Pod] = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        for job_index in range(rjob.get("replicas", 1)):
            pods += _indexed_pods(
                f"{name}-{rjob['name']}-{job_index}", rjob["template"]["spec"], subdomain, owner=rjob["name"]
            )
    return pods


def _pytorchjob_pods(objects: list[dict[str, Any]]) -> list[Pod]:
    (job,) = objects
    name = job["metadata"]["name"]
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    elastic = spec.get("elasticPolicy")
    nproc = spec.get("nprocPerNode", "auto")
    total = sum(r.get("replicas", 1) for r in replicas.values())
    pods: list[Pod] = []
    node_rank = 0
    for rtype in ("Master", "Worker"):
        if rtype not in replicas:
            continue
        (container,) = [c for c in replicas[rtype]["template"]["spec"]["containers"] if c["name"] == "pytorch"]
        port = _ports(container).get("pytorchjob-port", PYTORCHJOB_DEFAULT_PORT)
        for i in range(replicas[rtype].get("replicas", 1)):
            hostname = f"{name}-{rtype.lower()}-{i}"
            injected = {"PYTHONUNBUFFERED": "1", "PET_NPROC_PER_NODE": str(nproc)}
            if elastic:
                host = elastic.get("rdzvHost") or f"{name}-worker-0"
                injected |= {
                    "PET_RDZV_ENDPOINT": f"{host}:{elastic.get('rdzvPort', PYTORCHJOB_DEFAULT_PORT)}",
                    "PET_RDZV_BACKEND": elastic.get("rdzvBackend", "c10d"),
                    "PET_NNODES": f"{elastic['minReplicas']}:{elastic['maxReplicas']}",
                    "PET_MAX_RESTARTS": str(elastic.get("maxRestarts", 3)),
                }
            else:
                master = f"{name}-master-0"
                world = total * (int(nproc) if str(nproc).isdigit() else 1)
                injected |= {
                    "MASTER_ADDR": master,
                    "PET_MASTER_ADDR": master,
                    "MASTER_PORT": str(port),
                    "PET_MASTER_PORT": str(port),
                    "WORLD_SIZE": str(world),
                    "RANK": str(node_rank),
                    "PET_NODE_RANK": str(node_rank),
                    "PET_NNODES": str(total),
                }
            own = _resolve_env(container, {}, hostname)
            clash = {k for k in own if k in injected and own[k] != injected[k]}
            assert not clash, f"manifest sets {clash}, which the operator owns"
            # Each replica gets a Service of its own name: its hostname is its DNS name.
            pods.append(
                Pod(
                    hostname,
                    hostname,
                    {**own, **injected},
                    container["command"],
                    container.get("args", []),
                    _ports(container),
                    _gpus(container),
                    rtype,
                    i,
                )
            )
            node_rank += 1
    return pods


def _trainjob_pods(objects: list[dict[str, Any]]) -> list[Pod]:
    (tj,) = objects
    name = tj["metadata"]["name"]
    assert tj["spec"]["runtimeRef"]["name"] == "torch-distributed"
    trainer = tj["spec"]["trainer"]
    pods = []
    for index in range(trainer["numNodes"]):
        hostname = f"{name}-node-0-{index}"
        env = {item["name"]: item["value"] for item in trainer.get("env", []) if "value" in item}
        env |= {
            "PET_NNODES": str(trainer["numNodes"]),
            "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
            "PET_NODE_RANK": str(index),
            "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
            "PET_MASTER_PORT": str(TRAINER_V2_PORT),
        }
        pods.append(Pod(hostname, f"{hostname}.{name}", env, trainer["command"], trainer.get("args", []), {}))
    return pods


ENGINES = {"Job": _job_pods, "JobSet": _jobset_pods, "PyTorchJob": _pytorchjob_pods, "TrainJob": _trainjob_pods}


def launch(objects: list[dict[str, Any]]) -> list[Pod]:
    kinds = {o["kind"] for o in objects}
    (workload,) = kinds & set(ENGINES)
    return ENGINES[workload](objects)


_TORCHRUN_FLAGS = {
    "nnodes",
    "nproc-per-node",
    "node-rank",
    "master-addr",
    "master-port",
    "rdzv-backend",
    "rdzv-endpoint",
    "rdzv-id",
    "rdzv-conf",
    "max-restarts",
}


def run_launcher(code: str, env: dict[str, str], argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Run a `python3 -c CODE ...` command's CODE for real, with a stand-in `torch.distributed.run`
    whose main() reports the env and argv torchrun would have started with."""
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "torch" / "distributed"
        pkg.mkdir(parents=True)
        (Path(tmp) / "torch" / "__init__.py").write_text("")
        (pkg / "__init__.py").write_text("")
        (pkg / "run.py").write_text(
            "import json, os, sys\n"
            "def main(args=None):\n"
            "    print(json.dumps({'env': dict(os.environ), 'argv': sys.argv[1:] if args is None else args}))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, *argv],
            env={**env, "PYTHONPATH": tmp},
            capture_output=True,
            text=True,
            check=True,
        )
    out = json.loads(proc.stdout)
    return {k: v for k, v in out["env"].items() if k != "PYTHONPATH"}, out["argv"]


def torchrun_settings(pod: Pod) -> Torchrun:
    """torchrun's view: each option from its flag, else from PET_<OPTION>, else its default."""
    command = pod.command
    if command[:2] == ["python3", "-c"]:  # a launcher that ends in torchrun: run it to see what it changes
        env, rest = run_launcher(command[2], pod.env, command[3:] + pod.args)
        pod = Pod(pod.hostname, pod.dns_name, env, ["torchrun", *rest], [], pod.ports, pod.gpus, pod.owner, pod.index)
    if command[:3] == ["python3", "-m", "ddpctl_trainer.launch"]:  # torchrun's arguments, plus the group offset
        from ddpctl_trainer.launch import set_node_rank

        env = dict(pod.env)
        set_node_rank(env)
        pod = Pod(
            pod.hostname,
            pod.dns_name,
            env,
            ["torchrun", *command[3:]],
            pod.args,
            pod.ports,
            pod.gpus,
            pod.owner,
            pod.index,
        )
    assert pod.command[0] == "torchrun", pod.command
    flags: dict[str, str] = {}
    argv = pod.command[1:] + pod.args
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        key, _, value = argv[i][2:].partition("=")
        key = key.replace("_", "-")
        assert key in _TORCHRUN_FLAGS, f"unexpected torchrun flag {key}"
        if not value:
            i += 1
            value = argv[i]
        flags[key] = value
        i += 1

    def opt(key: str, default: str | None) -> str | None:
        return flags.get(key, pod.env.get("PET_" + key.upper().replace("-", "_"), default))

    node_rank = opt("node-rank", None)
    port = opt("master-port", None)
    return Torchrun(
        nnodes=opt("nnodes", "1"),  # type: ignore[arg-type]
        nproc_per_node=int(opt("nproc-per-node", "1")),  # type: ignore[arg-type]
        node_rank=int(node_rank) if node_rank is not None else None,
        master_addr=opt("master-addr", None),
        master_port=int(port) if port else None,
        rdzv_backend=opt("rdzv-backend", "static"),  # type: ignore[arg-type]
        rdzv_endpoint=opt("rdzv-endpoint", None),
    )
