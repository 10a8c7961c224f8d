"""The test cluster: a real Kubernetes control plane and the four engines' controllers on loopback.

    python cluster/up.py up      # build (cached) and start everything, idempotent; prints KUBECONFIG
    python cluster/up.py down    # stop everything, remove its state: no process or file left running
    python cluster/up.py status  # which components run
    python cluster/up.py nodes N # N simulated GPU nodes (8 at start), e.g. 64 for a scale test
    python cluster/up.py load REF  # copy an image of the local Docker engine to the real node

Every component is a host process built from the Go modules in cluster/go (scripts/build.sh):
etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (simulated GPU nodes whose pods
run, finish or fail by Stages), and the JobSet, Kueue, Kubeflow Trainer v2 and training-operator v1
managers. Next to the kwok nodes runs one real node (node.py: kubelet, containerd, runc, a CNI
bridge, CoreDNS) whose pods really run; it needs root and is skipped without it. Webhooks are
served by the managers themselves on 127.0.0.1 with a CA made here; every
webhook configuration and conversion webhook points at its `url`. State lives in .cluster/ (or
$DDPCTL_CLUSTER_DIR); ports start at $DDPCTL_CLUSTER_PORT_BASE (36400).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STATE = Path(os.environ.get("DDPCTL_CLUSTER_DIR") or REPO / ".cluster")
BASE = int(os.environ.get("DDPCTL_CLUSTER_PORT_BASE", "36400"))
GOMOD = Path(os.environ.get("GOMODCACHE") or Path.home() / "go/pkg/mod")


def versions() -> dict[str, str]:
    out = {}
    for line in (HERE / "versions.env").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


V = versions()
PORTS = {
    "etcd": BASE,
    "etcd-peer": BASE + 1,
    "apiserver": BASE + 2,
    "controller-manager": BASE + 3,
    "scheduler": BASE + 4,
    "kwok": BASE + 5,
    # the kubelet port of every kwok node, on loopback: reserved and never bound, so the API server's
    # log and exec requests are refused at once, whatever answers elsewhere on this machine's network
    "kwok-kubelet": BASE + 6,
    "jobset": BASE + 10,
    "kueue": BASE + 20,
    "trainer": BASE + 30,
    "training-operator": BASE + 40,
    "kubelet": BASE + 50,
    "kubelet-healthz": BASE + 51,
}


def log(msg: str) -> None:
    print(f"cluster: {msg}", file=sys.stderr, flush=True)


def fail(msg: str) -> None:
    log(f"error: {msg}")
    raise SystemExit(1)


# ------------------------------------------------------------------------------------------ processes


def pidfile(name: str) -> Path:
    return STATE / "run" / f"{name}.pid"


def running(name: str) -> int | None:
    try:
        pid = int(pidfile(name).read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def start(name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    """Start a component in its own session (so `down` stops it and its children), log to a file."""
    if running(name):
        return
    (STATE / "run").mkdir(parents=True, exist_ok=True)
    (STATE / "logs").mkdir(parents=True, exist_ok=True)
    with open(STATE / "logs" / f"{name}.log", "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
            cwd=cwd or STATE,
        )
    pidfile(name).write_text(str(proc.pid))


def stop(name: str, timeout: float = 15) -> None:
    pid = running(name)
    if pid:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except OSError:
                break
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and running(name):
                time.sleep(0.1)
            if not running(name):
                break
    pidfile(name).unlink(missing_ok=True)


def wait_for(what: str, check: Callable[[], bool], timeout: float, name: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if name and not running(name):
            tail = (STATE / "logs" / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
            fail(f"{name} exited while waiting for {what}:\n  " + "\n  ".join(tail))
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError, subprocess.CalledProcessError):
            pass
        time.sleep(0.2)
    fail(f"timed out after {timeout:.0f} s waiting for {what} (logs: {STATE / 'logs'})")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def https_answers(
    port: int, path: str = "/", want: tuple[int, ...] = (200,), verify: bool = True, ca: str = "ca"
) -> bool:
    """A TLS server on the port that trusts our CA answers `path` (any HTTP status in `want`)."""
    ctx = ssl.create_default_context(cafile=str(STATE / f"pki/{ca}.crt"))
    if not verify:  # the controller manager and scheduler serve a certificate they made themselves
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(str(STATE / "pki/admin.crt"), str(STATE / "pki/admin.key"))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=2) as r:
            return r.status in want
    except urllib.error.HTTPError as e:
        return e.code in want


# ------------------------------------------------------------------------------------------ PKI


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki() -> None:
    """One CA signs the API server's and the webhooks' serving certs and the admin client cert.

    The training-operator v1 gets a CA of its own: its cert rotator keeps given certs only when the
    CA is valid for the name `training-operator-ca` and the server cert for its Service's name."""
    pki = STATE / "pki"
    if (pki / "done").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    for ca, subject in (("ca", "/CN=ddpctl-test-ca"), ("to-ca", "/O=training-operator/CN=training-operator-ca")):
        (pki / f"{ca}.ext").write_text(
            "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,digitalSignature,keyEncipherment\n"
            + ("subjectAltName=DNS:training-operator-ca\n" if ca == "to-ca" else "")
        )
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", subject,
                "-extensions", "v3_ca", "-addext", f"subjectAltName=DNS:{subject.rsplit('=', 1)[1]}",
                "-keyout", str(pki / f"{ca}.key"), "-out", str(pki / f"{ca}.crt"))  # fmt: skip
    certs = {
        "apiserver": ("ca", "/CN=kube-apiserver", "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
                      "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"),
        "webhook": ("ca", "/CN=webhooks", "DNS:localhost,IP:127.0.0.1"),
        "to-webhook": ("to-ca", "/CN=training-operator", "DNS:training-operator.kubeflow.svc,IP:127.0.0.1"),
        "admin": ("ca", "/O=system:masters/CN=admin", None),
        "kubelet-client": ("ca", "/O=system:masters/CN=kube-apiserver-kubelet-client", None),
    }  # fmt: skip
    for name, (ca, subject, san) in certs.items():
        key, csr, crt = (str(pki / f"{name}.{ext}") for ext in ("key", "csr", "crt"))
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", key, "-out", csr)
        ext = pki / f"{name}.ext"
        ext.write_text(
            (f"subjectAltName={san}\n" if san else "")
            + "keyUsage=critical,digitalSignature,keyEncipherment\n"
            + f"extendedKeyUsage={'serverAuth' if san else 'clientAuth'}\n"
        )
        openssl("x509", "-req", "-in", csr, "-CA", str(pki / f"{ca}.crt"), "-CAkey", str(pki / f"{ca}.key"),
                "-CAcreateserial", "-days", "3650", "-extfile", str(ext), "-out", crt)  # fmt: skip
    for name in ("to-ca", "to-webhook"):  # the rotator parses PKCS#1 ("RSA PRIVATE KEY") keys only
        openssl("rsa", "-in", str(pki / f"{name}.key"), "-traditional", "-out", str(pki / f"{name}.key"))
    openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    # controller-runtime's webhook servers read tls.crt/tls.key from a folder.
    certdir = pki / "webhook-certs"
    certdir.mkdir(exist_ok=True)
    for src, dst in (("webhook.crt", "tls.crt"), ("webhook.key", "tls.key"), ("ca.crt", "ca.crt")):
        (certdir / dst).write_bytes((pki / src).read_bytes())
    (pki / "done").touch()


def write_kubeconfig() -> Path:
    pki = STATE / "pki"
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "ddpctl-test", "cluster": {
            "server": f"https://127.0.0.1:{PORTS['apiserver']}", "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": "admin", "user": {
            "client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")}}],
        "contexts": [{"name": "ddpctl-test", "context": {"cluster": "ddpctl-test", "user": "admin"}}],
        "current-context": "ddpctl-test",
    }  # fmt: skip
    import yaml

    path = STATE / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    path.chmod(0o600)
    return path


# ------------------------------------------------------------------------------------------ components


@dataclass
class Cluster:
    bin: Path
    kubeconfig: Path
    times: dict[str, float] = field(default_factory=dict)

    def exe(self, name: str) -> str:
        return str(self.bin / name)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        r = subprocess.run(
            [self.exe("kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if check and r.returncode:
            fail(f"kubectl {' '.join(args[:3])}: {r.stderr.strip()}")
        return r.stdout

    def apply(self, docs: list[dict], what: str) -> None:
        import yaml

        body = "\n---\n".join(yaml.safe_dump(d) for d in docs)
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=ddpctl-cluster", "-f", "-",
                     input=body)  # fmt: skip

    def timed(self, name: str, fn: Callable[[], None]) -> None:
        t0 = time.monotonic()
        fn()
        self.times[name] = time.monotonic() - t0
        log(f"{name}: ready in {self.times[name]:.1f} s")


def etcd(c: Cluster) -> None:
    start("etcd", [
        c.exe("etcd"), "--name", "ddpctl", "--data-dir", str(STATE / "etcd"),
        "--listen-client-urls", f"http://127.0.0.1:{PORTS['etcd']}",
        "--advertise-client-urls", f"http://127.0.0.1:{PORTS['etcd']}",
        "--listen-peer-urls", f"http://127.0.0.1:{PORTS['etcd-peer']}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{PORTS['etcd-peer']}",
        "--initial-cluster", f"ddpctl=http://127.0.0.1:{PORTS['etcd-peer']}",
        "--unsafe-no-fsync", "--quota-backend-bytes", str(4 << 30), "--log-level", "warn",
    ])  # fmt: skip

    def healthy() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORTS['etcd']}/health", timeout=2) as r:
            return json.loads(r.read()).get("health") == "true"

    wait_for("etcd /health", healthy, 30, "etcd")


def apiserver(c: Cluster) -> None:
    pki = STATE / "pki"
    start("kube-apiserver", [
        c.exe("kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{PORTS['etcd']}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={PORTS['apiserver']}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}", f"--requestheader-client-ca-file={pki / 'ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client", "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'kubelet-client.key'}", f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=Node,RBAC",
        "--allow-privileged=true", "--endpoint-reconciler-type=none", "--profiling=false",
        "--enable-priority-and-fairness=false", "--v=1",
    ])  # fmt: skip
    wait_for("kube-apiserver /readyz", lambda: https_answers(PORTS["apiserver"], "/readyz"), 60, "kube-apiserver")


def kube_component(c: Cluster, name: str, port: int, flags: list[str]) -> None:
    """kube-controller-manager or kube-scheduler: the admin kubeconfig, loopback, no leader election."""
    start(name, [
        c.exe(name), f"--kubeconfig={c.kubeconfig}",
        f"--authentication-kubeconfig={c.kubeconfig}", f"--authorization-kubeconfig={c.kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={port}", "--leader-elect=false", "--v=1", *flags,
    ])  # fmt: skip
    wait_for(f"{name} /healthz", lambda: https_answers(port, "/healthz", verify=False), 60, name)


def controller_manager(c: Cluster) -> None:
    pki = STATE / "pki"
    kube_component(c, "kube-controller-manager", PORTS["controller-manager"], [
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
        "--use-service-account-credentials=false", "--controllers=*,-nodeipam,-cloud-node-lifecycle",
        "--concurrent-job-syncs=10", "--node-monitor-grace-period=60s",
    ])  # fmt: skip


def scheduler(c: Cluster) -> None:
    kube_component(c, "kube-scheduler", PORTS["scheduler"], [])


def default_namespace_ready(c: Cluster) -> bool:
    """The service-account controller made the default ServiceAccount: pods can now be created."""
    return "default" in c.kubectl("get", "serviceaccount", "default", "-n", "default", "-o", "name", check=False)


# ------------------------------------------------------------------------------------------ commands


def binaries() -> Path:
    if os.environ.get("DDPCTL_CLUSTER_BIN"):  # a folder of binaries built elsewhere (development)
        return Path(os.environ["DDPCTL_CLUSTER_BIN"])
    r = subprocess.run(["bash", str(HERE / "scripts/build.sh")], stdout=subprocess.PIPE, text=True, check=False)
    if r.returncode:
        fail("building the cluster's binaries failed (see above)")
    return Path(r.stdout.strip().splitlines()[-1])


def up() -> None:
    t0 = time.monotonic()
    c = Cluster(bin=binaries(), kubeconfig=STATE / "kubeconfig")
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / ".gitignore").write_text("*\n")
    strangers = [f"{n} ({p})" for n, p in PORTS.items() if port_open(p)] if not running("etcd") else []
    if strangers:
        fail(f"ports in use: {', '.join(strangers)}; set DDPCTL_CLUSTER_PORT_BASE to another base (now {BASE})")
    link = STATE / "bin"
    if not link.is_symlink() or link.resolve() != c.bin.resolve():
        link.unlink(missing_ok=True)
        link.symlink_to(c.bin)
    c.timed("pki", make_pki)
    write_kubeconfig()
    c.timed("etcd", lambda: etcd(c))
    c.timed("kube-apiserver", lambda: apiserver(c))
    c.timed("kube-controller-manager", lambda: controller_manager(c))
    c.timed("kube-scheduler", lambda: scheduler(c))
    c.timed("default namespace", lambda: wait_for("the default ServiceAccount", lambda: default_namespace_ready(c), 60))
    from components import install_all

    install_all(c)
    import node

    node.up(c)
    log(f"up in {time.monotonic() - t0:.1f} s")
    print(f"export KUBECONFIG={c.kubeconfig}")


COMPONENTS = [
    "kueue", "training-operator", "trainer", "jobset", "kwok",
    "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd",
]  # fmt: skip


def down() -> None:
    import node

    node.down()  # first: its kubelet must not start pods again while the control plane goes
    for name in COMPONENTS:
        stop(name)
    # The two fixed paths two managers insist on: training-operator v1's webhook certs (pkg/cert) and
    # Kueue's metrics certs (read from /etc/kueue when its cert manager is off).
    subprocess.run(["rm", "-rf", "/tmp/k8s-webhook-server", "/etc/kueue"], check=True)  # noqa: S108
    if STATE.exists():
        subprocess.run(["rm", "-rf", str(STATE)], check=True)
    log("down: every component stopped, state removed")


def status() -> int:
    import node

    down_ = [n for n in COMPONENTS if not running(n)]
    for n in reversed(COMPONENTS):
        print(f"{n:24} {'running' if running(n) else 'stopped'}")
    if not node.missing():  # the real node counts where it can run
        for n in reversed(node.COMPONENTS):
            print(f"{n:24} {'running' if running(n) else 'stopped'}")
            down_ += [] if running(n) else [n]
    return 1 if down_ else 0


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    cmd = argv[1] if len(argv) > 1 else "up"
    if cmd == "up":
        up()
    elif cmd == "down":
        down()
    elif cmd == "status":
        return status()
    elif cmd == "nodes" and len(argv) == 3:
        from components import set_kwok_nodes

        set_kwok_nodes(Cluster(bin=STATE / "bin", kubeconfig=STATE / "kubeconfig"), int(argv[2]))
    elif cmd == "load" and len(argv) == 3:
        import node

        took = node.load_image(argv[2])
        log(f"{argv[2]}: {'already on the real node' if not took else f'loaded in {took:.0f} s'}")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
