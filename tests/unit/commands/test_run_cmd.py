"""`ddpctl run`'s own flags: --recovery pod where it runs (--local) and a one-line error where it
does not; the dry run shows the coordinator it would start."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--docker", "--recovery", "pod"], "ddpctl: error: --recovery pod: run --docker restarts the whole group"),
        (["--local", "--recovery", "pod", "--script", "x.py"], "ddpctl: error: recovery: pod: only the built-in"),
        (["--local", "--spares", "1"], "ddpctl: error: --spares: a warm spare takes a lost node's place"),
    ],
)
def test_pod_recovery_where_it_cannot_run_is_a_usage_error(cli, tmp_path, args: list[str], message: str) -> None:
    (tmp_path / "x.py").write_text("print('hi')\n")
    result = cli("run", *args, "--no-lint", "--dry-run")
    assert result.code == 2
    assert result.err.strip().splitlines()[-1].startswith(message), result.err
    assert "Traceback" not in result.err


def test_the_dry_run_shows_the_coordinator_and_each_nodes_place(cli) -> None:
    result = cli("run", "--local", "--nodes", "2", "--procs", "1", "--recovery", "pod", "--dry-run")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "# the job's coordinator (--recovery pod: a lost node is started again alone)"
    assert "-m ddpctl_trainer.coordinator --host 127.0.0.1 --port" in lines[1]
    port = lines[1].split()[-1]
    assert sum(f"DDP_COORDINATOR=127.0.0.1:{port}" in line for line in lines) == 2
    assert "DDP_NODE_FIRST_RANK=1" in result.out and "PET_STANDALONE=1" in result.out
