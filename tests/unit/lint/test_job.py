"""`lint_job(spec, cwd)`, what the commands call before they run a job: the job's own file found in
the user's folder, or nothing linted with a note saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpctl.lint import lint_job
from ddpctl.spec.sources import SpecInput

BAD = "import torch.distributed as dist\ndist.init_process_group('nccl')\n"


def _spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **layer: Any) -> Any:
    monkeypatch.chdir(tmp_path)  # no ddp.yaml there: only the defaults and this layer
    return SpecInput(flags=layer, config=None).spec()


@pytest.mark.parametrize(
    "layer,file",
    [
        ({"module": None, "script": "train.py"}, "train.py"),
        ({"module": None, "script": "/workspace/jobs/train.py"}, "jobs/train.py"),  # its path in the image
        ({"module": "pkg.train"}, "pkg/train.py"),
        ({"module": "pkg"}, "pkg/__main__.py"),
        ({"module": "pkg.train"}, "src/pkg/train.py"),
        ({"module": None, "command": ["python", "-u", "jobs/train.py", "--epochs", "3"]}, "jobs/train.py"),
        ({"module": None, "command": ["python", "-m", "pkg.train"]}, "pkg/train.py"),
    ],
    ids=["script", "script in the image", "module", "package", "src layout", "command", "command -m"],
)
def test_the_jobs_own_file_is_linted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layer: dict[str, Any], file: str
) -> None:
    (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / file).write_text(BAD)
    (tmp_path / "other.py").write_text(BAD)  # not the job's
    result = lint_job(_spec(tmp_path, monkeypatch, **layer), tmp_path)
    assert result.linted and result.files == [tmp_path / file]
    assert [(f.path, f.rule) for f in result.findings] == [(file, "DDP010")]


@pytest.mark.parametrize(
    "layer,note",
    [
        ({}, "built-in trainer"),
        ({"module": None, "script": "/opt/app/train.py"}, "not in"),
        ({"module": "somewhere.else"}, "not under"),
        ({"module": None, "command": ["bash", "-c", "true"]}, "names no Python file"),
    ],
    ids=["built-in trainer", "script only in the image", "installed module", "no Python file"],
)
def test_nothing_of_the_users_to_lint_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layer: dict[str, Any], note: str
) -> None:
    (tmp_path / "train.py").write_text(BAD)
    result = lint_job(_spec(tmp_path, monkeypatch, **layer), tmp_path)
    assert not result.linted and result.findings == [] and result.exit_code == 0
    assert any(note in n for n in result.notes), result.notes
