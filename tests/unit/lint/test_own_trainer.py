"""ddpctl's own trainer follows the recipe it checks: `ddpctl lint trainer/ddpctl_trainer/` finds nothing. Its
one deliberate case, `--strategy dp` wrapping in DataParallel, is silenced on its line with a
reason (`# ddpctl: ignore[DDP013] ...`)."""

from __future__ import annotations

from ddpctl.lint import lint_paths
from tests.support import REPO


def test_the_trainer_lints_clean() -> None:
    result = lint_paths([REPO / "trainer"], REPO)
    assert result.exit_code == 0
    assert [f.text() for f in result.findings] == []
