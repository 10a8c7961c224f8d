"""NCCL's transport, read from its own NCCL_DEBUG=INFO lines: socket, InfiniBand/RoCE and EFA, as
real runs printed them (the lines below are from public NCCL, nccl-tests and aws-ofi-nccl
issues and AWS's EFA examples, hosts and addresses as posted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl_trainer.preflight import nccl

# A socket fallback: no IB device, NCCL's socket transport, channels over NET/Socket.
SOCKET_INIT = [
    "ip-172-31-12-21:45361:45361 [0] NCCL INFO NET/IB : No device found.",
    "ip-172-31-12-21:45361:45361 [0] NCCL INFO NET/Socket : Using [0]ens3:172.31.12.21<0>",
    "gpu01:124172:124172 [0] NCCL INFO Using network Socket",
]
SOCKET_CHANNELS = [
    "[0] node0:13571:13571 [0] NCCL INFO Channel 00 : 2[1] -> 0[0] via SHM/direct/direct",
    "[0] node0:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
    "[0] node0:13571:13571 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
]
# InfiniBand with GPUDirect RDMA; RoCE NICs through NCCL's IB transport; the SHARP plugin (IBext).
IB_INIT = [
    "master_node:20:289 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>",
    "Wed Sep  6 17:26:52 2023[1,5]<stdout>:tomte249:86388:88864 [5] NCCL INFO Using network IB",
]
IB_CHANNELS = [
    "10-90-43-152:120890:121560 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA",
    "10-90-43-152:120890:121561 [1] NCCL INFO Channel 01 : 2[c7000] -> 1[8d000] [receive] via NET/IB/5/GDRDMA",
]
ROCE_INIT = [
    "dgxh100-4:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; "
    "OOB enp220s0np0:11.1.128.136<0>",
    "dgxh100-4:460770:460842 [0] NCCL INFO Using non-device net plugin version 0",
    "dgxh100-4:460770:460842 [0] NCCL INFO Using network IB",
]
IBEXT = [
    "test1:5425:5439 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP [RO]; OOB eno1:192.168.160.111<0>",
    "test1:5425:5439 [0] NCCL INFO Using network IBext_v8",
    "hostname-test:987:1260 [7] NCCL INFO Channel 03/0 : 47[7] -> 39[7] [receive] via NET/IBext_v8/2",
]
# EFA through aws-ofi-nccl: the plugin's name, then the provider; older and newer plugin names.
EFA_INIT = [
    "[1,0]<stdout>:test-nccl-efa-worker-0:21:21 [0] NCCL INFO NET/OFI Selected Provider is efa (found 1 nics)",
    "[1,0]<stdout>:test-nccl-efa-worker-0:21:21 [0] NCCL INFO Using network AWS Libfabric",
]
EFA_CHANNELS = [
    "ip-10-216-178-255:416481:416522 [3] NCCL INFO Channel 03/0 : 19[201d0] -> 26[201c0] [send] "
    "via NET/AWS Libfabric/0/GDRDMA",
    "algo-1:18059:20782 [2] NCCL INFO Channel 04/1 : 15[7] -> 2[2] [receive] via NET/AWS Libfabric/1/GDRDMA/Shared",
]
EFA_NEW = [
    "8h200-3:6310:6318 [0] NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)",
    "8h200-2:6831:6840 [0] NCCL INFO Using network Libfabric",
]
OFI_TCP = [
    "NCCL WARN NET/OFI No eligible providers were found",
    "NCCL WARN NET/OFI Selected provider is tcp, fabric is 10.224.0.0/12 (found 8 nics)",
    "ip-10-36-29-253:79:79 [0] NCCL INFO Using network AWS Libfabric",
]


@pytest.mark.parametrize(
    ("lines", "family", "label", "socket", "crossed", "decided_by"),
    [
        (SOCKET_INIT, "socket", "Socket", True, False, "NCCL INFO Using network Socket"),
        (SOCKET_INIT + SOCKET_CHANNELS, "socket", "Socket", True, True, "[send] via NET/Socket/0"),
        # an older NCCL's ring line
        (
            ["c6ad99331184:117277:117384 [0] NCCL INFO Ring 00 : 15 -> 0 [receive] via NET/Socket/0"],
            "socket",
            "Socket",
            True,
            True,
            "via NET/Socket/0",
        ),
        (IB_INIT, "ib", "IB/IB", False, False, "Using network IB"),
        (IB_INIT + IB_CHANNELS, "ib", "IB/IB GDR", False, True, "via NET/IB/5/GDRDMA"),
        (ROCE_INIT, "ib", "IB/RoCE", False, False, "Using network IB"),
        (IBEXT, "ib", "IB/IB", False, True, "via NET/IBext_v8/2"),
        (EFA_INIT, "ofi", "Libfabric efa", False, False, "Using network AWS Libfabric"),
        (EFA_INIT + EFA_CHANNELS, "ofi", "Libfabric efa GDR", False, True, "via NET/AWS Libfabric/0/GDRDMA"),
        (EFA_NEW, "ofi", "Libfabric efa", False, False, "Using network Libfabric"),
        # libfabric's TCP provider: the plugin line is the same as EFA's, the transport is sockets
        (OFI_TCP, "ofi", "Libfabric tcp", True, False, "Using network AWS Libfabric"),
        # one channel over sockets among IB ones: a fallback all the same
        (IB_INIT + IB_CHANNELS[:1] + SOCKET_CHANNELS[1:2], "socket", "Socket", True, True, "via NET/Socket/0"),
    ],
)
def test_parse_reads_the_transport_and_its_line(
    lines: list[str], family: str, label: str, socket: bool, crossed: bool, decided_by: str
) -> None:
    t = nccl.parse(lines)
    assert t is not None
    assert (t.family, t.label, t.is_socket, t.crossed_nodes) == (family, label, socket, crossed)
    assert decided_by in t.line and t.line.startswith("NCCL "), t.line


def test_parse_of_lines_without_a_transport_is_none() -> None:
    assert nccl.parse([]) is None
    assert nccl.parse(["NCCL version 2.21.5+cuda12.4", "hello", "[rank 0] epoch 1/2 step 3/8"]) is None
    assert nccl.parse(["x:1:1 [0] NCCL INFO cudaDriverVersion 12010"]) is None


def test_parse_keeps_why_it_fell_back() -> None:
    t = nccl.parse(SOCKET_INIT)
    assert t is not None and t.no_ib_device
    t = nccl.parse(IB_INIT)
    assert t is not None and not t.no_ib_device


@pytest.mark.parametrize(
    ("fabric", "lines", "wrong"),
    [
        ("socket", SOCKET_INIT, None),  # sockets asked for: anything goes
        ("socket", IB_INIT, None),
        ("infiniband", SOCKET_INIT + SOCKET_CHANNELS, "NCCL fell back to sockets (NCCL found no InfiniBand/RoCE"),
        ("infiniband", IB_INIT + IB_CHANNELS, None),
        ("roce", ROCE_INIT, None),
        ("infiniband", IBEXT, None),
        ("efa", EFA_INIT + EFA_CHANNELS, None),
        ("efa", EFA_NEW, None),
        ("efa", OFI_TCP, "NCCL fell back to sockets, not efa"),
        ("efa", SOCKET_INIT, "NCCL fell back to sockets"),
        ("efa", IB_INIT, "NCCL chose IB/IB, not efa"),
        ("infiniband", EFA_INIT, "NCCL chose Libfabric efa, not infiniband"),
        ("infiniband", [], None),  # nothing to tell from: reported as unknown, not as a finding
    ],
)
def test_problem_compares_with_the_fabric_asked_for(fabric: str, lines: list[str], wrong: str | None) -> None:
    found = nccl.problem(fabric, nccl.parse(lines))
    if wrong is None:
        assert found is None
    else:
        assert found is not None and found.startswith(wrong), found


@pytest.mark.parametrize(
    ("env", "added"),
    [
        ({}, {"NCCL_DEBUG_FILE": nccl.DEFAULT_DEBUG_FILE, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}),
        ({"NCCL_DEBUG": "INFO"}, {"NCCL_DEBUG_FILE": nccl.DEFAULT_DEBUG_FILE}),
        ({"NCCL_DEBUG": "trace", "NCCL_DEBUG_FILE": "/logs/n.%h.%p"}, {}),
        (
            {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_SUBSYS": "ALL"},
            {"NCCL_DEBUG_FILE": nccl.DEFAULT_DEBUG_FILE, "NCCL_DEBUG": "INFO"},
        ),
    ],
)
def test_capture_env_adds_only_what_is_missing(env: dict[str, str], added: dict[str, str]) -> None:
    assert nccl.capture_env(env) == added
    environ = dict(env)
    assert nccl.prepare_capture(environ) == added
    assert environ == {**env, **added}


@pytest.mark.parametrize(
    ("pattern", "name"),
    [
        ("/tmp/nccl.%h.%p.log", "/tmp/nccl.node-1.4242.log"),
        ("%h-%%-%p", "node-1-%-4242"),
        ("/plain", "/plain"),
        ("100%x", "100%x"),
    ],
)
def test_debug_file_names_it_as_nccl_does(pattern: str, name: str) -> None:
    assert nccl.debug_file(pattern, host="node-1.cluster.local", pid=4242) == name


def test_read_own_lines(tmp_path: Path) -> None:
    import os
    import socket

    host = socket.gethostname().split(".")[0]
    (tmp_path / f"n.{host}.{os.getpid()}").write_text("\n".join(IB_INIT) + "\n")
    path, lines = nccl.read_own_lines({"NCCL_DEBUG_FILE": str(tmp_path / "n.%h.%p")})
    assert path == str(tmp_path / f"n.{host}.{os.getpid()}") and lines == IB_INIT
    assert nccl.read_own_lines({}) == (None, [])
    assert nccl.read_own_lines({"NCCL_DEBUG_FILE": str(tmp_path / "none.%p")})[1] == []
