"""The test cluster's commands (run from the clone's root; `make cluster` and friends call them):

    python -m testcluster up         build (cached) and start everything, idempotent; prints KUBECONFIG
    python -m testcluster down       stop everything, remove its state: no process or file left running
    python -m testcluster status     which components run (exit 1 when one does not)
    python -m testcluster nodes N    N simulated GPU nodes (8 at start), e.g. 64 for a scale test
    python -m testcluster load REF.. copy images of the local Docker engine to the real node (one stream)

`down` and `status` need nothing but the standard library (`make cluster-down` runs them with the
system's python3 when the venv is gone): the installers, which read YAML, are imported by `up`.
"""

from __future__ import annotations

import argparse
import subprocess
import time

from testcluster import binaries, control_plane
from testcluster.kube import Cluster
from testcluster.node import layout as node_layout
from testcluster.node import lifecycle as node
from testcluster.node.containerd import load_images
from testcluster.pki import make_pki, write_kubeconfig
from testcluster.procs import fail, log, port_open, running, stop
from testcluster.settings import BASE, PORTS, STATE

# stop order: the reverse of `up`
COMPONENTS = [
    "kueue", "training-operator", "trainer", "jobset", "kwok",
    "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd",
]  # fmt: skip
# The two fixed paths two managers insist on: the training-operator v1's webhook certs (pkg/cert) and
# Kueue's metrics certs (read from /etc/kueue when its cert manager is off).
FIXED_PATHS = ["/tmp/k8s-webhook-server", "/etc/kueue"]  # noqa: S108


def up() -> None:
    from testcluster import controllers, kwok  # they read YAML: see the module's docstring

    t0 = time.monotonic()
    c = Cluster(bin=binaries.control_plane(), kubeconfig=STATE / "kubeconfig")
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / ".gitignore").write_text("*\n")
    strangers = [f"{n} ({p})" for n, p in PORTS.items() if port_open(p)] if not running("etcd") else []
    if strangers:
        fail(f"ports in use: {', '.join(strangers)}; set DDPCTL_CLUSTER_PORT_BASE to another base (now {BASE})")
    link = STATE / "bin"
    if not link.is_symlink() or link.resolve() != c.bin.resolve():
        link.unlink(missing_ok=True)
        link.symlink_to(c.bin)
    c.timed("pki", lambda: make_pki(STATE / "pki"))
    write_kubeconfig(c.kubeconfig, PORTS["apiserver"], STATE / "pki")
    control_plane.up(c)
    c.timed("kwok", lambda: kwok.kwok(c))
    controllers.up(c)
    node.up(c)
    log(f"up in {time.monotonic() - t0:.1f} s")
    print(f"export KUBECONFIG={c.kubeconfig}")


def down() -> None:
    node.down()  # first: its kubelet must not start pods again while the control plane goes
    for name in COMPONENTS:
        stop(name)
    subprocess.run(["rm", "-rf", *FIXED_PATHS], check=True)
    if STATE.exists():
        subprocess.run(["rm", "-rf", str(STATE)], check=True)
    log("down: every component stopped, state removed")


def status() -> int:
    names = list(reversed(COMPONENTS))
    if not node_layout.missing():  # the real node counts where it can run
        names += reversed(node_layout.COMPONENTS)
    for n in names:
        print(f"{n:24} {'running' if running(n) else 'stopped'}")
    return 0 if all(running(n) for n in names) else 1


def nodes(count: int) -> None:
    from testcluster import kwok  # it reads YAML: see the module's docstring

    if not running("kube-apiserver"):
        fail("the cluster is not running: start it with `make cluster`")
    kwok.set_kwok_nodes(Cluster(bin=STATE / "bin", kubeconfig=STATE / "kubeconfig"), count)


def load(refs: list[str]) -> None:
    took = load_images(refs)
    log(f"{' '.join(refs)}: {'already on the real node' if not took else f'loaded in {took:.0f} s'}")


def positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of nodes")
    return n


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m testcluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{up,down,status,nodes,load}")
    sub.add_parser("up", help="build (cached) and start everything")
    sub.add_parser("down", help="stop everything and remove its state")
    sub.add_parser("status", help="which components run")
    sub.add_parser("nodes", help="grow or shrink the simulated GPU nodes").add_argument("count", type=positive)
    sub.add_parser("load", help="copy local Docker images to the real node (shared layers sent once)").add_argument(
        "ref", nargs="+"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "up":
        up()
    elif args.command == "down":
        down()
    elif args.command == "status":
        return status()
    elif args.command == "nodes":
        nodes(args.count)
    else:
        load(args.ref)
    return 0
