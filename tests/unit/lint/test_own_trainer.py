"""ddpctl's own trainer/ follows the recipe: `ddpctl lint trainer/` exits 0, and none of ddpctl's
rules warns on it (a warning there would be a false alarm to fix in the linter).

What is left is listed in KNOWN: TorchFix's TOR104/TOR105 (trainer/data.py imports
`default_collate` from the private `torch.utils.data._utils.collate`) and DDP013 (`--strategy dp`
wraps in DataParallel on purpose). They are for trainer/ to fix or silence with
`# ddpctl: ignore[RULE] reason`; once it has, KNOWN empties and this test asserts no findings."""

from __future__ import annotations

from ddpctl.lint import lint_paths

from tests.support import REPO

KNOWN = {("trainer/data.py", "TOR104"), ("trainer/data.py", "TOR105"), ("trainer/trainer.py", "DDP013")}


def test_the_trainer_lints_with_no_error_and_no_new_finding() -> None:
    result = lint_paths([REPO / "trainer"], REPO)
    assert result.exit_code == 0
    assert {(f.path, f.rule) for f in result.findings} <= KNOWN, [f.text() for f in result.findings]
