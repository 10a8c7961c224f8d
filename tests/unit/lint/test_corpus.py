"""The corpus: small programs written here, each reproducing a pattern of a public training script
(its first comment, `# Modelled on owner/repo[@commit] path`, names the public repository and file
whose pattern it reproduces), linted as a program, with
every finding expected at the line its `# expect: RULE` comment marks, in whichever file of the
program it is. Any other finding, or a missing one, fails. The held-out programs (heldout/) were
kept out while the rules were tuned; they are checked the same way, as their own test, except that a
mark `# expect: RULE (missed)` is a finding the rules should make there and do not: it counts as a
miss in the figures (tools/lint_docs.py), and the test holds that it is still missed, so a rule that
starts to find it must have its mark changed. The corpus has no such marks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddpctl.lint import Severity, lint_paths

HERE = Path(__file__).parent
CORPUS = HERE / "corpus"
HELDOUT = HERE / "heldout"
EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+?)\s*(\(missed\))?$")
MODELLED = re.compile(r"^# Modelled on [\w.-]+/[\w.-]+(@[0-9a-f]{7,40})? [\w./-]+\.(py|rst)\b")


def programs(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def expected(folder: Path, only_missed: bool = False) -> list[tuple[str, int, str]]:
    marks = []
    for path in sorted(folder.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            match = EXPECT.search(line)
            if match and (match.group(2) or not only_missed):
                rel = str(path.relative_to(folder))
                marks.extend((rel, number, rule.strip()) for rule in match.group(1).split(","))
    return sorted(marks)


def found(folder: Path) -> list[tuple[str, int, str]]:
    result = lint_paths([folder], folder, use_torchfix=False)
    return sorted((f.path, f.line, f.rule) for f in result.findings)


@pytest.mark.parametrize("name", programs(CORPUS))
def test_a_corpus_program_finds_what_it_marks_and_nothing_else(name: str) -> None:
    assert expected(CORPUS / name, only_missed=True) == []
    assert found(CORPUS / name) == expected(CORPUS / name)


@pytest.mark.parametrize("name", programs(HELDOUT))
def test_a_held_out_program_finds_what_it_marks_and_nothing_else(name: str) -> None:
    missed = set(expected(HELDOUT / name, only_missed=True))
    assert found(HELDOUT / name) == [m for m in expected(HELDOUT / name) if m not in missed]


def test_the_corpus_is_big_enough_and_says_where_each_program_comes_from() -> None:
    assert len(programs(CORPUS)) >= 25 and len(programs(HELDOUT)) >= 3
    for folder in (CORPUS, HELDOUT):
        for path in folder.rglob("*.py"):
            assert MODELLED.match(path.read_text()), f"{path} does not name what it was modelled on"


def test_no_correct_program_gets_an_error() -> None:
    for folder in (CORPUS, HELDOUT):
        for name in programs(folder):
            marks = {(p, n) for p, n, _ in expected(folder / name)}
            result = lint_paths([folder / name], folder / name, use_torchfix=False)
            wrong = [
                f.text() for f in result.findings if f.severity is Severity.error and (f.path, f.line) not in marks
            ]
            assert wrong == [], name


def test_a_missing_local_module_is_a_note() -> None:
    result = lint_paths([CORPUS / "missing_local_module"], CORPUS / "missing_local_module", use_torchfix=False)
    assert any("mypkg.absent not found" in note for note in result.notes), result.notes
