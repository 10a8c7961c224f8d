"""ddpctl_trainer.preflight.checks: where a rank runs (its pod, its Kubernetes node), read from
the pod's env."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("env", "pod", "k8s_node"),
    [
        (
            {"DDP_POD_NAME": "ddp-train-1-x7k2p", "HOSTNAME": "ddp-train-1", "DDP_NODE_NAME": "gpu-7"},
            "ddp-train-1-x7k2p",
            "gpu-7",
        ),
        ({"HOSTNAME": "ddp-train-1"}, "ddp-train-1", None),  # without the downward API: the hostname
        ({"DDP_NODE_NAME": ""}, None, None),  # an empty variable counts as unset
    ],
)
def test_where_a_rank_runs_comes_from_the_pods_env(env: dict[str, str], pod: str | None, k8s_node: str | None) -> None:
    import socket

    from ddpctl_trainer.dist import DistContext
    from ddpctl_trainer.preflight.checks import my_place

    place = my_place(DistContext(5, 1, 8, 4, 1, 0, "torchrun"), env)
    assert (place.rank, place.local_rank, place.node) == (5, 1, 1)
    assert place.pod == (pod or socket.gethostname()) and place.k8s_node == k8s_node
    assert place.machine == (k8s_node or socket.gethostname())
