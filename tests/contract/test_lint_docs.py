"""docs/lint-rules.md is generated from the rules (and TorchFix's checks) by tools/lint_docs.py
(`make docs`): the committed page must equal what it generates, and a changed rule makes it stale."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from ddpctl.lint import RULES, torchfix
from tests.support import REPO, skip_unless
from tools import lint_docs


def _installed() -> None:
    skip_unless(torchfix.location() is not None, "TorchFix is not installed (pip install -e '.[test]')")


def test_the_committed_page_is_the_generated_one(capsys: pytest.CaptureFixture[str]) -> None:
    _installed()
    assert lint_docs.main(["--check"]) == 0, capsys.readouterr().err


def test_the_page_says_it_is_generated_and_lists_every_rule() -> None:
    text = (REPO / lint_docs.PAGE).read_text(encoding="utf-8")
    first = text.splitlines()[0]
    assert first.startswith("<!--") and "GENERATED" in first and "make docs" in first
    for rule in RULES:
        assert f"### {rule.id}\n" in text and rule.why in text and rule.fix in text


def test_a_changed_rule_makes_the_page_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _installed()
    (tmp_path / "docs").mkdir()
    shutil.copy(REPO / lint_docs.PAGE, tmp_path / lint_docs.PAGE)
    changed = dataclasses.replace(RULES[1], why="a changed why")
    monkeypatch.setattr(lint_docs, "RULES", (RULES[0], changed, *RULES[2:]))
    assert "- Why: a changed why." in lint_docs.render()
    assert lint_docs.main(["--check", "--root", str(tmp_path)]) == 1
    assert "docs/lint-rules.md is stale" in capsys.readouterr().err
    assert lint_docs.main(["--write", "--root", str(tmp_path)]) == 0
    assert lint_docs.main(["--check", "--root", str(tmp_path)]) == 0
