"""The packed workspace: deterministic (the same folder, the same bytes, whatever its times, owners,
umask or creation order), exactly the tar Python's tarfile writes for the same members, named by
the sha256 of the uncompressed tar, and said in one line."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from ddpctl.errors import SpecError
from ddpctl.workspace.pack import Pack, _member, pack, pack_workspace, size_text
from ddpctl.workspace.select import select
from tests.unit.workspace.trees import Exec, Link, Tree, make_tree

TREE: Tree = {
    "train.py": "import helpers\n",
    "helpers/__init__.py": "",
    "helpers/data.py": "X = 1\n" * 500,
    "scripts/run.sh": Exec("#!/bin/sh\necho hi\n"),
    "deep/" + "/".join(f"level{i}" for i in range(12)) + "/file_with_a_long_name.py": "x\n",
    "ünïcode/naïve.py": "y = 2\n",
    "data.bin": bytes(range(256)) * 40,
}


def _packed(root: Path, **kwargs: list[str]) -> tuple[Pack, bytes]:
    out = io.BytesIO()
    result = pack_workspace(root, out, **kwargs)  # type: ignore[arg-type]
    return result, out.getvalue()


def test_the_sha256_names_the_uncompressed_tar_and_sizes_are_right(tmp_path: Path) -> None:
    result, archive = _packed(make_tree(tmp_path / "ws", TREE))
    tar = gzip.decompress(archive)
    assert result.sha256 == hashlib.sha256(tar).hexdigest()
    assert result.size == len(tar) and result.size % (20 * 512) == 0
    assert result.compressed_size == len(archive)
    assert result.files == len(TREE)


def test_the_gzip_header_has_no_time_and_no_name(tmp_path: Path) -> None:
    _, archive = _packed(make_tree(tmp_path / "ws", TREE))
    assert archive[:4] == b"\x1f\x8b\x08\x00"  # gzip, deflate, no flags (no FNAME)
    assert archive[4:8] == b"\0\0\0\0"  # MTIME 0


def test_members_modes_owners_and_times(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "ws", TREE)
    os.chmod(root / "train.py", 0o600)  # the group and others' bits do not travel: 0644
    os.chmod(root / "helpers" / "data.py", 0o700)  # the owner's exec bit does: 0755
    _, archive = _packed(root)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for m in members.values():
            assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", ""), m.name
            assert m.isdir() or m.isfile(), m.name
        assert members["train.py"].mode == 0o644
        assert members["helpers/data.py"].mode == 0o755
        assert members["scripts/run.sh"].mode == 0o755
        assert members["helpers"].isdir() and members["helpers"].mode == 0o755
        for path, value in TREE.items():
            f = tar.extractfile(members[path])
            assert f is not None
            expected = value.encode() if isinstance(value, str) else value
            expected = value.text.encode() if isinstance(value, Exec) else expected
            assert f.read() == expected, path
    assert list(members)[:3] == ["data.bin", "deep", "deep/level0"]  # folder by folder, parents first


def test_it_is_the_tar_pythons_tarfile_writes(tmp_path: Path) -> None:
    """Byte for byte, the pax-format tar Python's tarfile writes for the same members in the same
    order (our writer is faster, not different)."""
    root = make_tree(tmp_path / "ws", TREE)
    selection = select(root)
    result = pack(selection, io.BytesIO())
    expected = io.BytesIO()
    with tarfile.open(fileobj=expected, mode="w", format=tarfile.PAX_FORMAT) as tar:
        written: set[str] = set()
        for file in selection.files:
            parts = file.path.split("/")
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if folder not in written:
                    written.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode, info.uname, info.gname = tarfile.DIRTYPE, 0o755, "", ""
                    tar.addfile(info)
            info = tar.gettarinfo(file.source, file.path)
            info.mtime = info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if info.mode & 0o100 else 0o644
            with open(file.source, "rb") as f:
                tar.addfile(info, f)
    assert result.sha256 == hashlib.sha256(expected.getvalue()).hexdigest()


@pytest.mark.parametrize("length", [*range(88, 104), 150, 300])
@pytest.mark.parametrize("ascii_only", [True, False])
def test_headers_equal_tarfiles_at_every_name_length(length: int, ascii_only: bool) -> None:
    """Names up to and past the 100-byte field, and pax records whose length crosses 99/100."""
    stem = "a" if ascii_only else "é"
    name = (stem * length)[:length]
    for mode, size, directory in ((0o644, 3, False), (0o755, 0, True), (0o644, 8**11, False)):
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = size, mode, 0, 0, 0, "", ""
        if directory:
            info.type = tarfile.DIRTYPE
        assert _member(name, mode, size, directory) == info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _permuted(tree: Tree) -> list[str]:
    return list(reversed(list(tree)))


def test_the_same_folder_packs_to_the_same_bytes_whatever_its_history(tmp_path: Path) -> None:
    """Other modification times, owners, group and other permission bits, umask and creation order:
    the same tar, the same sha256."""
    first, first_bytes = _packed(make_tree(tmp_path / "one", TREE))
    old = os.umask(0o077)
    try:
        other = make_tree(tmp_path / "two", TREE, order=_permuted(TREE))
    finally:
        os.umask(old)
    for i, path in enumerate(sorted(p for p in other.rglob("*") if p.is_file())):
        os.utime(path, (1_000_000 + i, 2_000_000_000 - i))
        if os.geteuid() == 0:
            os.chown(path, 1000 + i, 2000 + i)
        os.chmod(path, path.stat().st_mode | 0o066 if i % 2 else path.stat().st_mode & ~0o077)
    second, second_bytes = _packed(other)
    assert second.sha256 == first.sha256
    assert gzip.decompress(second_bytes) == gzip.decompress(first_bytes)


def test_content_and_the_exec_bit_change_the_hash(tmp_path: Path) -> None:
    base, _ = _packed(make_tree(tmp_path / "a", {"x.py": "1"}))
    changed, _ = _packed(make_tree(tmp_path / "b", {"x.py": "2"}))
    executable, _ = _packed(make_tree(tmp_path / "c", {"x.py": Exec("1")}))
    renamed, _ = _packed(make_tree(tmp_path / "d", {"y.py": "1"}))
    assert len({base.sha256, changed.sha256, executable.sha256, renamed.sha256}) == 4


def test_a_link_packs_as_the_file_it_points_to(tmp_path: Path) -> None:
    via_link, _ = _packed(make_tree(tmp_path / "a", {"real.py": "x", "alias.py": Link("real.py")}))
    copied, _ = _packed(make_tree(tmp_path / "b", {"real.py": "x", "alias.py": "x"}))
    assert via_link.sha256 == copied.sha256


def test_a_large_file_streams_through(tmp_path: Path) -> None:
    """Bigger than a chunk: read in pieces, the size in the header, the bytes all there."""
    blob = os.urandom(3 * (1 << 20) + 123)
    result, archive = _packed(make_tree(tmp_path / "ws", {"blob.bin": blob, "a.py": "x"}))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        f = tar.extractfile("blob.bin")
        assert f is not None and f.read() == blob
    assert result.files == 2


def test_a_file_gone_before_it_is_packed_is_a_one_line_error(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "ws", {"a.py": "x", "b.py": "y"})
    selection = select(root)
    (root / "b.py").unlink()
    with pytest.raises(SpecError) as raised:
        pack(selection, io.BytesIO())
    assert str(raised.value) == (
        "workspace: b.py cannot be read (No such file or directory); fix it, or leave it out with workspace.exclude"
    )


def test_the_summary_line(tmp_path: Path) -> None:
    tree: Tree = {
        ".gitignore": ".venv/\n*.log\n",
        ".venv/lib/x": "x",
        "a.log": "x",
        ".env": "K=v",
        ".ssh/id_rsa": "k",
        "train.py": "x" * 2000,
    }
    result, archive = _packed(make_tree(tmp_path / "ws", tree))
    line = result.summary()
    assert "\n" not in line
    assert line == (
        f"workspace: 2 files, 10.0 KiB ({size_text(len(archive))} compressed), sha256 {result.sha256[:12]}...; "
        "left out: .env, .ssh/ (likely secrets: name them in workspace.include to ship them); ignored: .venv/, a.log"
    )


def test_the_summary_names_five_and_counts_the_rest(tmp_path: Path) -> None:
    tree: Tree = {f"k{i}.pem": "x" for i in range(8)}
    tree["a.py"] = "x"
    result, _ = _packed(make_tree(tmp_path / "ws", tree))
    assert "left out: k0.pem, k1.pem, k2.pem, k3.pem, k4.pem and 3 more (likely secrets" in result.summary()
    assert result.summary().startswith("workspace: 1 file, ")


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (53555, "52.3 KiB"), (3 << 20, "3.0 MiB")]
)
def test_size_text(n: int, text: str) -> None:
    assert size_text(n) == text


def test_an_empty_workspace_is_a_valid_empty_tar(tmp_path: Path) -> None:
    result, archive = _packed(make_tree(tmp_path / "ws", {}))
    assert result.files == 0
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert tar.getmembers() == []


# ------------------------------------------------------------------ a folder's version, not packed


def test_the_version_of_a_folder_is_the_sha256_it_packs_to_without_gzip(tmp_path: Path, monkeypatch) -> None:
    """`version_of` names what `pack_workspace` names (a project image's tag is compared with it)
    and compresses nothing: gzip is not even reachable."""
    from ddpctl.workspace.pack import version_of

    root = make_tree(tmp_path / "ws", {**TREE, "big.bin": os.urandom((1 << 20) + 7), ".env": "K=v"})
    packed, _ = _packed(root)

    def no_gzip(*args: object, **kwargs: object) -> None:
        raise AssertionError("version_of compressed something")

    monkeypatch.setattr(gzip, "GzipFile", no_gzip)
    assert version_of(root) == packed.sha256
    (root / "train.py").write_text("import helpers  # edited\n")
    assert version_of(root) != packed.sha256


def test_the_version_leaves_out_links_that_leave_the_folder_or_point_nowhere(tmp_path: Path) -> None:
    """What `select` refuses for a path that would ship (a link out of the folder, to nothing, or
    back up: a loop) is left out of the version, which never fails for it."""
    from ddpctl.workspace.pack import version_of

    outside = tmp_path / "outside.txt"
    outside.write_text("not the project's\n")
    plain = make_tree(tmp_path / "plain", {"train.py": "x", "pkg/a.py": "y"})
    linked = make_tree(
        tmp_path / "linked",
        {
            "train.py": "x",
            "pkg/a.py": "y",
            "out.txt": Link(str(outside)),
            "gone.txt": Link("missing.txt"),
            "pkg/up": Link(".."),
        },
    )
    with pytest.raises(SpecError):
        select(linked)
    assert version_of(linked) == version_of(plain) != ""
    assert version_of(tmp_path / "no-such-folder") == ""
