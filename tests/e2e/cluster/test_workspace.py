"""A user's own code on the real node, in a namespace enforcing Pod Security "restricted": built into
a project image (`ddpctl build` in a folder without a Dockerfile), then edited and shipped with
`--workspace` and the same image, on every engine and with node groups; a corrupted archive; a
workspace too large for a Secret, in a real S3 server the pods reach on the node's bridge.

The project (tests/support/node_images.py): train.py (DDP over gloo) importing a local helper module
whose constant every rank prints, and a .env file that must never leave the folder.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO
from tests.support.cluster import RealCluster, ddpctl_together, restricted_namespace
from tests.support.docker import local_images
from tests.support.node_images import HOME, NodeImages, write_project

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NODE = "ddpctl-real-node"
GATEWAY = "10.88.0.1"  # the real node's bridge: pods reach the host there (testcluster/node/layout.py)
ON_NODE = ["--node-selector", "node.ddpctl.io/real=true", "--toleration", "node.ddpctl.io/real=true:NoSchedule"]


def _ddpctl(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> Any:
    """ddpctl ARGS; a `--follow` gives up after 10 minutes (exit 3, saying what it waited for), well
    inside the test's own timeout, so a stuck job fails with ddpctl's account of it."""
    wait = ["--timeout", "10m"] if "--follow" in args and "--timeout" not in args else []
    return subprocess.run(
        [sys.executable, "-m", "ddpctl", *args, *wait], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.fixture
def trainer_image(node_images: NodeImages) -> str:
    """The trainer image on the CPU base, on the real node (once a session: tests/support/node_images.py)."""
    return node_images.trainer


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path)


def why(r: Any) -> str:
    """A failed submit's stderr end and each node's last lines: a rank's own error is often not
    the end of the streamed output (the other node's teardown follows it)."""
    nodes: dict[str, list[str]] = {}
    for line in r.stdout.splitlines():
        if line.startswith("[node "):
            nodes.setdefault(line.split("]", 1)[0], []).append(line)
    return r.stderr[-3000:] + "".join("\n".join(lines[-15:]) + "\n" for lines in nodes.values())


def said(out: str) -> list[str]:
    return sorted(line.split("] ", 1)[-1] for line in out.splitlines() if " says " in line)


def _node_images(kube: RealCluster) -> list[str]:
    """The images in the real node's containerd (where `cluster load` imports them), read from the
    runtime itself: the Node object's status lists a new image only when the kubelet next reports
    it, which can be minutes after the load, so two reads of it can differ with nothing loaded."""
    code = (
        "from testcluster import binaries; from testcluster.node.containerd import ctr; "
        "print(ctr(binaries.real_node(), 'images', 'ls', '-q'))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       env={**os.environ, "HOME": HOME}, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    return sorted(r.stdout.split())


def _archive_names(kube: RealCluster, ns: str) -> list[str]:
    """The files in the job's workspace Secret, as stored in the cluster."""
    [secret] = kube.get("secrets", "-n", ns, "-l", "app.kubernetes.io/component=workspace")["items"]
    archive = base64.b64decode(secret["data"]["workspace.tar.gz"])
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return tar.getnames()


def test_built_in_then_edited_and_shipped_without_a_rebuild(
    kube: RealCluster, restricted: str, node_images: NodeImages
) -> None:
    """`ddpctl build` in the folder (no Dockerfile), loaded onto the node with the session's other
    images (one stream: tests/support/node_images.py): every rank prints the constant. Edit it,
    `submit --workspace .` with the same image: every rank prints the new value, and no image was
    built or loaded. The Secret holds no .env; `delete` leaves no archive object."""
    ns = restricted
    image, project = node_images.project, node_images.project_dir
    assert image.startswith("my-project:ws-"), image
    job = ["-n", ns, "--nodes", "2", "--procs", "1", "--gpus", "0", "--image", image, *ON_NODE, "--script", "train.py"]
    built = _ddpctl("submit", "--name", "built", *job, "--follow", cwd=project)
    assert built.returncode == 0, built.stderr[-3000:] + built.stdout[-3000:]
    assert said(built.stdout) == ["rank 0 of 2 says first in /workspace", "rank 1 of 2 says first in /workspace"]
    docker_before = local_images()
    node_before = _node_images(kube)
    (project / "helper.py").write_text("CONSTANT = 'edited'\n")
    stale = _ddpctl("submit", "--name", "stale", *job, cwd=project)
    assert stale.returncode == 2 and "carries an older version of this folder's code" in stale.stderr, stale.stderr
    shipped = _ddpctl("submit", "--name", "shipped", *job, "--workspace", ".", "--follow", cwd=project)
    assert shipped.returncode == 0, shipped.stderr[-3000:] + shipped.stdout[-3000:]
    assert said(shipped.stdout) == ["rank 0 of 2 says edited in /workspace", "rank 1 of 2 says edited in /workspace"]
    assert "left out: .env (likely secrets" in shipped.stderr
    assert local_images() == docker_before
    assert _node_images(kube) == node_before  # nothing built, nothing loaded
    names = _archive_names(kube, ns)
    assert "helper.py" in names and "train.py" in names and ".env" not in names
    deleted = _ddpctl("delete", "shipped", "-n", ns, cwd=project)
    assert deleted.returncode == 0, deleted.stderr
    left = kube.get("secrets", "-n", ns, "-l", "app.kubernetes.io/instance=shipped")["items"]
    assert left == [], [s["metadata"]["name"] for s in left]


CASES = {"job": ("job", []), "jobset": ("jobset", []), "pytorchjob": ("pytorchjob", []),
         "trainjob": ("trainjob", []), "job-1+1": ("job", ["--layout", "1+1"])}  # fmt: skip


@pytest.fixture(scope="module")
def workspace_runs(
    real_cluster: RealCluster, node_images: NodeImages, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Each case's `submit --workspace . --follow`, each in a namespace of its own enforcing
    "restricted", two at a time: one after another they took ~30 s each, most of it their pods'
    start, which they can share."""
    namespaces = {case: restricted_namespace(real_cluster) for case in CASES}
    runs = {}
    for case, (target, layout) in CASES.items():
        shape = layout or ["--nodes", "2", "--procs", "1"]
        runs[case] = (["submit", "-n", namespaces[case], "--target", target, "--name", f"ws-{target}", *shape,
                       "--gpus", "0", "--image", node_images.trainer, *ON_NODE, "--script", "train.py",
                       "--workspace", ".", "--follow", "--timeout", "10m"],
                      write_project(tmp_path_factory.mktemp(case)))  # fmt: skip
    try:
        yield ddpctl_together(runs, real_cluster, tmp_path_factory.mktemp("home"))
    finally:
        for ns in namespaces.values():
            real_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.mark.parametrize("case", CASES)
def test_every_engine_and_node_groups_run_a_workspace(workspace_runs: dict[str, Any], case: str) -> None:
    """The trainer image alone (no project build): the code travels in the workspace."""
    r = workspace_runs[case]
    assert r.returncode == 0, why(r)
    assert said(r.stdout) == ["rank 0 of 2 says first in /workspace", "rank 1 of 2 says first in /workspace"]


def test_a_corrupted_archive_fails_the_job_without_a_retry_and_status_names_it(
    kube: RealCluster, restricted: str, trainer_image: str, project: Path
) -> None:
    """The rendered Secret's archive is cut short (its sha256 still the packed one): every pod ends
    with exit 2 at once, the Job's rule fails it with no retry (backoffLimit 3 notwithstanding), and
    `status` gives the unpacker's one line."""
    ns = restricted
    r = _ddpctl("render", "-n", ns, "--name", "bad", "--nodes", "2", "--procs", "1", "--gpus", "0", "--image",
                trainer_image, *ON_NODE, "--script", "train.py", "--workspace", ".", "-o", "json",
                cwd=project)  # fmt: skip
    assert r.returncode == 0, r.stderr
    objects = json.loads(r.stdout)
    secret = next(o for o in objects["items"] if o["kind"] == "Secret")
    archive = base64.b64decode(secret["data"]["workspace.tar.gz"])
    secret["data"]["workspace.tar.gz"] = base64.b64encode(archive[: len(archive) // 2]).decode()
    kube.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(objects))
    waited = _ddpctl("status", "bad", "-n", ns, "--wait", "--timeout", "5m", cwd=project)
    assert waited.returncode == 1, waited.stderr[-3000:]
    job = kube.get("job", "bad", "-n", ns)
    failed = [c for c in job["status"].get("conditions") or [] if c["type"] == "Failed" and c["status"] == "True"]
    assert failed and failed[0]["reason"] == "PodFailurePolicy", job["status"]
    assert len(kube.pods(ns)) <= 2  # no pod was made again
    status = _ddpctl("status", "bad", "-n", ns, cwd=project)
    assert "exit code 2" in status.stdout and "workspace:" in status.stdout, status.stdout


@pytest.fixture
def store_image(node_images: NodeImages) -> str:
    """The trainer image with the object store client, for a workspace fetched from S3, as
    checkpoints in a store need."""
    return node_images.store


@pytest.fixture
def bridge_s3(tmp_path: Path) -> Iterator[Any]:
    from tests.support.s3 import _server

    yield from _server(tmp_path / "s3", ip=GATEWAY)


def test_a_workspace_too_large_for_a_secret_goes_to_s3_once(
    kube: RealCluster, restricted: str, store_image: str, project: Path, bridge_s3: Any
) -> None:
    """1.2 MB that do not compress: the archive goes to the store (content-addressed), the pods fetch
    and check it; a second submit of the same content uploads nothing (the object's bytes are the
    first upload's)."""
    import obstore

    ns = restricted
    (project / "weights.bin").write_bytes(os.urandom(1_200_000))
    keys = bridge_s3.env()
    kube.kubectl("create", "secret", "generic", "s3", "-n", ns, "--from-literal=id=" + keys["AWS_ACCESS_KEY_ID"],
                 "--from-literal=key=" + keys["AWS_SECRET_ACCESS_KEY"])  # fmt: skip
    store = bridge_s3.url("ws")
    job = ["-n", ns, "--nodes", "2", "--procs", "1", "--gpus", "0", "--image", store_image, *ON_NODE,
           "--script", "train.py", "--workspace", ".", "--workspace-store", store,
           "-e", f"AWS_ENDPOINT_URL={bridge_s3.endpoint}", "-e", "AWS_REGION=us-east-1",
           "--secret-env", "AWS_ACCESS_KEY_ID=s3:id", "--secret-env", "AWS_SECRET_ACCESS_KEY=s3:key"]  # fmt: skip
    first = _ddpctl("submit", "--name", "big", *job, "--follow", cwd=project, env=bridge_s3.env())
    assert first.returncode == 0, first.stderr[-3000:] + first.stdout[-3000:]
    assert said(first.stdout) == ["rank 0 of 2 says first in /workspace", "rank 1 of 2 says first in /workspace"]
    assert "(uploaded)" in first.stderr and bridge_s3.env()["AWS_SECRET_ACCESS_KEY"] not in first.stderr + first.stdout
    client = bridge_s3.client("ws")
    [name] = [o["path"] for page in obstore.list(client) for o in page]
    stamp = obstore.head(client, name)["last_modified"]
    second = _ddpctl("submit", "--name", "big-again", *job, cwd=project, env=bridge_s3.env())
    assert second.returncode == 0, second.stderr[-3000:]
    assert "(already there)" in second.stderr
    assert obstore.head(client, name)["last_modified"] == stamp  # not written again
