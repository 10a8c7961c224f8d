"""Upstream manifests, read from the Go module cache of the very version that was built (so
manifests and binary always match), and the edits kustomize would make to them: webhooks pointed
at `url: https://127.0.0.1:PORT/...` with our CA, JSON6902 patches, name prefixes."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from testcluster.settings import GOMOD, STATE

Doc = dict[str, Any]


def module_dir(module: str, version: str, gomod: Path = GOMOD) -> Path:
    """A module's source in the module cache (the build put it there); `!x` escapes capitals."""
    escaped = "".join(f"!{ch.lower()}" if ch.isupper() else ch for ch in module)
    path = gomod / f"{escaped}@{version}"
    if not path.is_dir():
        raise SystemExit(f"cluster: error: {path} is missing: run testcluster/scripts/build.sh first")
    return path


def load_docs(*paths: Path) -> list[Doc]:
    """Every object in the files given, or in a folder's *.yaml (kustomize's own files left out)."""
    docs: list[Doc] = []
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for f in files:
            if f.name in ("kustomization.yaml", "kustomizeconfig.yaml"):
                continue
            docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return docs


def ca_bundle(ca: str = "ca") -> str:
    """A CA of the cluster's PKI (`ca`, or the training operator's `to-ca`), as a caBundle."""
    return base64.b64encode((STATE / f"pki/{ca}.crt").read_bytes()).decode()


def point_webhooks_at(docs: list[Doc], port: int, bundle: str) -> list[Doc]:
    """Webhook configurations and CRD conversion webhooks call 127.0.0.1:port instead of a Service,
    trusting the CA in `bundle`; the Service's path is kept."""
    for d in docs:
        if d.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in d.get("webhooks") or []:
                svc = hook["clientConfig"].pop("service", None) or {}
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{svc.get('path', '/')}", "caBundle": bundle}
        conv = ((d.get("spec") or {}).get("conversion") or {}) if d.get("kind") == "CustomResourceDefinition" else {}
        if conv.get("strategy") == "Webhook":
            svc = conv["webhook"]["clientConfig"].pop("service", None) or {}
            conv["webhook"]["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{svc.get('path', '/convert')}",
                "caBundle": bundle,
            }
    return docs


def json_patch(doc: Doc, ops: list[dict[str, Any]]) -> None:
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


def prefixed(docs: list[Doc], prefix: str) -> list[Doc]:
    """kustomize's namePrefix for the cluster-scoped objects that would clash across controllers."""
    for d in docs:
        if d["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            d["metadata"]["name"] = f"{prefix}-{d['metadata']['name']}"
    return docs
