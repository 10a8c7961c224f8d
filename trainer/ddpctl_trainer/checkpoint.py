"""Atomic checkpoint files: write a temp file in the same directory, fsync, rename, fsync the dir.

A reader therefore sees either the previous complete file or the new complete file, never half
of one. Files are ``<dir>/ckpt-<step:08d>.pt`` (full) or ``<dir>/ckpt-<step:08d>/`` (FSDP
sharded, a torch.distributed.checkpoint directory plus ``trainer_state.pt``). Everything is
loaded with ``weights_only=True``: payloads hold only tensors and plain Python values.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

from .errors import CheckpointError
from .protocol import CHECKPOINT_TEMP, SHARDED_STATE_FILE, checkpoint_name, checkpoint_step

FORMAT = "ddpctl-trainer/1"
REQUIRED_KEYS = ("format", "model", "optimizer", "epoch", "step", "batches_done")


def checkpoint_path(directory: Path, step: int, sharded: bool = False) -> Path:
    return directory / checkpoint_name(step, sharded)


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (POSIX: the directory entry lives in the directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_save(obj: Any, path: Path, on_write: Callable[[IO[bytes]], None] | None = None) -> None:
    """``torch.save`` to ``path`` so that a crash at any point leaves no partial ``path``.
    ``on_write`` gets the temp file once the state is in it, before it is synced and renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            if on_write is not None:
                on_write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """Complete-looking checkpoints, newest (highest step) first."""
    if not directory.is_dir():
        return []
    found = []
    for entry in directory.iterdir():
        step = checkpoint_step(entry.name)
        if step is not None:
            found.append((step, entry))
    return sorted(found, key=lambda t: t[0], reverse=True)


def remove_stale_temps(directory: Path) -> None:
    """Delete temp files left by a writer that died before its rename."""
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        if CHECKPOINT_TEMP.match(entry.name):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def load_file(path: Path, mmap: bool = False) -> dict[str, Any]:
    """Load and check one full checkpoint; ``CheckpointError`` if unreadable or not ours.

    ``mmap`` maps the tensors instead of reading them: a cheap validity check of a large file.
    """
    target = path / SHARDED_STATE_FILE if path.is_dir() else path
    try:
        payload = torch.load(target, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as exc:  # noqa: BLE001 - corrupt zip, pickle errors, permissions ...
        raise CheckpointError(f"checkpoint {path} is unreadable ({type(exc).__name__}: {exc})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path} is not a ddpctl-trainer checkpoint (format {FORMAT})")
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {', '.join(missing)}")
    if path.is_dir():
        if not (path / ".metadata").is_file():
            raise CheckpointError(f"sharded checkpoint {path} has no .metadata")
        payload["sharded_dir"] = str(path)
    return payload


def find_latest(directory: Path, warn: Callable[[str], None]) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that loads; corrupt or partial ones are skipped with a warning."""
    for _, path in list_checkpoints(directory):
        try:
            return path, load_file(path)
        except CheckpointError as exc:
            warn(f"skipping {exc}")
    return None


def is_loadable(path: Path) -> bool:
    """Whether ``find_latest`` would accept this checkpoint (tensors are mapped, not read)."""
    try:
        load_file(path, mmap=True)
    except CheckpointError:
        return False
    return True


def prune(directory: Path, keep_last: int, current: Path) -> list[Path]:
    """Keep ``current`` (just written) and the newest loadable checkpoints below its step,
    ``keep_last`` in all; delete the older ones. Returns what was removed.

    Only checkpoints *older* than ``current`` are candidates: files with a higher step (corrupt
    ones, or another run's after ``--resume never``) sort first by name but must never push the
    one just written out. Unloadable files do not count towards ``keep_last``; they go once they
    are older than the oldest checkpoint kept.
    """
    step = checkpoint_step(current.name)
    if step is None:
        raise ValueError(f"{current} is not a checkpoint name")
    kept = 1  # current
    removed = []
    for entry_step, path in list_checkpoints(directory):
        if entry_step >= step:  # current itself, a same-step sibling, or newer: not ours to delete
            continue
        if kept < keep_last:
            if is_loadable(path):
                kept += 1
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    if removed:
        _fsync_dir(directory)
    return removed


def newer_than(directory: Path, step: int) -> list[Path]:
    """Checkpoints with a step above ``step`` (``--resume auto`` would pick a loadable one)."""
    return [path for s, path in list_checkpoints(directory) if s > step]


def snapshot(obj: Any, copy: bool) -> Any:
    """The state with every tensor copied (``copy``: tensors that are the live parameters, as on
    CPU; a GPU state offloaded to CPU is a copy already), so training may go on changing the
    originals while a writer saves this."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone() if copy else obj
    if isinstance(obj, dict):
        return {k: snapshot(v, copy) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(snapshot(v, copy) for v in obj)
    return obj


class Writer:
    """Saves checkpoints on a thread of its own, one at a time: the step loop waits only for the
    state's copy, never for the disk. A save waits for the one before it (at most one is in
    flight, so two never overlap); a save that fails (disk full, storage gone) is one warning, and
    training goes on: the next save tries again. Each save is atomic (``atomic_save``), so a
    failed or killed one is never visible."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self._thread: threading.Thread | None = None
        self.failed = False  # whether the last save failed (read after ``wait``)

    def wait(self) -> None:
        """Until the save in flight (if any) has finished."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def submit(self, what: str, save: Callable[[], None]) -> None:
        self.wait()

        def run() -> None:
            try:
                save()
                self.failed = False
            except Exception as exc:  # noqa: BLE001 - reported in one line; the next save retries
                self.failed = True
                reason = " ".join(str(exc).split())
                self._warn(
                    f"saving {what} failed ({type(exc).__name__}: {reason}); training goes on, the next save tries"
                )

        self._thread = threading.Thread(target=run, name="ddpctl-checkpoint-writer", daemon=True)
        self._thread.start()


def publish_dir(tmp_dir: Path, final: Path) -> None:
    """Rename a finished sharded-checkpoint directory into place, durably."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp_dir, final)
    _fsync_dir(final.parent)
