"""`ddpctl lint` as a user runs it: the line format, exit codes, JSON, what it lints by default,
--fix, ignore comments, and what it never imports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

FIXTURES = REPO / "tests" / "unit" / "lint" / "fixtures"
LINE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):(?P<col>\d+) (?P<rule>(DDP|TOR)\d{3}) (?P<message>.+); (?P<fix>.+)$")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


def _copy(tmp_path: Path, name: str, to: str = "train.py") -> Path:
    target = tmp_path / to
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / name, target)
    return target


def test_each_finding_is_one_line_and_an_error_exits_1(cli, tmp_path: Path) -> None:
    _copy(tmp_path, "article_style.py")
    result = cli("lint", "train.py")
    assert result.code == 1, result.err
    rows = [LINE.match(line) for line in result.out.splitlines()]
    assert all(rows), result.out
    assert [(r["path"], int(r["line"]), r["rule"]) for r in rows if r] == [
        ("train.py", 26, "DDP011"),
        ("train.py", 32, "DDP002"),
        ("train.py", 41, "TOR102"),
    ]
    assert "ddpctl lint: 1 error, 2 warnings in 1 file" in result.err


def test_warnings_alone_exit_0(cli, tmp_path: Path) -> None:
    _copy(tmp_path, "ddp010_bad.py")
    result = cli("lint", "train.py")
    assert (result.code, [LINE.match(x)["rule"] for x in result.out.splitlines()]) == (0, ["DDP010"] * 2)


def test_a_clean_script_exits_0_with_no_output(cli, tmp_path: Path) -> None:
    _copy(tmp_path, "tutorial_style.py")
    result = cli("lint", "train.py")
    assert (result.code, result.out) == (0, "")
    assert "no findings in 1 file" in result.err


def test_a_missing_path_is_a_usage_error(cli) -> None:
    result = cli("lint", "nope.py")
    assert result.code == 2
    assert result.err.strip() == "ddpctl: error: nope.py: no such file or folder; give Python files or folders to lint"


def test_a_file_that_does_not_parse_is_exit_2_naming_its_line(cli, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\n\ndef broken(:\n    pass\n")
    result = cli("lint", "train.py")
    assert result.code == 2
    assert result.err.startswith("ddpctl: error: train.py:3:12: syntax error: ")
    assert "Traceback" not in result.err


def test_a_syntax_error_in_a_followed_module_is_one_located_line(cli, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import helpers\n\nhelpers.run()\n")
    (tmp_path / "helpers.py").write_text("def run(:\n    pass\n")
    result = cli("lint", "train.py")
    assert result.code == 2
    assert result.err.startswith("ddpctl: error: helpers.py:1:9: syntax error: ")
    assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err


def test_an_unreadable_followed_module_names_its_path(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A permission error, simulated: the suite may run as root, who reads every file."""
    (tmp_path / "train.py").write_text("import helpers\n")
    (tmp_path / "helpers.py").write_text("x = 1\n")
    read_bytes = Path.read_bytes

    def refuse(path: Path) -> bytes:
        if path.name == "helpers.py":
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    result = cli("lint", "train.py")
    assert result.code == 2
    assert result.err.strip() == "ddpctl: error: helpers.py: cannot read it (Permission denied)"


def test_nesting_too_deep_to_parse_is_exit_2_naming_the_file(cli, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("x = " + "a+" * 20000 + "a\n")
    result = cli("lint", "train.py")
    assert result.code == 2
    assert result.err.startswith("ddpctl: error: train.py: nested too deeply to parse; ")
    assert "internal error" not in result.err


def test_json_for_tools(cli, tmp_path: Path) -> None:
    _copy(tmp_path, "article_style.py")
    result = cli("lint", "-o", "json", "train.py")
    assert result.code == 1
    data = json.loads(result.out)
    assert data["files"] == ["train.py"] and data["summary"] == {"error": 1, "warning": 2, "info": 0}
    first = data["findings"][0]
    assert first == {
        "path": "train.py",
        "line": 26,
        "column": 17,
        "rule": "DDP011",
        "severity": "warning",
        "message": first["message"],
        "fix": first["fix"],
        "source": "ddpctl",
        "fixable": False,
    }
    assert {f["source"] for f in data["findings"]} == {"ddpctl", "torchfix"}


def test_by_default_the_jobs_script_from_ddp_yaml(cli, tmp_path: Path) -> None:
    _copy(tmp_path, "ddp002_bad.py", "src/train.py")
    _copy(tmp_path, "ddp013_bad.py", "other.py")  # not the job's: not linted
    (tmp_path / "ddp.yaml").write_text("module: null\nscript: /workspace/src/train.py\n")
    result = cli("lint")
    assert result.code == 1, result.err
    assert [LINE.match(x)["path"] for x in result.out.splitlines()] == ["src/train.py"]


def test_by_default_the_jobs_module(cli, tmp_path: Path) -> None:
    _copy(tmp_path, "ddp010_bad.py", "pkg/train.py")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "job.yaml").write_text("module: pkg.train\n")  # --config: not ./ddp.yaml
    result = cli("lint", "--config", "job.yaml")
    assert [LINE.match(x)["path"] for x in result.out.splitlines()] == ["pkg/train.py"] * 2


def test_the_built_in_trainer_means_the_workspace(cli, tmp_path: Path) -> None:
    _copy(tmp_path, "ddp013_bad.py", "a.py")
    _copy(tmp_path, "ddp012_bad.py", "lib/b.py")
    _copy(tmp_path, "ddp001_bad.py", ".venv/lib/c.py")  # hidden folders are not the user's code
    (tmp_path / "ddp-runs").mkdir()
    result = cli("lint")
    assert sorted({LINE.match(x)["path"] for x in result.out.splitlines()}) == ["a.py", "lib/b.py"]
    assert "built-in trainer" in result.err


def test_fix_rewrites_prints_the_diff_and_reports_what_is_left(cli, tmp_path: Path) -> None:
    script = _copy(tmp_path, "article_style.py")
    result = cli("lint", "--fix", "train.py")
    assert result.out.startswith("--- a/train.py\n+++ b/train.py\n")
    assert '+parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", -1)))' in result.out
    assert "fixed 1 finding(s) in 1 file(s)" in result.err
    rules = [m["rule"] for m in map(LINE.match, result.out.splitlines()) if m]
    assert rules == ["DDP011", "TOR102"]  # left: not mechanical
    assert result.code == 0  # the error (DDP002) is fixed
    assert "import os\n" in script.read_text()
    again = cli("lint", "--fix", "train.py")
    assert "fixed 0 finding(s) in 0 file(s)" in again.err and not again.out.startswith("---")


def test_an_ignore_comment_with_its_reason_silences_one_rule(cli, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch import nn\n"
        "a = nn.DataParallel(nn.Linear(2, 2))  # ddpctl: ignore[DDP013] measuring DataParallel itself\n"
        "b = nn.DataParallel(  # ddpctl: ignore[DDP001] the wrong rule\n    nn.Linear(2, 2),\n)\n"
        "c = nn.DataParallel(\n    nn.Linear(2, 2),\n)  # ddpctl: ignore[DDP013, TOR102] on the statement's last line\n"
        "d = torch.load('x.pt')  # ddpctl: ignore[TOR102] our own file\n"
    )
    result = cli("lint", "train.py")
    assert [(int(m["line"]), m["rule"]) for m in map(LINE.match, result.out.splitlines()) if m] == [(4, "DDP013")]


def test_no_torchfix(cli, tmp_path: Path) -> None:
    _copy(tmp_path, "tor102_bad.py")
    assert cli("lint", "--no-torchfix", "train.py").out == ""


def test_lint_never_imports_torch_or_the_script(tmp_path: Path) -> None:
    script = _copy(tmp_path, "article_style.py")
    script.write_text(script.read_text() + "\nraise SystemExit('the script ran')\n")
    code = (
        "import sys\nfrom ddpctl.app import main\n"
        f"rc = main(['lint', {str(script)!r}])\n"
        "print('RESULT', rc, sorted(m for m in ('torch', 'torchvision', 'kubernetes') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert "RESULT 1 []" in out.stdout


def test_help_does_not_load_the_linter(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom ddpctl.app import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith('ddpctl.lint')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert "LOADED []" in out.stdout and "lint" in out.stdout
