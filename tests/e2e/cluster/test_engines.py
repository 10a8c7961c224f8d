"""`ddpctl submit` on each engine against the real controllers: the pods they make carry the layout.

Every number asserted here is read from pod objects that the Job controller, JobSet, the training
operator or Trainer v2 created from what ddpctl applied (tests/e2e/cluster/wiring.py).
"""

from __future__ import annotations

import pytest

from tests.e2e.cluster.wiring import layout
from tests.support.cluster import RealCluster, scheduled_pods

pytestmark = pytest.mark.cluster

CASES = [
    # target, flags, GPUs (processes) per node in node-rank order
    ("job", ["--nodes", "2", "--gpus", "4"], [4, 4]),
    ("jobset", ["--nodes", "2", "--gpus", "4"], [4, 4]),
    ("pytorchjob", ["--nodes", "2", "--gpus", "4"], [4, 4]),
    ("trainjob", ["--nodes", "2", "--gpus", "4"], [4, 4]),
    ("job", ["--layout", "4+3"], [4, 3]),
    ("jobset", ["--layout", "4+3"], [4, 3]),
    ("pytorchjob", ["--layout", "4+3"], [4, 3]),
    ("job", ["--layout", "1x4+2x2"], [4, 2, 2]),
]


@pytest.mark.parametrize("target, flags, per_node", CASES, ids=[f"{t}-{'-'.join(f[1:])}" for t, f, _ in CASES])
def test_submit_makes_pods_wired_for_ddp(cli, kube: RealCluster, namespace: str, target, flags, per_node) -> None:
    r = cli("submit", "-n", namespace, "--target", target, *flags)
    assert r.code == 0, r.err
    pods = scheduled_pods(kube, namespace, len(per_node))
    wired = layout(kube, namespace, pods)
    assert [w.nproc for w in wired] == per_node
    assert [w.gpus for w in wired] == per_node  # one GPU per process, requested from the node
    assert {w.master_port for w in wired} == {29500}
    assert all(w.node_name and w.node_name.startswith("gpu-node-") for w in wired)
