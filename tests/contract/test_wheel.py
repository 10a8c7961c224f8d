"""The built wheel stands alone: distinctive import names only, templates inside, renders from a
clean venv without the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support import REPO

# Builds a wheel, makes a venv and installs the CLI's dependencies into it: minutes, with pip's network.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
    )
    # pyproject's metadata builds without setuptools' deprecation warnings (a `license = {text}` table)
    assert "project.license" not in built.stdout + built.stderr, built.stderr
    (path,) = out.glob("ddpctl-*.whl")
    return path


def test_wheel_has_no_generic_top_level_names(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"ddpctl", "ddpctl_trainer"}
    assert any(n.startswith("ddpctl/templates/") and n.endswith("job.yaml.j2") for n in names)
    assert "ddpctl/templates/_pod.j2" in names


def test_wheel_renders_from_a_clean_venv(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # Install the wheel and the CLI's own dependencies (not torch: the CLI installs without it).
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, capture_output=True, text=True)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [str(env_dir / "bin" / "ddpctl"), "render", "-t", "jobset", "--nodes", "3"],
        capture_output=True,
        text=True,
        cwd=workdir,
        env=clean_env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "kind: JobSet" in proc.stdout and "completions: 3" in proc.stdout
    where = subprocess.run(
        [str(python), "-c", "import ddpctl, sys; print(ddpctl.__file__); print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        cwd=workdir,
        env=clean_env,
    )
    location, torch_loaded = where.stdout.split()
    assert str(env_dir) in location and str(REPO) not in location
    assert torch_loaded == "False"
    missing = subprocess.run(
        [str(python), "-c", "import torch"], capture_output=True, text=True, cwd=workdir, env=clean_env
    )
    assert missing.returncode != 0, "the CLI's install must not pull torch"
