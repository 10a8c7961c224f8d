"""The real node's container runtime: containerd with its own socket and root, Debian's runc, the
pause image written here, and images copied from the local Docker engine (no registry here)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
from pathlib import Path
from typing import IO

from testcluster import binaries
from testcluster.node.layout import CNI_BIN, DIR, NAMESPACE, RUNC, SOCK
from testcluster.procs import fail, running, start, wait_for
from testcluster.settings import PAUSE_IMAGE


def ctr(bin_: Path, *args: str, input_: IO[bytes] | None = None, check: bool = True) -> str:
    """containerd's own client on our socket, in the kubelet's namespace."""
    r = subprocess.run(
        [str(bin_ / "ctr"), "--address", str(SOCK), "--namespace", NAMESPACE, *args],
        stdin=input_, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if check and r.returncode:
        fail(f"ctr {' '.join(args[:2])}: {r.stderr.strip()[-2000:]}")
    return r.stdout


def containerd_config(node: Path) -> str:
    """config.toml (version 3): socket, root and state under `node`/containerd, the pods' network
    namespaces and CNI configuration under `node` too, Debian's runc and CNI plugins."""
    d = node / "containerd"
    return f"""version = 3
root = "{d / "root"}"
state = "{d / "state"}"
[grpc]
  address = "{d / "containerd.sock"}"
[plugins.'io.containerd.cri.v1.images']
  # the kubelet's image GC is off (thresholds 100%); images come from `python -m testcluster load`
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{PAUSE_IMAGE}'
[plugins.'io.containerd.cri.v1.runtime']
  # containerd itself runs with the score the sandbox gives it; pods may not lower theirs below it
  restrict_oom_score_adj = true
  # the pods' network namespaces under the state folder, not the host's /run/netns: `ip netns add`
  # (tests/support/slow_link.py) makes that a bind mount of itself, which hides the mounts made
  # before it, so their pods never finished terminating (containerd's key; an unknown one is ignored)
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{CNI_BIN}']
    conf_dir = '{node / "cni" / "net.d"}'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = false
      BinaryName = '{RUNC}'
"""


def pause_archive(binary: Path, out: Path) -> None:
    """A docker-archive tar of a one-file image (FROM scratch) whose entrypoint is the pause
    program, for `ctr images import`: the sandbox image without a registry."""
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
    """Start containerd and import the pause image once."""
    cfg = DIR / "containerd" / "config.toml"
    cfg.write_text(containerd_config(DIR))
    # the runc shim is found on PATH
    start("containerd", [str(bin_ / "containerd"), "--config", str(cfg)],
          env={"PATH": f"{bin_}:{os.environ.get('PATH', '')}"})  # fmt: skip
    wait_for("containerd", lambda: "Server" in ctr(bin_, "version", check=False), 30, "containerd")
    if PAUSE_IMAGE not in ctr(bin_, "images", "ls", "-q"):
        archive = DIR / "pause.tar"
        pause_archive(bin_ / "pause", archive)
        with open(archive, "rb") as f:
            ctr(bin_, "images", "import", "--label", "io.cri-containerd.pinned=pinned", "-", input_=f)


def has_image(listing: str, ref: str, image_id: str) -> bool:
    """`ctr images ls` lists `ref` (or docker.io/library/`ref`, as an import names it) as the
    Docker image `image_id` (our label carries it)."""
    lines = {line.split(" ", 1)[0]: line for line in listing.splitlines()}
    return any(image_id in lines[name] for name in names_of(list(lines), ref))


def load_images(refs: list[str]) -> float:
    """`docker save REF... | ctr images import`: the node's containerd gets images of the local
    Docker engine (no registry here). Images that share layers are saved together, so a layer is
    streamed once however many of them hold it. Returns the seconds it took; a no-op for the
    images already there (the same Docker image ID, which our label records)."""
    bin_ = binaries.real_node()
    if not running("containerd"):
        fail("the real node is not running: start it with `make cluster`")
    ids: dict[str, str] = {}
    for ref in dict.fromkeys(refs):
        inspect = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True,
                                 text=True, check=False)  # fmt: skip
        if inspect.returncode:
            fail(f"image {ref} is not in the local Docker engine ({inspect.stderr.strip()})")
        ids[ref] = inspect.stdout.strip()
    listing = ctr(bin_, "images", "ls")
    missing = [ref for ref, image_id in ids.items() if not has_image(listing, ref, image_id)]
    if not missing:
        return 0.0
    t0 = time.monotonic()
    save = subprocess.Popen(["docker", "save", *missing], stdout=subprocess.PIPE)
    try:
        # the layers stay unpacked as snapshots; their tar blobs would only double the disk used
        ctr(bin_, "images", "import", "--local", "--discard-unpacked-layers", "-", input_=save.stdout)
    finally:
        if save.stdout:
            save.stdout.close()
        save.wait()
    if save.returncode:
        fail(f"docker save {' '.join(missing)} failed (exit {save.returncode})")
    names = ctr(bin_, "images", "ls", "-q").split()
    for ref in missing:  # each image its own ID: an import's --label would give all of them one
        for name in names_of(names, ref):
            ctr(bin_, "images", "label", name, f"ddpctl.io/docker-id={ids[ref]}")
    return time.monotonic() - t0


def names_of(names: list[str], ref: str) -> list[str]:
    """The names containerd lists for `ref`: itself, or docker.io/library/`ref` as an import names it."""
    return [name for name in names if name == ref or name.endswith("/" + ref)]
