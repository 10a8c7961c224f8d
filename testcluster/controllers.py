"""The engines' controllers: JobSet, Kubeflow Trainer v2, the training-operator v1 and Kueue.

Each installer applies the component's upstream CRDs and webhook configurations (testcluster.manifests),
starts its manager as a host process that serves its own webhooks on 127.0.0.1 with our
certificates, and waits until they answer. What each one edits in upstream's manifests, and its
configuration file, are pure functions below its installer."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml

from testcluster.kube import Cluster
from testcluster.manifests import Doc, ca_bundle, json_patch, load_docs, module_dir, point_webhooks_at, prefixed
from testcluster.procs import https_answers, start, wait_for
from testcluster.settings import PAUSE_IMAGE, PORTS, STATE, V

WEBHOOK_CERTS = STATE / "pki/webhook-certs"  # tls.crt, tls.key and ca.crt, as controller-runtime reads them


def install_crds(c: Cluster, docs: list[Doc], what: str) -> None:
    """Apply CRDs and wait until the API serves each (Established)."""
    c.apply(docs, what)
    names = [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"]

    def established() -> bool:
        items = json.loads(c.kubectl("get", "crd", "-o", "json"))["items"]
        return set(names) <= established_crds(items)

    wait_for(f"{what} Established", established, 60)


def established_crds(items: list[Doc]) -> set[str]:
    """The names of the CRDs whose Established condition is True."""
    return {
        i["metadata"]["name"]
        for i in items
        if any(
            x["type"] == "Established" and x["status"] == "True"
            for x in (i.get("status") or {}).get("conditions") or []
        )
    }


def controller_config(name: str, config: Doc) -> Path:
    path = STATE / f"{name}-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def webhook_answers(port: int) -> bool:
    """A controller-runtime webhook server answers (404 for an unknown path) with our certificate."""
    return https_answers(port, "/", want=(200, 404, 405))


def manager_config(api_version: str, name: str, ports: dict[str, int], **fields: Any) -> Doc:
    """A controller-runtime manager's Configuration: webhooks and health probes on loopback at the
    ports of `name`, no metrics server, no leader election; `fields` add to it."""
    return {
        "apiVersion": api_version,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports[f'{name}-health']}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": ports[name], "host": "127.0.0.1"},
        "leaderElection": {"leaderElect": False},
        **fields,
    }


# ------------------------------------------------------------------------------------------ JobSet


def jobset_webhooks(hooks: list[Doc], patches: Path) -> list[Doc]:
    """The pod webhooks only see JobSet pods (upstream's config/components/webhook/patches)."""
    for d in hooks:
        patch = patches / ("mutating-patch.yaml" if d["kind"].startswith("Mutating") else "validating-patch.yaml")
        json_patch(d, yaml.safe_load(patch.read_text()))
    return hooks


def jobset_config(certdir: Path, ports: dict[str, int] = PORTS) -> Doc:
    cfg = manager_config("config.jobset.x-k8s.io/v1alpha1", "jobset", ports, internalCertManagement={"enable": False})
    cfg["webhook"]["certDir"] = str(certdir)
    return cfg


def jobset(c: Cluster) -> None:
    src = module_dir("sigs.k8s.io/jobset", V["JOBSET_VERSION"]) / "config/components"
    hooks = jobset_webhooks(load_docs(src / "webhook/manifests.yaml"), src / "webhook/patches")
    install_crds(c, load_docs(src / "crd/bases"), "the JobSet CRD")
    port = PORTS["jobset"]
    cfg = controller_config("jobset", jobset_config(WEBHOOK_CERTS))
    start("jobset", [c.exe("jobset"), f"--kubeconfig={c.kubeconfig}", f"--config={cfg}", "--zap-log-level=error"])
    wait_for("the JobSet webhook", lambda: webhook_answers(port), 60, "jobset")
    c.apply(prefixed(point_webhooks_at(hooks, port, ca_bundle()), "jobset"), "JobSet webhooks")


# ------------------------------------------------------------------------------------------ Trainer v2


def trainer_webhooks(hooks: list[Doc], patches: Path) -> list[Doc]:
    """Of upstream's webhook patches, only the names: the rest points at its Service, which we replace."""
    for d in hooks:
        patch = patches / ("patch_mutating.yaml" if d["kind"].startswith("Mutating") else "patch_validating.yaml")
        json_patch(d, [op for op in yaml.safe_load(patch.read_text()) if op["path"] == "/metadata/name"])
    return hooks


def trainer_config(ports: dict[str, int] = PORTS) -> Doc:
    return manager_config("config.trainer.kubeflow.org/v1alpha1", "trainer", ports, certManagement={"enable": False},
                          statusServer={"port": ports["trainer-status"]})  # fmt: skip


def serving_certs_tmpdir(name: str) -> dict[str, str]:
    """controller-runtime's default cert folder is $TMPDIR/k8s-webhook-server/serving-certs: a TMPDIR
    per controller gives each the folder it expects without a shared fixed path."""
    tmp = STATE / "tmp" / name
    certs = tmp / "k8s-webhook-server/serving-certs"
    certs.mkdir(parents=True, exist_ok=True)
    for f in ("tls.crt", "tls.key", "ca.crt"):
        (certs / f).write_bytes((WEBHOOK_CERTS / f).read_bytes())
    return {"TMPDIR": str(tmp)}


def trainer(c: Cluster) -> None:
    src = module_dir("github.com/kubeflow/trainer/v2", V["TRAINER_VERSION"]) / "manifests/base"
    install_crds(c, load_docs(src / "crds"), "the Trainer v2 CRDs")
    hooks = trainer_webhooks(load_docs(src / "webhook/manifests.yaml"), src / "webhook")
    port = PORTS["trainer"]
    cfg = controller_config("trainer", trainer_config())
    start("trainer", [c.exe("trainer-controller-manager"), f"--kubeconfig={c.kubeconfig}", f"--config={cfg}",
                      "--zap-log-level=error"], env=serving_certs_tmpdir("trainer"))  # fmt: skip
    wait_for("the Trainer v2 webhook", lambda: webhook_answers(port), 60, "trainer")
    c.apply(point_webhooks_at(hooks, port, ca_bundle()), "Trainer v2 webhooks")
    c.apply(load_docs(src / "runtimes/torch_distributed.yaml"), "the torch-distributed runtime")


# ------------------------------------------------------------------------------------------ training-operator


# The operator adds this init container to every PyTorchJob worker, to wait for the master's name.
# Its built-in one (alpine, `nslookup`) sets no securityContext, so Pod Security "restricted"
# refuses the worker pods; a platform team gives the operator a template like this one. Ours runs
# the node's pause program (testcluster/node/go/pause), the one image every node has.
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
# The operator's fixed folder for its webhook certificates (pkg/cert); in a pod, a mounted Secret.
TRAINING_OPERATOR_CERTS = Path("/tmp/k8s-webhook-server/serving-certs")  # noqa: S108


def training_operator_secret(pki: Path) -> Doc:
    """The Secret its cert rotator reads: our to-ca and the serving certificate it signed."""
    files = (("ca.crt", "to-ca.crt"), ("ca.key", "to-ca.key"), ("tls.crt", "to-webhook.crt"),
             ("tls.key", "to-webhook.key"))  # fmt: skip
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "training-operator-webhook-cert", "namespace": "kubeflow"},
        "data": {k: base64.b64encode((pki / f).read_bytes()).decode() for k, f in files},
    }  # fmt: skip


def training_operator_webhooks(hooks: list[Doc]) -> list[Doc]:
    """PyTorchJob's webhook only (the operator serves only the schemes it runs), under the name its
    rotator looks for to inject its CA."""
    for d in hooks:
        d["metadata"]["name"] = "validator.training-operator.kubeflow.org"
        d["webhooks"] = [h for h in d["webhooks"] if "pytorchjob" in h["name"]]
    return hooks


def training_operator(c: Cluster) -> None:
    """The v1 operator, for PyTorchJob only. It has no switch for its cert rotator: it keeps the
    certificate it finds in its Secret when that one is valid for its Service name, waits for the
    Secret's files in its fixed folder (in a pod, a mounted volume; here we write them) and injects
    the CA into its webhook configuration."""
    src = module_dir("github.com/kubeflow/training-operator", V["TRAINING_OPERATOR_VERSION"]) / "manifests/base"
    install_crds(c, load_docs(src / "crds/kubeflow.org_pytorchjobs.yaml"), "the PyTorchJob CRD")
    secret = training_operator_secret(STATE / "pki")
    hooks = training_operator_webhooks(load_docs(src / "webhook/manifests.yaml"))
    TRAINING_OPERATOR_CERTS.mkdir(parents=True, exist_ok=True)
    for f in ("tls.crt", "tls.key"):
        (TRAINING_OPERATOR_CERTS / f).write_bytes(base64.b64decode(secret["data"][f]))
    port = PORTS["training-operator"]
    init = STATE / "pytorch-init-container.yaml"
    init.write_text(PYTORCH_INIT_CONTAINER)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow"}}
    c.apply([namespace, secret, *point_webhooks_at(hooks, port, ca_bundle("to-ca"))],
            "the training-operator's Secret, webhook")  # fmt: skip
    start("training-operator", [
        c.exe("training-operator.v1"), f"--kubeconfig={c.kubeconfig}", "--enable-scheme=pytorchjob",
        f"--webhook-server-port={port}", f"--health-probe-bind-address=127.0.0.1:{PORTS['training-operator-health']}",
        "--metrics-bind-address=0", "--leader-elect=false", "--zap-log-level=error", "--zap-devel=false",
        f"--pytorch-init-container-template-file={init}", f"--pytorch-init-container-image={PAUSE_IMAGE}",
    ], env={"MY_POD_NAMESPACE": "kubeflow"})  # fmt: skip
    wait_for("the training-operator webhook", lambda: https_answers(port, "/", (404, 405), ca="to-ca"), 60,
             "training-operator")  # fmt: skip


# ------------------------------------------------------------------------------------------ Kueue

# The integrations Kueue manages here: our four engines. PyTorchJob is deprecated in Kueue and off
# by default from v0.19, so it is named explicitly.
KUEUE_FRAMEWORKS = ["batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob", "trainer.kubeflow.org/trainjob"]
# The webhooks of the engines' objects: they skip the system namespaces.
KUEUE_JOB_HOOKS = {"job", "jobset", "pytorchjob", "trainjob"}
# Webhooks kept: Kueue's own objects and the integrations above (a webhook whose integration is off
# is not served, and failurePolicy Fail would then refuse every such object, e.g. every Deployment).
KUEUE_HOOKS = {"clusterqueue", "cohort", "resourceflavor", "workload", "localqueue", *KUEUE_JOB_HOOKS}
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # fixed in cmd/kueue when its cert manager is off


def kueue_hook_kind(name: str) -> str:
    """`mjob.kb.io` -> `job`: a Kueue webhook's object kind (its name without the m/v prefix)."""
    return name.split(".")[0][1:]


def kueue_webhooks(hooks: list[Doc]) -> list[Doc]:
    outside = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                     "values": ["kube-system", "kueue-system"]}]}  # fmt: skip
    for d in hooks:
        d["webhooks"] = [h for h in d["webhooks"] if kueue_hook_kind(h["name"]) in KUEUE_HOOKS]
        for h in d["webhooks"]:
            if kueue_hook_kind(h["name"]) in KUEUE_JOB_HOOKS:
                h["namespaceSelector"] = outside
    return hooks


def kueue_crds(crds: list[Doc], patches: list[Doc]) -> list[Doc]:
    """The conversion webhooks of the CRDs upstream's crd/kustomization.yaml patches (only those)."""
    conversion = {d["metadata"]["name"]: d["spec"]["conversion"] for d in patches}
    for d in crds:
        if d["metadata"]["name"] in conversion:
            d["spec"]["conversion"] = conversion[d["metadata"]["name"]]
    return crds


def kueue_config(certdir: Path, ports: dict[str, int] = PORTS) -> Doc:
    cfg = manager_config(
        "config.kueue.x-k8s.io/v1beta2", "kueue", ports, namespace="kueue-system",
        internalCertManagement={"enable": False}, manageJobsWithoutQueueName=False,
        integrations={"frameworks": KUEUE_FRAMEWORKS}, featureGates={"VisibilityOnDemand": False},
    )  # fmt: skip
    cfg["webhook"]["certDir"] = str(certdir)
    return cfg


def kueue(c: Cluster) -> None:
    src = module_dir("sigs.k8s.io/kueue", V["KUEUE_VERSION"]) / "config/components"
    port = PORTS["kueue"]
    listed = yaml.safe_load((src / "crd/kustomization.yaml").read_text())["patches"]
    crds = kueue_crds(load_docs(src / "crd/bases"), load_docs(*(src / "crd" / p["path"] for p in listed)))
    hooks = kueue_webhooks(load_docs(src / "webhook/manifests.yaml"))
    KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
    for f in ("tls.crt", "tls.key"):
        (KUEUE_METRICS_CERTS / f).write_bytes((WEBHOOK_CERTS / f).read_bytes())
    # The conversion webhooks must answer before the CRDs can serve, so the manager starts first.
    c.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}], "kueue-system")
    install_crds(c, point_webhooks_at(crds, port, ca_bundle()), "the Kueue CRDs")
    cfg = controller_config("kueue", kueue_config(WEBHOOK_CERTS))
    start("kueue", [c.exe("kueue"), f"--kubeconfig={c.kubeconfig}", f"--config={cfg}", "--zap-log-level=error"])
    wait_for("the Kueue webhook", lambda: webhook_answers(port), 90, "kueue")
    c.apply(prefixed(point_webhooks_at(hooks, port, ca_bundle()), "kueue"), "Kueue webhooks")


# ------------------------------------------------------------------------------------------ all


def up(c: Cluster) -> None:
    c.timed("jobset", lambda: jobset(c))
    c.timed("trainer", lambda: trainer(c))
    c.timed("training-operator", lambda: training_operator(c))
    c.timed("kueue", lambda: kueue(c))
