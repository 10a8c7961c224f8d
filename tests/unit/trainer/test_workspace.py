"""The workspace in the pod (ddpctl_trainer.workspace): fetched (a mounted file, or an object store
URL from a real S3 server), checked, unpacked safely, worked in; a missing or corrupt archive ends
the launcher at once with exit 2 and one line, on stderr and as the termination message."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ddpctl.workspace.inline import unpacker_files
from ddpctl.workspace.pack import pack_workspace
from ddpctl.workspace.upload import upload
from ddpctl_trainer import protocol
from ddpctl_trainer import workspace as ws
from ddpctl_trainer.workspace import WorkspaceError
from tests.support import REPO
from tests.support.s3 import S3Server, prefix_for
from tests.unit.workspace.trees import Exec, Link, make_tree

TREE = {
    "train.py": "import helper\nprint('cwd', __import__('os').getcwd(), helper.VALUE)\n",
    "helper.py": "VALUE = 42\n",
    "scripts/run.sh": Exec("#!/bin/sh\necho run\n"),
    "pkg/sub/data.txt": "d" * 3000,
}


def _pack(tmp_path: Path, tree: dict[str, object] | None = None) -> tuple[Path, str]:
    out = io.BytesIO()
    packed = pack_workspace(make_tree(tmp_path / "src", tree or TREE), out)  # type: ignore[arg-type]
    archive = tmp_path / "mount" / protocol.WORKSPACE_ARCHIVE_KEY
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(out.getvalue())
    return archive, packed.sha256


def _env(archive: Path | str, sha: str, target: Path) -> dict[str, str]:
    return {
        protocol.WORKSPACE_ARCHIVE_ENV: str(archive),
        protocol.WORKSPACE_SHA256_ENV: sha,
        protocol.WORKSPACE_DIR_ENV: str(target),
        "PYTHONPATH": "/opt/ddpctl",
    }


def _evil(tmp_path: Path, members: list[tarfile.TarInfo], data: bytes = b"pwned") -> tuple[Path, str]:
    """An archive of hand-made members (which our packer never writes), with its right sha256."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info in members:
            if info.isreg():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    path = tmp_path / "evil.tar.gz"
    path.write_bytes(gzip.compress(raw.getvalue()))
    return path, hashlib.sha256(raw.getvalue()).hexdigest()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


# ------------------------------------------------------------------------------------ prepare


def test_a_good_archive_is_unpacked_and_worked_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    archive, sha = _pack(tmp_path)
    target = tmp_path / "workspace"
    env = _env(archive, sha, target)
    assert ws.prepare(env) == target
    assert Path.cwd() == target
    assert env["PYTHONPATH"] == f"{target}{os.pathsep}/opt/ddpctl"
    assert (target / "helper.py").read_text() == "VALUE = 42\n"
    assert (target / "pkg/sub/data.txt").read_text() == "d" * 3000
    assert (target / "scripts/run.sh").stat().st_mode & 0o777 == 0o755
    assert (target / "train.py").stat().st_mode & 0o777 == 0o644
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == [
        "helper.py",
        "pkg",
        "pkg/sub",
        "pkg/sub/data.txt",
        "scripts",
        "scripts/run.sh",
        "train.py",
    ]


def test_without_an_archive_nothing_happens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = {"PYTHONPATH": "x"}
    assert ws.prepare(env) is None
    assert env == {"PYTHONPATH": "x"} and Path.cwd() == tmp_path


def test_unpacking_again_into_a_used_folder_replaces_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A container restarted in the same pod finds its emptyDir as it left it: the code is put
    back, what the run wrote stays, and a link left there is replaced, not followed."""
    monkeypatch.chdir(tmp_path)
    archive, sha = _pack(tmp_path)
    target = tmp_path / "workspace"
    ws.prepare(_env(archive, sha, target))
    (target / "helper.py").write_text("edited")
    (target / "checkpoints").mkdir()
    (target / "checkpoints" / "ckpt.pt").write_text("kept")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(target / "pkg")
    (target / "pkg").symlink_to(outside)
    (target / "train.py").unlink()
    (target / "train.py").symlink_to(outside / "victim.py")
    ws.prepare(_env(archive, sha, target))
    assert (target / "helper.py").read_text() == "VALUE = 42\n"
    assert (target / "checkpoints" / "ckpt.pt").read_text() == "kept"
    assert not (target / "pkg").is_symlink() and (target / "pkg/sub/data.txt").is_file()
    assert not (target / "train.py").is_symlink()
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("sha", "is corrupt: its contents have sha256 "),
        ("truncated", "is corrupt (truncated: the gzip stream ends early)"),
        ("garbage", "is corrupt (not a gzip stream"),
        ("missing", "is missing (is the workspace's Secret mounted there?)"),
    ],
)
def test_a_bad_archive_writes_nothing_and_exits_2(
    damage: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    archive, sha = _pack(tmp_path)
    data = archive.read_bytes()
    if damage == "sha":
        sha = hashlib.sha256(b"other").hexdigest()
    elif damage == "truncated":
        archive.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        archive.write_bytes(b"PK\x03\x04 not a gzip stream")
    else:
        archive.unlink()
    target = tmp_path / "workspace"
    with pytest.raises(WorkspaceError) as raised:
        ws.prepare(_env(archive, sha, target))
    assert raised.value.exit_code == protocol.EXIT_USAGE
    assert says in str(raised.value)
    assert str(archive) in str(raised.value)
    assert not target.exists() or list(target.iterdir()) == []
    assert Path.cwd() == tmp_path


@pytest.mark.parametrize(
    ("members", "says"),
    [
        ([_member("../escape.py")], "unsafe path '../escape.py'"),
        ([_member("a/../../escape.py")], "unsafe path"),
        ([_member("/etc/escape.py")], "unsafe path '/etc/escape.py'"),
        ([_member("link", tarfile.SYMTYPE, "/etc/passwd")], "'link', which is not a file or folder"),
        ([_member("a.py"), _member("hard", tarfile.LNKTYPE, "a.py")], "'hard', which is not a file or folder"),
        ([_member("dev", tarfile.CHRTYPE)], "'dev', which is not a file or folder"),
        ([_member("fifo", tarfile.FIFOTYPE)], "'fifo', which is not a file or folder"),
    ],
    ids=["dotdot", "dotdot-inside", "absolute", "symlink", "hardlink", "device", "fifo"],
)
def test_unsafe_members_are_refused(
    members: list[tarfile.TarInfo], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    archive, sha = _evil(tmp_path, members)
    target = tmp_path / "deep" / "workspace"
    with pytest.raises(WorkspaceError) as raised:
        ws.prepare(_env(archive, sha, target))
    assert says in str(raised.value)
    assert raised.value.exit_code == protocol.EXIT_USAGE
    assert not (tmp_path / "deep" / "escape.py").exists() and not (tmp_path / "escape.py").exists()


def test_setuid_and_odd_modes_do_not_travel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    archive, sha = _evil(tmp_path, [_member("s", mode=0o4777), _member("w", mode=0o666)])
    target = tmp_path / "workspace"
    ws.prepare(_env(archive, sha, target))
    assert (target / "s").stat().st_mode & 0o7777 == 0o755
    assert (target / "w").stat().st_mode & 0o7777 == 0o644


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (protocol.WORKSPACE_SHA256_ENV, "", "DDP_WORKSPACE_SHA256 must be the archive's sha256"),
        (protocol.WORKSPACE_DIR_ENV, "relative/dir", "must be an absolute path"),
    ],
)
def test_bad_settings(key: str, value: str, says: str, tmp_path: Path) -> None:
    archive, sha = _pack(tmp_path)
    env = _env(archive, sha, tmp_path / "workspace")
    env[key] = value
    with pytest.raises(WorkspaceError, match=says):
        ws.prepare(env)


def test_report_says_it_once_on_stderr_and_in_the_termination_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")
    code = ws.report(WorkspaceError("archive /x is corrupt\n(twice)"), str(log))
    assert code == protocol.EXIT_USAGE
    line = "ddpctl-trainer: error: workspace: archive /x is corrupt (twice)"
    assert capsys.readouterr().err == line + "\n"
    assert log.read_text() == line + "\n"


# ------------------------------------------------------------------------------------ processes


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_", "PET_", "AWS_"))}
    env["PYTHONPATH"] = str(REPO / "trainer")  # ddpctl_trainer, as the image's /opt/ddpctl holds it
    env.update(extra)
    return env


def test_the_launcher_exits_2_with_one_line_before_torchrun(tmp_path: Path) -> None:
    archive, sha = _pack(tmp_path)
    archive.write_bytes(archive.read_bytes()[:50])
    env = _clean_env(**_env(archive, sha, tmp_path / "workspace"))
    done = subprocess.run(
        [sys.executable, "-m", protocol.LAUNCHER_MODULE, "--standalone", "--nproc-per-node", "1", "train.py"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == protocol.EXIT_USAGE
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"ddpctl-trainer: error: workspace: archive {archive} is corrupt (truncated: the gzip stream ends early)"
    ]


def test_the_lone_unpacker_needs_python3_alone_then_becomes_the_command(tmp_path: Path) -> None:
    """An image with python3 and nothing of ddpctl: the two files shipped beside the archive, run
    isolated from every installed package (-I -S), unpack and exec the command, which runs in the
    workspace with it on PYTHONPATH."""
    archive, sha = _pack(tmp_path)
    for name, data in unpacker_files().items():
        (archive.parent / name).write_bytes(data)
    target = tmp_path / "workspace"
    env = _clean_env(**_env(archive, sha, target))
    env.pop("PYTHONPATH")
    command = [sys.executable, "-I", "-S", str(archive.parent / "workspace.py")]
    child = [sys.executable, "-c", "import os, sys, helper; print(os.getcwd(), helper.VALUE, sys.argv[1:])", "arg"]
    done = subprocess.run([*command, *child], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{target} 42 ['arg']\n"
    # and its exit code is the command's
    failing = [sys.executable, "-c", "raise SystemExit(7)"]
    assert subprocess.run([*command, *failing], env=env, timeout=60, cwd=tmp_path).returncode == 7
    # the straggler detector a user's script may import, laid out as the package it is installed as
    # (after the workspace on PYTHONPATH), importable without torch
    probe = "import sys; from ddpctl_trainer import stragglers; print(stragglers.__file__, 'torch' in sys.modules)"
    helper = [sys.executable, "-S", "-c", probe]  # -S: nothing installed, as in that image
    done = subprocess.run([*command, *helper], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{target / protocol.WORKSPACE_HELPERS / 'ddpctl_trainer' / 'stragglers.py'} False\n"


@pytest.mark.slow
def test_the_launcher_runs_torchrun_in_the_workspace(tmp_path: Path) -> None:
    """The real launcher and torchrun: the worker starts in the unpacked folder and imports the
    workspace's own module."""
    archive, sha = _pack(tmp_path)
    target = tmp_path / "workspace"
    env = _clean_env(**_env(archive, sha, target), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-m", protocol.LAUNCHER_MODULE, "--standalone", "--nproc-per-node", "1", "train.py"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert f"cwd {target} 42" in done.stdout


# ------------------------------------------------------------------------------------ object store


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return s3


def test_from_an_object_store(
    s3_env: S3Server, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uploaded by the CLI, fetched by the pod: unpacked, the download removed after."""
    monkeypatch.chdir(tmp_path)
    archive, sha = _pack(tmp_path)
    url = upload(archive, sha, s3_env.url(prefix_for(request))).url
    target = tmp_path / "workspace"
    assert ws.prepare(_env(url, sha, target)) == target
    assert (target / "helper.py").read_text() == "VALUE = 42\n"
    assert not any(p.name.startswith(".ddpctl") for p in target.iterdir())


def test_missing_from_the_object_store_exits_2(
    s3_env: S3Server, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = s3_env.url(prefix_for(request)) + "/" + "0" * 64 + ".tar.gz"
    with pytest.raises(WorkspaceError) as raised:
        ws.prepare(_env(url, "0" * 64, tmp_path / "workspace"))
    assert raised.value.exit_code == protocol.EXIT_USAGE
    assert str(raised.value) == f"archive {url} is missing from the object store"


def test_refused_credentials_exit_1_without_the_secret(
    s3_env: S3Server, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the archive's fault: exit 1, which the failure rules retry."""
    archive, sha = _pack(tmp_path)
    url = upload(archive, sha, s3_env.url(prefix_for(request))).url
    wrong = "wr0ng-secret-value-123456"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    with pytest.raises(WorkspaceError) as raised:
        ws.prepare(_env(url, sha, tmp_path / "workspace"))
    assert raised.value.exit_code == protocol.EXIT_FAILURE
    assert str(raised.value).startswith(f"fetching {url} failed (")
    assert wrong not in str(raised.value) and "\n" not in str(raised.value)


def test_a_link_in_the_archive_source_never_reaches_the_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: a link inside the workspace arrives as a plain file."""
    monkeypatch.chdir(tmp_path)
    archive, sha = _pack(tmp_path, {"real.py": "x = 1\n", "alias.py": Link("real.py")})
    target = tmp_path / "workspace"
    ws.prepare(_env(archive, sha, target))
    assert not (target / "alias.py").is_symlink() and (target / "alias.py").read_text() == "x = 1\n"
