"""A small workspace as an object in the job's namespace: an immutable Secret the pods mount.

Why a Secret, not a ConfigMap: the code is the user's, often not public, and may hold what the
secrets check cannot recognise (a token in a config file). A Secret is readable by whoever can
`get secrets` in the namespace: the `edit` and `admin` roles, the people who can already read the
job's credentials and exec into its pods; a ConfigMap would also be readable by the `view` role,
which clusters hand out widely (dashboards, read-only users). Secrets are encrypted at rest when the
cluster enables it; a ConfigMap never is. Both are limited to the same 1 MiB.

The limit: the API server refuses a Secret whose data (the decoded bytes of every key together)
exceeds 1 MiB (`MaxSecretSize`, 1,048,576 bytes; ConfigMaps the same). That is the check here: the
.tar.gz plus any other keys, at most `INLINE_LIMIT` bytes. Base64 makes that at most 1,398,104
characters in the request, under the API server's 3 MiB request limit, and etcd stores the
protobuf-encoded bytes (not base64), under its default 1.5 MiB request limit with room for the
object's metadata. Anything larger goes to an object store (`upload.py`).

The object is named `<job>-workspace-<first 10 hex of the sha256>`: the same content keeps its
name, other content gets another, so `immutable: true` never stands in the way of a new version and
a pod never mounts an object that changed under it. The full sha256 is an annotation.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpctl.records import record
from ddpctl_trainer import protocol
from ddpctl_trainer.protocol import WORKSPACE_ARCHIVE_KEY, WORKSPACE_UNPACKER_FILES

from .pack import size_text

INLINE_LIMIT = 1 << 20  # bytes: the API server's limit on a Secret's (or ConfigMap's) data, decoded
SHA256_ANNOTATION = "ddpctl.io/workspace-sha256"
COMPONENT = "workspace"
_SHORT = 10
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
MAX_NAME = 253  # a Secret's name is a DNS-1123 subdomain


def object_name(job: str, sha256: str) -> str:
    """`<job>-workspace-<10 hex>`: a DNS-1123 subdomain (the job's name is a DNS label already)."""
    name = f"{job}-{COMPONENT}-{sha256[:_SHORT]}"
    if not _NAME.fullmatch(name) or len(name) > MAX_NAME:
        raise ValueError(f"{job!r} makes no valid object name")
    return name


@record
class TooLarge:
    """The workspace does not fit in an object: `message` is the one line the caller reports."""

    size: int  # the data's bytes
    limit: int

    @property
    def message(self) -> str:
        return (
            f"the workspace is {size_text(self.size)} compressed, more than the {size_text(self.limit)} an object in "
            "the cluster holds"
        )

    @property
    def fix(self) -> str:
        return (
            "give --workspace-store s3://BUCKET/PREFIX (or checkpoints in an object store), or leave large files out "
            "with workspace.exclude, .gitignore or .dockerignore"
        )


def inline_size(archive_size: int, files: Mapping[str, bytes] | None = None) -> int:
    """The data's size as the API server counts it: every key's decoded bytes."""
    return archive_size + sum(len(v) for v in (files or {}).values())


def workspace_secret(
    job: str,
    archive: bytes,
    sha256: str,
    labels: Mapping[str, str] | None = None,
    namespace: str | None = None,
    files: Mapping[str, bytes] | None = None,
    limit: int = INLINE_LIMIT,
) -> dict[str, Any] | TooLarge:
    """The Secret that carries `archive` (the .tar.gz whose uncompressed tar has `sha256`) to the
    job's pods, or `TooLarge`. `labels`: the job's object labels (ddpctl's own are set here and
    win); `files`: other keys to ship beside the archive (the unpacker, for an image without
    ddpctl's trainer). Pure: the same arguments give the same object."""
    if not _SHA256.fullmatch(sha256):
        raise ValueError("sha256 must be 64 lowercase hex digits")
    extra = dict(files or {})
    if WORKSPACE_ARCHIVE_KEY in extra:
        raise ValueError(f"{WORKSPACE_ARCHIVE_KEY} is the archive's key")
    size = inline_size(len(archive), extra)
    if size > limit:
        return TooLarge(size, limit)
    data = {WORKSPACE_ARCHIVE_KEY: archive, **extra}
    metadata: dict[str, Any] = {
        "name": object_name(job, sha256),
        "labels": dict(
            sorted(
                {
                    **(labels or {}),
                    "app.kubernetes.io/name": "ddp-job",
                    "app.kubernetes.io/instance": job,
                    "app.kubernetes.io/component": COMPONENT,
                    "app.kubernetes.io/managed-by": "ddpctl",
                }.items()
            )
        ),
        "annotations": {SHA256_ANNOTATION: sha256},
    }
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "immutable": True,
        "data": {key: base64.b64encode(data[key]).decode("ascii") for key in sorted(data)},
    }


def unpacker_files() -> dict[str, bytes]:
    """The trainer's `workspace.py` and the `protocol.py` it imports, read (not imported: the CLI
    runs none of the trainer but its protocol) from the installed package, to ship beside the
    archive for an image that has python3 and nothing of ddpctl (`files` of `workspace_secret`)."""
    folder = Path(protocol.__file__).parent
    return {name: (folder / name).read_bytes() for name in WORKSPACE_UNPACKER_FILES}
