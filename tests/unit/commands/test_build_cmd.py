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
