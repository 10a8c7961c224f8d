"""api.py: a job's context (PYTHONPATH, layout, -m) reaches the lint, and --fix over a program is
all or nothing, one diff per file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpctl.lint import api
from ddpctl.spec.sources import SpecInput


def _spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **layer: Any) -> Any:
    monkeypatch.chdir(tmp_path)
    return SpecInput(flags=layer, config=None).spec()


def test_the_jobs_pythonpath_and_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "src").mkdir()
    spec = _spec(
        tmp_path,
        monkeypatch,
        module=None,
        script="train.py",
        nodes=3,
        gpusPerNode=4,
        env={"PYTHONPATH": "/workspace/src"},
    )
    ctx = api.job_context(spec, tmp_path)
    assert ctx.roots == (tmp_path / "src",) and (ctx.layout.nodes, ctx.layout.procs_per_node) == (3, 4)
    assert not ctx.module_entry


def test_a_helper_found_through_pythonpath_is_linted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src/helpers.py").write_text("import torch\ndef save(s):\n    torch.save(s, 'a.pt')\n")
    (tmp_path / "train.py").write_text(
        "import torch.distributed as dist\nimport helpers\ndist.init_process_group('gloo')\nhelpers.save({})\n"
    )
    spec = _spec(tmp_path, monkeypatch, module=None, script="train.py", env={"PYTHONPATH": "src"})
    result = api.lint_job(spec, tmp_path, use_torchfix=False)
    assert [(f.path, f.line, f.rule) for f in result.findings] == [("src/helpers.py", 3, "DDP008")]


def test_fix_rewrites_every_file_of_the_flow(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import os, torch\nimport torch.distributed as dist\nfrom work import run\n"
        "dist.init_process_group('nccl')\nrank = int(os.environ['RANK'])\n"
        "torch.cuda.set_device(rank)\nrun(rank)\n"
    )
    (tmp_path / "work.py").write_text("import torch\ndef run(rank):\n    return torch.nn.Linear(2, 2).to(rank)\n")
    path = tmp_path / "train.py"
    linted = api.lint_sources(api.read([path], tmp_path), [path], False, cwd=tmp_path)
    assert sorted((f.path, f.rule) for f in linted.result.findings) == [("train.py", "DDP001"), ("work.py", "DDP001")]
    done, after = linted.fix(False)
    assert sorted(d.src.display for d in done if d.changed) == ["train.py", "work.py"]
    assert not [f for f in after.result.findings if f.rule == "DDP001"]
    compile((tmp_path / "work.py").read_text(), "work.py", "exec")
    assert "LOCAL_DEVICE" in (tmp_path / "work.py").read_text()
