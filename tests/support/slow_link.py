"""A node with a slow network for tests: its processes run in a network namespace of their own,
joined to this host by a veth pair whose two ends are rate-limited (tc's token bucket filter).

A CPU quota (tests/support/cpu_quota.py) slows a node's compute, not its network: gloo's loopback
transfers cost the receiving process little CPU, and a node under a 5 % quota still reached 0.6-0.7
x its peers' pair bandwidth. A link slowed by the kernel is what a slow NIC or a congested port
looks like to the preflight. Every node then talks over the host end's address (``host_ip``:
the host's own nodes reach each other through it at loopback speed, routed locally; only traffic
to or from the namespace crosses the slowed link), each naming its interface in
``GLOO_SOCKET_IFNAME``. Needs root, iproute2 (``ip``, ``tc``) and ``nsenter``; ``unavailable`` says why not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from types import TracebackType

SUBNET = "10.231.{}.{}"  # a /30 per link, from a range the test machine does not route


def unavailable() -> str | None:
    """Why a slowed link cannot be made here; None when it can."""
    missing = [tool for tool in ("ip", "tc", "nsenter") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found (install iproute2 and util-linux)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


class SlowLink:
    """``with SlowLink(mbit) as link:`` run a node with ``link.wrap(cmd)`` and ``link.node_env``;
    the others with ``link.host_env``, all with ``link.host_ip`` as the rendezvous address. On exit
    the namespace goes, and the veth pair with it."""

    def __init__(self, mbit: float) -> None:
        self.mbit = mbit
        tag = os.getpid() % 250 + 1
        self.name = f"ddpctl-slow-{os.getpid()}"
        self.host_if, self.node_if = f"dsh{tag}", f"dsn{tag}"
        self.host_ip, self.node_ip = SUBNET.format(tag, 1), SUBNET.format(tag, 2)

    @property
    def host_env(self) -> dict[str, str]:
        return {"GLOO_SOCKET_IFNAME": self.host_if}

    @property
    def node_env(self) -> dict[str, str]:
        return {"GLOO_SOCKET_IFNAME": self.node_if}

    def wrap(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` run inside the namespace: nsenter, not `ip netns exec`, which mounts a /sys of its
        own and so hides the cgroups a node's CPU quota lives in."""
        return ["nsenter", f"--net=/run/netns/{self.name}", *cmd]

    def _in_ns(self, *args: str) -> None:
        _run("ip", "netns", "exec", self.name, *args)

    def __enter__(self) -> SlowLink:
        _run("ip", "netns", "add", self.name)
        try:
            _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.node_if)
            _run("ip", "link", "set", self.node_if, "netns", self.name)
            _run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _run("ip", "link", "set", self.host_if, "up")
            self._in_ns("ip", "addr", "add", f"{self.node_ip}/30", "dev", self.node_if)
            self._in_ns("ip", "link", "set", self.node_if, "up")
            self._in_ns("ip", "link", "set", "lo", "up")
            rate = f"{self.mbit:g}mbit"
            shape = ["root", "tbf", "rate", rate, "burst", "64kb", "latency", "100ms"]
            _run("tc", "qdisc", "add", "dev", self.host_if, *shape)  # to the node
            self._in_ns("tc", "qdisc", "add", "dev", self.node_if, *shape)  # from the node
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True)
        subprocess.run(["ip", "link", "delete", self.host_if], capture_output=True)  # gone with the namespace


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")
