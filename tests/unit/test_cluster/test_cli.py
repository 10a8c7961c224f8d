"""testcluster.cli: the commands' arguments, `status` and the imports of `down` and `status`, which run
with nothing but the standard library (make cluster-down uses the system's python3 without a venv),
and the stop list, which must name every process `up` starts."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testcluster.cli import COMPONENTS, parser
from testcluster.node.layout import COMPONENTS as NODE_COMPONENTS
from testcluster.settings import HERE
from tests.support import REPO


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["up"], {"command": "up"}),
        (["down"], {"command": "down"}),
        (["status"], {"command": "status"}),
        (["nodes", "64"], {"command": "nodes", "count": 64}),
        (["load", "ddpctl-trainer:3f2a"], {"command": "load", "ref": ["ddpctl-trainer:3f2a"]}),
        (["load", "a:1", "b:2"], {"command": "load", "ref": ["a:1", "b:2"]}),
    ],
)
def test_commands_and_their_arguments(argv: list[str], parsed: dict[str, object]) -> None:
    assert vars(parser().parse_args(argv)) == parsed


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        ([], "the following arguments are required"),
        (["start"], "invalid choice: 'start'"),
        (["nodes"], "the following arguments are required: count"),
        (["nodes", "0"], "'0' is not a positive number of nodes"),
        (["nodes", "-3"], "'-3' is not a positive number of nodes"),
        (["nodes", "many"], "'many' is not a positive number of nodes"),
        (["load"], "the following arguments are required: ref"),
        (["up", "now"], "unrecognized arguments: now"),
    ],
)
def test_usage_errors_exit_2_with_one_line_naming_the_problem(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        parser().parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert error in err.splitlines()[-1]
    assert err.splitlines()[-1].startswith("python -m testcluster")


NO_YAML = """
import sys
sys.modules["yaml"] = None  # `import yaml` now fails
from testcluster.cli import main
code = main(["status"])
print("exit", code)
"""


def test_status_runs_without_yaml_and_fails_while_the_cluster_is_down(tmp_path: Path) -> None:
    env = {**os.environ, "DDPCTL_CLUSTER_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", NO_YAML], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == "exit 1"
    assert lines[0].split() == ["etcd", "stopped"]
    assert {line.split()[0] for line in lines[:-1]} >= set(COMPONENTS)


def test_python_m_cluster_is_the_entry_point_from_the_clones_root() -> None:
    r = subprocess.run([sys.executable, "-m", "testcluster", "--help"], cwd=REPO, capture_output=True, text=True,
                       check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "python -m testcluster nodes N" in r.stdout


def started_names() -> set[str]:
    """The names given to procs.start (or to kube_component, which passes its own on) in the package."""
    names = set()
    for path in HERE.rglob("*.py"):
        for call in ast.walk(ast.parse(path.read_text())):
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or not call.args:
                continue
            arg = {"start": call.args[0], "kube_component": call.args[1] if len(call.args) > 1 else None}.get(
                call.func.id
            )
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.add(arg.value)
    return names


def test_down_stops_every_process_up_starts() -> None:
    assert started_names() == set(COMPONENTS) | set(NODE_COMPONENTS)
    assert len(COMPONENTS) == len(set(COMPONENTS))
