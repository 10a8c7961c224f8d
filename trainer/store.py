"""Where checkpoints live: a local directory, or an object store (``s3://``, ``gs://``, ``az://``).

The trainer talks to one ``CheckpointStore``, picked by ``--checkpoint-dir`` (``open_store``):

* ``LocalStore``: a directory, as ``checkpoint.py`` writes it: ``ckpt-<step>.pt`` files renamed into
  place atomically, ``ckpt-<step>/`` directories for FSDP sharded checkpoints (which need a directory
  every rank shares).
* ``ObjectStore``: a bucket prefix, through obstore (an optional package: only this class imports
  it). An object store has no rename, so a checkpoint becomes visible by what is written last:

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
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

import torch

from . import checkpoint as ckpt
from . import dist as d
from .errors import CheckpointError
from .protocol import (
    CHECKPOINT_LATEST,
    CHECKPOINT_MANIFEST,
    CHECKPOINT_STATE_FILE,
    OBJECT_STORE_ENDPOINT_ENV,
    OBJECT_STORE_SECRET_ENV,
    SHARDED_STATE_FILE,
    checkpoint_name,
    url_scheme,
)

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig
    from obstore.store import ObjectStore as _Client
    from torch.distributed.checkpoint import StorageReader

    from .dist import DistContext

Warn = Callable[[str], None]
OnWrite = Callable[[IO[bytes]], None]

# The object store client's patience: a dead server fails a request in seconds (refused connections
# retried 3 times), a slow one gets 5 minutes per request; well inside a 120 s grace period only when
# the server answers, which is the case the stop checkpoint can do anything about.
_RETRIES = 3
_RETRY_TIMEOUT_S = 30
_CONNECT_TIMEOUT_S = 5
_REQUEST_TIMEOUT_S = 300
_LATEST_ATTEMPTS = 10  # compare-and-swap rounds for `latest` against concurrent writers
_DOWNLOAD_CHUNK = 8 << 20


class StoreError(CheckpointError):
    """The object store refused or failed a request: one line, credentials scrubbed."""


class ObjectMissing(StoreError):
    """The object is not there (never written, or deleted since it was listed)."""


class _Conflict(StoreError):
    """A conditional write lost: someone else wrote the object since it was read."""


class _Unsupported(StoreError):
    """The server cannot do what was asked (a conditional write): 501 Not Implemented and kin."""


# ------------------------------------------------------------------------------------ messages

_QUERY = re.compile(r"(https?://[^\s?]+)\?\S*")  # presigned URLs and SAS tokens carry secrets in the query
_USERINFO = re.compile(r"(://)[^/@\s]+@")


def scrub(text: str, env: dict[str, str] | None = None) -> str:
    """``text`` as one line without credentials: the values of the secret variables
    (``protocol.OBJECT_STORE_SECRET_ENV``), URL query strings and user:password@ parts go."""
    env = dict(os.environ) if env is None else env
    text = text.split("\n\nDebug source:", 1)[0]  # obstore appends the Rust error's debug dump
    text = " ".join(text.split())
    for name in OBJECT_STORE_SECRET_ENV:
        value = env.get(name, "")
        if len(value) >= 4:
            text = text.replace(value, "***")
    text = _QUERY.sub(r"\1?***", text)
    return _USERINFO.sub(r"\1***@", text)


_STATUS = re.compile(r"status code: (\d{3}[^:<]*)")
_S3_CODE = re.compile(r"<Code>([^<]+)</Code>")
_S3_MESSAGE = re.compile(r"<Message>([^<]+)</Message>")
_REQUEST = re.compile(r"Error performing ([A-Z]+) https?://\S+")


def _reason(exc: BaseException) -> str:
    """An obstore error in a few words: its kind, and the server's answer (status, S3 error code and
    message) or, when none came, what the transport said (the request URL, which the caller names
    already, is left out)."""
    kind = type(exc).__name__
    text = scrub(str(exc))
    status, code, said = _STATUS.search(text), _S3_CODE.search(text), _S3_MESSAGE.search(text)
    if status or code:
        answer = ", ".join(m.group(1).strip() for m in (status, code) if m)
        text = f"{answer}: {said.group(1)}" if said else answer
    else:
        text = _REQUEST.sub(r"\1 request", text).replace("Error performing list request: ", "list: ")
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{kind}: {text}"


# ------------------------------------------------------------------------------------ the interface


class ShardedSave(Protocol):
    """One rank's part of one FSDP sharded checkpoint."""

    dir: Path  # where torch.distributed.checkpoint.save writes this rank's files
    background: bool  # whether ``commit`` may run on the writer thread (it runs no collective)

    @property
    def where(self) -> str:
        """The checkpoint, for messages."""

    def write_state(self, payload: dict[str, Any]) -> None:
        """Rank 0: the trainer's position, RNG states and scheduler next to the shards."""

    def commit(self) -> str | None:
        """Store this rank's files; rank 0 also publishes. Returns the checkpoint on rank 0."""

    def abandon(self) -> None:
        """Drop the local files of a save that will not be committed."""


class CheckpointStore(Protocol):
    """Where a run's checkpoints live (see the module's doc); ``location`` names it in messages."""

    location: str

    def where(self, step: int, sharded: bool) -> str:
        """The checkpoint of ``step``, as messages and metrics name it."""

    def remove_stale(self) -> None:
        """Before resuming: drop what a writer that died left (local temp files)."""

    def find_latest(self, warn: Warn) -> tuple[str, dict[str, Any]] | None:
        """The newest complete checkpoint that loads (rank 0); the others are skipped with a warning."""

    def save(self, payload: dict[str, Any], on_write: OnWrite | None = None) -> str:
        """Write a full checkpoint and publish it (rank 0); returns ``where``. ``on_write`` gets the
        file with the state in it before it is published."""

    def prune(self, keep_last: int, step: int, sharded: bool) -> list[str]:
        """After ``step`` is published: delete older checkpoints beyond ``keep_last``."""

    def newer_than(self, step: int) -> list[str]:
        """Complete checkpoints past ``step`` (another run's), newest first, by name."""

    def begin_sharded(self, step: int, ctx: DistContext) -> ShardedSave:
        """Every rank, together (it may run collectives): where this rank saves its shard."""

    def sharded_reader(self, payload: dict[str, Any]) -> StorageReader:
        """Every rank: a ``torch.distributed.checkpoint`` reader of a sharded checkpoint."""


def is_url(location: str) -> bool:
    return url_scheme(location) is not None


def open_store(location: str, warn: Warn, timeout_s: float = 600.0) -> CheckpointStore:
    """The store ``--checkpoint-dir`` names (config.py has checked the scheme and the client).
    ``warn`` takes what the store says once (a server without conditional writes); ``timeout_s``:
    how long rank 0 waits for the other ranks' shards of a sharded checkpoint."""
    if is_url(location):
        return ObjectStore(location, warn, timeout_s)
    return LocalStore(Path(location))


# ------------------------------------------------------------------------------------ local


class LocalStore:
    """A directory: ``checkpoint.py``'s atomic files, as the trainer has always written them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.location = str(directory)

    def where(self, step: int, sharded: bool) -> str:
        return str(ckpt.checkpoint_path(self.directory, step, sharded))

    def remove_stale(self) -> None:
        ckpt.remove_stale_temps(self.directory)

    def find_latest(self, warn: Warn) -> tuple[str, dict[str, Any]] | None:
        found = ckpt.find_latest(self.directory, warn)
        return None if found is None else (str(found[0]), found[1])

    def save(self, payload: dict[str, Any], on_write: OnWrite | None = None) -> str:
        path = ckpt.checkpoint_path(self.directory, payload["step"])
        ckpt.atomic_save(payload, path, on_write=on_write)
        return str(path)

    def prune(self, keep_last: int, step: int, sharded: bool) -> list[str]:
        current = ckpt.checkpoint_path(self.directory, step, sharded)
        return [str(p) for p in ckpt.prune(self.directory, keep_last, current)]

    def newer_than(self, step: int) -> list[str]:
        return [p.name for p in ckpt.newer_than(self.directory, step) if ckpt.is_loadable(p)]

    def begin_sharded(self, step: int, ctx: DistContext) -> ShardedSave:
        final = ckpt.checkpoint_path(self.directory, step, sharded=True)
        tmp = final.parent / f".{final.name}.tmp"
        if ctx.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        d.barrier()
        return _LocalShardedSave(tmp, final, ctx.is_main)

    def sharded_reader(self, payload: dict[str, Any]) -> StorageReader:
        from torch.distributed.checkpoint import FileSystemReader

        return FileSystemReader(payload["sharded_dir"])


@dataclass
class _LocalShardedSave:
    """A sharded checkpoint in a shared directory: every rank writes into ``.ckpt-<step>.tmp``,
    rank 0 renames it to ``ckpt-<step>`` once all have (a barrier: never on the writer thread)."""

    dir: Path
    final: Path
    main: bool
    background: bool = False

    @property
    def where(self) -> str:
        return str(self.final)

    def write_state(self, payload: dict[str, Any]) -> None:
        self._payload = payload

    def commit(self) -> str | None:
        d.barrier()
        if not self.main:
            return None
        self._payload.update(model={}, optimizer={}, sharded=True)
        ckpt.atomic_save(self._payload, self.dir / SHARDED_STATE_FILE)
        ckpt.publish_dir(self.dir, self.final)
        return str(self.final)

    def abandon(self) -> None:
        pass  # the next save's begin_sharded clears the temp directory


# ------------------------------------------------------------------------------------ object store


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

    def __init__(self, url: str, warn: Warn, timeout_s: float = 600.0, client: _Client | None = None) -> None:
        self.url = _USERINFO.sub(r"\1", url).rstrip("/")
        self.location = self.url
        self.warn = warn
        self.timeout_s = timeout_s  # how long rank 0 waits for the other ranks' shards
        self._client = client if client is not None else _connect(self.url)
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
        """``fn()``; any failure becomes a ``StoreError`` (``ObjectMissing``, ``_Conflict`` or
        ``_Unsupported`` where the raw error says so, decided before the URL is in the text)."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - obstore's errors, and OSErrors of the staging files
            raise _classify(exc)(f"{what} failed ({_reason(exc)})") from None

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
            except _Unsupported as exc:
                self._unconditional = True
                self.warn(
                    f"{self.url} does not support conditional writes ({exc}); `{CHECKPOINT_LATEST}` is written "
                    "unconditionally (safe with one writer per checkpoint directory)"
                )
            except _Conflict:  # someone wrote it meanwhile: read it again
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
    def begin_sharded(self, step: int, ctx: DistContext) -> ShardedSave:
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
            reason = str(exc) if isinstance(exc, CheckpointError) else f"storing its shard failed ({_reason(exc)})"
            report = {"error": reason}
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
                    f"checkpoint {self.where} not published: not every rank reported its shard ({_reason(exc)})"
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


def _is_obstore_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("obstore")


_STATUS_CODE = re.compile(r"status code: (\d{3})\b")


def _classify(exc: BaseException) -> type[StoreError]:
    """Which ``StoreError`` a raw failure becomes, from its type and the server's answer (its status
    and S3 error code, never the rest of the text, which holds the request's URL): ``ObjectMissing``
    (obstore raises the builtin ``FileNotFoundError``), ``_Conflict`` (a conditional write that lost,
    or S3's 409 ConditionalRequestConflict), ``_Unsupported`` (501 Not Implemented and kin)."""
    name = type(exc).__name__ if _is_obstore_error(exc) else ""
    if (isinstance(exc, FileNotFoundError) and exc.filename is None) or name == "NotFoundError":
        return ObjectMissing  # (a staging file's FileNotFoundError names its file)
    if not name:
        return StoreError  # an OSError of a staging file, or a bug: no server answer to read
    text = str(exc)
    status = next((m.group(1) for m in _STATUS_CODE.finditer(text)), None)
    code = next((m.group(1) for m in _S3_CODE.finditer(text)), None)
    if name == "NotSupportedError" or status == "501" or code == "NotImplemented":
        return _Unsupported
    if name in ("AlreadyExistsError", "PreconditionError") or code == "ConditionalRequestConflict":
        return _Conflict
    return StoreError


def _connect(url: str) -> _Client:
    """An obstore client of ``url``; credentials, region and endpoint from the environment."""
    from datetime import timedelta

    from obstore.store import from_url

    endpoint = os.environ.get(OBJECT_STORE_ENDPOINT_ENV, "")
    client_options: ClientConfig = {
        "connect_timeout": timedelta(seconds=_CONNECT_TIMEOUT_S),
        "timeout": timedelta(seconds=_REQUEST_TIMEOUT_S),
    }
    if url_scheme(url) == "s3" and endpoint.lower().startswith("http://"):
        client_options["allow_http"] = True  # a MinIO/Ceph/SeaweedFS endpoint without TLS, named explicitly
    retry: RetryConfig = {
        "max_retries": _RETRIES,
        "retry_timeout": timedelta(seconds=_RETRY_TIMEOUT_S),
        "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2), "base": 2},
    }
    try:
        client: _Client = from_url(url, client_options=client_options, retry_config=retry)
    except Exception as exc:  # noqa: BLE001 - a malformed URL or configuration: one line
        raise StoreError(f"--checkpoint-dir {url}: {_reason(exc)}") from None
    return client


__all__ = [
    "CheckpointStore",
    "LocalStore",
    "ObjectMissing",
    "ObjectStore",
    "ShardedSave",
    "StoreError",
    "open_store",
    "scrub",
]
