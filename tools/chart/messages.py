"""The messages of the JobSpec's rules across keys (spec/rules), which the chart checks at render time."""

from __future__ import annotations

import typing
from typing import Any

from ddpctl.spec.schema import MAX_NODES
from ddpctl_trainer import protocol
from tools.chart.probes import GROUP_TOPOLOGY, LEVEL, TOPOLOGY, after, error_message, group_list, listed, topology_at


def field_messages() -> dict[str, dict[str, str]]:
    """The JobSpec's rules that JSON Schema cannot state (they span keys), which the chart checks at
    render time: each error's field, problem and fix, as templates over the values the chart knows."""
    return {
        "groupName": error_message(
            lambda a: after(a["_index"] - 1, *group_list(*[(a["name"], 1, 1)] * 2)),
            {"where": "nodeGroups[1]", "name": "zdup", "_index": 1},
            {"where": "nodeGroups[2]", "name": "ztwice", "_index": 2},
        ),
        "groupProcs": error_message(
            lambda a: after(
                a["_index"], {"name": "zg", "nodes": 1, "gpusPerNode": a["gpus"], "procsPerNode": a["procs"]}
            ),
            {"where": "nodeGroups[0]", "procs": 5, "gpus": 3, "_index": 0},
            {"where": "nodeGroups[1]", "procs": 4, "gpus": 2, "_index": 1},
        ),
        "groupGpus": error_message(
            lambda a: after(a["_index"], *group_list(("zg", 1, a["gpus"])), gpus=a["first"]),
            {"where": "nodeGroups[1]", "gpus": 7, "first": 0, "_index": 1},
            {"where": "nodeGroups[2]", "gpus": 0, "first": 6, "_index": 2},
        ),
        "groupsNodes": error_message(
            lambda a: {"nodeGroups": group_list(("za", MAX_NODES, 0), ("zb", a["total"] - MAX_NODES, 0))},
            {"total": 1025},
            {"total": 1030},
        ),
        "groupsWithLayout": error_message(
            lambda a: {**after(0, *group_list(("za", 1, 1))), **dict.fromkeys(listed(a, "keys"), 1)},
            {"keys": "nodes"},
            {"keys": "gpusPerNode, procsPerNode"},
        ),
        "nodes": error_message(lambda a: {"nodes": str(a["nodes"])}, {"nodes": 1025}, {"nodes": 3000}),
        "nodesRange": error_message(
            lambda a: {"nodes": f"{a['min']}:{a['max']}"}, {"min": 5, "max": 3}, {"min": 9, "max": 2}
        ),
        "nodesMax": error_message(lambda a: {"nodes": f"1:{a['max']}"}, {"max": 1025}, {"max": 2000}),
        "procs": error_message(
            lambda a: {"gpusPerNode": a["gpus"], "procsPerNode": a["procs"]},
            {"procs": 5, "gpus": 3},
            {"procs": 4, "gpus": 2},
        ),
        "entrypoint": error_message(
            lambda a: typing.cast(dict[str, Any], a["_values"]),
            {"chosen": "none", "_values": {"module": None}},
            {"chosen": "module, script", "_values": {"module": "zmod", "script": "zs"}},
        ),
        "backend": error_message({"backend": "nccl"}),
        "secretEnv": error_message(
            lambda a: (
                {"env": dict.fromkeys(listed(a, "names"), "x")}
                | {"secretEnv": {name: {"secret": "s", "key": "k"} for name in listed(a, "names")}}
            ),
            {"names": "ZA"},
            {"names": "ZB, ZC"},
        ),
        "mountPath": error_message(
            lambda a: {"volumes": {v: {"claimName": "c", "mountPath": a["path"]} for v in (a["other"], a["volume"])}},
            {"volume": "zb", "other": "za", "path": "/zp"},
            {"volume": "zd", "other": "zc", "path": "/zq/r"},
        ),
        "checkpointsTrainer": error_message({"checkpoints": "s3://zb/p", "module": "zmod"}),
        "checkpointsVolume": error_message(
            {"checkpoints": "s3://zb/p", "volumes": {"checkpoints": {"claimName": "c", "mountPath": "/zc"}}}
        ),
        "checkpointsArgs": error_message({"checkpoints": "s3://zb/p", "args": ["--checkpoint-dir", "/zc"]}),
        "topologyModes": error_message(
            lambda a: topology_at(
                a["where"], {a["first"]: LEVEL} | {a["second"]: a["second"] == "unconstrained" or LEVEL}
            ),
            {**TOPOLOGY, "first": "required", "second": "preferred"},
            {**GROUP_TOPOLOGY, "first": "preferred", "second": "unconstrained"},
        ),
        "sliceSizeMissing": error_message(
            lambda a: topology_at(a["where"], {"sliceLevel": LEVEL}), TOPOLOGY, GROUP_TOPOLOGY
        ),
        "sliceLevelMissing": error_message(
            lambda a: topology_at(a["where"], {"sliceSize": 1}), TOPOLOGY, GROUP_TOPOLOGY
        ),
        "sliceElastic": error_message({"nodes": "1:4", "topology": {"sliceLevel": LEVEL, "sliceSize": 2}}),
        "sliceDivides": error_message(
            lambda a: topology_at(a["where"], {"sliceLevel": LEVEL, "sliceSize": a["size"]}, a["pods"]),
            {**TOPOLOGY, "size": 4, "pods": 6, "divisors": "1, 2, 3, 6"},
            {**GROUP_TOPOLOGY, "size": 3, "pods": 10, "divisors": "1, 2, 5, 10"},
        ),
        "collectiveTimeout": error_message(
            lambda a: {"collectiveTimeout": a["collective"], **a["_stall"]},
            {"collective": 250, "stall": protocol.STALL_TIMEOUT_S, "_stall": {}},
            {"collective": 100, "stall": 120, "_stall": {"stallTimeout": 120}},
        ),
        "stallTimeout": error_message(lambda a: {"stallTimeout": a["stall"]}, {"stall": 700}, {"stall": 650}),
        "preflightTrainer": error_message(
            lambda a: {"module": "zmod", "preflight": {"mode": a["mode"]}}, {"mode": "warn"}, {"mode": "fail"}
        ),
        "fabricGloo": error_message(
            lambda a: {"fabric": a["fabric"], "backend": a["backend"], "gpusPerNode": a["gpus"]},
            {"fabric": "infiniband", "backend": "auto", "gpus": 0},
            {"fabric": "efa", "backend": "gloo", "gpus": 3},
        ),
        "fabricPrivileged": error_message(
            lambda a: {"fabric": a["fabric"], "podSecurity": a["podSecurity"], "gpusPerNode": 1},
            {"fabric": "infiniband", "podSecurity": "restricted"},
            {"fabric": "efa", "podSecurity": "baseline"},
        ),
        "stragglersReplace": error_message({"stragglers": {"mode": "replace"}}),
        # recovery auto resolved to gang (a target or layout that cannot replace a pod alone)
        "stragglersGang": error_message(
            {"target": "pytorchjob", "stragglers": {"mode": "replace"}, "recovery": "auto"}
        ),
        "avoidNodesAffinity": error_message(
            {"avoidNodes": ["zn"], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}}
        ),
    }
