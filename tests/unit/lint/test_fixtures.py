"""Each rule against its fixture: a small script written for this project with the mistake, each
finding at the exact line its `# expect: RULE` comment marks (and nothing else), and a clean twin
that finds nothing. The article-style CIFAR-10 script finds its three mistakes; a script in the
shape of PyTorch's multi-node tutorial finds nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddpctl.lint import RULES, lint_paths

FIXTURES = Path(__file__).parent / "fixtures"
EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)$")
BAD = sorted(p.name for p in FIXTURES.glob("*_bad.py")) + ["article_style.py", "fixable_train.py"]
CLEAN = sorted(p.name for p in FIXTURES.glob("*_clean.py")) + ["tutorial_style.py"]


def expected(path: Path) -> list[tuple[int, str]]:
    marks = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = EXPECT.search(line)
        if match:
            marks.extend((number, rule.strip()) for rule in match.group(1).split(","))
    return sorted(marks)


def found(path: Path) -> list[tuple[int, str]]:
    result = lint_paths([path], FIXTURES)
    return sorted((f.line, f.rule) for f in result.findings)


@pytest.mark.parametrize("name", BAD)
def test_a_mistake_is_found_at_its_line_and_nothing_else(name: str) -> None:
    marks = expected(FIXTURES / name)
    assert marks, f"{name} marks no expected finding"
    assert found(FIXTURES / name) == marks


@pytest.mark.parametrize("name", CLEAN)
def test_the_clean_twin_finds_nothing(name: str) -> None:
    assert found(FIXTURES / name) == []


def test_every_rule_has_a_fixture_and_a_clean_twin() -> None:
    ids = [rule.id.lower() for rule in RULES] + ["tor102"]
    for rule in ids:
        assert (FIXTURES / f"{rule}_bad.py").is_file(), rule
        assert (FIXTURES / f"{rule}_clean.py").is_file(), rule
        assert rule.upper() in {r for _, r in expected(FIXTURES / f"{rule}_bad.py")}, rule


def test_the_article_style_script_finds_its_three_mistakes() -> None:
    result = lint_paths([FIXTURES / "article_style.py"], FIXTURES)
    assert sorted(f.rule for f in result.findings) == ["DDP002", "DDP011", "TOR102"]
    assert result.exit_code == 1  # DDP002 is an error


def test_the_tutorial_shaped_script_exits_0_with_no_warning() -> None:
    result = lint_paths([FIXTURES / "tutorial_style.py"], FIXTURES)
    assert (result.exit_code, result.findings) == (0, [])
