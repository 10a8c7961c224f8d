"""ddpctl.spec.parts: the keys of a spec's nested parts (rendezvous, resources, volumes, secret
refs, topology, node groups) are checked under their place in the spec, and the parts answer
what they say (a topology's mode and Kueue annotations, a group's processes per node)."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.errors import SpecError
from ddpctl.spec import kueue
from ddpctl.spec.fields import declared
from ddpctl.spec.model import JobSpec
from ddpctl.spec.parts import NodeGroup, Rendezvous, Resources, SecretKeyRef, Topology, Volume

RACK = "cloud.ddpctl.io/topology-rack"


def _group(**more: Any) -> dict[str, Any]:
    return {"nodeGroups": [{"name": "a", "nodes": 1, "gpusPerNode": 0, **more}]}


REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"rendezvous": {"mode": "etcd"}}, "rendezvous.mode", "'etcd' is not a valid value"),
    ({"rendezvous": {"port": 0}}, "rendezvous.port", "0 must be an integer >= 1"),
    ({"rendezvous": {"port": 70000}}, "rendezvous.port", "70000 is not a TCP port"),
    ({"rendezvous": {"joinTimeout": 0}}, "rendezvous.joinTimeout", "must be an integer >= 1"),
    ({"rendezvous": {"maxRestarts": -1}}, "rendezvous.maxRestarts", "must be an integer >= 0"),
    ({"resources": {"memory": "lots"}}, "resources.memory", "is not a Kubernetes quantity"),
    ({"resources": {"cpu": "1 000"}}, "resources.cpu", "is not a Kubernetes quantity"),
    ({"resources": {"gpuResource": "bad resource"}}, "resources.gpuResource", "is not a resource name"),
    ({"resources": {"cpuLimit": "-1"}}, "resources.cpuLimit", "is not a Kubernetes quantity"),
    ({"resources": {"fabricDevices": "4"}}, "resources.fabricDevices", "must be an integer >= 1"),
    ({"preflight": {"mode": "always"}}, "preflight.mode", "'always' is not a valid value"),
    ({"preflight": {"tolerance": 1.5}}, "preflight.tolerance", "1.5 is not a number from 0.01 to 1"),
    ({"preflight": {"minGflops": 2e6}}, "preflight.minGflops", "is not a number from 0 to 1000000"),
    ({"preflight": {"minH2d": float("nan")}}, "preflight.minH2d", "is not a number"),
    ({"preflight": {"tolerence": 0.5}}, "preflight.tolerence", "is not a known key"),
    ({"stragglers": {"mode": "replace"}}, "stragglers.mode", "replace needs recovery: pod"),
    ({"stragglers": {"mode": "on"}}, "stragglers.mode", "'on' is not a valid value"),
    ({"stragglers": {"tolerance": 0}}, "stragglers.tolerance", "0 is not a number above 0 and below 1"),
    ({"stragglers": {"tolerance": 1}}, "stragglers.tolerance", "1 is not a number above 0 and below 1"),
    ({"stragglers": {"tolerance": float("nan")}}, "stragglers.tolerance", "is not a number above 0"),
    ({"stragglers": {"every": 0}}, "stragglers.every", "0 must be an integer >= 1"),
    ({"stragglers": {"every": 2.5}}, "stragglers.every", "must be an integer >= 1"),
    ({"stragglers": {"windows": 0}}, "stragglers.windows", "0 must be an integer >= 1"),
    ({"stragglers": {"window": 2}}, "stragglers.window", "is not a known key"),
    ({"volumes": {"d": {"claimName": "Bad_PVC", "mountPath": "/d"}}}, "volumes.d.claimName", "is not a valid name"),
    ({"volumes": {"d": {"claimName": "p", "mountPath": "relative"}}}, "volumes.d.mountPath", "not an absolute path"),
    ({"volumes": {"d": {"claimName": "p", "mountPath": "/dev/shm/"}}}, "volumes.d.mountPath", "managed by shmSize"),
    ({"volumes": {"d": {"claimName": "p", "mountPath": "/d", "readOnly": "yes"}}}, "volumes.d.readOnly", "boolean"),
    ({"secretEnv": {"T": {"secret": "Bad_Name", "key": "k"}}}, "secretEnv.T.secret", "is not a valid DNS-1123"),
    ({"secretEnv": {"T": {"secret": "s", "key": "bad key"}}}, "secretEnv.T.key", "is not a Secret key"),
    ({"topology": {"unconstrained": "yes"}}, "topology.unconstrained", "'yes' is not a boolean"),
    ({"topology": {"preferred": "a/b/c"}}, "topology.preferred", "has an invalid prefix"),
    ({"topology": {"required": "not a label"}}, "topology.required", "is not a valid label key"),
    ({"topology": {"sliceLevel": RACK, "sliceSize": 0}}, "topology.sliceSize", "must be an integer >= 1"),
    (_group(name="A_B"), "nodeGroups[0].name", "is not a valid DNS-1123 label"),
    (_group(nodes=0), "nodeGroups[0].nodes", "0 must be an integer >= 1"),
    (_group(nodes=2000), "nodeGroups[0].nodes", "2000 is more than 1024"),
    (_group(gpusPerNode=-1), "nodeGroups[0].gpusPerNode", "must be an integer >= 0"),
    (_group(procsPerNode=0), "nodeGroups[0].procsPerNode", "must be an integer >= 1"),
    (_group(nodeSelector={"pool": "a b"}), "nodeGroups[0].nodeSelector.pool", "is not a valid label value"),
    (_group(tolerations=[{"effect": "Now"}]), "nodeGroups[0].tolerations[0].effect", "is not a taint effect"),
    (_group(resources={"gpu": "1"}), "nodeGroups[0].resources", "only cpu, memory and cpuLimit"),
    (_group(resources={"cpu": "lots"}), "nodeGroups[0].resources.cpu", "is not a Kubernetes quantity"),
    (_group(resources={"cpuLimit": "1 cpu"}), "nodeGroups[0].resources.cpuLimit", "is not a Kubernetes quantity"),
    (_group(gpuResource="bad resource"), "nodeGroups[0].gpuResource", "is not a resource name"),
    (_group(topology={"required": "not a label"}), "nodeGroups[0].topology.required", "is not a valid label key"),
]


@pytest.mark.parametrize(("data", "field", "problem"), REFUSED, ids=[f"{r[1]}-{i}" for i, r in enumerate(REFUSED)])
def test_a_bad_key_of_a_part_is_refused_under_its_place(data: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict(data)
    assert (info.value.field, problem in info.value.problem) == (field, True), str(info.value)
    assert info.value.fix


@pytest.mark.parametrize(
    ("topology", "mode", "annotations"),
    [
        (Topology(), None, {}),
        (Topology(required=RACK), "required", {kueue.REQUIRED_TOPOLOGY: RACK}),
        (Topology(preferred=RACK), "preferred", {kueue.PREFERRED_TOPOLOGY: RACK}),
        (Topology(unconstrained=True), "unconstrained", {kueue.UNCONSTRAINED_TOPOLOGY: "true"}),
        (
            Topology(slice_level=RACK, slice_size=2),
            None,
            {kueue.SLICE_REQUIRED_TOPOLOGY: RACK, kueue.SLICE_SIZE: "2"},
        ),
    ],
)
def test_a_topology_request_becomes_kueues_podset_annotations(
    topology: Topology, mode: str | None, annotations: dict[str, str]
) -> None:
    assert topology.mode == mode
    assert topology.annotations() == annotations
    assert bool(topology) == bool(annotations)
    assert topology.describe()


def test_a_groups_topology_overrides_the_specs() -> None:
    spec = JobSpec.from_dict(
        {
            "topology": {"preferred": RACK},
            "nodeGroups": [
                {"name": "a", "nodes": 2, "gpusPerNode": 1, "topology": {"sliceLevel": RACK, "sliceSize": 2}},
                {"name": "b", "nodes": 1, "gpusPerNode": 1},
            ],
        }
    )
    a, b = spec.groups
    assert spec.topology_of(a).annotations() == {kueue.SLICE_REQUIRED_TOPOLOGY: RACK, kueue.SLICE_SIZE: "2"}
    assert spec.topology_of(b).annotations() == {kueue.PREFERRED_TOPOLOGY: RACK}
    assert not JobSpec().topology and JobSpec().topology_of(JobSpec().groups[0]).annotations() == {}


@pytest.mark.parametrize(("gpus", "procs", "nproc"), [(4, None, 4), (0, None, 2), (0, 3, 3), (8, 2, 2)])
def test_a_group_runs_one_process_per_gpu_unless_told(gpus: int, procs: int | None, nproc: int) -> None:
    assert NodeGroup("g", 1, gpus, procs).nproc == nproc


def test_a_groups_maps_are_read_only() -> None:
    group = NodeGroup("g", 1, 0, node_selector={"b": "2", "a": "1"}, tolerations=[{"key": "k"}])  # type: ignore[arg-type]
    assert list(group.node_selector) == ["a", "b"] and isinstance(group.tolerations, tuple)
    with pytest.raises(TypeError):
        group.node_selector["c"] = "3"  # type: ignore[index]


@pytest.mark.parametrize("cls", [NodeGroup, Rendezvous, Resources, SecretKeyRef, Topology, Volume])
def test_every_key_of_a_part_declares_a_doc(cls: type) -> None:
    for key in declared(cls):
        assert str(key.field.metadata["doc"]).strip(), f"{cls.__name__}.{key.name}"


@pytest.mark.parametrize(
    ("data", "mode"),
    [
        ({}, "warn"),  # the trainer's default
        ({"stragglers": None}, "warn"),
        ({"stragglers": {"mode": "off"}}, "off"),
        ({"stragglers": {"mode": "fail", "tolerance": 0.999, "every": 1, "windows": 1}}, "fail"),
    ],
)
def test_the_stragglers_part_says_whether_it_is_on(data: dict[str, Any], mode: str) -> None:
    watch = JobSpec.from_dict(data).stragglers
    assert (watch.mode, watch.on) == (mode, mode != "off")


def test_replace_is_refused_with_what_to_do_instead() -> None:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({"stragglers": {"mode": "replace"}})
    assert str(info.value) == (
        "stragglers.mode: replace needs recovery: pod (only the straggler's pod is replaced, while the others keep "
        "their state); add --recovery pod (or auto), or use --stragglers fail and resubmit with --avoid-node NODE"
    )
    for recovery in ("pod", "auto"):  # auto: the engine says whether pod can run (Engine.check_recovery)
        assert JobSpec.from_dict({"stragglers": {"mode": "replace"}, "recovery": recovery}).stragglers.mode == "replace"


@pytest.mark.parametrize(
    ("data", "mode", "floors"),
    [
        ({}, "off", {}),
        ({"preflight": None}, "off", {}),
        ({"preflight": {"mode": "warn", "tolerance": 1}}, "warn", {}),
        (
            {"preflight": {"mode": "fail", "minBusbw": 12.5, "minTflops": 300}},
            "fail",
            {"minTflops": 300, "minBusbw": 12.5},
        ),
    ],
)
def test_the_preflight_part_says_whether_it_is_on_and_which_floors_are_set(
    data: dict[str, Any], mode: str, floors: dict[str, float]
) -> None:
    checks = JobSpec.from_dict(data).preflight
    assert (checks.mode, checks.on, checks.floors()) == (mode, mode != "off", floors)
