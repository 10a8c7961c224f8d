"""testcluster.node.host, the parts that need no root: the CNI configuration, which mounts, cgroups and
shims are the node's (on fake trees and /proc texts), and the cpuset a new cgroup inherits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testcluster.node.host import cgroup_roots, cni_conflist, is_our_shim, make_cgroup_root, mounts_under, our_cgroups
from testcluster.node.layout import BRIDGE, CGROUP_ROOT, GATEWAY, SUBNET


def test_pods_join_our_bridge_with_addresses_from_our_subnet(tmp_path: Path) -> None:
    conf = json.loads(json.dumps(cni_conflist(tmp_path / "ipam")))
    bridge, loopback = conf["plugins"]
    assert (bridge["type"], bridge["bridge"], bridge["isGateway"]) == ("bridge", BRIDGE, True)
    assert bridge["ipam"]["ranges"] == [[{"subnet": SUBNET, "gateway": GATEWAY}]]
    assert bridge["ipam"]["dataDir"] == str(tmp_path / "ipam")
    assert loopback == {"type": "loopback"}


def mountinfo(*points: str) -> str:
    return "".join(f"{i} 1 0:{i} / {p} rw,relatime - tmpfs tmpfs rw\n" for i, p in enumerate(points, 30))


@pytest.mark.parametrize(
    ("points", "under"),
    [
        (["/", "/proc", "/r/.cluster/node"], []),  # the folder itself is not under it
        (["/r/.cluster/node/netns/cni-1", "/r/.cluster/node/kubelet/pods/x/volumes/v"],
         ["/r/.cluster/node/kubelet/pods/x/volumes/v", "/r/.cluster/node/netns/cni-1"]),  # deepest first
        (["/r/.cluster/node/kubelet/a", "/r/.cluster/node/kubelet/a"], ["/r/.cluster/node/kubelet/a"]),  # once
        (["/r/.cluster/node-other/x"], []),  # a sibling whose name starts the same
        (["/r/.cluster/node/my\\040volume"], ["/r/.cluster/node/my volume"]),  # mountinfo escapes spaces
    ],
)  # fmt: skip
def test_the_mounts_under_the_nodes_folder_deepest_first(points: list[str], under: list[str]) -> None:
    assert mounts_under(Path("/r/.cluster/node"), mountinfo(*points)) == under


def v1_tree(root: Path, *controllers: str) -> Path:
    for c in controllers:
        (root / c).mkdir(parents=True)
        (root / c / "cgroup.procs").write_text("")
    (root / "unified").mkdir()  # a mount point without cgroup.procs: not a hierarchy here
    return root


def test_v1_has_our_root_in_each_hierarchy_v2_in_its_one_tree(tmp_path: Path) -> None:
    v1 = v1_tree(tmp_path / "v1", "cpu", "memory", "pids")
    assert cgroup_roots(v1) == [v1 / c / CGROUP_ROOT for c in ("cpu", "memory", "pids")]
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory pids\n")
    assert cgroup_roots(v2) == [v2 / CGROUP_ROOT]


def test_a_new_cpuset_gets_its_parents_cpus_and_memory_nodes(tmp_path: Path) -> None:
    tree = v1_tree(tmp_path, "cpuset", "memory")
    (tree / "cpuset/cpuset.cpus").write_text("0-1\n")
    (tree / "cpuset/cpuset.mems").write_text("0\n")
    ours = tree / "cpuset" / CGROUP_ROOT
    ours.mkdir()  # as the kernel makes it: the files exist, empty
    (ours / "cpuset.cpus").write_text("\n")
    (ours / "cpuset.mems").write_text("0\n")  # set already: kept
    make_cgroup_root(tree)
    assert (ours / "cpuset.cpus").read_text() == "0-1\n"
    assert (ours / "cpuset.mems").read_text() == "0\n"
    assert (tree / "memory" / CGROUP_ROOT).is_dir()


def test_the_pods_cgroups_are_listed_deepest_first_for_removal(tmp_path: Path) -> None:
    tree = v1_tree(tmp_path, "cpu", "memory")
    for c in ("cpu", "memory"):
        (tree / c / CGROUP_ROOT / "kubepods" / "besteffort" / "pod1").mkdir(parents=True)
    (tree / "cpu" / "kubepods" / "other").mkdir(parents=True)  # another kubelet's: not ours
    got = our_cgroups(tree)
    assert len(got) == 8  # ddpctl-node, kubepods, besteffort, pod1 in each hierarchy
    assert all(CGROUP_ROOT in p.parts for p in got)
    depths = [len(p.parts) for p in got]
    assert depths == sorted(depths, reverse=True)
    assert {p.name for p in got[-2:]} == {CGROUP_ROOT}


SOCK = Path("/r/.cluster/node/containerd/containerd.sock")


@pytest.mark.parametrize(
    ("argv", "ours"),
    [
        ([b"/cache/bin/containerd-shim-runc-v2", b"-namespace", b"k8s.io", b"-address", str(SOCK).encode(), b""],
         True),
        ([b"/usr/bin/containerd-shim-runc-v2", b"-address", b"/run/containerd/containerd.sock", b""], False),
        ([b"/cache/bin/containerd", b"--address", str(SOCK).encode(), b""], False),  # containerd itself
        ([b""], False),
        ([], False),
    ],
)  # fmt: skip
def test_only_shims_of_our_containerd_are_ours(argv: list[bytes], ours: bool) -> None:
    assert is_our_shim(argv, SOCK) is ours
