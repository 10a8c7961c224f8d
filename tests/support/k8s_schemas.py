"""Offline schema validation shared by the render tests, the Helm chart tests and the API double.

- Core kinds (Job, Service, ...) go through the PyPI package `kubernetes-validate`, strict
  (an unknown field is an error), against each Kubernetes version in `KUBE_VERSIONS`.
- Custom kinds (PyTorchJob, JobSet, TrainJob) are checked against the upstream CRDs'
  `openAPIV3Schema` vendored in `tests/contract/schemas/crds/` (provenance in its README), with the API
  server's structural-schema rules and unknown fields as errors, as `kubectl apply --validate=strict`
  would report them. The structural walker lives with the API double (`kube_api_double.validation`),
  so both use one implementation.
  CEL rules (`x-kubernetes-validations`) are not evaluated.

`validate_object(obj)` returns a list of "<field path>: <message>" strings; empty means valid.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "tests" / "contract" / "schemas"
CRD_DIR = SCHEMAS / "crds"
KUBE_VERSIONS: tuple[str, ...] = ("1.29.0", "1.33.0")
CORE_API_VERSIONS = {"v1", "batch/v1", "apps/v1"}


def require_crds() -> Path:
    """The vendored CRD folder: part of every clone, so its absence is a broken checkout."""
    assert CRD_DIR.is_dir(), f"the vendored upstream CRDs are missing from {CRD_DIR}"
    return CRD_DIR


@functools.cache
def _validate_core_cached(doc: str, version: str) -> tuple[str, ...]:
    import json

    import kubernetes_validate

    obj = json.loads(doc)
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        return (f"{path}: {exc.message}",)
    return ()


def validate_core(obj: dict[str, Any], versions: tuple[str, ...] = KUBE_VERSIONS) -> list[str]:
    import json

    doc = json.dumps(obj, sort_keys=True)
    errors: list[str] = []
    for version in versions:
        errors += [f"[k8s {version}] {e}" for e in _validate_core_cached(doc, version)]
    return errors


def validate_custom(obj: dict[str, Any]) -> list[str]:
    from tests.support.kube_api_double.validation import validate_custom as structural

    return [str(e) for e in structural(obj, require_crds())]


def validate_object(obj: dict[str, Any]) -> list[str]:
    """Errors for one object of any kind ddpctl renders; [] when valid."""
    if obj.get("apiVersion") in CORE_API_VERSIONS:
        return validate_core(obj)
    return validate_custom(obj)
