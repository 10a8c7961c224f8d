"""Metrics: what training measures (``Meter``), and where it goes: JSON lines from rank 0
(``MetricsLog``), progress from rank 0 (``Progress``: plain lines, or a bar on a TTY).

A ``Meter`` keeps its sums on the device and reduces them across ranks only when asked (a
collective every ``--log-every`` steps, never a per-step ``.item()``), so what is shown and written
is already the whole job's.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.distributed as dist

from . import protocol
from .dist import group_active


@dataclass(frozen=True)
class Reduced:
    """An interval's loss and accuracy over every rank's samples, and this rank's sample count."""

    loss: float
    accuracy: float
    samples: float  # every rank's
    local_samples: float  # this rank's


class Meter:
    """This rank's loss sum, correct count and samples since the last report, kept on the device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.totals = torch.zeros(3, dtype=torch.float64, device=device)
        self.last: Reduced | None = None  # the last report's values (None before the first)

    def reset(self) -> None:
        self.totals = torch.zeros(3, dtype=torch.float64, device=self.device)

    def add(self, out: torch.Tensor, loss: torch.Tensor, y: torch.Tensor) -> None:
        """Count a micro-batch: its output, mean loss and labels."""
        with torch.no_grad():
            n = y.shape[0]
            self.totals += torch.stack(
                [
                    loss.detach().double() * n,
                    (out.detach().argmax(1) == y).sum().double(),
                    torch.tensor(float(n), dtype=torch.float64, device=self.device),
                ]
            )

    def reduce(self) -> Reduced:
        """Collective (every rank calls it): the interval's totals summed over the ranks (one
        all-reduce); the next interval starts from zero."""
        totals = self.totals
        local_samples = float(totals[2].item())
        if group_active():
            dist.all_reduce(totals)
        loss_sum, correct, count = totals.tolist()
        self.totals = torch.zeros_like(totals)
        self.last = Reduced(loss_sum / max(count, 1.0), correct / max(count, 1.0), count, local_samples)
        return self.last


class MetricsLog:
    """Appends one JSON object per line; only rank 0 opens the file (appending across restarts)."""

    def __init__(self, path: str | None, enabled: bool) -> None:
        self._file: TextIO | None = None
        if path and enabled:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def emit(self, event: str, **fields: Any) -> None:
        if self._file is None:
            return
        record = {"event": event, "time": time.time(), **fields}
        self._file.write(json.dumps(record, sort_keys=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Progress:
    """Rank 0's progress: plain lines (``[rank 0] epoch 1/2 step 10/40 loss 2.30 123.4 samples/s eta 1m05s``)
    or a tqdm bar when stderr is a terminal. The values are global (reduced over the ranks), so the
    other ranks would only repeat them: they stay quiet (their warnings and errors still print)."""

    def __init__(self, mode: str, rank: int, epochs: int) -> None:
        self.rank = rank
        self.epochs = epochs
        tty = sys.stderr.isatty()
        if mode == "auto":
            mode = "bar" if tty else "lines"
        self.mode = mode
        self._bar: Any = None
        self._use_bar = mode == "bar" and rank == 0
        self._quiet = mode == "none" or rank != 0

    def start_epoch(self, epoch: int, steps: int, done: int) -> None:
        if not self._use_bar:
            return
        try:
            from tqdm import tqdm
        except ImportError:  # no tqdm in the image: fall back to lines
            self._use_bar, self.mode, self._quiet = False, "lines", False
            return
        self._bar = tqdm(total=steps, initial=done, desc=f"epoch {epoch + 1}/{self.epochs}", dynamic_ncols=True)

    def step(self) -> None:
        if self._bar is not None:
            self._bar.update(1)

    def report(
        self, epoch: int, step_in_epoch: int, steps: int, loss: float, rate: float, eta_s: float | None = None
    ) -> None:
        """One progress line (`protocol.Progress`, which `ddpctl status` reads back); `epoch` counts from 0."""
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{loss:.4f}", samples_s=f"{rate:.1f}", refresh=False)
        elif not self._quiet:
            self.line(protocol.Progress(epoch + 1, self.epochs, step_in_epoch, steps, loss, rate, eta_s).text())

    def end_epoch(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def line(self, text: str) -> None:
        """A plain line from rank 0, shown unless progress is off."""
        if self._quiet and not self._use_bar:
            return
        self.note(text)

    def note(self, text: str) -> None:
        """A line from rank 0 that is always shown (a straggler named), whatever the progress setting."""
        msg = protocol.rank_prefix(self.rank) + text
        if self._bar is not None:
            self._bar.write(msg)
        else:
            # one write per line, so lines of ranks sharing a terminal/log do not interleave
            sys.stdout.write(msg + "\n")
            sys.stdout.flush()
