"""ddpctl_trainer.store: the store --checkpoint-dir names, and the local directory's checkpoints as
the checkpointer sees them (names, save and find, prune, another run's newer ones, sharded saves in
a shared directory). The object store: test_object_store.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from ddpctl_trainer import checkpoint as ckpt
from ddpctl_trainer.dist import DistContext
from ddpctl_trainer.protocol import SHARDED_STATE_FILE
from ddpctl_trainer.store import LocalStore, is_url, open_store

ONE = DistContext(0, 0, 1, 1, 0, 0, "single")


def _payload(step: int) -> dict[str, Any]:
    return {
        "format": ckpt.FORMAT,
        "model": {"w": torch.full((2,), float(step))},
        "optimizer": {"state": {}},
        "epoch": 0,
        "step": step,
        "batches_done": step,
    }


@pytest.mark.parametrize(
    ("location", "url"),
    [
        ("s3://bucket/run", True),
        ("gs://bucket/run", True),
        ("az://container/run", True),
        ("/ckpt", False),
        ("./checkpoints", False),
        ("relative/a@b", False),
    ],
)
def test_a_url_is_an_object_store_anything_else_a_directory(location: str, url: bool) -> None:
    assert is_url(location) is url
    if not url:
        store = open_store(location, lambda m: None)
        assert isinstance(store, LocalStore) and store.directory == Path(location)


@pytest.mark.parametrize(
    ("step", "sharded", "name"),
    [(0, False, "ckpt-00000000.pt"), (1234, False, "ckpt-00001234.pt"), (7, True, "ckpt-00000007")],
)
def test_where_a_step_is_saved(tmp_path: Path, step: int, sharded: bool, name: str) -> None:
    assert LocalStore(tmp_path).where(step, sharded) == str(tmp_path / name)


def test_saved_checkpoints_are_found_newest_first_and_pruned_to_keep_last(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "ckpt")
    seen: list[int] = []
    for step in (1, 2, 3):
        where = store.save(_payload(step), on_write=lambda f: seen.append(f.tell()))
        assert where == store.where(step, False)
    assert len(seen) == 3 and all(size > 0 for size in seen)  # the file before it is published
    found = store.find_latest(lambda m: None)
    assert found is not None and found[0] == store.where(3, False) and found[1]["step"] == 3
    assert store.prune(2, 3, sharded=False) == [store.where(1, False)]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["ckpt-00000002.pt", "ckpt-00000003.pt"]


def test_newer_than_names_only_loadable_checkpoints_of_another_run(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    for step in (2, 9):
        store.save(_payload(step))
    (tmp_path / "ckpt-00000011.pt").write_bytes(b"half a checkpoint")
    assert store.newer_than(2) == ["ckpt-00000009.pt"]
    assert store.newer_than(9) == []


def test_stale_temp_files_go_before_a_resume(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.save(_payload(1))
    (tmp_path / ".ckpt-00000002.pt.tmp.4242").write_bytes(b"partial")
    (tmp_path / ".ckpt-00000003.tmp").mkdir()
    store.remove_stale()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-00000001.pt"]


def test_a_sharded_save_in_a_shared_directory_appears_whole_at_its_commit(tmp_path: Path) -> None:
    """Every rank writes into ``.ckpt-<step>.tmp``; rank 0 renames it into place once all have:
    before the commit nothing loadable is there, after it the checkpoint is (a barrier, so never
    on the writer's thread)."""
    store = LocalStore(tmp_path)
    save = store.begin_sharded(4, ONE)
    assert save.dir == tmp_path / ".ckpt-00000004.tmp" and save.dir.is_dir() and not save.background
    (save.dir / ".metadata").write_bytes(b"the shards' index")
    save.write_state(_payload(4))
    assert store.find_latest(lambda m: None) is None
    assert save.commit() == save.where == str(tmp_path / "ckpt-00000004")
    assert not save.dir.exists() and (tmp_path / "ckpt-00000004" / SHARDED_STATE_FILE).is_file()
    found = store.find_latest(lambda m: None)
    assert found is not None and found[1]["sharded"] and found[1]["sharded_dir"] == save.where
