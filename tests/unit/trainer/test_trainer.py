"""ddpctl_trainer.trainer, one process in this one: the Trainer trains the parts it is given (the
factory makes them, not the trainer), accumulates gradients exactly, evaluates each sample once,
stops at a step boundary with a checkpoint on SIGTERM, and ends where --max-steps says. The
multi-process proofs (ranks equal to one process, bit-identical resume) are in tests/e2e/trainer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from ddpctl_trainer import build as build_mod
from ddpctl_trainer import stop
from ddpctl_trainer import trainer as trainer_mod
from ddpctl_trainer.build import unwrap
from ddpctl_trainer.callbacks import Callback, TrainerView
from ddpctl_trainer.checkpointer import Checkpointer
from ddpctl_trainer.config import parse_args
from ddpctl_trainer.data import build_data
from ddpctl_trainer.dist import DistContext
from ddpctl_trainer.errors import Preempted, UsageError
from ddpctl_trainer.metrics import MetricsLog, Progress
from ddpctl_trainer.trainer import Trainer, run_trainer
from tests.support.trainer import ONE_PROCESS, in_process

ONE = DistContext(0, 0, 1, 1, 0, 0, "single")
CPU = torch.device("cpu")


def test_the_trainer_trains_the_parts_it_is_given_and_builds_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in PyTorch's tutorial, Trainer(model, data, optimizer, ...): a model and optimizer made by
    hand train as given; the trainer calls none of the factory."""
    cfg = parse_args([*ONE_PROCESS, "--checkpoint-dir", str(tmp_path), "--epochs", "1"], {})
    data = build_data(cfg, ONE, 16, pin_memory=False)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, cfg.num_classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    start = [p.detach().clone() for p in model.parameters()]
    for module in (build_mod, trainer_mod):
        for name in ("build", "wrap", "make_optimizer", "make_scheduler", "build_data", "build_model"):
            monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("the trainer built a part"), raising=False)
    metrics, progress = MetricsLog(None, True), Progress("none", 0, cfg.epochs)
    checkpointer = Checkpointer(cfg, ONE, CPU, model, optimizer, None, metrics=metrics, progress=progress)
    trainer = Trainer(model, data, optimizer, checkpointer, cfg, ONE, CPU, metrics=metrics, progress=progress)
    trainer.fit()
    assert trainer.step == 2 and trainer.model is model and trainer.module is model
    assert all(not torch.equal(p, s) for p, s in zip(model.parameters(), start))
    assert (tmp_path / "ckpt-00000002.pt").is_file()


def test_from_config_makes_every_part_from_the_flags(tmp_path: Path) -> None:
    trainer = in_process(tmp_path, "--optimizer", "adamw", "--scheduler", "cosine", "--lr", "0.01")
    assert isinstance(trainer.optimizer, torch.optim.AdamW) and trainer.scheduler is not None
    assert trainer.module is unwrap(trainer.model) is trainer.checkpointer.module
    assert trainer.checkpointer.optimizer is trainer.optimizer and trainer.checkpointer.scheduler is trainer.scheduler
    assert trainer.optimizer.param_groups[0]["params"] == list(trainer.module.parameters())
    assert (trainer.batch, trainer.steps_per_epoch, trainer.total_steps) == (16, 2, 4)


def test_accumulating_gradients_trains_like_one_larger_batch(tmp_path: Path) -> None:
    """--grad-accum 2 of 8 samples equals a batch of 16: each micro-batch's loss is divided by the
    group's size, and the optimizer steps once a group (float64: equal to rounding)."""
    common = ("--dtype", "float64", "--epochs", "2", "--no-eval")
    whole = in_process(tmp_path / "a", *common, "--batch-size", "16")
    accumulated = in_process(tmp_path / "b", *common, "--batch-size", "8", "--grad-accum", "2")
    whole.fit()
    accumulated.fit()
    assert whole.step == accumulated.step == 4
    for a, b in zip(whole.module.parameters(), accumulated.module.parameters()):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_evaluation_counts_each_sample_once(tmp_path: Path) -> None:
    trainer = in_process(tmp_path, "--eval", "--eval-samples", "13", "--batch-size", "4")
    result = trainer.evaluate()
    assert result["samples"] == 13 and 0.0 <= result["accuracy"] <= 1.0
    assert trainer.model.training  # back to training mode


@pytest.mark.parametrize(
    ("batches_done", "accum", "step_in_epoch"),
    [(0, 1, 2), (1, 1, 1), (1, 2, 1), (2, 2, 1), (3, 2, 2)],  # 0: the epoch's last step is done
)
def test_step_in_epoch(tmp_path: Path, batches_done: int, accum: int, step_in_epoch: int) -> None:
    trainer = in_process(tmp_path, "--batch-size", str(16 // accum), "--grad-accum", str(accum))
    trainer.batches_done = batches_done
    assert trainer.step_in_epoch() == step_in_epoch


class _SignalAt(Callback):
    """This process gets SIGTERM (as recorded by the handler) right after ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, trainer: TrainerView) -> None:
        if trainer.step == self.step:
            assert not stop.on_signal()  # recorded: training stops at the next step boundary


def test_a_sigterm_stops_after_the_step_with_its_checkpoint(tmp_path: Path) -> None:
    made = in_process(tmp_path, "--epochs", "3", "--metrics-file", str(tmp_path / "metrics.jsonl"))
    trainer = Trainer(
        made.model,
        made.data,
        made.optimizer,
        made.checkpointer,
        made.cfg,
        ONE,
        CPU,
        callbacks=[_SignalAt(3)],
        metrics=made.metrics,
        progress=made.progress,
    )
    with pytest.raises(Preempted) as stopped:
        trainer.fit()
    where = tmp_path / "ckpt-00000003.pt"
    assert str(stopped.value) == (
        f"stopped by SIGTERM after step 3; checkpoint {where} written, the next start resumes there"
    )
    assert stopped.value.exit_code == 143 and where.is_file()
    events = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    preempted = [e for e in events if e["event"] == "preempted"]
    assert len(preempted) == 1 and preempted[0]["saved"] and preempted[0]["signalled"]


@pytest.mark.parametrize(("max_steps", "steps"), [(1, 1), (3, 3), (100, 4)])
def test_max_steps_ends_training_with_its_checkpoint(tmp_path: Path, max_steps: int, steps: int) -> None:
    trainer = in_process(tmp_path, "--epochs", "2", "--max-steps", str(max_steps), "--keep-last", "1")
    trainer.fit()
    assert trainer.step == steps
    assert [p.name for p in tmp_path.iterdir()] == [f"ckpt-{steps:08d}.pt"]


def test_run_trainer_resumes_and_trains_to_the_end(tmp_path: Path) -> None:
    args = [*ONE_PROCESS, "--checkpoint-dir", str(tmp_path), "--stall-timeout", "0"]
    run_trainer(parse_args([*args, "--epochs", "1"], {}), ONE, CPU, "gloo")
    run_trainer(parse_args([*args, "--epochs", "2"], {}), ONE, CPU, "gloo")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-00000002.pt", "ckpt-00000004.pt"]


def test_a_part_that_cannot_be_made_is_the_error_of_the_flag(tmp_path: Path) -> None:
    cfg = parse_args([*ONE_PROCESS, "--checkpoint-dir", str(tmp_path), "--model", "no_such_module_xyz:build"], {})
    with pytest.raises(UsageError, match="--model 'no_such_module_xyz:build': cannot import"):
        run_trainer(cfg, ONE, CPU, "gloo")


@pytest.mark.parametrize(
    ("anyone", "everyone", "recovers_pods", "votes", "decision"),
    [
        (False, False, True, 0, "go"),
        (True, True, False, 0, "stop"),  # gang: any rank asked stops them all, with a checkpoint
        (True, False, False, 1, "stop"),
        (True, True, True, 0, "stop"),  # pod recovery, the job preempted or deleted: every rank asked
        (True, False, True, 1, "go"),  # one pod asked: the others get a vote to join in first
        (True, False, True, 2, "leave"),  # still only some: they leave alone, the others recover
        (True, False, True, 3, "leave"),
    ],
)
def test_the_stop_vote_decides_who_stops(
    anyone: bool, everyone: bool, recovers_pods: bool, votes: int, decision: str
) -> None:
    assert stop.decision(anyone, everyone, recovers_pods, votes) == decision
