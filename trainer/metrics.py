"""Metrics output: JSON lines from rank 0, progress from rank 0 (plain lines, or a bar on a TTY).

Values shown here are already reduced across ranks by the trainer (a collective only every
``--log-every`` steps, never a per-step ``.item()``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from . import protocol


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
        msg = protocol.rank_prefix(self.rank) + text
        if self._bar is not None:
            self._bar.write(msg)
        else:
            # one write per line, so lines of ranks sharing a terminal/log do not interleave
            sys.stdout.write(msg + "\n")
            sys.stdout.flush()
