"""ddpctl.console: what a run looks like on a terminal and in a log: the status line (redrawn in
place on a terminal, a line per change otherwise), prefixed rank and node lines, notes, and the
small words (plural, age, paths) every message uses."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ddpctl.console import BAR_WIDTH, Console, StatusLine, age_text, make_console, plural, relative_path


class Terminal(io.StringIO):
    """A stream that says it is a terminal (what a user's shell gives ddpctl)."""

    def isatty(self) -> bool:
        return True


class Job:
    """What the status line shows of a job (a JobState's phase and status())."""

    def __init__(self, phase: str) -> None:
        self.phase = phase
        self.widths: list[int] = []

    def status(self, bar_width: int = 0) -> str:
        self.widths.append(bar_width)
        return f"w: {self.phase}"


@pytest.mark.parametrize(
    ("count", "word", "words", "text"),
    [(1, "node", None, "1 node"), (2, "node", None, "2 nodes"), (0, "node", None, "0 nodes"),
     (1, "process", "processes", "1 process"), (3, "process", "processes", "3 processes")],
)  # fmt: skip
def test_plural(count: int, word: str, words: str | None, text: str) -> None:
    assert plural(count, word, words) == text


@pytest.mark.parametrize(
    ("seconds", "age"),
    [(-5, "0s"), (0, "0s"), (59.9, "59s"), (60, "1m"), (3599, "59m"), (7199, "119m"), (7200, "2h"),
     (172799, "47h"), (172800, "2d"), (10 * 86400, "10d")],
)  # fmt: skip
def test_age_text_is_kubectls_age_column(seconds: float, age: str) -> None:
    assert age_text(seconds) == age


def test_relative_path(tmp_path: Path) -> None:
    assert relative_path(tmp_path / "ddp-runs" / "w", tmp_path) == "ddp-runs/w"
    assert relative_path(Path("/elsewhere/x"), tmp_path) == "/elsewhere/x"


# ------------------------------------------------------------------------------ the status line


def test_on_a_terminal_the_status_line_is_redrawn_in_place() -> None:
    tty = Terminal()
    line = StatusLine(stream=tty)
    line.show("one")
    line.show("one")  # unchanged: not drawn again
    line.show("two")
    line.say("a message")
    line.show("three")
    line.end()
    assert tty.getvalue() == "\r\x1b[Kone\r\x1b[Ktwo\r\x1b[Ka message\n\r\x1b[Kthree\n"


def test_in_a_log_each_change_is_a_line() -> None:
    log = io.StringIO()
    line = StatusLine(stream=log)
    for text in ("one", "one", "two"):
        line.show(text)
    line.say("a message")
    line.clear()
    line.end()
    assert log.getvalue() == "one\ntwo\na message\n"


def test_a_disabled_status_line_shows_nothing_but_messages() -> None:
    tty = Terminal()
    line = StatusLine(enabled=False, stream=tty)
    line.show("one")
    line.clear()
    line.say("a message")
    line.end()
    assert tty.getvalue() == "a message\n"


def test_clear_erases_the_line_on_a_terminal_only_once() -> None:
    tty = Terminal()
    line = StatusLine(stream=tty)
    line.show("one")
    line.clear()
    line.clear()
    assert tty.getvalue() == "\r\x1b[Kone\r\x1b[K"


# ------------------------------------------------------------------------------ the console


def test_rank_and_node_lines_go_to_stdout_with_their_prefix() -> None:
    out, err = io.StringIO(), io.StringIO()
    console = Console(out, err, color=False, live_status=False)
    console.rank_line(3, "hello")
    console.node_line(1, "agent says")
    console.rank_line(0, "epoch 1/2 step 1/4", progress=True)  # no live line: printed like any other
    console.note("a note")
    assert out.getvalue() == "[rank 3] hello\n[node 1] agent says\n[rank 0] epoch 1/2 step 1/4\n"
    assert err.getvalue() == "ddpctl: a note\n"


def test_colours_are_per_rank_and_reset_after_the_prefix() -> None:
    out = io.StringIO()
    console = Console(out, io.StringIO(), color=True, live_status=False)
    for rank in (0, 1, 8):
        console.rank_line(rank, "x")
    console.node_line(0, "y")
    assert out.getvalue().splitlines() == [
        "\x1b[36m[rank 0]\x1b[0m x",
        "\x1b[33m[rank 1]\x1b[0m x",
        "\x1b[36m[rank 8]\x1b[0m x",  # eight colours, then again
        "\x1b[2m[node 0]\x1b[0m y",
    ]


def test_without_a_live_line_the_status_is_a_note_per_phase() -> None:
    err = io.StringIO()
    console = Console(io.StringIO(), err, color=False, live_status=False)
    job = Job("starting")
    console.status(job)
    console.status(job)
    job.phase = "training"
    console.status(job)
    assert err.getvalue() == "ddpctl: w: starting\nddpctl: w: training\n"
    assert set(job.widths) == {0}  # no bar in a log


def test_a_live_status_line_is_drawn_with_a_bar_and_cleared_for_other_lines() -> None:
    out, err = io.StringIO(), Terminal()
    console = Console(out, err, color=False, live_status=True)
    job = Job("training")
    console.status(job)
    console.rank_line(0, "epoch 1/2 step 1/4", progress=True)  # the live line shows progress instead
    console.rank_line(1, "a line")
    console.note("a note")
    console.done()
    assert job.widths == [BAR_WIDTH]
    assert out.getvalue() == "[rank 1] a line\n"
    assert err.getvalue() == "\r\x1b[Kw: training\r\x1b[Kddpctl: a note\n"


def test_make_console_picks_colour_and_a_live_line_from_the_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    on_terminal = make_console(Terminal(), Terminal(), None)
    assert (on_terminal.color, on_terminal.live) == (True, True)
    in_logs = make_console(io.StringIO(), io.StringIO(), None)
    assert (in_logs.color, in_logs.live) == (False, False)
    assert make_console(Terminal(), io.StringIO(), False).color is False  # --no-color
    monkeypatch.setenv("NO_COLOR", "1")
    assert make_console(Terminal(), Terminal(), None).color is False
