"""ddpctl_trainer.checkpointer: what a checkpoint holds and when it is stored (in the background or
now, full or FSDP sharded, in a directory or an object store), what resume restores, a rerun of a
finished job, and how torch.distributed.checkpoint's wrapped failures end; in one process (the
multi-process proof is tests/e2e/trainer: a resumed run ends bit-identical to an uninterrupted one)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException

from ddpctl_trainer import checkpoint as ckpt
from ddpctl_trainer import stop
from ddpctl_trainer.checkpointer import Position, dcp_failure, rng_state, set_rng_state
from ddpctl_trainer.dist import DistContext, setup, teardown
from ddpctl_trainer.errors import CheckpointError, StoreError, Terminated
from tests.support.s3 import SECRET_KEY, S3Server, prefix_for, require_obstore
from tests.support.trainer import in_process


def test_rng_state_survives_a_weights_only_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(1)
    state = rng_state()
    torch.save({"rng": state}, tmp_path / "r.pt")
    want = torch.rand(3)
    torch.manual_seed(99)
    set_rng_state(torch.load(tmp_path / "r.pt", weights_only=True)["rng"])
    assert torch.equal(torch.rand(3), want)


def test_a_checkpoint_holds_the_position_the_state_and_the_flags(tmp_path: Path) -> None:
    """Everything a resume needs, as tensors and plain values (it loads with weights_only): the
    position (also as samples, so another world size resumes at the same sample), the weights
    without a wrapper's prefix, the optimizer, the scheduler, every rank's RNG, the flags."""
    trainer = in_process(tmp_path, "--scheduler", "cosine", "--grad-accum", "2", "--batch-size", "4")
    trainer.epoch, trainer.step, trainer.batches_done = 1, 5, 2
    trainer.save_checkpoint(background=False)
    payload = ckpt.load_file(tmp_path / "ckpt-00000005.pt")
    fields = ("epoch", "step", "batches_done", "samples_done", "world_size", "batch_per_process", "grad_accum")
    assert {k: payload[k] for k in fields} == dict(zip(fields, (1, 5, 2, 8, 1, 4, 2)))
    assert payload["model"].keys() == trainer.module.state_dict().keys()
    assert not any(k.startswith("module.") for k in payload["model"])
    assert payload["scheduler"]["T_max"] == trainer.total_steps and len(payload["rng"]) == 1
    assert payload["config"] == trainer.cfg.to_dict() and payload["format"] == ckpt.FORMAT


def test_resume_restores_the_weights_the_position_and_the_rng(tmp_path: Path) -> None:
    first = in_process(tmp_path, "--epochs", "1", "--save-every", "1")
    first.fit()
    saved = ckpt.load_file(tmp_path / "ckpt-00000002.pt")
    second = in_process(tmp_path, "--epochs", "2")
    assert not torch.equal(next(iter(second.module.parameters())), next(iter(first.module.parameters())))
    torch.manual_seed(1234)  # this process's RNG moved on since: the checkpoint's comes back
    assert not torch.equal(torch.get_rng_state(), saved["rng"][0]["torch"])
    at = second.checkpointer.resume()
    assert at == Position(epoch=1, step=2, batches_done=0)
    assert all(torch.equal(v, saved["model"][k]) for k, v in second.module.state_dict().items())
    assert torch.equal(torch.get_rng_state(), saved["rng"][0]["torch"])
    assert second.checkpointer.resumed_from == str(tmp_path / "ckpt-00000002.pt")
    assert not second.checkpointer.already_complete(at)  # a second epoch is left


@pytest.mark.parametrize(
    ("rerun", "complete"),
    [
        pytest.param(["--epochs", "1"], True, id="every-epoch-done"),
        pytest.param(["--epochs", "3", "--max-steps", "2"], True, id="max-steps-reached"),
        pytest.param(["--epochs", "2"], False, id="an-epoch-left"),
        pytest.param(["--epochs", "1", "--resume", "never"], False, id="resume-never-starts-over"),
    ],
)
def test_a_rerun_of_a_finished_job_is_already_complete(
    tmp_path: Path, rerun: list[str], complete: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    in_process(tmp_path, "--epochs", "1").fit()
    capsys.readouterr()
    again = in_process(tmp_path, "--progress", "lines", *rerun)
    again.resume()
    assert again.checkpointer.already_complete(again.position) is complete
    out = capsys.readouterr().out
    assert ("[rank 0] already complete at step 2 (epoch 1/" in out) is complete, out
    assert ("resumed from" in out) is (not complete and "never" not in rerun), out


def test_a_step_is_unsaved_until_its_checkpoint_is_stored(tmp_path: Path) -> None:
    """The stop path and the last save ask ``unsaved``: a step the last save stored needs none,
    unless that save failed (it is tried again)."""
    trainer = in_process(tmp_path)
    checkpointer = trainer.checkpointer
    assert checkpointer.unsaved(0)
    trainer.save_checkpoint()
    assert not checkpointer.unsaved(0) and checkpointer.unsaved(1)
    checkpointer.writer.failed = True
    assert checkpointer.unsaved(0)


def test_a_stop_only_this_rank_got_leaves_a_cadence_save_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rank must run a save the same way (the foreground one runs collectives the background
    one does not): a SIGTERM that reached this rank alone, just before a --save-every save, does not
    make it save in the foreground; the save goes to the writer, as on the ranks without a signal,
    and the stop vote after the step waits for it."""
    trainer = in_process(tmp_path)
    writer = trainer.checkpointer.writer
    stop.defer(True)
    assert not stop.on_signal() and stop.requested()  # this process's own SIGTERM, recorded
    submitted: list[str] = []
    real_submit = writer.submit

    def submit(what: str, save: Any) -> None:
        submitted.append(what)
        real_submit(what, save)

    monkeypatch.setattr(writer, "submit", submit)
    trainer.save_checkpoint()
    writer.wait()
    assert submitted == [str(tmp_path / "ckpt-00000000.pt")]
    assert not writer.failed and (tmp_path / "ckpt-00000000.pt").is_file()


@pytest.mark.parametrize(
    ("template", "files"),
    [
        pytest.param("final.pt", ["final.pt"], id="rank-0-writes"),
        pytest.param("final-{rank}.pt", ["final-0.pt"], id="every-rank-writes-its-own"),
    ],
)
def test_the_final_weights(tmp_path: Path, template: str, files: list[str]) -> None:
    trainer = in_process(tmp_path / "ckpt")
    trainer.checkpointer.save_final(str(tmp_path / template), 7)
    assert sorted(p.name for p in tmp_path.glob("final*")) == files
    saved = torch.load(tmp_path / files[0], weights_only=True)
    assert saved["step"] == 7 and saved["model"].keys() == trainer.module.state_dict().keys()


def test_a_failure_torch_distributed_checkpoint_wrapped_is_raised_as_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its CheckpointException (a BaseException, with every rank's failure): a TrainerError found
    in it as it is; a second SIGTERM as it is (exit 143); anything else one CheckpointError line
    naming the rank, the type and the message without secrets."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2-secret")
    refused = StoreError("reading s3://b/run/ckpt-00000003/a/__1_0.distcp failed (GenericError: 503)")
    disk = OSError(28, "No space left on device\nkey hunter2-secret")
    both = CheckpointException("read_data", {0: (disk, None), 1: (refused, None)})
    assert dcp_failure("loading checkpoint X", both) is refused
    found = dcp_failure("loading checkpoint X", CheckpointException("read_data", {1: (disk, None)}))
    assert isinstance(found, CheckpointError)
    assert str(found) == "loading checkpoint X failed on rank 1 (OSError: [Errno 28] No space left on device key ***)"
    second = Terminated()
    signalled = CheckpointException("write", {0: (disk, None), 1: (second, None)})
    assert dcp_failure("saving", signalled) is second


# --------------------------------------------------------------------------------------------
# FSDP sharded checkpoints in an object store: one process, in this one
# --------------------------------------------------------------------------------------------


@pytest.fixture
def fsdp_trainer(s3: S3Server, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A function that builds a one-process FSDP trainer (its process group in memory) with sharded
    checkpoints under this test's prefix; ``fit`` trains one step and stores its checkpoint."""
    require_obstore()
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    url = s3.url(prefix_for(request))
    args = ["--strategy", "fsdp", "--fsdp-state-dict", "sharded", "--max-steps", "1"]
    ctx = DistContext(0, 0, 1, 1, 0, 0, "single")
    setup(ctx, "gloo", 60, need_group=True)
    try:
        yield lambda: in_process(url, *args)
    finally:
        teardown()


def test_a_store_failure_inside_torch_distributed_checkpoint_is_one_line_not_a_traceback(
    fsdp_trainer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.distributed.checkpoint wraps any rank's failure in its CheckpointException, a
    BaseException that no `except Exception` sees: a StoreError while a shard downloads keeps its
    message; any other failure is one CheckpointError line with its type, credentials scrubbed;
    so is a failure of writing the shards."""
    import torch.distributed.checkpoint as dcp

    from ddpctl_trainer.object_store import ObjectStore

    fsdp_trainer().fit()
    real_download = ObjectStore._download

    def shard_refused(self: ObjectStore, path: str, dest: Path) -> None:
        if path.endswith(".distcp"):
            raise StoreError(f"reading {path} failed (GenericError: 503 Service Unavailable)")
        real_download(self, path, dest)

    monkeypatch.setattr(ObjectStore, "_download", shard_refused)
    with pytest.raises(StoreError, match=r"^reading ckpt-00000001/\w+/__0_0.distcp failed \(GenericError: 503"):
        fsdp_trainer().resume()

    def disk_full(self: ObjectStore, path: str, dest: Path) -> None:
        if path.endswith(".distcp"):
            raise OSError(28, f"No space left on device {SECRET_KEY}")
        real_download(self, path, dest)

    monkeypatch.setattr(ObjectStore, "_download", disk_full)
    trainer = fsdp_trainer()
    with pytest.raises(CheckpointError) as failed:
        trainer.resume()
    message = str(failed.value)
    where = trainer.checkpointer.store.location
    assert message.startswith(f"loading checkpoint {where}/ckpt-00000001 failed on rank 0 (OSError: ")
    assert "No space left on device ***" in message and SECRET_KEY not in message and "\n" not in message

    def write_refused(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dcp.FileSystemWriter, "write_data", write_refused)
    with pytest.raises(CheckpointError, match=r"^saving the sharded checkpoint s3://.* failed on rank 0 \(OSError: "):
        trainer.save_checkpoint(background=False)


def test_a_sharded_checkpoint_stored_in_the_foreground_clears_an_earlier_failed_save(fsdp_trainer: Any) -> None:
    """The stop path saves again when the last background save failed (``writer.failed``): a
    foreground sharded save that succeeds clears it, as a full one does, so nothing saves twice."""
    checkpointer = fsdp_trainer().checkpointer
    checkpointer.writer.failed = True
    checkpointer.save(Position(), background=False)
    assert not checkpointer.writer.failed
    assert checkpointer.store.read_latest()[0] == 0
