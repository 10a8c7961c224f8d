"""Where checkpoints live: a local directory, or an object store (``s3://``, ``gs://``, ``az://``).

The checkpointer talks to one ``CheckpointStore``, picked by ``--checkpoint-dir`` (``open_store``):

* ``LocalStore`` (here): a directory, as ``checkpoint.py`` writes it: ``ckpt-<step>.pt`` files
  renamed into place atomically, ``ckpt-<step>/`` directories for FSDP sharded checkpoints (which
  need a directory every rank shares).
* ``ObjectStore`` (object_store.py): a bucket prefix, where a checkpoint is published by writing
  its manifest and then the ``latest`` pointer, since an object store has no rename.

Full checkpoints are written and read by rank 0 alone; an FSDP sharded checkpoint by every rank
(``begin_sharded``, then each rank's ``ShardedSave``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from . import checkpoint as ckpt
from . import dist as d
from .protocol import SHARDED_STATE_FILE, url_scheme

if TYPE_CHECKING:
    from torch.distributed.checkpoint import StorageReader

    from .dist import DistContext

Warn = Callable[[str], None]
OnWrite = Callable[[IO[bytes]], None]


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
        from .object_store import ObjectStore

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


__all__ = ["CheckpointStore", "LocalStore", "ShardedSave", "is_url", "open_store"]
