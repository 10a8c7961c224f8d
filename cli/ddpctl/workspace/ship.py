"""A packed workspace on its way to the pods, and what the pods need to find it.

`prepare` packs the folder into a temporary .tar.gz and decides how it travels: in an immutable
Secret beside the job (with the stand-alone unpacker, so any image with python3 can unpack it),
or, too large for one, to an object store at `<store>/<sha256>.tar.gz` (uploaded by `submit`,
never by `render`). A `Shipment` then gives, purely, the object to create, the env, volumes and
mounts every pod gets, and the command that unpacks before the pod's own command runs. Nothing
here reads the spec: the caller passes what it says.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ddpctl.errors import UsageError
from ddpctl.records import record
from ddpctl.workspace.inline import TooLarge, unpacker_files, workspace_secret
from ddpctl.workspace.pack import Pack, pack_workspace
from ddpctl.workspace.upload import archive_url
from ddpctl_trainer.protocol import (
    WORKSPACE_ARCHIVE_ENV,
    WORKSPACE_ARCHIVE_KEY,
    WORKSPACE_DIR,
    WORKSPACE_DIR_ENV,
    WORKSPACE_MOUNT,
    WORKSPACE_SHA256_ENV,
)

ARCHIVE_VOLUME = "workspace-archive"  # the Secret's volume
DIR_VOLUME = "workspace"  # the emptyDir the code is unpacked into
UNPACKER = f"{WORKSPACE_MOUNT}/workspace.py"  # the stand-alone unpacker, a key of the Secret


@record
class Shipment:
    """A workspace packed for job `job`: in `secret` (the Secret to create), or at `url` (an object
    store; `uploaded` once `submit` put it there). `archive` is the .tar.gz on this machine."""

    pack: Pack
    archive: Path
    secret: Mapping[str, Any] | None = None
    url: str | None = None
    uploaded: bool | None = None  # None: not asked (render); False: the store had it already

    @property
    def name(self) -> str | None:
        """The Secret's name (None when the archive goes to an object store)."""
        return str(self.secret["metadata"]["name"]) if self.secret is not None else None

    @property
    def source(self) -> str:
        """Where each pod reads the archive: the Secret's mounted key, or the store's URL."""
        return f"{WORKSPACE_MOUNT}/{WORKSPACE_ARCHIVE_KEY}" if self.secret is not None else str(self.url)

    def env(self) -> dict[str, str]:
        return {
            WORKSPACE_ARCHIVE_ENV: self.source,
            WORKSPACE_SHA256_ENV: self.pack.sha256,
            WORKSPACE_DIR_ENV: WORKSPACE_DIR,
        }

    def volumes(self) -> list[dict[str, Any]]:
        """The pod's volumes: the code's emptyDir, and the Secret (read-only files)."""
        out: list[dict[str, Any]] = [{"name": DIR_VOLUME, "emptyDir": {}}]
        if self.name is not None:
            out.append({"name": ARCHIVE_VOLUME, "secret": {"secretName": self.name, "defaultMode": 0o444}})
        return out

    def mounts(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"name": DIR_VOLUME, "mountPath": WORKSPACE_DIR}]
        if self.name is not None:
            out.append({"name": ARCHIVE_VOLUME, "mountPath": WORKSPACE_MOUNT, "readOnly": True})
        return out

    def wrap(self, command: Sequence[str]) -> tuple[str, ...]:
        """The pod's command, behind the unpacker, which execs it once the code is in place: the
        Secret's own copy (any image with python3), or the trainer's module for a store (the image
        needs ddpctl's trainer and its object store client then, as checkpoints in a store do)."""
        if self.secret is not None:
            return ("python3", UNPACKER, *command)
        return ("python3", "-m", "ddpctl_trainer.workspace", *command)

    def where(self) -> str:
        """Where it goes, in words (for --explain and the submit line)."""
        if self.secret is not None:
            return f"Secret {self.name} in the job's namespace, mounted at {WORKSPACE_MOUNT}"
        done = {None: "to be uploaded by submit", True: "uploaded", False: "already there"}[self.uploaded]
        return f"{self.url} ({done})"

    def explain(self) -> str:
        """The workspace in one sentence: what was packed, where it goes, what was left out."""
        return (
            f"{self.pack.summary().removeprefix('workspace: ')}; goes to {self.where()}; unpacked at "
            f"{WORKSPACE_DIR} (the working directory, first on PYTHONPATH) before the pod's command"
        )


@contextmanager
def prepare(
    root: Path | str,
    *,
    job: str,
    namespace: str,
    labels: Mapping[str, str],
    exclude: Sequence[str] = (),
    include: Sequence[str] = (),
    store: str | None = None,
    too_large_fix: str = "",
) -> Iterator[Shipment]:
    """Pack `root` and decide how it travels (see the module). `store`: where a workspace too large
    for a Secret goes; None: nowhere, and too large is a usage error (`too_large_fix` its fix,
    when not the default one)."""
    with tempfile.TemporaryDirectory(prefix="ddpctl-workspace-") as tmp:
        archive = Path(tmp) / WORKSPACE_ARCHIVE_KEY
        with archive.open("wb") as out:
            packed = pack_workspace(root, out, tuple(exclude), tuple(include))
        if not packed.files:
            raise UsageError(
                f"workspace: {root} holds no file to ship (all ignored, left out, or none); give the folder of your "
                "code, or name what to ship with workspace.include"
            )
        secret = workspace_secret(job, archive.read_bytes(), packed.sha256, labels, namespace, files=unpacker_files())
        if not isinstance(secret, TooLarge):
            yield Shipment(packed, archive, secret=secret)
            return
        if store is None:
            raise UsageError(f"workspace: {secret.message}; {too_large_fix or secret.fix}")
        yield Shipment(packed, archive, url=archive_url(store, packed.sha256))


def uploaded(shipment: Shipment, field_name: str) -> Shipment:
    """The shipment after `submit` put its archive in the store (only when absent: content-addressed)."""
    from ddpctl.workspace.upload import upload

    if shipment.url is None:
        return shipment
    store = shipment.url.rsplit("/", 1)[0]
    done = upload(shipment.archive, shipment.pack.sha256, store, field_name=field_name)
    return Shipment(shipment.pack, shipment.archive, url=done.url, uploaded=done.uploaded)
