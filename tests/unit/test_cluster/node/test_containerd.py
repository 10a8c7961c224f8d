"""testcluster.node.containerd, the parts that need no containerd: its configuration file, the pause
image's archive, and whether a Docker image is on the node already."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

from testcluster.node.containerd import containerd_config, has_image, pause_archive
from testcluster.node.layout import CNI_BIN, DIR, RUNC, SOCK
from testcluster.settings import PAUSE_IMAGE


def test_the_config_keeps_containerd_in_the_nodes_folder_with_debians_runc() -> None:
    cfg = tomllib.loads(containerd_config(DIR))
    assert cfg["version"] == 3
    assert cfg["grpc"]["address"] == str(SOCK)  # where ctr and the kubelet look
    assert Path(cfg["root"]).parent == Path(cfg["state"]).parent == SOCK.parent
    images = cfg["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == PAUSE_IMAGE
    runtime = cfg["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["cni"] == {"bin_dirs": [str(CNI_BIN)], "conf_dir": str(DIR / "cni" / "net.d")}
    assert runtime["netns_mounts_under_state_dir"] is True  # not the host's /run/netns (the real-node tests look)
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["options"] == {"SystemdCgroup": False, "BinaryName": RUNC}


def read(t: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = t.extractfile(member)
    assert f is not None, member.name
    return f.read()


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as t:
        return {m.name: read(t, m) for m in t.getmembers()}


def test_the_pause_archive_is_a_one_layer_image_whose_digests_match(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF a static program")
    pause_archive(binary, tmp_path / "pause.tar")
    files = members(tmp_path / "pause.tar")
    (manifest,) = json.loads(files["manifest.json"])
    assert manifest["RepoTags"] == [PAUSE_IMAGE]
    assert manifest["Layers"] == ["layer.tar"]
    config_blob = files[manifest["Config"]]
    assert manifest["Config"] == hashlib.sha256(config_blob).hexdigest() + ".json"
    config = json.loads(config_blob)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(files["layer.tar"]).hexdigest()]
    assert config["config"] == {"Entrypoint": ["/pause"], "User": "65535:65535"}  # non-root, as restricted wants
    with tarfile.open(fileobj=io.BytesIO(files["layer.tar"])) as layer:
        (entry,) = layer.getmembers()
        assert (entry.name, entry.mode, entry.uid, entry.mtime) == ("pause", 0o755, 0, 0)
        assert read(layer, entry) == binary.read_bytes()


def test_the_pause_archive_is_the_same_from_the_same_program(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"program")
    pause_archive(binary, tmp_path / "a.tar")
    binary.touch()  # a newer mtime changes nothing
    pause_archive(binary, tmp_path / "b.tar")
    assert members(tmp_path / "a.tar") == members(tmp_path / "b.tar")


LISTING = """\
REF                                 TYPE                                       DIGEST    SIZE     PLATFORMS   LABELS
docker.io/library/trainer:1         application/vnd.docker.distribution...     sha256:d1 5.8 GiB  linux/amd64 ddpctl.io/docker-id=sha256:aaa
localhost/ddpctl-pause:1            application/vnd.docker.distribution...     sha256:d2 1.0 MiB  linux/amd64 io.cri-containerd.pinned=pinned
"""  # noqa: E501


@pytest.mark.parametrize(
    ("ref", "image_id", "present"),
    [
        ("trainer:1", "sha256:aaa", True),  # docker.io/library/ as the import names it
        ("docker.io/library/trainer:1", "sha256:aaa", True),
        ("trainer:1", "sha256:bbb", False),  # the tag now names another image: import it again
        ("iner:1", "sha256:aaa", False),  # a suffix of a name is not the name
        ("trainer:2", "sha256:aaa", False),
    ],
)
def test_an_image_is_there_when_its_name_carries_the_same_docker_id(ref: str, image_id: str, present: bool) -> None:
    assert has_image(LISTING, ref, image_id) is present
