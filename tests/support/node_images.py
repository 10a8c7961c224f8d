"""The images the real-node tests run, built once a session and loaded onto the real node together.

A load streams the whole image (`docker save`, ~6 GB with PyPI's torch) into the node's containerd,
~80 s here whatever the node already holds (`docker save` alone takes ~52 s); images loaded together
share that stream, so the four that the real-node tests use cost one load, not four. The fourth is a
user's project built by `ddpctl build` in its folder (no Dockerfile): the test of building, editing
and shipping it starts from the folder and image made here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import REPO, skip_unless
from tests.support.cluster import RealCluster
from tests.support.docker import BASE_IMAGE, docker_works, image_present

NODE = "ddpctl-real-node"
HOME = os.environ.get("HOME", "/root")  # before a test's `kube` fixture moves it: the cluster's cache is there


@dataclass(frozen=True)
class NodeImages:
    trainer: str  # the trainer image on the CPU base (`ddpctl build` of this clone)
    user: str  # a user's own image on it: tests/e2e/cluster/user-image.Dockerfile (WORKDIR /app)
    store: str  # the trainer image with the object store client, for a workspace fetched from S3
    project: str  # `ddpctl build` in `project_dir` (no Dockerfile) on the trainer image: my-project:ws-...
    project_dir: Path  # that folder (PROJECT_FILES), for the one test that edits it afterwards


# A user's project: train.py (DDP over gloo) importing a local helper module whose constant every
# rank prints, and a .env file that must never leave the folder.
TRAIN = """\
import os

import torch.distributed as dist

import helper

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} of {dist.get_world_size()} says {helper.CONSTANT} in {os.getcwd()}", flush=True)
dist.barrier()  # the teardown docs/trainer.md asks for: no rank leaves while a peer still uses the group
dist.destroy_process_group()
"""
PROJECT_FILES = {"train.py": TRAIN, "helper.py": "CONSTANT = 'first'\n", ".env": "TOKEN=never-shipped\n"}


def write_project(parent: Path) -> Path:
    """The project in `parent`/my-project (the folder's name is the image's repository)."""
    folder = parent / "my-project"
    folder.mkdir()
    for name, text in PROJECT_FILES.items():
        (folder / name).write_text(text)
    return folder


def build(*args: str, cwd: Path = REPO) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "ddpctl", "build", "--quiet", "--no-latest", *args],
        cwd=cwd, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


def load(*images: str) -> None:
    """`python -m testcluster load IMAGE...`: one stream for all of them, a no-op for those there."""
    r = subprocess.run(
        [sys.executable, "-m", "testcluster", "load", *images], cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "HOME": HOME}, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]


def store_image(trainer: str, folder: Path) -> str:
    """The trainer image plus obstore's wheel (from this machine: no image build reaches an index)."""
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(folder), "obstore==0.12.1"],
                       capture_output=True, text=True, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (folder / "Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nUSER 0\nCOPY *.whl /tmp/wheels/\n"
        "RUN python3 -m pip install --no-index --break-system-packages /tmp/wheels/*.whl 2>/dev/null "
        "|| python3 -m pip install --no-index /tmp/wheels/*.whl\nUSER 1000:1000\n"
    )
    return build("--base-image", trainer, "--repo", "ddpctl-store-test", "--context", str(folder),
                 "--file", str(folder / "Dockerfile"))  # fmt: skip


@pytest.fixture(scope="package")
def node_images(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> NodeImages:
    """Built (cached by Docker) and loaded once, for the package of real-node tests."""
    ready = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
    state = real_cluster.kubectl("get", "node", NODE, "-o", ready, check=False).stdout.strip()
    skip_unless(state == "True", f"the real node {NODE} (root, runc and the CNI plugins: make cluster)")
    skip_unless(docker_works(), "a running Docker engine (bash scripts/install-docker.sh)")
    skip_unless(image_present(BASE_IMAGE), f"the CPU base image {BASE_IMAGE} (bash scripts/make-base-image.sh)")
    trainer = build("--base-image", BASE_IMAGE, "--repo", "ddpctl-trainer-test")
    user = build("--base-image", trainer, "--repo", "ddpctl-user-test", "--file",
                 "tests/e2e/cluster/user-image.Dockerfile", "--context", "tests/support/models")  # fmt: skip
    project_dir = write_project(tmp_path_factory.mktemp("project"))
    project = build("--base-image", trainer, cwd=project_dir)
    # a folder of its own that stays: the image records the folder it was built in, and a new one
    # each session would make a new image, which the load then streams again (~80 s)
    store_context = Path(HOME) / ".cache" / "ddpctl" / "test-store-image"
    store_context.mkdir(parents=True, exist_ok=True)
    store = store_image(trainer, store_context)
    images = NodeImages(trainer, user, store, project, project_dir)
    load(images.trainer, images.user, images.store, images.project)
    return images


@pytest.fixture
def node_image(node_images: NodeImages) -> str:
    """The user image, on the real node (built and loaded once a session: tests/support/node_images.py)."""
    return node_images.user
