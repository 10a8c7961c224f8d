"""What a running job looks like on a terminal, for local runs and cluster jobs alike.

`StatusLine`: one status line, redrawn in place on a terminal and written as plain lines otherwise
(`ddpctl submit --wait`, `ddpctl status --watch`, `ddpctl run`). `Console`: a local run's prefixed
`[rank R]` / `[node N]` log lines on stdout, its notes and status line on stderr.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any, Protocol, TextIO


class JobStatus(Protocol):
    """What the status line shows of a job (supervise.JobState)."""

    phase: str

    def status(self, bar_width: int = 0) -> str: ...


BAR_WIDTH = 20
_COLOURS = ("36", "33", "35", "32", "34", "91", "96", "93")


def plural(count: int, word: str, words: str | None = None) -> str:
    """`1 node`, `2 nodes`, `1 process`, `2 processes`."""
    return f"{count} {word if count == 1 else (words or word + 's')}"


def age_text(seconds: float) -> str:
    """kubectl's AGE column: 45s, 12m, 3h, 2d."""
    secs = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size * (2 if unit != "m" else 1):
            return f"{secs // size}{unit}"
    return f"{secs}s"


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:  # noqa: BLE001
        return False


class StatusLine:
    """On a terminal, one line rewritten in place; otherwise a line each time it changes."""

    def __init__(self, enabled: bool = True, stream: Any = None) -> None:
        self.enabled = enabled
        self.stream = stream
        self.last = ""
        self.lock = threading.Lock()

    def _out(self) -> Any:
        return self.stream or sys.stderr

    def show(self, text: str) -> None:
        if not self.enabled or text == self.last:
            return
        with self.lock:
            out = self._out()
            if isatty(out):
                out.write("\r\x1b[K" + text)
            else:
                out.write(text + "\n")
            out.flush()
            self.last = text

    def clear(self) -> None:
        """Erase the redrawn line (a terminal only), so that a message can take its place."""
        with self.lock:
            self._clear()

    def _clear(self) -> None:
        out = self._out()
        if self.enabled and self.last and isatty(out):
            out.write("\r\x1b[K")
            out.flush()
        self.last = ""

    def say(self, text: str) -> None:
        """A message line that must not be overwritten by the next status line."""
        with self.lock:
            out = self._out()
            if self.enabled and isatty(out) and self.last:
                out.write("\r\x1b[K")
                self.last = ""
            out.write(text + "\n")
            out.flush()

    def end(self) -> None:
        if self.enabled and self.last and isatty(self._out()):
            with self.lock:
                self._out().write("\n")
                self.last = ""


class Console:
    """Writes prefixed log lines to `out` and the status to `err` (a redrawn line on a TTY,
    a line per phase change otherwise)."""

    def __init__(self, out: TextIO, err: TextIO, color: bool, live_status: bool) -> None:
        self.out, self.err = out, err
        self.color = color
        self.live = live_status
        self._status = StatusLine(enabled=live_status, stream=err)
        self._last_phase: str | None = None

    def _paint(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def _clear(self) -> None:
        if self.live:
            self._status.clear()

    def line(self, prefix: str, colour: str, text: str) -> None:
        self._clear()
        self.out.write(f"{self._paint(prefix, colour)} {text}\n")
        self.out.flush()

    def rank_line(self, rank: int, text: str, progress: bool = False) -> None:
        """A rank's line; rank 0's progress lines are drawn by the live status line on a terminal."""
        if progress and self.live:
            return
        self.line(f"[rank {rank}]", _COLOURS[rank % len(_COLOURS)], text)

    def node_line(self, node: int, text: str) -> None:
        self.line(f"[node {node}]", "2", text)

    def note(self, text: str) -> None:
        self._clear()
        self.err.write(f"ddpctl: {text}\n")
        self.err.flush()

    def status(self, state: JobStatus) -> None:
        if self.live:
            self._status.show(self._paint(state.status(bar_width=BAR_WIDTH), "1"))
        elif state.phase != self._last_phase:
            self._last_phase = state.phase
            self.note(state.status())

    def done(self) -> None:
        self._clear()


def make_console(out: TextIO | None, err: TextIO | None, color: bool | None) -> Console:
    out = out or sys.stdout
    err = err or sys.stderr
    if color is None:
        color = out.isatty() and "NO_COLOR" not in os.environ
    return Console(out, err, color, live_status=err.isatty())


def relative_path(path: Path, base: Path) -> str:
    """`path` as the user would type it from `base` (absolute when it lies elsewhere)."""
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)
