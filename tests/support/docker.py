"""A Docker engine and the locally made CPU base image, as the docker tests need them."""

from __future__ import annotations

import os
import shutil
import subprocess

BASE_IMAGE = os.environ.get("DDPCTL_TEST_BASE_IMAGE", "ddpctl-base:cpu")


def docker_works() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def image_present(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def local_images() -> list[str]:
    """Every `REPOSITORY:TAG ID` the engine holds, sorted: `docker images` orders by creation time,
    and images made in the same second come in no fixed order."""
    out = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"], capture_output=True, text=True, check=True
    ).stdout
    return sorted(out.splitlines())
