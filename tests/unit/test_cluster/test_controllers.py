"""testcluster.controllers, the parts that need no cluster: the managers' configuration files, what each
installer keeps and edits of upstream's webhooks and CRDs, and the Secret the operator reads."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from testcluster.controllers import (
    KUEUE_FRAMEWORKS,
    KUEUE_HOOKS,
    KUEUE_JOB_HOOKS,
    established_crds,
    jobset_config,
    jobset_webhooks,
    kueue_config,
    kueue_crds,
    kueue_hook_kind,
    kueue_webhooks,
    trainer_config,
    trainer_webhooks,
    training_operator_secret,
    training_operator_webhooks,
)
from testcluster.settings import ports

PORTS = ports(5000)
CERTS = Path("/state/pki/webhook-certs")


def crd_status(name: str, *conditions: tuple[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}


@pytest.mark.parametrize(
    ("items", "names"),
    [
        ([crd_status("a", ("NamesAccepted", "True"), ("Established", "True"))], {"a"}),
        ([crd_status("a", ("Established", "False"))], set()),
        ([crd_status("a", ("NamesAccepted", "True"))], set()),
        ([{"metadata": {"name": "new"}}, crd_status("b", ("Established", "True"))], {"b"}),  # no status yet
    ],
)
def test_a_crd_counts_as_served_once_established(items: list[dict[str, Any]], names: set[str]) -> None:
    assert established_crds(items) == names


CONFIGS = [
    # name, its configuration, the fields beyond the common ones
    ("jobset", jobset_config(CERTS, PORTS), {"internalCertManagement": {"enable": False}}),
    ("trainer", trainer_config(PORTS), {"certManagement": {"enable": False},
                                        "statusServer": {"port": PORTS["trainer-status"]}}),
    ("kueue", kueue_config(CERTS, PORTS), {"namespace": "kueue-system", "internalCertManagement": {"enable": False},
                                           "manageJobsWithoutQueueName": False,
                                           "integrations": {"frameworks": KUEUE_FRAMEWORKS},
                                           "featureGates": {"VisibilityOnDemand": False}}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "config", "extra"), CONFIGS)
def test_managers_serve_on_loopback_at_their_ports_without_leader_election(
    name: str, config: dict[str, Any], extra: dict[str, Any]
) -> None:
    assert config["kind"] == "Configuration"
    assert config["webhook"]["port"] == PORTS[name]
    assert config["webhook"]["host"] == "127.0.0.1"
    assert config["health"] == {"healthProbeBindAddress": f"127.0.0.1:{PORTS[f'{name}-health']}"}
    assert config["metrics"] == {"bindAddress": "0"}
    assert config["leaderElection"] == {"leaderElect": False}
    assert {k: config[k] for k in extra} == extra
    assert set(config) == {"apiVersion", "kind", "health", "metrics", "webhook", "leaderElection", *extra}


@pytest.mark.parametrize(("name", "config"), [(n, c) for n, c, _ in CONFIGS])
def test_managers_given_a_cert_folder_read_ours(name: str, config: dict[str, Any]) -> None:
    # Trainer v2 has no such field: it reads $TMPDIR's folder (serving_certs_tmpdir)
    assert config["webhook"].get("certDir") == (None if name == "trainer" else str(CERTS))


def hooks(kind: str, *names: str) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": f"{kind.lower()}-config"},
            "webhooks": [{"name": n, "clientConfig": {}} for n in names]}  # fmt: skip


def test_jobsets_pod_webhooks_get_upstreams_patches(tmp_path: Path) -> None:
    selector = {"matchExpressions": [{"key": "jobset", "operator": "Exists"}]}
    (tmp_path / "mutating-patch.yaml").write_text(
        yaml.safe_dump([{"op": "add", "path": "/webhooks/0/objectSelector", "value": selector}])
    )
    (tmp_path / "validating-patch.yaml").write_text("- op: replace\n  path: /metadata/name\n  value: v\n")
    m, v = jobset_webhooks([hooks("MutatingWebhookConfiguration", "mpod"), hooks("ValidatingWebhookConfiguration")],
                           tmp_path)  # fmt: skip
    assert m["webhooks"][0]["objectSelector"] == selector
    assert v["metadata"]["name"] == "v"


def test_trainer_takes_only_the_names_from_its_patches(tmp_path: Path) -> None:
    ops = [{"op": "replace", "path": "/metadata/name", "value": "trainer-mutating"},
           {"op": "replace", "path": "/webhooks/0/clientConfig/service/name", "value": "trainer-svc"}]  # fmt: skip
    (tmp_path / "patch_mutating.yaml").write_text(yaml.safe_dump(ops))
    (tmp_path / "patch_validating.yaml").write_text(yaml.safe_dump(ops[:1]))
    (m,) = trainer_webhooks([hooks("MutatingWebhookConfiguration", "mtrainjob")], tmp_path)
    assert m["metadata"]["name"] == "trainer-mutating"
    assert m["webhooks"][0]["clientConfig"] == {}  # the Service is not ours to name: the URL replaces it


def test_the_training_operator_keeps_the_pytorchjob_webhook_under_its_rotators_name() -> None:
    (d,) = training_operator_webhooks(
        [hooks("ValidatingWebhookConfiguration", "validate-kubeflow-org-v1-pytorchjob.kubeflow.org",
               "validate-kubeflow-org-v1-tfjob.kubeflow.org", "validate-kubeflow-org-v1-mpijob.kubeflow.org")]
    )  # fmt: skip
    assert d["metadata"]["name"] == "validator.training-operator.kubeflow.org"
    assert [h["name"] for h in d["webhooks"]] == ["validate-kubeflow-org-v1-pytorchjob.kubeflow.org"]


def test_the_training_operators_secret_carries_its_ca_and_serving_certificate(tmp_path: Path) -> None:
    for f in ("to-ca.crt", "to-ca.key", "to-webhook.crt", "to-webhook.key"):
        (tmp_path / f).write_text(f"contents of {f}")
    secret = training_operator_secret(tmp_path)
    assert secret["metadata"] == {"name": "training-operator-webhook-cert", "namespace": "kubeflow"}
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded == {"ca.crt": "contents of to-ca.crt", "ca.key": "contents of to-ca.key",
                       "tls.crt": "contents of to-webhook.crt", "tls.key": "contents of to-webhook.key"}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "kind"),
    [("mjob.kb.io", "job"), ("vclusterqueue.kb.io", "clusterqueue"), ("mpytorchjob.kb.io", "pytorchjob"),
     ("vtrainjob.kb.io", "trainjob"), ("mdeployment.kb.io", "deployment")],
)  # fmt: skip
def test_a_kueue_webhooks_kind_is_its_name_without_the_prefix(name: str, kind: str) -> None:
    assert kueue_hook_kind(name) == kind


def test_kueue_keeps_the_webhooks_of_its_objects_and_our_engines_only() -> None:
    (m,) = kueue_webhooks([hooks("MutatingWebhookConfiguration", "mjob.kb.io", "mdeployment.kb.io",
                                 "mworkload.kb.io", "mjobset.kb.io", "mpod.kb.io")])  # fmt: skip
    assert [h["name"] for h in m["webhooks"]] == ["mjob.kb.io", "mworkload.kb.io", "mjobset.kb.io"]
    job, workload, _ = m["webhooks"]
    assert job["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}
    ]
    assert "namespaceSelector" not in workload


def test_kueue_manages_each_engine_it_has_a_webhook_for() -> None:
    assert {f.rsplit("/", 1)[1] for f in KUEUE_FRAMEWORKS} == KUEUE_JOB_HOOKS
    assert KUEUE_JOB_HOOKS <= KUEUE_HOOKS


def test_kueue_crds_get_the_conversion_of_the_patches_listed_only() -> None:
    def kueue_crd(name: str, conversion: Any = None) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"conversion": conversion} if conversion else {}}

    webhook = {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"path": "/convert"}}}}
    crds = kueue_crds([kueue_crd("workloads.kueue.x-k8s.io"), kueue_crd("cohorts.kueue.x-k8s.io")],
                      [kueue_crd("workloads.kueue.x-k8s.io", webhook)])  # fmt: skip
    assert crds[0]["spec"]["conversion"] == webhook
    assert "conversion" not in crds[1]["spec"]
