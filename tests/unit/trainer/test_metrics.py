"""ddpctl_trainer.metrics: the meter's sums and their reduction, rank 0's progress lines, and the
metrics file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ddpctl_trainer.metrics import Meter, MetricsLog, Progress


@pytest.mark.parametrize("rank,printed", [(0, True), (1, False), (3, False)])
def test_only_rank_0_prints_progress_lines(rank: int, printed: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """The values are reduced over all ranks: the other ranks would print the same lines again."""

    progress = Progress("lines", rank, epochs=2)
    progress.report(0, 4, 8, loss=2.3, rate=100.0)
    progress.line("eval epoch 1/2: loss 2.2")
    out = capsys.readouterr().out
    assert (f"[rank {rank}] epoch 1/2 step 4/8 loss 2.3000 100.0 samples/s\n" in out) == printed
    assert ("eval epoch 1/2" in out) == printed


def test_the_meter_counts_a_micro_batchs_loss_correct_answers_and_samples() -> None:
    meter = Meter(torch.device("cpu"))
    out = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]], dtype=torch.float64)
    meter.add(out, torch.tensor(0.5), torch.tensor([0, 1, 1]))  # argmax 0, 1, 0: two right
    meter.add(out[:1], torch.tensor(2.0), torch.tensor([1]))  # one wrong
    assert meter.last is None
    got = meter.reduce()  # one process: no group, the sums are this rank's
    assert (got.loss, got.accuracy, got.samples, got.local_samples) == ((0.5 * 3 + 2.0) / 4, 2 / 4, 4.0, 4.0)
    assert meter.last == got
    assert meter.reduce().samples == 0.0  # the next interval starts from zero
    assert meter.last.loss == 0.0  # nothing counted: no division by zero


def test_only_rank_0_writes_the_metrics_file_and_a_restart_appends(tmp_path: Path) -> None:
    path = tmp_path / "out" / "metrics.jsonl"
    for rank in (1, 0):
        log = MetricsLog(str(path), enabled=rank == 0)
        log.emit("start", rank=rank)
        log.close()
    MetricsLog(str(path), enabled=True).emit("start", rank=0)  # the restart: appended
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["event"], r["rank"]) for r in rows] == [("start", 0), ("start", 0)]
    assert all(isinstance(r["time"], float) for r in rows)


@pytest.mark.parametrize(
    ("eta_s", "line"),
    [
        (None, "[rank 0] epoch 2/3 step 5/8 loss 1.2500 64.0 samples/s"),
        (65.0, "[rank 0] epoch 2/3 step 5/8 loss 1.2500 64.0 samples/s eta 1m05s"),
    ],
)
def test_a_progress_line_is_what_ddpctl_status_reads_back(
    eta_s: float | None, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ddpctl_trainer.protocol import parse_progress

    Progress("lines", 0, epochs=3).report(1, 5, 8, loss=1.25, rate=64.0, eta_s=eta_s)
    out = capsys.readouterr().out
    assert out == line + "\n"
    parsed = parse_progress(out.strip())
    assert parsed is not None and (parsed.epoch, parsed.step, parsed.eta_s) == (2, 5, eta_s)
