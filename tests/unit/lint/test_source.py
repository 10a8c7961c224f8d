"""Reading a file as the checks do: lines as Python counts them, columns in characters, ignores."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.errors import UsageError
from ddpctl.lint import lint_paths
from ddpctl.lint.source import load, parse_ignores, split_lines


def test_lines_end_where_python_ends_them() -> None:
    text = "a = 1\x0c\nb = 2\r\nc = 3\rd = 4\n"  # a form feed is no line end to ast
    assert split_lines(text) == ["a = 1\x0c", "b = 2", "c = 3", "d = 4", ""]
    assert "".join(split_lines(text, keepends=True)) == text


def test_findings_after_a_form_feed_and_wide_characters_are_placed_right(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(
        "import torch.distributed as dist\n\x0c\nnote = '\u00e9\u00e9'; dist.init_process_group('nccl')\n",
        encoding="utf-8",
    )
    [found] = lint_paths([path], tmp_path).findings
    assert (found.line, found.col, found.rule) == (3, 38, "DDP010")


def test_an_ignore_reason_stops_at_a_second_comment() -> None:
    [ignore] = parse_ignores(["x = 1  # ddpctl: ignore[ddp013, TOR102]  # not a reason"]).values()
    assert (ignore.rules, ignore.reason) == (("DDP013", "TOR102"), "")
    [ignore] = parse_ignores(["x = 1  # ddpctl: ignore[DDP013] - the user's choice"]).values()
    assert ignore.reason == "the user's choice"


@pytest.mark.parametrize(
    "data,message",
    [
        (b"def f(:\n", "bad.py:1:7: syntax error: invalid syntax; fix it, then lint again"),
        (b"x = '\xff'\n", "bad.py: cannot read it as Python source"),
        (b"x = 1\x00\n", "bad.py:1:1: syntax error: source code string cannot contain null bytes"),
    ],
    ids=["syntax", "not UTF-8", "NUL byte"],
)
def test_a_file_that_cannot_be_read_as_python_is_bad_input(tmp_path: Path, data: bytes, message: str) -> None:
    (tmp_path / "bad.py").write_bytes(data)
    with pytest.raises(UsageError) as caught:
        load(tmp_path / "bad.py", "bad.py")
    assert caught.value.message.startswith(message)
