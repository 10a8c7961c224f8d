"""ddpctl_trainer.checkpoint: checkpoint files written atomically, pruned without ever losing the
one just written, skipped when corrupt, loaded with weights_only; and the Writer and snapshot that
save off the step loop without losing a save, overlapping two, or letting training change what is
being saved."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from ddpctl_trainer import checkpoint as ckpt
from ddpctl_trainer.checkpoint import Writer, atomic_save, snapshot
from ddpctl_trainer.errors import CheckpointError


def test_a_failed_save_is_one_warning_and_the_next_one_saves(tmp_path: Path) -> None:
    warnings: list[str] = []
    writer = Writer(warnings.append)

    def full_disk() -> None:
        raise OSError(28, "No space left on device")

    writer.submit("ckpt-00000003.pt", full_disk)
    writer.wait()
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert warnings[0].startswith("saving ckpt-00000003.pt failed (OSError: [Errno 28] No space left on device)")
    writer.submit("ckpt-00000006.pt", lambda: atomic_save({"step": 6}, tmp_path / "ckpt-00000006.pt"))
    writer.wait()
    assert torch.load(tmp_path / "ckpt-00000006.pt", weights_only=True) == {"step": 6}
    assert len(warnings) == 1


def test_a_second_save_waits_for_the_first_and_they_never_overlap() -> None:
    writer = Writer(lambda msg: None)
    release, started_second = threading.Event(), threading.Event()
    running, most = [0], [0]
    lock = threading.Lock()

    def save(block: bool) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if block:
            release.wait(10)
        else:
            started_second.set()
        with lock:
            running[0] -= 1

    writer.submit("first", lambda: save(True))
    second = threading.Thread(target=writer.submit, args=("second", lambda: save(False)))
    second.start()
    assert not started_second.wait(0.3)  # the first is still being written: the second waits
    release.set()
    second.join(10)
    writer.wait()
    assert started_second.is_set() and most[0] == 1


def test_snapshot_copies_what_training_goes_on_changing() -> None:
    weight = torch.zeros(3, dtype=torch.float64)
    state = {"model": {"w": weight}, "rng": [torch.ones(2)], "step": 5, "name": "x"}
    copy = snapshot(state, copy=True)
    weight += 1  # the next optimizer step
    assert torch.equal(copy["model"]["w"], torch.zeros(3, dtype=torch.float64))
    assert copy["step"] == 5 and copy["name"] == "x" and isinstance(copy["rng"], list)
    offloaded = snapshot(state, copy=False)  # a GPU state offloaded to CPU is a copy already
    assert offloaded["model"]["w"] is weight


def _payload(step: int) -> dict:
    return {
        "format": ckpt.FORMAT,
        "model": {"w": torch.full((3,), float(step))},
        "optimizer": {"state": {}},
        "epoch": 0,
        "step": step,
        "batches_done": step,
        "rng": [{"torch": torch.get_rng_state(), "python": (3, (1, 2, 3), None)}],
    }


def test_atomic_save_prune_and_skip_corrupt(tmp_path: Path) -> None:
    warnings: list[str] = []
    for step in (1, 2, 3, 4):
        ckpt.atomic_save(_payload(step), ckpt.checkpoint_path(tmp_path, step))
    removed = ckpt.prune(tmp_path, 2, ckpt.checkpoint_path(tmp_path, 4))
    assert [p.name for p in removed] == ["ckpt-00000002.pt", "ckpt-00000001.pt"]
    (tmp_path / "ckpt-00000009.pt").write_bytes(b"\x00garbage")
    (tmp_path / ".ckpt-00000010.pt.tmp.123").write_bytes(b"partial")
    path, payload = ckpt.find_latest(tmp_path, warnings.append)
    assert path.name == "ckpt-00000004.pt" and payload["step"] == 4
    assert len(warnings) == 1 and "ckpt-00000009.pt" in warnings[0]
    ckpt.remove_stale_temps(tmp_path)
    assert not list(tmp_path.glob(".*tmp*"))


def test_atomic_save_shows_the_written_temp_file_and_an_interrupted_save_leaves_nothing(tmp_path: Path) -> None:
    """``on_write`` (the step hooks' on_checkpoint_write) sees the temp file with the state in it,
    before the rename; a save that ends there (an exception, as a signal's) leaves neither file."""
    path = ckpt.checkpoint_path(tmp_path, 1)
    seen: list[tuple[str, int]] = []
    ckpt.atomic_save(_payload(1), path, on_write=lambda f: seen.append((Path(f.name).name, f.tell())))
    assert len(seen) == 1 and seen[0][0].startswith(".ckpt-00000001.pt.tmp.") and seen[0][1] > 0
    assert ckpt.load_file(path)["step"] == 1

    def interrupted(f: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ckpt.atomic_save(_payload(2), ckpt.checkpoint_path(tmp_path, 2), on_write=interrupted)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-00000001.pt"]


def test_prune_never_removes_the_checkpoint_just_written(tmp_path: Path) -> None:
    """Higher-step leftovers (corrupt, or another run's) sort first by name; they must not push
    the new checkpoint and its predecessors out, and unloadable files do not count as kept."""
    for step in (1, 2):
        ckpt.atomic_save(_payload(step), ckpt.checkpoint_path(tmp_path, step))
    (tmp_path / "ckpt-00000010.pt").write_bytes(b"not a checkpoint")
    data = (tmp_path / "ckpt-00000002.pt").read_bytes()
    (tmp_path / "ckpt-00000011.pt").write_bytes(data[: len(data) // 2])
    ckpt.atomic_save(_payload(12), ckpt.checkpoint_path(tmp_path, 12))  # a loadable one of another run
    current = ckpt.checkpoint_path(tmp_path, 3)
    ckpt.atomic_save(_payload(3), current)
    removed = ckpt.prune(tmp_path, 2, current)
    assert [p.name for p in removed] == ["ckpt-00000001.pt"]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ckpt-00000002.pt", "ckpt-00000003.pt", "ckpt-00000010.pt", "ckpt-00000011.pt", "ckpt-00000012.pt"]
    assert [p.name for p in ckpt.newer_than(tmp_path, 3)] == [
        "ckpt-00000012.pt",
        "ckpt-00000011.pt",
        "ckpt-00000010.pt",
    ]
    # keep_last 1: only the one just written survives of this run's
    assert [p.name for p in ckpt.prune(tmp_path, 1, current)] == ["ckpt-00000002.pt"]
    assert current.is_file()


def test_prune_skips_unloadable_files_when_counting(tmp_path: Path) -> None:
    for step in (1, 2, 4):
        ckpt.atomic_save(_payload(step), ckpt.checkpoint_path(tmp_path, step))
    (tmp_path / "ckpt-00000003.pt").write_bytes(b"\x00garbage")
    current = ckpt.checkpoint_path(tmp_path, 4)
    removed = ckpt.prune(tmp_path, 2, current)
    # kept: 4 (current) and 2 (the newest loadable below it); 3 does not count and stays while it
    # is newer than a kept one; 1 is past the window
    assert [p.name for p in removed] == ["ckpt-00000001.pt"]
    assert (tmp_path / "ckpt-00000002.pt").is_file() and (tmp_path / "ckpt-00000003.pt").is_file()
    ckpt.atomic_save(_payload(5), ckpt.checkpoint_path(tmp_path, 5))
    removed = ckpt.prune(tmp_path, 2, ckpt.checkpoint_path(tmp_path, 5))
    assert [p.name for p in removed] == ["ckpt-00000003.pt", "ckpt-00000002.pt"]


class _Evil:
    def __reduce__(self):  # would run code when unpickled without weights_only
        return (print, ("pwned",))


def test_checkpoints_load_with_weights_only(tmp_path: Path) -> None:
    path = tmp_path / "ckpt-00000001.pt"
    torch.save({**_payload(1), "extra": _Evil()}, path)
    with pytest.raises(CheckpointError, match="unreadable"):
        ckpt.load_file(path)
