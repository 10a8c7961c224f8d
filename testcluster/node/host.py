"""What the real node changes on this machine outside its folder, and how each is undone: the
bridge and its FORWARD rule, the CNI configuration, the pods' cgroups, mounts, runc shims."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from testcluster.node.layout import BRIDGE, CGROUP_ROOT, CGROUPS, DIR, FORWARD_RULE, GATEWAY, SOCK, SUBNET
from testcluster.procs import fail, log

# ------------------------------------------------------------------------------------------ network


def sh(*argv: str, check: bool = True) -> bool:
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and r.returncode:
        fail(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r.returncode == 0


def network_up() -> None:
    """The bridge exists before the kubelet (its node IP) and CoreDNS (its bind address) start;
    the CNI bridge plugin then attaches each pod to it."""
    if not sh("ip", "link", "show", BRIDGE, check=False):
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{GATEWAY}/16", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    if not sh("iptables", "-C", *FORWARD_RULE, check=False):
        sh("iptables", "-I", *FORWARD_RULE)


def network_down() -> None:
    while sh("iptables", "-D", *FORWARD_RULE, check=False):
        pass
    sh("ip", "link", "del", BRIDGE, check=False)


def cni_conflist(ipam_dir: Path) -> dict[str, Any]:
    """Each pod on our bridge, its address from SUBNET (host-local, state in `ipam_dir`), and lo."""
    ipam = {"type": "host-local", "dataDir": str(ipam_dir),
            "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]], "routes": [{"dst": "0.0.0.0/0"}]}  # fmt: skip
    return {
        "cniVersion": "1.0.0",
        "name": "ddpctl",
        "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "ipam": ipam},
                    {"type": "loopback"}],
    }  # fmt: skip


def cni_config() -> None:
    net = DIR / "cni" / "net.d"
    net.mkdir(parents=True, exist_ok=True)
    (net / "10-ddpctl.conflist").write_text(json.dumps(cni_conflist(DIR / "cni" / "ipam"), indent=2))


# ------------------------------------------------------------------------------------------ cgroups


def cgroup_roots(cgroups: Path = CGROUPS) -> list[Path]:
    """Our cgroup root (CGROUP_ROOT) in each hierarchy: every v1 controller's, or the v2 tree."""
    if (cgroups / "cgroup.controllers").exists():  # cgroup v2: one tree
        return [cgroups / CGROUP_ROOT]
    return [d / CGROUP_ROOT for d in sorted(cgroups.iterdir()) if (d / "cgroup.procs").exists()]


def make_cgroup_root(cgroups: Path = CGROUPS) -> None:
    """The kubelet's cgroupRoot must exist in every hierarchy before it starts. Our own root keeps
    the node's pods apart from any other kubelet's `kubepods` on this machine, so `down` kills
    only ours. A v1 cpuset starts with no CPUs and memory nodes: it gets its parent's."""
    for root in cgroup_roots(cgroups):
        root.mkdir(exist_ok=True)
        if root.parent.name == "cpuset":
            for f in ("cpuset.cpus", "cpuset.mems"):
                if not (root / f).read_text().strip():
                    (root / f).write_text((root.parent / f).read_text())


def our_cgroups(cgroups: Path = CGROUPS) -> list[Path]:
    """Every cgroup folder under our root, in every hierarchy, deepest first (the root last)."""
    dirs: list[Path] = []
    for top in cgroup_roots(cgroups):
        if top.is_dir():
            dirs += [Path(root) for root, _, _ in os.walk(top)]
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def kill_pods() -> None:
    """SIGKILL what still runs in the pods' cgroups, then remove the cgroups."""
    for d in our_cgroups():
        try:
            for pid in (d / "cgroup.procs").read_text().split():
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 10
    for d in our_cgroups():
        while True:
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    log(f"warning: could not remove {d}")
                    break
                time.sleep(0.1)


# ------------------------------------------------------------------------------------------ mounts, shims


def mounts_under(root: Path, mountinfo: str) -> list[str]:
    """The mount points below `root` in a /proc/<pid>/mountinfo text, deepest first (the unmount order)."""
    prefix = str(root) + "/"
    points = []
    for line in mountinfo.splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def unmount_all(root: Path) -> None:
    for point in mounts_under(root, Path("/proc/self/mountinfo").read_text()):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def is_our_shim(argv: list[bytes], sock: Path = SOCK) -> bool:
    """A runc shim started by our containerd: it names our socket in its argv."""
    return bool(argv) and argv[0].endswith(b"containerd-shim-runc-v2") and str(sock).encode() in argv


def kill_shims() -> None:
    """The runc shims outlive containerd by design; ours name our socket in their argv."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if is_our_shim(argv):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
