"""ddpctl.cluster.workloads: reading live objects by the engines' static facts. The objects are
the ones `render` makes for real JobSpecs, and the hand-made ones are the shapes other tools
(or older versions of the controllers) leave: defaults omitted, annotations instead of labels."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.cluster import workloads
from ddpctl.cluster.kinds import BY_TARGET, JOB, JOBSET, NOT_COORDINATOR, PYTORCHJOB, TRAINJOB
from ddpctl.engines import ENGINES, plan_for
from ddpctl.engines.base import COMPLETION_INDEX, NODE_RANK_OFFSET
from ddpctl.engines.pytorchjob import REPLICA_INDEX, REPLICA_TYPE
from ddpctl.manifests.render import render_plan
from ddpctl.spec.model import JobSpec

UNEVEN = [
    {"name": "a", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 2},
    {"name": "b", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 1},
]


def rendered(target: str, **data: Any) -> list[dict[str, Any]]:
    """The workload objects `render` makes for the spec on `target`."""
    plan = plan_for(JobSpec.from_dict({"name": "w", "target": target, **data}))
    kind = BY_TARGET[target].kind
    return [o for o in render_plan(plan) if o["kind"] == kind]


@pytest.mark.parametrize(
    ("target", "data", "nodes"),
    [
        ("job", {"nodes": 3}, [3]),
        ("job", {"nodeGroups": UNEVEN}, [3, 3]),  # one Job per group, each counting the whole job
        ("jobset", {"nodes": 3}, [3]),
        ("jobset", {"nodeGroups": UNEVEN}, [3]),
        ("pytorchjob", {"nodes": 4}, [4]),
        ("pytorchjob", {"nodes": "2:5"}, [5]),  # elastic: the maximum
        ("pytorchjob", {"nodes": 1}, [1]),
        ("trainjob", {"nodes": 2}, [2]),
        # pod recovery: each pod's torchrun counts 1 node, and the coordinator runs none
        ("job", {"nodes": 3, "gpusPerNode": 0, "recovery": "pod"}, [1, 3]),  # the coordinator's Job (left out by
        # its label where jobs are read), then the trainers'
        ("job", {"nodeGroups": UNEVEN, "recovery": "pod"}, [1, 3, 3]),
        ("jobset", {"nodes": 3, "gpusPerNode": 0, "recovery": "pod"}, [3]),
        ("jobset", {"nodeGroups": UNEVEN, "recovery": "pod"}, [3]),
    ],
)
def test_expected_nodes_of_what_render_makes(target: str, data: dict[str, Any], nodes: list[int]) -> None:
    kind = BY_TARGET[target]
    assert [workloads.expected_nodes(kind, obj) for obj in rendered(target, **data)] == nodes


@pytest.mark.parametrize(
    ("kind", "spec", "nodes"),
    [
        (JOBSET, {"replicatedJobs": [{"replicas": 2, "template": {"spec": {"completions": 3}}}]}, 6),
        (JOBSET, {"replicatedJobs": [{"template": {"spec": {"parallelism": 2}}}]}, 2),  # completions: parallelism
        (JOBSET, {"replicatedJobs": [{"template": {}}]}, 1),  # both default to 1
        (JOBSET, {"replicatedJobs": []}, 0),
        (PYTORCHJOB, {"pytorchReplicaSpecs": {"Master": {}, "Worker": {"replicas": 3}}}, 4),  # replicas: 1
        (PYTORCHJOB, {"pytorchReplicaSpecs": {"Worker": {"replicas": "x"}}}, 0),
        (JOB, {"completions": 5}, 5),
        (JOB, {}, None),
        (TRAINJOB, {"trainer": {"numNodes": 2}}, 2),
        (TRAINJOB, {}, None),
    ],
)
def test_expected_nodes_of_a_live_object(kind: Any, spec: dict[str, Any], nodes: int | None) -> None:
    assert workloads.expected_nodes(kind, {"spec": spec}) == nodes


def test_the_first_node_rank_of_a_groups_workload() -> None:
    jobs = rendered("job", nodeGroups=UNEVEN)
    assert [workloads.first_node_rank(j) for j in jobs] == [0, 2]
    assert workloads.first_node_rank({}) == 0


@pytest.mark.parametrize("target", sorted(ENGINES))
def test_what_kueue_suspended_is_read_where_the_engine_says(target: str) -> None:
    kind = BY_TARGET[target]
    (obj,) = rendered(target, queue="q")[:1]
    path = kind.engine.suspend_field
    assert workloads.suspended(kind, obj) is (workloads.field(obj, path) is True)
    node = obj
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = True
    assert workloads.suspended(kind, obj) is True
    node[path[-1]] = False
    assert workloads.suspended(kind, obj) is False


@pytest.mark.parametrize(("target", "selector"), [
    # our labels, but not a pod-recovery job's coordinator (it trains nothing)
    ("job", f"app.kubernetes.io/instance=w,app.kubernetes.io/managed-by=ddpctl,{NOT_COORDINATOR}"),
    ("jobset", f"app.kubernetes.io/instance=w,app.kubernetes.io/managed-by=ddpctl,{NOT_COORDINATOR}"),
    ("pytorchjob", f"app.kubernetes.io/instance=w,app.kubernetes.io/managed-by=ddpctl,{NOT_COORDINATOR}"),
    ("trainjob", "jobset.sigs.k8s.io/jobset-name=w"),  # its pods come from a JobSet the runtime makes
])  # fmt: skip
def test_the_pod_selector(target: str, selector: str) -> None:
    assert workloads.pod_selector(BY_TARGET[target], "w") == selector


def _indexed_pod(index: str | None = None, *, annotation: bool = False, offset: str | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"labels": {}, "annotations": {}}
    if index is not None:
        md["annotations" if annotation else "labels"][COMPLETION_INDEX] = index
    env = [{"name": NODE_RANK_OFFSET, "value": offset}] if offset is not None else []
    return {"metadata": md, "spec": {"containers": [{"name": "trainer", "env": env}]}}


def _operator_pod(role: str | None, index: str | None) -> dict[str, Any]:
    labels = {k: v for k, v in ((REPLICA_TYPE, role), (REPLICA_INDEX, index)) if v is not None}
    return {"metadata": {"labels": labels}}


MASTER_AND_WORKERS = {"spec": {"pytorchReplicaSpecs": {"Master": {}, "Worker": {}}}}


@pytest.mark.parametrize(
    ("kind", "job", "pod", "rank"),
    [
        (JOB, None, _indexed_pod("3"), 3),
        (JOB, None, _indexed_pod("3", annotation=True), 3),  # older pods carry the annotation only
        (JOB, None, _indexed_pod("1", offset="2"), 3),  # a later node group's pod
        (JOBSET, None, _indexed_pod("1", offset="2"), 3),
        (TRAINJOB, None, _indexed_pod("1"), 1),
        (JOB, None, _indexed_pod(), None),
        (JOB, None, _indexed_pod("x"), None),
        (PYTORCHJOB, None, _operator_pod("master", "0"), 0),
        (PYTORCHJOB, None, _operator_pod("worker", "0"), 1),  # master 0, worker i -> i + 1
        (PYTORCHJOB, MASTER_AND_WORKERS, _operator_pod("worker", "2"), 3),
        (PYTORCHJOB, {"spec": {"pytorchReplicaSpecs": {"Worker": {}}}}, _operator_pod("worker", "2"), 2),  # elastic
        (PYTORCHJOB, None, _operator_pod("worker", None), None),
    ],
)
def test_rank_of_a_pod(kind: Any, job: dict[str, Any] | None, pod: dict[str, Any], rank: int | None) -> None:
    assert workloads.rank_of(kind, job, pod) == rank


@pytest.mark.parametrize(
    ("kind", "pod", "role"),
    [
        (PYTORCHJOB, _operator_pod("master", "0"), "master"),
        (PYTORCHJOB, {"metadata": {}}, "worker"),  # no label: a worker
        (JOB, _operator_pod("master", "0"), "node"),  # only the engine with roles reads the label
        (JOBSET, _indexed_pod("0"), "node"),
    ],
)
def test_replica_type_of_a_pod(kind: Any, pod: dict[str, Any], role: str) -> None:
    assert workloads.replica_type(kind, pod) == role


@pytest.mark.parametrize(
    "target,data,meets",
    [
        ("job", {"recovery": "pod", "gpusPerNode": 0}, True),
        ("jobset", {"recovery": "pod", "gpusPerNode": 0}, True),
        ("job", {"gpusPerNode": 0}, False),
        ("jobset", {}, False),
        ("pytorchjob", {}, False),
        ("job", {"gpusPerNode": 0, "env": {"NOTE": "DDP_COORDINATOR"}}, False),  # its name as a value only
    ],
)
def test_a_workload_meets_at_a_coordinator_as_its_pod_templates_say(target: str, data: dict, meets: bool) -> None:
    (top,) = [o for o in rendered(target, **data) if o["kind"] not in ("Service",) and "-coordinator" not in
              o["metadata"]["name"]]  # fmt: skip
    assert workloads.meets_at_coordinator(top) is meets
