"""`ddpctl lint --fix` end to end: a script with the device from the global rank, a --local_rank
argument and nccl hard-coded fails under `ddpctl run --local` (CPU, gloo); fixed, it lints clean of
those rules and trains there, 2 nodes x 2 processes. Real torchrun agents, bounded, no sleeps."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.ports import free_port
from tests.support.procs import run_ddpctl as _ddpctl

FIXTURE = REPO / "tests" / "unit" / "lint" / "fixtures" / "fixable_train.py"


@pytest.mark.slow
def test_the_fixed_script_trains_under_run_local(tmp_path: Path) -> None:
    shutil.copy(FIXTURE, tmp_path / "train.py")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    run = ["run", "--local", "--backoff-limit", "0", "--port", str(free_port()), "--script", "train.py"]

    before = _ddpctl(*run, cwd=tmp_path, extra_env=env)
    assert before.returncode != 0 and "LINT-FIXED" not in before.stdout

    linted = _ddpctl("lint", "train.py", cwd=tmp_path, extra_env=env)
    assert linted.returncode == 1
    # its nccl is no finding yet: as written the script needs CUDA anyway; the device fix uncovers it
    assert {line.split()[1] for line in linted.stdout.splitlines()} >= {"DDP001", "DDP002"}

    fixed = _ddpctl("lint", "--fix", "train.py", cwd=tmp_path, extra_env=env)
    assert fixed.stdout.startswith("--- a/train.py\n+++ b/train.py\n"), fixed.stdout
    assert fixed.returncode == 0 and "fixed 7 finding(s) in 1 file(s)" in fixed.stderr, fixed.stderr
    assert "no findings in 1 file" in fixed.stderr  # nothing left: the fixture has only fixable mistakes

    after = _ddpctl(*run, cwd=tmp_path, extra_env=env)
    assert after.returncode == 0, after.stderr[-2000:] + after.stdout[-2000:]
    epochs = [line for line in after.stdout.splitlines() if "LINT-FIXED epoch" in line]
    assert [line.split("LINT-FIXED ")[1].split()[:2] for line in epochs] == [["epoch", "0"], ["epoch", "1"]]
    assert "local rank argument 0" in epochs[0]  # the argument now defaults to LOCAL_RANK
