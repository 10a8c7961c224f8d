"""testcluster.kwok: the simulated nodes' objects and topology, the pool's resizing, and which Stages
kwok runs (upstream's, guarded, and ours)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from testcluster.kwok import (
    BLOCK_LABEL,
    COMPLETE_DELAY,
    FAILURE_ANNOTATIONS,
    KWOK_ANNOTATION,
    RACK_LABEL,
    kwok_nodes,
    stages,
    surplus,
)
from testcluster.manifests import load_docs
from testcluster.settings import HERE


@pytest.mark.parametrize(
    ("index", "block", "rack"),
    [(0, "block-0", "rack-0-0"), (1, "block-0", "rack-0-0"), (2, "block-0", "rack-0-1"), (3, "block-0", "rack-0-1"),
     (4, "block-1", "rack-1-0"), (7, "block-1", "rack-1-1"), (8, "block-2", "rack-2-0"), (63, "block-15", "rack-15-1")],
)  # fmt: skip
def test_nodes_sit_two_to_a_rack_and_two_racks_to_a_block(index: int, block: str, rack: str) -> None:
    labels = kwok_nodes(64)[index]["metadata"]["labels"]
    assert (labels[BLOCK_LABEL], labels[RACK_LABEL]) == (block, rack)


@pytest.mark.parametrize("count", [1, 8, 64])
def test_each_node_is_a_kwok_node_of_eight_gpus(count: int) -> None:
    nodes = kwok_nodes(count)
    assert [n["metadata"]["name"] for n in nodes] == [f"gpu-node-{i}" for i in range(count)]
    for n in nodes:
        assert n["metadata"]["annotations"] == {KWOK_ANNOTATION: "fake"}  # kwok manages only these
        assert n["metadata"]["labels"]["kubernetes.io/hostname"] == n["metadata"]["name"]
        assert n["status"]["allocatable"]["nvidia.com/gpu"] == n["status"]["capacity"]["nvidia.com/gpu"] == "8"
    racks = Counter(n["metadata"]["labels"][RACK_LABEL] for n in nodes)
    assert max(racks.values()) <= 2


@pytest.mark.parametrize(
    ("have", "count", "extra"),
    [
        (8, 8, []),
        (10, 8, ["gpu-node-8", "gpu-node-9"]),
        (64, 8, [f"gpu-node-{i}" for i in range(8, 64)]),
        (8, 64, []),
    ],
)
def test_shrinking_deletes_the_highest_numbered_nodes(have: int, count: int, extra: list[str]) -> None:
    assert surplus([f"gpu-node-{i}" for i in range(have)], count) == extra


def stage(name: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Stage", "metadata": {"name": name}, "spec": {"selector": {"matchExpressions": []}, **spec}}


def test_upstreams_pod_complete_waits_for_the_failure_stages_and_the_delay_annotation() -> None:
    upstream = [stage("node-initialize"), stage("pod-ready"), stage("pod-complete"), stage("pod-delete")]
    ours = [stage("pod-fail-exit-code"), stage("pod-delete")]
    out = stages(upstream, ours)
    assert [d["metadata"]["name"] for d in out] == [
        "node-initialize", "pod-ready", "pod-complete", "pod-fail-exit-code", "pod-delete"
    ]  # fmt: skip
    assert out[-1] is ours[-1]  # upstream's pod-delete gave way to ours
    complete = out[2]["spec"]
    assert complete["selector"]["matchExpressions"] == [
        {"key": f'.metadata.annotations["{key}"]', "operator": "DoesNotExist"} for key in FAILURE_ANNOTATIONS
    ]
    assert complete["delay"]["durationFrom"] == {"expressionFrom": f'.metadata.annotations["{COMPLETE_DELAY}"]'}
    assert out[0]["spec"] == stage("node-initialize")["spec"]  # the others unchanged


def test_the_guard_names_the_annotations_our_failure_stages_act_on() -> None:
    ours = load_docs(HERE / "kwok-stages.yaml")
    triggers = {
        e["key"] for d in ours for e in d["spec"]["selector"].get("matchExpressions", []) if e["operator"] == "Exists"
    }
    assert {f'.metadata.annotations["{key}"]' for key in FAILURE_ANNOTATIONS} <= triggers
    assert "pod-delete" in {d["metadata"]["name"] for d in ours}  # upstream's is dropped for it
