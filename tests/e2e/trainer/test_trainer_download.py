"""CIFAR-10 ``--download`` in a real 2-process gloo group, with a fake (slow) downloader: no rank
reads before the download it depends on has finished, a shared directory has one writer, each
node-local directory gets its own copy, and a failed download stops every rank (no hang)."""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

MARK = "cifar-10-batches-py"

# name: per rank (local_rank, node_rank, data dir name); the failing case's rank 0 download raises
CASES: dict[str, list[tuple[int, int, str]]] = {
    "one-node-two-procs": [(0, 0, "a"), (1, 0, "a")],
    "two-nodes-own-dirs": [(0, 0, "n0"), (0, 1, "n1")],
    "two-nodes-shared-dir": [(0, 0, "s"), (0, 1, "s")],
    "download-fails": [(0, 0, "f"), (1, 0, "f")],
}


def _log(path: Path, **event: Any) -> None:
    with open(path, "a") as f:  # one short O_APPEND write per event: lines never interleave
        f.write(json.dumps({**event, "t": time.monotonic()}) + "\n")


def _worker(rank: int, world: int, root: str) -> None:
    """One rank: fake torchvision's download/read, then build the data as the trainer does."""
    import torch.distributed as dist

    from ddpctl_trainer import data
    from ddpctl_trainer.config import parse_args
    from ddpctl_trainer.dist import DistContext
    from ddpctl_trainer.errors import TrainerError

    base = Path(root)
    log = base / "events.jsonl"
    case = ""

    def fake_fetch(where: Path) -> None:
        _log(log, case=case, rank=rank, what="fetch", dir=where.name)
        if case == "download-fails":
            raise OSError("no route to host")
        if (where / MARK / "done").is_file():  # torchvision: files that verify are not fetched again
            return
        time.sleep(1.0)  # a slow download: a rank that does not wait reads too early
        (where / MARK).mkdir(parents=True, exist_ok=True)
        (where / MARK / "done").write_text("ok")
        _log(log, case=case, rank=rank, what="wrote", dir=where.name)

    def fake_read(where: Path) -> tuple[data.TensorImages, data.TensorImages]:
        if not (where / MARK / "done").is_file():
            raise data.TrainerFailure(f"cannot read CIFAR-10 from --data-dir {where}: read before the download")
        return data.synthetic(8, 10, 4, seed=0), data.synthetic(4, 10, 4, seed=0, split=1)

    data._fetch_cifar10 = fake_fetch
    data._read_cifar10 = fake_read
    data._torchvision = lambda what: None
    # a short collective timeout: a rank whose peer died must not wait half an hour
    dist.init_process_group(
        "gloo",
        init_method=f"file://{base / 'store'}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        for case, shape in CASES.items():
            local_rank, node_rank, dirname = shape[rank]
            (base / dirname).mkdir(exist_ok=True)
            cfg = parse_args(["--dataset", "cifar10", "--data-dir", str(base / dirname), "--download"], env={})
            local_world = sum(1 for _, node, _ in shape if node == node_rank)
            ctx = DistContext(rank, local_rank, world, local_world, node_rank, 0, "test")
            try:
                bundle = data.build_data(cfg, ctx, 2, pin_memory=False)
                _log(log, case=case, rank=rank, what="ok", classes=bundle.num_classes)
            except TrainerError as exc:
                _log(log, case=case, rank=rank, what="error", message=str(exc))
            dist.barrier()  # cases one after the other
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    base = tmp_path_factory.mktemp("download")
    mp = multiprocessing.get_context("spawn")
    env_before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    # daemonic: killed at interpreter exit should the test process stop before the finally below
    procs = [mp.Process(target=_worker, args=(rank, 2, str(base)), daemon=True) for rank in range(2)]
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + 150
        for p in procs:
            p.join(max(deadline - time.monotonic(), 0))
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    finally:
        for p in procs:  # never leave a rank behind, whatever failed
            if p.is_alive():
                p.kill()
                p.join(10)
        if env_before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env_before
    return [json.loads(line) for line in (base / "events.jsonl").read_text().splitlines()]


def _of(events: list[dict[str, Any]], case: str, what: str) -> list[dict[str, Any]]:
    return [e for e in events if e["case"] == case and e["what"] == what]


@pytest.mark.parametrize("case", ["one-node-two-procs", "two-nodes-own-dirs", "two-nodes-shared-dir"])
def test_every_rank_reads_after_its_download(events: list[dict[str, Any]], case: str) -> None:
    assert not _of(events, case, "error"), _of(events, case, "error")
    assert sorted(e["rank"] for e in _of(events, case, "ok")) == [0, 1]


def test_one_node_downloads_once_on_local_rank_0(events: list[dict[str, Any]]) -> None:
    assert [(e["rank"], e["dir"]) for e in _of(events, "one-node-two-procs", "wrote")] == [(0, "a")]
    assert [e["rank"] for e in _of(events, "one-node-two-procs", "fetch")] == [0]


def test_node_local_dirs_each_get_a_copy(events: list[dict[str, Any]]) -> None:
    wrote = _of(events, "two-nodes-own-dirs", "wrote")
    assert sorted((e["rank"], e["dir"]) for e in wrote) == [(0, "n0"), (1, "n1")]


def test_a_shared_dir_has_one_writer(events: list[dict[str, Any]]) -> None:
    """Node 1 starts only after rank 0 finished, finds the files complete and writes nothing."""
    case = "two-nodes-shared-dir"
    assert [e["rank"] for e in _of(events, case, "wrote")] == [0]
    (written,) = _of(events, case, "wrote")
    (second,) = [e for e in _of(events, case, "fetch") if e["rank"] == 1]
    assert second["t"] >= written["t"]


def test_a_failed_download_stops_both_ranks(events: list[dict[str, Any]]) -> None:
    errors = {e["rank"]: e["message"] for e in _of(events, "download-fails", "error")}
    assert errors[0].startswith("--download of CIFAR-10 into ") and errors[0].endswith(
        "failed (offline?): no route to host"
    ), errors[0]
    assert errors[1].startswith("rank 0 could not download CIFAR-10: --download of CIFAR-10 into ")
    assert [e["rank"] for e in _of(events, "download-fails", "fetch")] == [0]
