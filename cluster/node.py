"""One real node next to the kwok nodes: a kubelet whose pods really run, for the gloo tests.

    kubelet (the control plane's build) -> containerd v2 (cluster/node/go) -> Debian's runc
    pod network: Debian's CNI bridge + host-local plugins on a bridge of our own (ddpctl0)
    cluster DNS: CoreDNS on the bridge address, so `<pod>.<service>` names resolve in pods
    the pod sandbox: a pause program built here, imported as an image (no registry exists)

It needs root (a bridge, an iptables rule, mounts, cgroups). Everything it makes lives under
.cluster/node, except what the kernel keeps elsewhere (the bridge, one FORWARD rule, the pods'
cgroups under <hierarchy>/ddpctl-node), and `down` removes all of it. Pods land here only when
they ask for it: the node carries the label and NoSchedule taint `node.ddpctl.io/real=true`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from up import HERE, PORTS, STATE, Cluster, fail, log, openssl, running, start, stop, wait_for

NAME = "ddpctl-real-node"
LABEL = "node.ddpctl.io/real"
BRIDGE = "ddpctl0"
GATEWAY = "10.88.0.1"  # the bridge's address: the node's InternalIP, the kubelet's and CoreDNS's
SUBNET = "10.88.0.0/16"
PAUSE_IMAGE = "localhost/ddpctl-pause:1"
NAMESPACE = "k8s.io"  # containerd's namespace for CRI (kubelet) images and containers
RUNC = "/usr/sbin/runc"
CNI_BIN = Path("/usr/lib/cni")
CGROUPS = Path("/sys/fs/cgroup")
CGROUP_ROOT = "ddpctl-node"  # the kubelet's cgroupRoot: its pods go to <hierarchy>/ddpctl-node/kubepods
COMPONENTS = ["kubelet", "coredns", "containerd"]  # stop order
# Docker sets the FORWARD policy to DROP; pods on our bridge talk to each other through this rule.
FORWARD_RULE = ["FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT", "-m", "comment", "--comment", "ddpctl-node"]

DIR = STATE / "node"
SOCK = DIR / "containerd" / "containerd.sock"


def missing() -> list[str]:
    """What this machine lacks for the real node (empty: it can start), each with its fix."""
    out = []
    if os.geteuid() != 0:
        out.append("root (a bridge, iptables, mounts and cgroups)")
    for tool, package in (("ip", "iproute2"), ("iptables", "iptables")):
        if not shutil.which(tool):
            out.append(f"{tool} (apt-get install {package})")
    if not Path(RUNC).exists():
        out.append(f"{RUNC} (apt-get install runc)")
    if not (CNI_BIN / "bridge").exists():
        out.append(f"{CNI_BIN}/bridge (apt-get install containernetworking-plugins)")
    return out


def binaries() -> Path:
    r = subprocess.run(["bash", str(HERE / "node/build.sh")], stdout=subprocess.PIPE, text=True, check=False)
    if r.returncode:
        fail("building the real node's binaries failed (see above)")
    return Path(r.stdout.strip().splitlines()[-1])


def ctr(bin_: Path, *args: str, input_: object = None, check: bool = True) -> str:
    r = subprocess.run(
        [str(bin_ / "ctr"), "--address", str(SOCK), "--namespace", NAMESPACE, *args],
        stdin=input_,  # type: ignore[arg-type]
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if check and r.returncode:
        fail(f"ctr {' '.join(args[:2])}: {r.stderr.strip()[-2000:]}")
    return r.stdout


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


def cni_config() -> None:
    net = DIR / "cni" / "net.d"
    net.mkdir(parents=True, exist_ok=True)
    ipam = {"type": "host-local", "dataDir": str(DIR / "cni" / "ipam"),
            "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]], "routes": [{"dst": "0.0.0.0/0"}]}  # fmt: skip
    conf = {
        "cniVersion": "1.0.0",
        "name": "ddpctl",
        "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "ipam": ipam},
                    {"type": "loopback"}],
    }  # fmt: skip
    (net / "10-ddpctl.conflist").write_text(json.dumps(conf, indent=2))


# ------------------------------------------------------------------------------------------ containerd


def containerd_config() -> Path:
    d = DIR / "containerd"
    path = d / "config.toml"
    path.write_text(f"""version = 3
root = "{d / "root"}"
state = "{d / "state"}"
[grpc]
  address = "{SOCK}"
[plugins.'io.containerd.cri.v1.images']
  # the kubelet's image GC is off (thresholds 100%); images come from `cluster/up.py load`
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{PAUSE_IMAGE}'
[plugins.'io.containerd.cri.v1.runtime']
  # containerd itself runs with the score the sandbox gives it; pods may not lower theirs below it
  restrict_oom_score_adj = true
  netns_mounts_under = '{DIR / "netns"}'
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{CNI_BIN}']
    conf_dir = '{DIR / "cni" / "net.d"}'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = false
      BinaryName = '{RUNC}'
""")
    return path


def pause_archive(binary: Path, out: Path) -> None:
    """A docker-archive tar of a one-file image (FROM scratch) whose entrypoint is the pause
    program, for `ctr images import`: the sandbox image without a registry."""
    import hashlib
    import io
    import tarfile

    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        info = t.gettarinfo(str(binary), arcname="pause")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o755
        with open(binary, "rb") as f:
            t.addfile(info, f)
    data = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()  # fmt: skip
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [PAUSE_IMAGE], "Layers": ["layer.tar"]}]).encode()
    with tarfile.open(out, "w") as t:
        for name, blob in ((config_name, config), ("layer.tar", data), ("manifest.json", manifest)):
            ti = tarfile.TarInfo(name)
            ti.size = len(blob)
            t.addfile(ti, io.BytesIO(blob))


def containerd(bin_: Path) -> None:
    cfg = containerd_config()
    # the runc shim is found on PATH
    start("containerd", [str(bin_ / "containerd"), "--config", str(cfg)],
          env={"PATH": f"{bin_}:{os.environ.get('PATH', '')}"})  # fmt: skip
    wait_for("containerd", lambda: "Server" in ctr(bin_, "version", check=False), 30, "containerd")
    if PAUSE_IMAGE not in ctr(bin_, "images", "ls", "-q"):
        archive = DIR / "pause.tar"
        pause_archive(bin_ / "pause", archive)
        with open(archive, "rb") as f:
            ctr(bin_, "images", "import", "--label", "io.cri-containerd.pinned=pinned", "-", input_=f)


def load_image(ref: str) -> float:
    """`docker save REF | ctr images import`: the node's containerd gets an image of the local Docker
    engine (no registry here). Returns the seconds it took; a no-op when the same image is there."""
    bin_ = binaries()
    if not running("containerd"):
        fail("the real node is not running: start it with `make cluster`")
    inspect = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True,
                             text=True, check=False)  # fmt: skip
    if inspect.returncode:
        fail(f"image {ref} is not in the local Docker engine ({inspect.stderr.strip()})")
    image_id = inspect.stdout.strip()
    for line in ctr(bin_, "images", "ls").splitlines():
        name = line.split(" ", 1)[0]
        if (name == ref or name.endswith("/" + ref)) and image_id in line:
            return 0.0
    t0 = time.monotonic()
    save = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE)
    try:
        # the layers stay unpacked as snapshots; their tar blobs would only double the disk used
        label = f"ddpctl.io/docker-id={image_id}"
        ctr(bin_, "images", "import", "--local", "--discard-unpacked-layers", "--label", label, "-", input_=save.stdout)
    finally:
        if save.stdout:
            save.stdout.close()
        save.wait()
    if save.returncode:
        fail(f"docker save {ref} failed (exit {save.returncode})")
    return time.monotonic() - t0


# ------------------------------------------------------------------------------------------ CoreDNS


def coredns(bin_: Path, c: Cluster) -> None:
    corefile = DIR / "Corefile"
    # As kubeadm's Corefile: names and reverse lookups of Services and pods (c10d asks for the
    # peer's name); nothing is forwarded, since nothing outside can be reached here.
    corefile.write_text(f"""cluster.local:53 in-addr.arpa:53 {{
    bind {GATEWAY}
    errors
    kubernetes cluster.local in-addr.arpa {{
        kubeconfig {c.kubeconfig}
        pods insecure
    }}
}}
.:53 {{
    bind {GATEWAY}
    errors
}}
""")
    start("coredns", [str(bin_ / "coredns"), "-conf", str(corefile)], cwd=DIR)

    def answers() -> bool:
        with socket.create_connection((GATEWAY, 53), timeout=1):
            return True

    wait_for("CoreDNS on the bridge", answers, 30, "coredns")


# ------------------------------------------------------------------------------------------ kubelet


def kubelet_cert() -> tuple[Path, Path]:
    """The kubelet's serving certificate, signed by the cluster CA for the node's IP: the API server
    verifies it (--kubelet-certificate-authority) when it asks the kubelet for logs."""
    pki = DIR / "pki"
    key, crt = pki / "kubelet.key", pki / "kubelet.crt"
    if crt.exists():
        return crt, key
    pki.mkdir(parents=True, exist_ok=True)
    csr, ext = pki / "kubelet.csr", pki / "kubelet.ext"
    ext.write_text(f"subjectAltName=IP:{GATEWAY},DNS:{NAME}\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={NAME}", "-keyout", str(key), "-out", str(csr))
    ca = STATE / "pki"
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca / "ca.crt"), "-CAkey", str(ca / "ca.key"),
            "-CAcreateserial", "-days", "3650", "-extfile", str(ext), "-out", str(crt))  # fmt: skip
    return crt, key


def kubelet_config() -> Path:
    import yaml

    crt, key = kubelet_cert()
    resolv = DIR / "resolv.conf"  # pods with dnsPolicy Default; ClusterFirst pods get CoreDNS
    resolv.write_text(f"nameserver {GATEWAY}\n")
    cfg = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # this sandbox has cgroup v1 only
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "oomScoreAdj": 0,  # the sandbox may not lower scores
        "address": GATEWAY,
        "port": PORTS["kubelet"],
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": PORTS["kubelet-healthz"],
        "readOnlyPort": 0,
        "clusterDNS": [GATEWAY],
        "clusterDomain": "cluster.local",
        "tlsCertFile": str(crt),
        "tlsPrivateKeyFile": str(key),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(STATE / "pki" / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "failSwapOn": False,
        # a shared dev disk: evict only when it is really full, and never collect images we loaded
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "registerWithTaints": [{"key": LABEL, "value": "true", "effect": "NoSchedule"}],
        "containerRuntimeEndpoint": f"unix://{SOCK}",
        "resolvConf": str(resolv),
        "podLogsDir": str(DIR / "pod-logs"),
        "staticPodPath": "",
    }  # fmt: skip
    path = DIR / "kubelet.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def node_ready(c: Cluster) -> bool:
    ready = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
    return c.kubectl("get", "node", NAME, "-o", ready, check=False).strip() == "True"


def kubelet(c: Cluster) -> None:
    cfg = kubelet_config()
    start("kubelet", [
        c.exe("kubelet"), f"--config={cfg}", f"--kubeconfig={c.kubeconfig}", f"--root-dir={DIR / 'kubelet'}",
        f"--cert-dir={DIR / 'kubelet' / 'pki'}", f"--hostname-override={NAME}", f"--node-ip={GATEWAY}",
        f"--node-labels={LABEL}=true", "--v=1",
    ])  # fmt: skip
    wait_for(f"node {NAME} Ready", lambda: node_ready(c), 90, "kubelet")


# ------------------------------------------------------------------------------------------ up / down


def up(c: Cluster) -> None:
    """Start the real node (idempotent)."""
    lacking = missing()
    if lacking:
        msg = "the real node needs " + ", ".join(lacking)
        if os.environ.get("CI") == "true":
            fail(msg)
        log(f"note: {msg}; starting without it (its tests skip)")
        return
    bin_ = binaries()
    DIR.mkdir(parents=True, exist_ok=True)
    (DIR / "bin").write_text(str(bin_))
    for d in ("containerd", "netns", "pod-logs", "kubelet"):
        (DIR / d).mkdir(parents=True, exist_ok=True)
    network_up()
    make_cgroup_root()
    cni_config()
    c.timed("containerd", lambda: containerd(bin_))
    c.timed("coredns", lambda: coredns(bin_, c))
    c.timed("kubelet", lambda: kubelet(c))


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def _cgroup_roots() -> list[Path]:
    """Our cgroup root (CGROUP_ROOT) in each hierarchy: every v1 controller's, or the v2 tree."""
    if (CGROUPS / "cgroup.controllers").exists():  # cgroup v2: one tree
        return [CGROUPS / CGROUP_ROOT]
    return [d / CGROUP_ROOT for d in sorted(CGROUPS.iterdir()) if (d / "cgroup.procs").exists()]


def make_cgroup_root() -> None:
    """The kubelet's cgroupRoot must exist in every hierarchy before it starts. Our own root keeps
    the node's pods apart from any other kubelet's `kubepods` on this machine, so `down` kills
    only ours. A v1 cpuset starts with no CPUs and memory nodes: it gets its parent's."""
    for root in _cgroup_roots():
        root.mkdir(exist_ok=True)
        if root.parent.name == "cpuset":
            for f in ("cpuset.cpus", "cpuset.mems"):
                if not (root / f).read_text().strip():
                    (root / f).write_text((root.parent / f).read_text())


def _our_cgroups() -> list[Path]:
    """Every cgroup folder under our root, in every hierarchy, deepest first (the root last)."""
    dirs: list[Path] = []
    for top in _cgroup_roots():
        if top.is_dir():
            dirs += [Path(root) for root, _, _ in os.walk(top)]
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def _kill_pods() -> None:
    """SIGKILL what still runs in the pods' cgroups, then remove the cgroups."""
    for d in _our_cgroups():
        try:
            for pid in (d / "cgroup.procs").read_text().split():
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 10
    for d in _our_cgroups():
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


def _kill_shims() -> None:
    """The runc shims outlive containerd by design; ours name our socket in their argv."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"containerd-shim-runc-v2") and str(SOCK).encode() in argv:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass


def down() -> None:
    """Stop the node's processes and containers, unmount, remove the bridge, the rule, the cgroups."""
    stop("kubelet")
    if running("containerd") and SOCK.exists():
        bin_ = Path((DIR / "bin").read_text()) if (DIR / "bin").exists() else None
        if bin_:
            for task in ctr(bin_, "tasks", "ls", "-q", check=False).split():
                ctr(bin_, "tasks", "kill", "-s", "SIGKILL", task, check=False)
    _kill_pods()
    for name in ("coredns", "containerd"):
        stop(name)
    _kill_shims()
    for point in _mounts_under(DIR):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    if os.geteuid() == 0:
        network_down()
