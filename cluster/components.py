"""What runs on the control plane: kwok's simulated GPU nodes and the four engines' controllers.

Each installer applies the component's upstream CRDs and webhook configurations, read from the Go
module cache of the very version that was built (so manifests and binary always match), with every
webhook's `clientConfig` rewritten to `url: https://127.0.0.1:PORT/...` and our CA.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml
from node import PAUSE_IMAGE
from up import GOMOD, HERE, PORTS, STATE, Cluster, V, https_answers, start, wait_for

# Simulated nodes, shaped like a small GPU cluster: 2 blocks x 2 racks x 2 nodes of 8 GPUs. The
# topology labels are the ones Kueue's Topology object names (block, rack, host).
BLOCK_LABEL = "cloud.ddpctl.io/topology-block"
RACK_LABEL = "cloud.ddpctl.io/topology-rack"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


def module_dir(module: str, version: str) -> Path:
    """A module's source in the module cache (the build put it there); `!x` escapes capitals."""
    escaped = "".join(f"!{ch.lower()}" if ch.isupper() else ch for ch in module)
    path = GOMOD / f"{escaped}@{version}"
    if not path.is_dir():
        raise SystemExit(f"cluster: error: {path} is missing: run cluster/scripts/build.sh first")
    return path


def load_docs(*paths: Path) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for f in files:
            if f.name in ("kustomization.yaml", "kustomizeconfig.yaml"):
                continue
            docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return docs


def ca_bundle(ca: str = "ca") -> str:
    return base64.b64encode((STATE / f"pki/{ca}.crt").read_bytes()).decode()


def point_webhooks_at(docs: list[dict[str, Any]], port: int, ca: str = "ca") -> list[dict[str, Any]]:
    """Webhook configurations and CRD conversion webhooks call 127.0.0.1:port instead of a Service."""
    for d in docs:
        if d.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in d.get("webhooks") or []:
                svc = hook["clientConfig"].pop("service", None) or {}
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{svc.get('path', '/')}",
                    "caBundle": ca_bundle(ca),
                }
        conv = ((d.get("spec") or {}).get("conversion") or {}) if d.get("kind") == "CustomResourceDefinition" else {}
        if conv.get("strategy") == "Webhook":
            cc = conv["webhook"]["clientConfig"]
            svc = cc.pop("service", None) or {}
            conv["webhook"]["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{svc.get('path', '/convert')}",
                "caBundle": ca_bundle(ca),
            }
    return docs


def json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """The `replace`/`add`/`remove` operations kustomize's JSON6902 patches use, on simple paths."""
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if op["op"] == "remove":
                node.pop(index)
            elif op["op"] == "add":
                node.insert(index, op["value"])
            else:
                node[index] = op["value"]
        elif op["op"] == "remove":
            node.pop(last, None)
        else:
            node[last] = op["value"]


def prefixed(docs: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """kustomize's namePrefix for the cluster-scoped objects that would clash across controllers."""
    for d in docs:
        if d["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            d["metadata"]["name"] = f"{prefix}-{d['metadata']['name']}"
    return docs


def install_crds(c: Cluster, docs: list[dict[str, Any]], what: str) -> None:
    """Apply CRDs and wait until the API serves each (Established)."""
    c.apply(docs, what)
    names = [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"]

    def established() -> bool:
        items = json.loads(c.kubectl("get", "crd", "-o", "json"))["items"]
        ok = {
            i["metadata"]["name"]
            for i in items
            if any(
                x["type"] == "Established" and x["status"] == "True"
                for x in (i.get("status") or {}).get("conditions") or []
            )
        }
        return set(names) <= ok

    wait_for(f"{what} Established", established, 60)


def controller_config(name: str, config: dict[str, Any]) -> Path:
    import yaml as _yaml

    path = STATE / f"{name}-config.yaml"
    path.write_text(_yaml.safe_dump(config, sort_keys=False))
    return path


def webhook_answers(port: int) -> bool:
    """A controller-runtime webhook server answers (404 for an unknown path) with our certificate."""
    return https_answers(port, "/", want=(200, 404, 405))


# ------------------------------------------------------------------------------------------ kwok


def kwok_stages() -> list[dict[str, Any]]:
    """Upstream's node and pod stages, our pod-complete guard, and our failure stages.

    Upstream's pod-complete finishes every Job-owned pod at once; ours leaves alone a pod that a
    failure stage is about to fail, and waits for the pod's `pod-complete.stage.kwok.x-k8s.io/delay`
    annotation (a Go duration) when it has one, so a test can keep pods running."""
    stage = module_dir("sigs.k8s.io/kwok", V["KWOK_VERSION"]) / "kustomize/stage"
    docs = load_docs(stage / "node/fast", stage / "node/heartbeat-with-lease", stage / "pod/fast")
    docs = [d for d in docs if d["metadata"]["name"] != "pod-delete"]  # ours terminates first, then deletes
    for d in docs:
        if d["metadata"]["name"] == "pod-complete":
            d["spec"]["selector"]["matchExpressions"] += [
                {"key": f'.metadata.annotations["{key}"]', "operator": "DoesNotExist"}
                for key in ("pod-fail-exit-code.stage.kwok.x-k8s.io/exit-code",
                            "pod-disruption-failed.stage.kwok.x-k8s.io/reason")
            ]  # fmt: skip
            d["spec"]["delay"] = {
                "durationMilliseconds": 0,
                "durationFrom": {"expressionFrom": '.metadata.annotations["pod-complete.stage.kwok.x-k8s.io/delay"]'},
            }
    return docs + load_docs(HERE / "kwok-stages.yaml")


def kwok_node(name: str, block: int, rack: int) -> dict[str, Any]:
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


def kwok_nodes(count: int = 8, prefix: str = "gpu-node") -> list[dict[str, Any]]:
    return [kwok_node(f"{prefix}-{i}", block=i // 4, rack=(i // 2) % 2) for i in range(count)]


def set_kwok_nodes(c: Cluster, count: int) -> None:
    """Grow or shrink the simulated nodes to `count` and wait until kwok reports each Ready."""
    have = json.loads(c.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json"))["items"]
    extra = [n["metadata"]["name"] for n in have if int(n["metadata"]["name"].rsplit("-", 1)[1]) >= count]
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


# ------------------------------------------------------------------------------------------ JobSet


def jobset(c: Cluster) -> None:
    src = module_dir("sigs.k8s.io/jobset", V["JOBSET_VERSION"]) / "config/components"
    hooks = load_docs(src / "webhook/manifests.yaml")
    for d in hooks:  # the pod webhooks only see JobSet pods (config/components/webhook/patches)
        patch = src / "webhook/patches" / ("mutating-patch.yaml" if d["kind"].startswith("Mutating") else
                                           "validating-patch.yaml")  # fmt: skip
        json_patch(d, yaml.safe_load(patch.read_text()))
    install_crds(c, load_docs(src / "crd/bases"), "the JobSet CRD")
    port = PORTS["jobset"]
    cfg = controller_config("jobset", {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(STATE / "pki/webhook-certs")},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{port + 1}"},
    })  # fmt: skip
    start("jobset", [c.exe("jobset"), f"--kubeconfig={c.kubeconfig}", f"--config={cfg}", "--zap-log-level=error"])
    wait_for("the JobSet webhook", lambda: webhook_answers(port), 60, "jobset")
    c.apply(prefixed(point_webhooks_at(hooks, port), "jobset"), "JobSet webhooks")


# ------------------------------------------------------------------------------------------ Trainer v2


def serving_certs_tmpdir(name: str) -> dict[str, str]:
    """controller-runtime's default cert folder is $TMPDIR/k8s-webhook-server/serving-certs: a TMPDIR
    per controller gives each the folder it expects without a shared fixed path."""
    tmp = STATE / "tmp" / name
    certs = tmp / "k8s-webhook-server/serving-certs"
    certs.mkdir(parents=True, exist_ok=True)
    for f in ("tls.crt", "tls.key", "ca.crt"):
        (certs / f).write_bytes((STATE / "pki/webhook-certs" / f).read_bytes())
    return {"TMPDIR": str(tmp)}


def trainer(c: Cluster) -> None:
    src = module_dir("github.com/kubeflow/trainer/v2", V["TRAINER_VERSION"]) / "manifests/base"
    install_crds(c, load_docs(src / "crds"), "the Trainer v2 CRDs")
    hooks = load_docs(src / "webhook/manifests.yaml")
    for d in hooks:
        patch = (
            src / "webhook" / ("patch_mutating.yaml" if d["kind"].startswith("Mutating") else "patch_validating.yaml")
        )
        json_patch(d, [op for op in yaml.safe_load(patch.read_text()) if op["path"] == "/metadata/name"])
    port = PORTS["trainer"]
    cfg = controller_config("trainer", {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{port + 1}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": port, "host": "127.0.0.1"},
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        "statusServer": {"port": port + 2},
    })  # fmt: skip
    start("trainer", [c.exe("trainer-controller-manager"), f"--kubeconfig={c.kubeconfig}", f"--config={cfg}",
                      "--zap-log-level=error"], env=serving_certs_tmpdir("trainer"))  # fmt: skip
    wait_for("the Trainer v2 webhook", lambda: webhook_answers(port), 60, "trainer")
    c.apply(point_webhooks_at(hooks, port), "Trainer v2 webhooks")
    c.apply(load_docs(src / "runtimes/torch_distributed.yaml"), "the torch-distributed runtime")


# ------------------------------------------------------------------------------------------ training-operator


# The operator adds this init container to every PyTorchJob worker, to wait for the master's name.
# Its built-in one (alpine, `nslookup`) sets no securityContext, so Pod Security "restricted"
# refuses the worker pods; a platform team gives the operator a template like this one. Ours runs
# the node's pause program (cluster/node/go/pause), the one image every node has.
PYTORCH_INIT_CONTAINER = """\
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  command: ["/pause", "wait-for-dns", "{{.MasterAddr}}", "{{.MaxTries}}"]
  resources:
    limits: {cpu: 100m, memory: 20Mi}
    requests: {cpu: 50m, memory: 10Mi}
  securityContext:
    allowPrivilegeEscalation: false
    capabilities: {drop: [ALL]}
    runAsNonRoot: true
    runAsUser: 65535
    seccompProfile: {type: RuntimeDefault}
"""


def training_operator(c: Cluster) -> None:
    """The v1 operator, for PyTorchJob only. It has no switch for its cert rotator: it keeps the
    certificate it finds in its Secret when that one is valid for its Service name, waits for the
    Secret's files in its fixed folder /tmp/k8s-webhook-server/serving-certs (in a pod, a mounted
    volume; here we write them) and injects the CA into its webhook configuration."""
    src = module_dir("github.com/kubeflow/training-operator", V["TRAINING_OPERATOR_VERSION"]) / "manifests/base"
    install_crds(c, load_docs(src / "crds/kubeflow.org_pytorchjobs.yaml"), "the PyTorchJob CRD")
    pki = STATE / "pki"
    secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "training-operator-webhook-cert", "namespace": "kubeflow"},
        "data": {k: base64.b64encode((pki / f).read_bytes()).decode()
                 for k, f in (("ca.crt", "to-ca.crt"), ("ca.key", "to-ca.key"), ("tls.crt", "to-webhook.crt"),
                              ("tls.key", "to-webhook.key"))},
    }  # fmt: skip
    hooks = load_docs(src / "webhook/manifests.yaml")
    for d in hooks:
        d["metadata"]["name"] = "validator.training-operator.kubeflow.org"
        d["webhooks"] = [h for h in d["webhooks"] if "pytorchjob" in h["name"]]
    certs = Path("/tmp/k8s-webhook-server/serving-certs")  # noqa: S108 - the operator's fixed path
    certs.mkdir(parents=True, exist_ok=True)
    for f in ("tls.crt", "tls.key"):
        (certs / f).write_bytes(base64.b64decode(secret["data"][f]))
    port = PORTS["training-operator"]
    init = STATE / "pytorch-init-container.yaml"
    init.write_text(PYTORCH_INIT_CONTAINER)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow"}}
    c.apply([namespace, secret, *point_webhooks_at(hooks, port, "to-ca")], "the training-operator's Secret, webhook")
    start("training-operator", [
        c.exe("training-operator.v1"), f"--kubeconfig={c.kubeconfig}", "--enable-scheme=pytorchjob",
        f"--webhook-server-port={port}", f"--health-probe-bind-address=127.0.0.1:{port + 1}",
        "--metrics-bind-address=0", "--leader-elect=false", "--zap-log-level=error", "--zap-devel=false",
        f"--pytorch-init-container-template-file={init}", f"--pytorch-init-container-image={PAUSE_IMAGE}",
    ], env={"MY_POD_NAMESPACE": "kubeflow"})  # fmt: skip
    wait_for("the training-operator webhook", lambda: https_answers(port, "/", (404, 405), ca="to-ca"), 60,
             "training-operator")  # fmt: skip


# ------------------------------------------------------------------------------------------ Kueue

# The integrations Kueue manages here: our four engines. PyTorchJob is deprecated in Kueue and off
# by default from v0.19, so it is named explicitly.
KUEUE_FRAMEWORKS = ["batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob", "trainer.kubeflow.org/trainjob"]
# Webhooks kept: Kueue's own objects and the integrations above (a webhook whose integration is off
# is not served, and failurePolicy Fail would then refuse every such object, e.g. every Deployment).
KUEUE_HOOKS = {"clusterqueue", "cohort", "resourceflavor", "workload", "localqueue", "job", "jobset", "pytorchjob",
               "trainjob"}  # fmt: skip
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # fixed in cmd/kueue when its cert manager is off


def kueue(c: Cluster) -> None:
    src = module_dir("sigs.k8s.io/kueue", V["KUEUE_VERSION"]) / "config/components"
    port = PORTS["kueue"]
    crds = load_docs(src / "crd/bases")
    listed = yaml.safe_load((src / "crd/kustomization.yaml").read_text())["patches"]  # only these are applied
    conversion = {d["metadata"]["name"]: d["spec"]["conversion"]
                  for d in load_docs(*(src / "crd" / p["path"] for p in listed))}  # fmt: skip
    for d in crds:
        if d["metadata"]["name"] in conversion:
            d["spec"]["conversion"] = conversion[d["metadata"]["name"]]
    hooks = load_docs(src / "webhook/manifests.yaml")
    outside = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                     "values": ["kube-system", "kueue-system"]}]}  # fmt: skip
    for d in hooks:
        d["webhooks"] = [h for h in d["webhooks"] if h["name"].split(".")[0][1:] in KUEUE_HOOKS]
        for h in d["webhooks"]:
            if h["name"].split(".")[0][1:] in {"job", "jobset", "pytorchjob", "trainjob"}:
                h["namespaceSelector"] = outside
    KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
    for f in ("tls.crt", "tls.key"):
        (KUEUE_METRICS_CERTS / f).write_bytes((STATE / "pki/webhook-certs" / f).read_bytes())
    # The conversion webhooks must answer before the CRDs can serve, so the manager starts first.
    c.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}], "kueue-system")
    install_crds(c, point_webhooks_at(crds, port), "the Kueue CRDs")
    cfg = controller_config("kueue", {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{port + 1}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(STATE / "pki/webhook-certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": KUEUE_FRAMEWORKS},
        "featureGates": {"VisibilityOnDemand": False},
    })  # fmt: skip
    start("kueue", [c.exe("kueue"), f"--kubeconfig={c.kubeconfig}", f"--config={cfg}", "--zap-log-level=error"])
    wait_for("the Kueue webhook", lambda: webhook_answers(port), 90, "kueue")
    c.apply(prefixed(point_webhooks_at(hooks, port), "kueue"), "Kueue webhooks")


# ------------------------------------------------------------------------------------------ all


def install_all(c: Cluster) -> None:
    c.timed("kwok", lambda: kwok(c))
    c.timed("jobset", lambda: jobset(c))
    c.timed("trainer", lambda: trainer(c))
    c.timed("training-operator", lambda: training_operator(c))
    c.timed("kueue", lambda: kueue(c))
