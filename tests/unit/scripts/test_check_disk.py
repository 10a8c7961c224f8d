"""scripts/check-disk.sh, which `make test` runs first: a full disk stops the suite at once in one
line naming the folder and the fix, instead of twenty minutes of set-up errors."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "check-disk.sh"


def _check(need_gib: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DISK_MIN_GIB": str(need_gib)}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("need_gib", "code"),
    [
        (0, 0),  # any disk has 0 GiB free
        (10**9, 1),  # no disk has an exabyte free
    ],
)
def test_the_check_passes_or_stops_by_the_space_asked_for(need_gib: int, code: int) -> None:
    r = _check(need_gib)
    assert r.returncode == code, r.stderr
    assert r.stdout == ""
    if code:
        [line] = r.stderr.splitlines()
        assert line.startswith("check-disk: ") and f"the suite needs {need_gib} GiB" in line
        assert "DISK_MIN_GIB" in line
    else:
        assert r.stderr == ""
