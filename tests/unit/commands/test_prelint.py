"""`run`, `render` and `submit` read the job's own script against the DDP recipe first: findings
are printed once, `submit` stops on an error (exit 2) unless --no-lint, `--explain` says whether
the script was linted, and the built-in trainer is not linted (nor is ddpctl.lint imported)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import REPO
from tests.support.api import objects_left, one_error

ARTICLE = REPO / "tests" / "unit" / "lint" / "fixtures" / "article_style.py"


def test_submit_stops_on_an_error_of_the_recipe_unless_no_lint(cli, make_cluster, tmp_path: Path) -> None:
    shutil.copy(ARTICLE, tmp_path / "train.py")
    c = make_cluster()
    args = ["submit", *c.args, "--script", "train.py", "--workspace", "."]
    err = one_error(cli(*args), 2, "lint: train.py:", "DDP002", "submit anyway with --no-lint")
    assert "error" in err
    assert objects_left(c.double, "default") == []
    r = cli(*args, "--no-lint")
    assert r.code == 0, r.err


def test_render_prints_the_findings_and_explain_says_it_linted(cli, tmp_path: Path) -> None:
    shutil.copy(ARTICLE, tmp_path / "train.py")
    r = cli("render", "--script", "train.py", "--workspace", ".")
    assert r.code == 0, r.err
    assert "ddpctl: lint: train.py:" in r.err and " DDP002 " in r.err
    explained = " ".join(cli("render", "--script", "train.py", "--workspace", ".", "--explain").out.split())
    assert "lint: train.py: " in explained and "(ddpctl lint)" in explained
    skipped = " ".join(cli("render", "--script", "train.py", "--explain", "--no-lint").out.split())
    assert "lint: not linted (--no-lint)" in skipped


def test_the_built_in_trainer_is_not_linted_and_lint_is_not_loaded() -> None:
    code = "import sys; from ddpctl.app import main; main(['render']); print('ddpctl.lint' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False")
