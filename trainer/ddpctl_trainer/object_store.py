"""Checkpoints under an object store URL (``s3://``, ``gs://``, ``az://``), through obstore (an
optional package: only this module imports it, and only when a store is opened).

An object store has no rename, so a checkpoint becomes visible by what is written last:

1. its data under a prefix no earlier save used, ``ckpt-<step>/<attempt>/`` (``state.pt``, or an
   FSDP sharded checkpoint's ``torch.distributed.checkpoint`` files and ``trainer_state.pt``);
2. then ``ckpt-<step>/manifest.json``: the files and their sizes. A checkpoint without it, or
   whose files are missing or short, is incomplete: resume skips it with a warning naming it;
3. then ``latest`` (``{"step", "checkpoint"}``), written with a conditional write (created if
   absent, else swapped only if unchanged since read, and never moved back to an older step), for
   readers that follow one pointer. Resume itself lists the checkpoints and takes the newest
   complete one, so a save that died between its manifest and the pointer is not lost.

Old checkpoints are deleted (manifest first) only after the new one is published. Every object is
written whole by one PUT (multipart uploads complete atomically), so a reader sees an object
entirely or not at all, and a failed save (server down, credentials refused) leaves only objects
that no manifest names. Errors become ``StoreError``: one line, without credentials.

Full checkpoints are written and read by rank 0 alone. An FSDP sharded checkpoint is written by
every rank: each saves its shard to a local staging directory with ``torch.distributed.checkpoint``
and uploads its own files (no gather to rank 0); rank 0 publishes once every rank has said (through
the job's c10d store, not a collective, so it may happen on the writer thread) that its upload is
done. Resume downloads only the files each rank's load plan reads.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import torch

from . import checkpoint as ckpt
from . import dist as d
from .errors import CheckpointError, StoreError, without_userinfo
from .object_client import Conflict, ObjectMissing, Unsupported, connect, failed, reason
from .protocol import (
    CHECKPOINT_LATEST,
    CHECKPOINT_MANIFEST,
    CHECKPOINT_STATE_FILE,
    SHARDED_STATE_FILE,
    checkpoint_name,
)

if TYPE_CHECKING:
    from obstore.store import ObjectStore as Client
    from torch.distributed.checkpoint import StorageReader

    from .dist import DistContext

Warn = Callable[[str], None]
OnWrite = Callable[[IO[bytes]], None]

_LATEST_ATTEMPTS = 10  # compare-and-swap rounds for `latest` against concurrent writers
_DOWNLOAD_CHUNK = 8 << 20


# ------------------------------------------------------------------------------------ the layout


@dataclass
class _Listed:
    """What a listing shows of one checkpoint prefix ``ckpt-<step>/``: its objects and sizes."""

    step: int
    name: str
    objects: dict[str, int] = field(default_factory=dict)  # path below ckpt-<step>/ -> size

    @property
    def has_manifest(self) -> bool:
        return CHECKPOINT_MANIFEST in self.objects


_STEP_PREFIX = re.compile(r"^ckpt-(\d{8,})$")


class ObjectStore:
    """Checkpoints under an object store URL (see the module's doc for the layout)."""

    def __init__(self, url: str, warn: Warn, timeout_s: float = 600.0, client: Client | None = None) -> None:
        self.url = without_userinfo(url).rstrip("/")
        self.location = self.url
        self.warn = warn
        self.timeout_s = timeout_s  # how long rank 0 waits for the other ranks' shards
        self._client = client if client is not None else connect(self.url)
        self._staging_root: Path | None = None
        self._unconditional = False  # the server answered that it cannot do conditional writes
        self._marks: Any = None  # the job's c10d store, for sharded saves (made on first use)

    # -- names
    def where(self, step: int, sharded: bool = False) -> str:
        return f"{self.url}/{checkpoint_name(step, sharded=True)}"

    def _staging(self, name: str) -> Path:
        """A fresh local directory for one save or load (under TMPDIR)."""
        if self._staging_root is None or not self._staging_root.is_dir():
            self._staging_root = Path(tempfile.mkdtemp(prefix="ddpctl-checkpoints-"))
        path = self._staging_root / f"{name}-{secrets.token_hex(4)}"
        path.mkdir(parents=True)
        return path

    # -- requests (every obstore call goes through these: errors become one scrubbed line)
    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()``; any failure becomes a ``StoreError`` (``ObjectMissing``, ``Conflict`` or
        ``Unsupported`` where the raw error says so, decided before the URL is in the text)."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - obstore's errors, and OSErrors of the staging files
            raise failed(what, exc) from None

    def _put(self, path: str, data: bytes | Path, mode: Any = None) -> dict[str, Any]:
        import obstore

        if mode is None:
            return dict(self._call(f"writing {self.url}/{path}", lambda: obstore.put(self._client, path, data)))
        return dict(self._call(f"writing {self.url}/{path}", lambda: obstore.put(self._client, path, data, mode=mode)))

    def _get(self, path: str) -> tuple[bytes, dict[str, Any]]:
        import obstore

        def get() -> tuple[bytes, dict[str, Any]]:
            result = obstore.get(self._client, path)
            return bytes(result.bytes()), dict(result.meta)

        got: tuple[bytes, dict[str, Any]] = self._call(f"reading {self.url}/{path}", get)
        return got

    def _download(self, path: str, dest: Path) -> None:
        import obstore

        def fetch() -> None:
            result = obstore.get(self._client, path)
            with open(dest, "wb") as f:
                for chunk in result.stream(min_chunk_size=_DOWNLOAD_CHUNK):
                    f.write(memoryview(chunk))

        self._call(f"reading {self.url}/{path}", fetch)

    def _list(self, prefix: str | None = None) -> list[dict[str, Any]]:
        import obstore

        def collect() -> list[dict[str, Any]]:
            return [dict(meta) for meta in obstore.list(self._client, prefix).collect()]

        listed: list[dict[str, Any]] = self._call(f"listing {self.url}", collect)
        return listed

    def _delete(self, paths: list[str]) -> None:
        import obstore

        if paths:
            self._call(f"deleting under {self.url}", lambda: obstore.delete(self._client, paths))

    # -- what is there
    def _scan(self) -> dict[int, _Listed]:
        """Every checkpoint prefix under the URL, with its objects (one paginated LIST)."""
        found: dict[int, _Listed] = {}
        for meta in self._list():
            head, _, rest = str(meta["path"]).partition("/")
            match = _STEP_PREFIX.match(head)
            if not match or not rest:
                continue
            step = int(match.group(1))
            found.setdefault(step, _Listed(step, head)).objects[rest] = int(meta["size"])
        return found

    def _manifest(self, listed: _Listed) -> dict[str, Any]:
        """The manifest of a complete checkpoint; ``CheckpointError`` (naming it) otherwise."""
        where = self.where(listed.step)
        if not listed.has_manifest:
            raise CheckpointError(
                f"checkpoint {where} is incomplete (no {CHECKPOINT_MANIFEST}: its save did not finish)"
            )
        try:
            raw, _ = self._get(f"{listed.name}/{CHECKPOINT_MANIFEST}")
        except ObjectMissing:  # deleted since the listing
            raise CheckpointError(f"checkpoint {where} is incomplete (no {CHECKPOINT_MANIFEST})") from None
        try:
            manifest: dict[str, Any] = json.loads(raw)
            data, files = str(manifest["data"]), dict(manifest["files"])
            if manifest.get("format") != ckpt.FORMAT or int(manifest["step"]) != listed.step:
                raise ValueError("not this checkpoint's manifest")
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"checkpoint {where} has an unreadable {CHECKPOINT_MANIFEST} ({exc})") from None
        for name, size in sorted(files.items()):
            have = listed.objects.get(f"{data}/{name}")
            if have is None:
                raise CheckpointError(f"checkpoint {where} is incomplete ({data}/{name} is missing)")
            if have != int(size):
                raise CheckpointError(
                    f"checkpoint {where} is incomplete ({data}/{name} has {have} bytes, the manifest says {size})"
                )
        return manifest

    def _load(self, listed: _Listed) -> dict[str, Any]:
        """Download, check and load one complete checkpoint (``weights_only``)."""
        manifest = self._manifest(listed)
        where = self.where(listed.step)
        sharded = bool(manifest.get("sharded"))
        state = SHARDED_STATE_FILE if sharded else CHECKPOINT_STATE_FILE
        for needed in (state, ".metadata") if sharded else (state,):
            if needed not in manifest["files"]:
                raise CheckpointError(f"checkpoint {where} lacks {needed}")
        staging = self._staging(listed.name)
        try:
            local = staging / state
            self._download(f"{listed.name}/{manifest['data']}/{state}", local)
            payload = ckpt.load_file(local)
        except ObjectMissing:  # deleted since the listing (pruned by another writer)
            raise CheckpointError(f"checkpoint {where} is incomplete ({manifest['data']}/{state} is missing)") from None
        except StoreError:
            raise
        except CheckpointError as exc:
            raise CheckpointError(str(exc).replace(str(staging / state), where)) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if sharded:
            payload["sharded_ref"] = {"prefix": f"{listed.name}/{manifest['data']}", "files": manifest["files"]}
        return payload

    def find_latest(self, warn: Warn) -> tuple[str, dict[str, Any]] | None:
        for step, listed in sorted(self._scan().items(), reverse=True):
            try:
                return self.where(step), self._load(listed)
            except StoreError:
                raise  # the server, not the checkpoint: say so instead of skipping good ones
            except CheckpointError as exc:
                warn(f"skipping {exc}")
        return None

    def remove_stale(self) -> None:
        """Nothing to do: incomplete checkpoints are named when resume skips them, and go with
        pruning (or when their step is saved again)."""

    def newer_than(self, step: int) -> list[str]:
        return [
            listed.name
            for s, listed in sorted(self._scan().items(), reverse=True)
            if s > step and self._is_complete(listed)
        ]

    def _is_complete(self, listed: _Listed) -> bool:
        """Whether the checkpoint has a manifest whose files are all there in full (``_manifest``);
        a failing server raises ``StoreError`` instead of answering no."""
        try:
            self._manifest(listed)
        except StoreError:
            raise
        except CheckpointError:
            return False
        return True

    def read_latest(self) -> tuple[int, str, dict[str, Any]] | None:
        """``latest``'s step, checkpoint name and object meta (its ETag), or None when absent."""
        try:
            raw, meta = self._get(CHECKPOINT_LATEST)
        except ObjectMissing:
            return None
        try:
            pointer = json.loads(raw)
            return int(pointer["step"]), str(pointer["checkpoint"]), meta
        except (ValueError, KeyError, TypeError):
            return -1, "", meta  # unreadable: any checkpoint may replace it

    # -- writing
    def save(self, payload: dict[str, Any], on_write: OnWrite | None = None) -> str:
        step = int(payload["step"])
        name, attempt = checkpoint_name(step, sharded=True), _attempt()
        staging = self._staging(name)
        try:
            file = staging / CHECKPOINT_STATE_FILE
            with open(file, "wb") as f:
                torch.save(payload, f)
                if on_write is not None:
                    on_write(f)
                f.flush()
            size = file.stat().st_size
            self._put(f"{name}/{attempt}/{CHECKPOINT_STATE_FILE}", file)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return self.publish(step, attempt, {CHECKPOINT_STATE_FILE: size}, sharded=False, epoch=payload.get("epoch"))

    def publish(
        self, step: int, attempt: str, files: dict[str, int], sharded: bool, epoch: Any = None, world_size: int = 1
    ) -> str:
        """Make a checkpoint whose data is stored visible: its manifest, then ``latest``; then drop
        the data of earlier attempts at the same step (no manifest names them any more). Returns
        ``where``. Once the manifest is stored the checkpoint is saved (resume finds it by listing):
        a failure of the steps after it is one warning, not a failed save."""
        name, where = checkpoint_name(step, sharded=True), self.where(step)
        manifest = {
            "format": ckpt.FORMAT,
            "step": step,
            "epoch": epoch,
            "sharded": sharded,
            "world_size": world_size,
            "data": attempt,
            "files": files,
        }
        self._put(f"{name}/{CHECKPOINT_MANIFEST}", json.dumps(manifest, sort_keys=True).encode())
        try:
            self.point_latest(step)
            stale = [p for p in self._names_under(name) if p != CHECKPOINT_MANIFEST and not p.startswith(f"{attempt}/")]
            self._delete([f"{name}/{p}" for p in stale])
        except StoreError as exc:
            self.warn(
                f"{where} is saved, but updating `{CHECKPOINT_LATEST}` or removing an earlier attempt's data failed "
                f"({exc}); resume finds the checkpoint by listing, and the next save tries again"
            )
        return where

    def _names_under(self, name: str) -> list[str]:
        return [str(m["path"]).partition("/")[2] for m in self._list(name)]

    def point_latest(self, step: int) -> None:
        """Move ``latest`` to ``step``, never back: create it if absent (If-None-Match), else
        compare-and-swap on the ETag just read (If-Match), retried against concurrent writers. A
        server without conditional writes gets a plain write (said once)."""
        body = json.dumps({"step": step, "checkpoint": checkpoint_name(step, sharded=True)}).encode()
        for _ in range(_LATEST_ATTEMPTS):
            current = self.read_latest()
            if current is not None and current[0] >= step:
                return  # another save got further: the pointer never moves back
            if self._unconditional:
                self._put(CHECKPOINT_LATEST, body)
                return
            mode: Any = "create"
            if current is not None:  # If-Match on what was read (and its version, where the store has them)
                mode = {k: current[2][k] for k in ("e_tag", "version") if current[2].get(k) is not None}
            try:
                self._put(CHECKPOINT_LATEST, body, mode=mode)
                return
            except Unsupported as exc:
                self._unconditional = True
                self.warn(
                    f"{self.url} does not support conditional writes ({exc}); `{CHECKPOINT_LATEST}` is written "
                    "unconditionally (safe with one writer per checkpoint directory)"
                )
            except Conflict:  # someone wrote it meanwhile: read it again
                pass
        raise StoreError(f"writing {self.url}/{CHECKPOINT_LATEST} failed: {_LATEST_ATTEMPTS} concurrent updates won")

    def delete_checkpoint(self, listed: _Listed) -> None:
        """The manifest first: a half-deleted checkpoint is incomplete, never a broken complete one."""
        if listed.has_manifest:
            self._delete([f"{listed.name}/{CHECKPOINT_MANIFEST}"])
        self._delete([f"{listed.name}/{p}" for p in self._names_under(listed.name)])

    def prune(self, keep_last: int, step: int, sharded: bool) -> list[str]:
        """As ``checkpoint.prune``: keep ``step`` and the newest complete ones below it,
        ``keep_last`` in all; incomplete ones do not count and go once older than the oldest kept;
        newer ones (another run's) and the one ``latest`` names are never deleted."""
        pointer = self.read_latest()
        kept, removed = 1, []
        for s, listed in sorted(self._scan().items(), reverse=True):
            if s >= step or (pointer is not None and s == pointer[0]):
                continue
            if kept < keep_last:
                if self._is_complete(listed):  # as resume would judge it: manifest, files, sizes
                    kept += 1
                continue
            self.delete_checkpoint(listed)
            removed.append(self.where(s))
        return removed

    # -- sharded
    def begin_sharded(self, step: int, ctx: DistContext) -> _ObjectShardedSave:
        attempt = d.broadcast_object(_attempt() if ctx.is_main else "")
        name = checkpoint_name(step, sharded=True)
        return _ObjectShardedSave(self, step, name, attempt, self._staging(f"{name}-rank{ctx.rank}"), ctx)

    def sharded_reader(self, payload: dict[str, Any]) -> StorageReader:
        ref = payload["sharded_ref"]
        return _downloading_reader(self, str(ref["prefix"]), self._staging("load"))

    def marks(self, ctx: DistContext) -> Any:
        """The job's c10d store (its own connection), where ranks say their shard is uploaded."""
        if self._marks is None:
            from torch.distributed import PrefixStore

            from .watchdog import connect_store

            base: Any = connect_store(ctx.world_size, ctx.restart_count)
            self._marks = PrefixStore("ddpctl_checkpoints", base)
        return self._marks


@dataclass
class _ObjectShardedSave:
    """One rank's shard of a sharded checkpoint in the object store: saved to local staging, then
    uploaded by this rank (on its writer thread); rank 0 publishes once every rank reported."""

    store: ObjectStore
    step: int
    name: str
    attempt: str
    dir: Path
    ctx: DistContext
    background: bool = True
    epoch: Any = None

    @property
    def where(self) -> str:
        return self.store.where(self.step)

    def write_state(self, payload: dict[str, Any]) -> None:
        self.epoch = payload.get("epoch")
        torch.save({**payload, "model": {}, "optimizer": {}, "sharded": True}, self.dir / SHARDED_STATE_FILE)

    def _key(self, rank: int) -> str:
        return f"{self.name}/{self.attempt}/rank{rank}"

    def commit(self) -> str | None:
        marks = self.store.marks(self.ctx)
        report: dict[str, Any] = {"files": {}}
        try:
            for file in sorted(self.dir.iterdir()):
                if file.is_file():
                    self.store._put(f"{self.name}/{self.attempt}/{file.name}", file)
                    report["files"][file.name] = file.stat().st_size
        except Exception as exc:  # noqa: BLE001 - whatever failed, rank 0 must hear it (not wait timeout_s)
            why = str(exc) if isinstance(exc, CheckpointError) else f"storing its shard failed ({reason(exc)})"
            report = {"error": why}
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
        if not self.ctx.is_main:
            marks.set(self._key(self.ctx.rank), json.dumps(report))
            if "error" in report:
                raise CheckpointError(report["error"])
            return None
        if "error" in report:
            raise CheckpointError(report["error"])
        import datetime

        others = [self._key(r) for r in range(1, self.ctx.world_size)]
        files: dict[str, int] = dict(report["files"])
        if others:
            try:
                marks.wait(others, datetime.timedelta(seconds=self.store.timeout_s))
            except Exception as exc:  # noqa: BLE001 - a timeout, or the job's store gone
                raise CheckpointError(
                    f"checkpoint {self.where} not published: not every rank reported its shard ({reason(exc)})"
                ) from None
            for rank, key in enumerate(others, start=1):
                theirs = json.loads(marks.get(key))
                marks.delete_key(key)
                if "error" in theirs:
                    raise CheckpointError(f"checkpoint {self.where} not published: rank {rank}: {theirs['error']}")
                files.update(theirs["files"])
        return self.store.publish(
            self.step, self.attempt, files, sharded=True, epoch=self.epoch, world_size=self.ctx.world_size
        )

    def abandon(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _downloading_reader(store: ObjectStore, prefix: str, staging: Path) -> StorageReader:
    """A ``FileSystemReader`` over a staging directory that downloads, before reading, the files of
    the checkpoint that this rank's load plan needs (and ``.metadata`` first)."""
    from torch.distributed.checkpoint import FileSystemReader

    class DownloadingReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            self._fetch([".metadata"])
            return super().read_metadata(*args, **kwargs)

        def read_data(self, plan: Any, planner: Any) -> Any:
            try:
                self._fetch({self.storage_data[item.storage_index].relative_path for item in plan.items})
                done = super().read_data(plan, planner)
                done.wait()  # the files are read before they go
                return done
            finally:
                shutil.rmtree(staging, ignore_errors=True)

        def _fetch(self, names: Iterable[str]) -> None:
            for name in sorted(names):
                if not (staging / name).exists():
                    store._download(f"{prefix}/{name}", staging / name)

    return DownloadingReader(str(staging))


def _attempt() -> str:
    return secrets.token_hex(6)


__all__ = ["ObjectMissing", "ObjectStore", "StoreError"]
