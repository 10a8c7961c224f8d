"""The real test cluster for the `cluster` tests: kube-apiserver, controllers and kwok from testcluster/.

The session starts it (`python -m testcluster up`, which builds the binaries once into a cache) unless it
already runs, and stops it at the end if it started it. Every test gets a namespace of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, skip_unless

STATE = Path(os.environ.get("DDPCTL_CLUSTER_DIR") or REPO / ".cluster")


@dataclass
class RealCluster:
    kubeconfig: Path

    @property
    def args(self) -> list[str]:
        return ["--kubeconfig", str(self.kubeconfig)]

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [str(STATE / "bin" / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if check:
            assert r.returncode == 0, (args, r.stderr)
        return r

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def pods(self, namespace: str, selector: str = "app.kubernetes.io/managed-by=ddpctl") -> list[dict[str, Any]]:
        return list(self.get("pods", "-n", namespace, "-l", selector)["items"])


def snapshot(lines: int = 25) -> str:
    """What the cluster looked like when a test failed: every pod, the latest warnings, and the real
    node's kubelet and containerd logs' ends. A hung `--follow` is killed by the test's timeout
    before it can say why; this says what it was waiting for."""
    kubeconfig = STATE / "kubeconfig"
    if not kubeconfig.exists():
        return "the test cluster is not up"
    kube = RealCluster(kubeconfig)
    parts = []
    for title, args in (
        ("pods", ("get", "pods", "-A", "-o", "wide")),
        ("warnings", ("get", "events", "-A", "--field-selector", "type=Warning", "--sort-by", ".lastTimestamp")),
    ):
        try:
            r = kube.kubectl(*args, check=False)
            text = r.stdout + r.stderr
        except subprocess.TimeoutExpired:
            text = "(kubectl timed out)"
        parts.append(f"--- {title}\n" + "\n".join(text.splitlines()[-80:]))
    for name in ("kubelet", "containerd"):
        log = STATE / "logs" / f"{name}.log"
        tail = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else ["(no log)"]
        parts.append(f"--- {name}.log\n" + "\n".join(tail))
    return "\n".join(parts)


def cluster_command(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m testcluster ARGS`, from the clone's root (the package is found there, not installed)."""
    return subprocess.run(
        [sys.executable, "-m", "testcluster", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


@pytest.fixture(scope="package")
def real_cluster() -> Iterator[RealCluster]:
    """The test cluster, up for the tests of the package that asks for it (tests/e2e/cluster) and
    stopped after its last one when started here: idle, it would take ~7 % of a core from every
    test after it."""
    skip_unless(
        shutil.which("go") is not None or (STATE / "bin").exists(),
        "the cluster tests build Kubernetes from Go modules: install Go 1.26+ (then `make cluster`)",
    )
    started_here = cluster_command("status").returncode != 0
    r = cluster_command("up")
    assert r.returncode == 0, f"python -m testcluster up failed:\n{r.stderr[-4000:]}"
    yield RealCluster(kubeconfig=STATE / "kubeconfig")
    if started_here:
        cluster_command("down")


def restricted_namespace(kube: RealCluster) -> str:
    """A fresh namespace enforcing Pod Security `restricted` (pods that break it are refused), for a
    fixture wider than a test's; its user deletes it."""
    ns = f"t-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "namespace", ns)
    kube.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    return ns


# Jobs at once on the real node: their pods share the machine's two cores with the other worker's
# tests, whose timing checks (preflight, stragglers) more pods at once starve (four 2 x 2 jobs at once
# took 277 s under the suite's load, where one after another took 151 s, and a healthy local
# preflight named a node at 0.57 x the median meanwhile).
AT_ONCE = 2


def ddpctl_together(
    runs: dict[str, tuple[list[str], Path]], kube: RealCluster, home: Path, timeout: float = 900
) -> dict[str, subprocess.CompletedProcess[str]]:
    """`ddpctl ARGS` in CWD for each run against the cluster, AT_ONCE at a time: jobs that wait
    mostly on their pods' start share that wait. The others are ended if one fails to finish."""
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(kube.kubeconfig)}
    done: dict[str, subprocess.CompletedProcess[str]] = {}
    keys = list(runs)
    for first in range(0, len(keys), AT_ONCE):
        procs = {
            key: subprocess.Popen(
                [sys.executable, "-m", "ddpctl", *runs[key][0]],
                cwd=runs[key][1],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for key in keys[first : first + AT_ONCE]
        }
        try:
            for key, proc in procs.items():
                out, err = proc.communicate(timeout=timeout)
                done[key] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
    return done


@pytest.fixture
def namespace(real_cluster: RealCluster) -> Iterator[str]:
    """A fresh namespace, deleted afterwards (in the background: nothing waits on its finalizers)."""
    ns = f"t-{uuid.uuid4().hex[:8]}"
    real_cluster.kubectl("create", "namespace", ns)
    yield ns
    real_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture
def kube(real_cluster: RealCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> RealCluster:
    """The real cluster as the CLI's only kubeconfig: $KUBECONFIG points at it, nothing else leaks in."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KUBECONFIG", str(real_cluster.kubeconfig))
    for key in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(key, raising=False)
    return real_cluster


def wait_until(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    """Poll a condition on the cluster until it holds (controllers act asynchronously); fail with `what`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


# A pod template annotation our kwok pod-complete stage reads: pods run this long before they succeed.
KEEP_RUNNING = "pod-complete.stage.kwok.x-k8s.io/delay=1h"


def scheduled_pods(kube: RealCluster, ns: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
    """Wait until the controllers made `count` pods and the scheduler bound each to a node."""

    def bound() -> list[dict[str, Any]] | None:
        pods = [p for p in kube.pods(ns) if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) >= count else None

    return list(wait_until(f"{count} scheduled pods in {ns}", bound, timeout))


REAL_NODE = "ddpctl-real-node"


@pytest.fixture
def restricted(kube: RealCluster, namespace: str) -> str:
    """The test's namespace, enforcing Pod Security `restricted` (pods that break it are refused)."""
    kube.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    return namespace


@pytest.fixture
def local_volume(kube: RealCluster, tmp_path: Path) -> Iterator[Any]:
    """make(ns, claim) -> host folder: a `local` PersistentVolume on the real node, pre-bound to a
    claim in `ns`, its folder owned by the image's user (uid 1000) as a storage admin would set it."""
    made: list[str] = []

    def make(ns: str, claim: str) -> Path:
        folder = tmp_path / claim
        folder.mkdir()
        os.chown(folder, 1000, 1000)
        pv = f"{ns}-{claim}"
        node_term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [REAL_NODE]}]}
        docs = [
            {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
             "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                      "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "ddpctl-local",
                      "local": {"path": str(folder)}, "nodeAffinity": {"required": {"nodeSelectorTerms": [node_term]}},
                      "claimRef": {"namespace": ns, "name": claim}}},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": ns},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "ddpctl-local", "volumeName": pv,
                      "resources": {"requests": {"storage": "1Gi"}}}},
        ]  # fmt: skip
        kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        made.append(pv)
        return folder

    yield make
    for pv in made:
        kube.kubectl("delete", "pv", pv, "--wait=false", check=False)
