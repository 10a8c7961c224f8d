"""Which network transport NCCL chose, read from its own ``NCCL_DEBUG=INFO`` lines.

NCCL says it twice: once at communicator init, which network plugin it loaded
(``NCCL INFO Using network Socket | IB | IBext_v8 | AWS Libfabric | Libfabric``), and once per
channel it connects to another node, what carries that channel's traffic
(``... [send] via NET/Socket/0``, ``via NET/IB/3/GDRDMA``, ``via NET/AWS Libfabric/0/GDRDMA``).
The channel lines win: they are the traffic itself (NCCL connects them lazily, at the first
collective that crosses nodes, so read them after one). Around them:

* ``NET/IB : No device found.``: no usable InfiniBand/RoCE NIC, the usual reason for a socket
  fallback; ``NET/IB : Using [0]mlx5_0:1/RoCE ...`` says the link layer (IB or RoCE);
* ``NET/OFI Selected Provider is efa (found 4 nics)`` (aws-ofi-nccl): the libfabric provider. The
  plugin line reads ``Using network AWS Libfabric`` whatever the provider, so only this line tells
  EFA from libfabric's own TCP provider (``Selected provider is tcp``), another socket fallback.

Capture: NCCL writes its lines to stdout unless ``NCCL_DEBUG_FILE`` names a file (``%h`` the host
name up to its first dot, ``%p`` the pid), and it reads these variables once, when it first
initialises: ``capture_env`` (set before the process group exists) points each rank at its own
file, which ``read_own_lines`` reads back. The parsing is pure (``parse``), tested on real lines.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass

DEBUG_FILE_ENV = "NCCL_DEBUG_FILE"
DEFAULT_DEBUG_FILE = "/tmp/ddpctl-nccl.%h.%p.log"  # noqa: S108 - per host and pid, like NCCL's own examples
SOCKET_PROVIDERS = ("tcp", "sockets", "udp")  # libfabric providers that are plain sockets underneath

_NCCL = re.compile(r"NCCL (?:INFO|WARN) (?P<text>.*?)\s*$")
_CHANNEL = re.compile(r"\bvia NET/(?P<net>[^/]+?)/(?P<dev>\d+)(?P<flags>(?:/[\w]+)*)")
_USING = re.compile(r"^Using network (?P<net>\S.*)$")
_IB_DEVICES = re.compile(r"^NET/IB ?: Using (?P<devices>.*)$")
_LINK = re.compile(r"\[\d+\][\w.-]+:\d+/(?P<link>IB|RoCE)\b")
_NO_IB = re.compile(r"^NET/IB ?: No device found")
_PROVIDER = re.compile(r"^NET/OFI Selected [Pp]rovider is (?P<provider>[\w;-]+)")


@dataclass(frozen=True)
class Transport:
    """One rank's NCCL network transport, with the NCCL line that decided it."""

    network: str  # NCCL's own name: Socket, IB, IBext_v8, AWS Libfabric, Libfabric
    family: str  # socket | ib (verbs: InfiniBand or RoCE) | ofi (libfabric) | other
    line: str  # the NCCL line (from `NCCL INFO` on) it was read from
    link: str | None = None  # IB or RoCE, from `NET/IB : Using [0]mlx5_0:1/RoCE`
    provider: str | None = None  # the libfabric provider: efa, tcp, cxi, ...
    gdr: bool = False  # GPUDirect RDMA on a channel (`/GDRDMA`)
    crossed_nodes: bool = False  # a channel went over the network (read from a `via NET/` line)
    no_ib_device: bool = False  # NCCL said `NET/IB : No device found.`

    @property
    def is_socket(self) -> bool:
        """Plain TCP sockets: NCCL's own, or libfabric's TCP provider."""
        return self.family == "socket" or (self.family == "ofi" and self.provider in SOCKET_PROVIDERS)

    @property
    def label(self) -> str:
        """What the report's table shows: `Socket`, `IB/RoCE GDR`, `Libfabric efa GDR`."""
        if self.family == "socket":
            out = "Socket"
        elif self.family == "ib":
            out = f"IB/{self.link}" if self.link else "IB"
        elif self.family == "ofi":
            out = f"Libfabric {self.provider}" if self.provider else "Libfabric"
        else:
            out = self.network
        return out + (" GDR" if self.gdr else "")

    def to_dict(self) -> dict[str, object]:
        return {
            "network": self.network,
            "family": self.family,
            "label": self.label,
            "link": self.link,
            "provider": self.provider,
            "gdr": self.gdr,
            "crossed_nodes": self.crossed_nodes,
            "socket": self.is_socket,
            "line": self.line,
        }


def _family(network: str) -> str:
    low = network.lower()
    if low.startswith("socket"):
        return "socket"
    if low.startswith("ib"):  # IB, IBext, IBext_v8 (the SHARP plugin over verbs)
        return "ib"
    if "libfabric" in low or low.startswith("ofi"):
        return "ofi"
    return "other"


def parse(lines: Iterable[str]) -> Transport | None:
    """The transport one rank's NCCL lines show; None when they say nothing about it."""
    using: tuple[str, str] | None = None  # (network, line)
    channel: tuple[str, str, bool] | None = None  # (network, line, gdr), a socket one kept over others
    gdr = False
    link: str | None = None
    provider: str | None = None
    no_ib = False
    for raw in lines:
        match = _NCCL.search(raw)
        if match is None:
            continue
        text = match.group("text")
        line = raw[match.start() :].strip()
        found = _CHANNEL.search(text)
        if found is not None:
            net, flags = found.group("net"), found.group("flags")
            gdr = gdr or "GDRDMA" in flags
            # one channel over sockets is a fallback, whatever the others use
            if channel is None or (_family(net) == "socket" and _family(channel[0]) != "socket"):
                channel = (net, line, "GDRDMA" in flags)
            continue
        if (m := _USING.match(text)) is not None:
            using = (m.group("net").strip(), line)
        elif (m := _IB_DEVICES.match(text)) is not None:
            links = {x.group("link") for x in _LINK.finditer(m.group("devices"))}
            link = "RoCE" if links == {"RoCE"} else "IB" if links == {"IB"} else link
        elif _NO_IB.match(text):
            no_ib = True
        elif (m := _PROVIDER.match(text)) is not None:
            provider = m.group("provider").split(";")[0].lower()
    if channel is not None:
        network, line, crossed = channel[0], channel[1], True
    elif using is not None:
        (network, line), crossed = using, False
    else:
        return None
    family = _family(network)
    return Transport(
        network=network,
        family=family,
        line=line,
        link=link if family == "ib" else None,
        provider=provider if family == "ofi" else None,
        gdr=gdr and family != "socket",  # GDR on other channels is no help to a socket one
        crossed_nodes=crossed,
        no_ib_device=no_ib,
    )


def problem(fabric: str, transport: Transport | None) -> str | None:
    """What is wrong with ``transport`` for a job that asked for ``fabric``; None when nothing is
    (or nothing can be told: no NCCL lines). Any transport will do for ``socket``."""
    if fabric == "socket" or transport is None:
        return None
    if transport.is_socket:
        why = " (NCCL found no InfiniBand/RoCE device)" if transport.no_ib_device else ""
        return f"NCCL fell back to sockets{why}, not {fabric}"
    if fabric in ("infiniband", "roce") and transport.family == "ib":
        return None
    if fabric == "efa" and transport.family == "ofi" and transport.provider in (None, "efa"):
        return None
    return f"NCCL chose {transport.label}, not {fabric}"


def capture_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables to add so that NCCL writes the lines ``parse`` reads into a file of this rank's
    own: a debug file per host and pid unless one is set, INFO level unless INFO or TRACE is set,
    and the INIT and NET subsystems unless the user chose subsystems. Empty when nothing is missing."""
    out: dict[str, str] = {}
    if not env.get(DEBUG_FILE_ENV):
        out[DEBUG_FILE_ENV] = DEFAULT_DEBUG_FILE
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        out["NCCL_DEBUG"] = "INFO"
        if not env.get("NCCL_DEBUG_SUBSYS"):
            out["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
    return out


def prepare_capture(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set ``capture_env`` in this process's environment (before NCCL initialises: before the
    process group exists); returns what it set."""
    environ = os.environ if environ is None else environ
    added = capture_env(environ)
    environ.update(added)
    return added


def debug_file(pattern: str, host: str | None = None, pid: int | None = None) -> str:
    """NCCL's file name for ``NCCL_DEBUG_FILE=pattern``: ``%h`` is the host name up to its first dot,
    ``%p`` the pid, ``%%`` a percent sign."""
    host = (host if host is not None else socket.gethostname()).split(".")[0]
    pid = os.getpid() if pid is None else pid
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern) and pattern[i + 1] in "hp%":
            out.append({"h": host, "p": str(pid), "%": "%"}[pattern[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def read_own_lines(env: Mapping[str, str] | None = None) -> tuple[str | None, list[str]]:
    """(the file, its lines) of this process's NCCL debug output; (None, []) when NCCL writes to
    stdout (no ``NCCL_DEBUG_FILE``), (file, []) when the file is missing."""
    env = os.environ if env is None else env
    pattern = env.get(DEBUG_FILE_ENV)
    if not pattern:
        return None, []
    path = debug_file(pattern)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return path, f.read().splitlines()
    except OSError:
        return path, []
