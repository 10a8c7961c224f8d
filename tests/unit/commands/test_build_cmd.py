"""`ddpctl build` reads the spec too: --config FILE names the spec file (-f is the Dockerfile, as
in docker), whose image's repository is the default --repo."""

from __future__ import annotations

from pathlib import Path

from tests.support import REPO
from tests.support.api import one_error


def test_build_reads_the_spec_file_given_with_config(cli, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("image: registry.example.com/team/trainer:1.0\n")
    r = cli("build", "--print-tag", "--builder", "docker", "--context", str(REPO), "--config", str(spec))
    assert r.code == 0, r.err
    assert r.out.strip().startswith("registry.example.com/team/trainer:") and not r.out.strip().endswith(":1.0")
    spec.write_text("nodes: 0\n")
    one_error(
        cli("build", "--print-tag", "--builder", "docker", "--context", str(REPO), "--config", str(spec)), 2, "nodes"
    )


def _fake_docker(tmp_path: Path, monkeypatch) -> None:
    """A `docker` on PATH that knows no image: a build is only planned, and submit's look into a
    local image finds none (the image is said not checked)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_the_tag_build_gives_a_folder_with_its_own_dockerfile_is_one_submit_takes(cli, tmp_path, monkeypatch) -> None:
    """Not the trainer's repository (submit would refuse it as the trainer image, and --latest
    would overwrite ddpctl-trainer:latest): the folder's name, as for a folder without a Dockerfile."""
    from ddpctl.image.project import default_repo

    _fake_docker(tmp_path, monkeypatch)
    (tmp_path / "Dockerfile").write_text("FROM pytorch/pytorch:2.5.1\nWORKDIR /app\nCOPY . .\n")
    (tmp_path / "train.py").write_text("print('step 1')\n")
    built = cli("build", "--print-tag")
    assert built.code == 0, built.err
    tag = built.out.strip()
    assert tag.startswith(f"{default_repo(tmp_path)}:") and "ddpctl-trainer" not in tag, tag
    r = cli("submit", "--dry-run=client", "--image", tag, "--script", "train.py", "--no-lint", "--target", "job")
    assert r.code == 0, r.err
    assert "created (dry run)" in r.out and f"the image {tag} is not in the local docker engine" in r.err


def test_ddpctls_own_source_still_builds_the_trainers_repository(cli, tmp_path, monkeypatch) -> None:
    _fake_docker(tmp_path, monkeypatch)
    r = cli("build", "--print-tag", "--context", str(REPO))
    assert r.code == 0, r.err
    assert r.out.strip().startswith("ddpctl-trainer:"), r.out
