"""A user's own image on the real node: a project's own Dockerfile (tests/e2e/cluster/user-image.
Dockerfile: its own WORKDIR, `COPY . .`, a tag that is not a `ws-` one), submitted from the
project's folder with `--script train.py`, runs /app/train.py to its last step. A variant of it
whose WORKDIR lacks the script is refused (exit 2) before anything is made in the cluster, naming
the image, its WORKDIR and the path looked for. The image and its load are test_real_node's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster.test_real_node import ON_NODE
from tests.support import REPO
from tests.support.cluster import RealCluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PROJECT = REPO / "tests" / "support" / "models"  # the image's build context: the user's folder, train.py in it


def _ddpctl(*args: str, cwd: Path = PROJECT, timeout: float = 600) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "ddpctl", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env=dict(os.environ),
    )  # fmt: skip


def test_a_projects_own_image_runs_its_script_from_its_workdir(restricted: str, node_image: str) -> None:
    assert ":ws-" not in node_image, node_image
    r = _ddpctl("submit", "-n", restricted, "--name", "own", "--nodes", "2", "--procs", "1", "--gpus", "0",
                "--image", node_image, *ON_NODE, "--script", "train.py", "--follow")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    steps = sorted({line.split("] ", 1)[-1].split(" loss ")[0] for line in r.stdout.splitlines() if " step " in line})
    assert steps == ["rank 0 step 1", "rank 0 step 2", "rank 1 step 1", "rank 1 step 2"], r.stdout[-3000:]
    assert "in /app" in r.stdout and "not built from this folder" not in r.stderr


def test_a_variant_whose_workdir_lacks_the_script_is_exit_2_before_anything_is_made(
    kube: RealCluster, restricted: str, node_image: str, tmp_path: Path
) -> None:
    """The same image with another WORKDIR (built locally, never loaded: nothing reaches the node)."""
    (tmp_path / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nWORKDIR /srv\n")
    built = _ddpctl("build", "--quiet", "--no-latest", "--repo", "ddpctl-user-test-srv", "--base-image", node_image,
                    cwd=tmp_path, timeout=600)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    variant = built.stdout.strip()
    r = _ddpctl("submit", "-n", restricted, "--name", "srv", "--nodes", "2", "--procs", "1", "--gpus", "0",
                "--image", variant, *ON_NODE, "--script", "train.py")  # fmt: skip
    assert r.returncode == 2, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ddpctl: error: --script: the image {variant} has no /srv/train.py (its WORKDIR /srv"), last
    made = kube.kubectl("get", "jobs,jobsets,services,secrets,pods", "-n", restricted, "-o", "name", check=False)
    assert made.stdout.strip() == "", made.stdout
