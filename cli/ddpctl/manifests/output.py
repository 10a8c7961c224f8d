"""The rendered objects as files: multi-document YAML, a JSON `List`, or a kustomize directory
(`ddpctl render`, `submit --dry-run=client -o`). Files are written atomically: an output directory
that a GitOps repository holds never has half a manifest in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]  # base chosen at run time
    """Block-style YAML with multi-line strings as literal blocks, for readable GitOps diffs."""


_LINE_BREAKS = ("\x85", "\u2028", "\u2029")


def _str_representer(dumper: yaml.SafeDumper, data: str) -> Any:
    style: str | None = None
    if not data.isprintable():  # a line break or control character: most strings have neither
        if any(c in data for c in _LINE_BREAKS) or not all(c.isprintable() or c == "\n" for c in data):
            style = '"'  # only double quotes escape Unicode line breaks and control characters
        elif "\n" in data:
            style = "|"
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)


def to_yaml_documents(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(
        objects,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=4096,
        explicit_start=True,
    )


def to_json_list(objects: list[dict[str, Any]]) -> str:
    """kubectl's shape for several objects: a v1 List."""
    import json  # only for -o json: ~1 ms of every render otherwise

    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2, ensure_ascii=False) + "\n"


def object_filename(obj: dict[str, Any]) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def write_output_dir(objects: list[dict[str, Any]], directory: Path) -> list[Path]:
    """One file per object plus a kustomization.yaml, so `kubectl kustomize DIR` gives the same objects."""
    from ddpctl.atomic import write_text_atomic  # tempfile: ~2 ms that a render to stdout does not need

    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    names: list[str] = []
    for obj in objects:
        fname = object_filename(obj)
        path = directory / fname
        write_text_atomic(path, to_yaml_documents([obj]))
        written.append(path)
        names.append(fname)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": names}
    kpath = directory / "kustomization.yaml"
    write_text_atomic(kpath, to_yaml_documents([kustomization]))
    written.append(kpath)
    return written
