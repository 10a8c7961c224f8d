"""Ports for the tests' stores and servers, which no two tests share."""

from __future__ import annotations

import itertools
import os
import socket

PORT_BLOCK = 1000
_next_ports = itertools.count()


def free_port() -> int:
    """A port no other test is handed: below the kernel's ephemeral range (32768 and up), so no
    outgoing connection can take it between this check and the store's bind (a port the kernel
    picked with bind(0) can), in a block of this pytest-xdist worker's own, never the same twice
    in a run."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...; unset without xdist
    index = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    base = 20_000 + index * PORT_BLOCK
    for _ in range(PORT_BLOCK):
        port = base + next(_next_ports) % PORT_BLOCK
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # left bound by an earlier test's process: the next one
            return port
    raise RuntimeError(f"no free port in {base}-{base + PORT_BLOCK - 1}")
