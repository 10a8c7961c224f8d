"""ddpctl_trainer.checkpoint.Writer and snapshot: saving off the step loop without losing a save,
overlapping two, or letting training change what is being saved."""

from __future__ import annotations

import threading
from pathlib import Path

import torch
from ddpctl_trainer.checkpoint import Writer, atomic_save, snapshot


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
