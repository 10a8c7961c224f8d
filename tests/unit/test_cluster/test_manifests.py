"""testcluster.manifests: upstream's manifests found in the module cache and read, and the edits that
point their webhooks at loopback, apply kustomize's JSON6902 patches and prefix names."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from testcluster.manifests import json_patch, load_docs, module_dir, point_webhooks_at, prefixed


@pytest.mark.parametrize(
    ("module", "folder"),
    [
        ("sigs.k8s.io/kwok", "sigs.k8s.io/kwok@v1"),
        ("github.com/Azure/go-autorest", "github.com/!azure/go-autorest@v1"),  # capitals escaped
        ("github.com/kubeflow/trainer/v2", "github.com/kubeflow/trainer/v2@v1"),
    ],
)
def test_a_module_is_found_under_its_escaped_path(tmp_path: Path, module: str, folder: str) -> None:
    (tmp_path / folder).mkdir(parents=True)
    assert module_dir(module, "v1", gomod=tmp_path) == tmp_path / folder


def test_a_module_not_built_yet_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"sigs.k8s.io/kwok@v9 is missing: run testcluster/scripts/build.sh first"):
        module_dir("sigs.k8s.io/kwok", "v9", gomod=tmp_path)


def test_docs_are_read_from_files_and_folders_without_kustomizes_own(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text("kind: B\n---\n---\nkind: C\n")  # an empty document is skipped
    (tmp_path / "a.yaml").write_text("kind: A\n")
    (tmp_path / "kustomization.yaml").write_text("resources: [a.yaml]\n")
    (tmp_path / "kustomizeconfig.yaml").write_text("nameReference: []\n")
    (tmp_path / "notes.md").write_text("kind: Z\n")
    single = tmp_path / "one" / "x.yaml"
    single.parent.mkdir()
    single.write_text("kind: X\n")
    assert [d["kind"] for d in load_docs(tmp_path, single)] == ["A", "B", "C", "X"]


def hook_config(kind: str, service: dict[str, Any] | None) -> dict[str, Any]:
    client: dict[str, Any] = {"service": service} if service is not None else {}
    return {"kind": kind, "metadata": {"name": "h"}, "webhooks": [{"name": "w", "clientConfig": client}]}


def crd(conversion: dict[str, Any] | None) -> dict[str, Any]:
    spec = {"conversion": conversion} if conversion else {}
    return {"kind": "CustomResourceDefinition", "metadata": {"name": "c"}, "spec": spec}


WEBHOOK_CASES = [
    # the object, where its webhook's clientConfig is found, the URL it gets
    (hook_config("MutatingWebhookConfiguration", {"name": "svc", "namespace": "ns", "path": "/mutate-x"}),
     ("webhooks", 0, "clientConfig"), "https://127.0.0.1:9443/mutate-x"),
    (hook_config("ValidatingWebhookConfiguration", {"name": "svc", "namespace": "ns"}),
     ("webhooks", 0, "clientConfig"), "https://127.0.0.1:9443/"),
    (crd({"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "s", "path": "/convert-v1"}},
                                             "conversionReviewVersions": ["v1"]}}),
     ("spec", "conversion", "webhook", "clientConfig"), "https://127.0.0.1:9443/convert-v1"),
    (crd({"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "s"}}}}),
     ("spec", "conversion", "webhook", "clientConfig"), "https://127.0.0.1:9443/convert"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "where", "url"), WEBHOOK_CASES)
def test_webhooks_call_loopback_with_our_ca_instead_of_a_service(
    doc: dict[str, Any], where: tuple[str | int, ...], url: str
) -> None:
    (out,) = point_webhooks_at([doc], 9443, "Q0E=")
    node: Any = out
    for key in where:
        node = node[key]
    assert node == {"url": url, "caBundle": "Q0E="}


@pytest.mark.parametrize(
    "doc",
    [
        crd({"strategy": "None"}),
        crd(None),
        {"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {}}},
        {"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "empty"}, "webhooks": None},
    ],
)
def test_objects_without_webhooks_are_left_as_they_are(doc: dict[str, Any]) -> None:
    before = copy.deepcopy(doc)
    assert point_webhooks_at([doc], 9443, "Q0E=") == [before]


PATCH_CASES = [
    # the document, the operations, the document after
    ({"metadata": {"name": "a"}}, [{"op": "replace", "path": "/metadata/name", "value": "b"}],
     {"metadata": {"name": "b"}}),
    ({"metadata": {}}, [{"op": "add", "path": "/metadata/labels/x", "value": "1"}],
     {"metadata": {"labels": {"x": "1"}}}),  # missing parents are made
    ({"metadata": {"annotations": {"a/b": "1", "c": "2"}}}, [{"op": "remove", "path": "/metadata/annotations/a~1b"}],
     {"metadata": {"annotations": {"c": "2"}}}),  # ~1 is a slash
    ({"w": [{"n": 1}, {"n": 2}]}, [{"op": "add", "path": "/w/1", "value": {"n": 9}}],
     {"w": [{"n": 1}, {"n": 9}, {"n": 2}]}),
    ({"w": [1, 2]}, [{"op": "add", "path": "/w/-", "value": 3}], {"w": [1, 2, 3]}),  # - appends
    ({"w": [1, 2]}, [{"op": "remove", "path": "/w/0"}], {"w": [2]}),
    ({"w": [{"s": {"k": 1}}]}, [{"op": "replace", "path": "/w/0/s", "value": {"k": 2}}], {"w": [{"s": {"k": 2}}]}),
    ({"a": {"m~n": 1}}, [{"op": "replace", "path": "/a/m~0n", "value": 2}], {"a": {"m~n": 2}}),  # ~0 is a tilde
]  # fmt: skip


@pytest.mark.parametrize(("doc", "ops", "after"), PATCH_CASES)
def test_json_patches_as_kustomize_applies_them(doc: dict[str, Any], ops: list[dict[str, Any]], after: Any) -> None:
    json_patch(doc, ops)
    assert doc == after


def test_only_webhook_configurations_get_the_prefix() -> None:
    docs = [
        {"kind": "MutatingWebhookConfiguration", "metadata": {"name": "mutating-webhook-configuration"}},
        {"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "validating-webhook-configuration"}},
        {"kind": "CustomResourceDefinition", "metadata": {"name": "jobsets.jobset.x-k8s.io"}},
    ]
    assert [d["metadata"]["name"] for d in prefixed(docs, "jobset")] == [
        "jobset-mutating-webhook-configuration",
        "jobset-validating-webhook-configuration",
        "jobsets.jobset.x-k8s.io",
    ]
