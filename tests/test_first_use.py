"""What a new user sees (issue 12): each case runs the command as the user typed it, checks that
the old, unhelpful output is gone and that the new line says what is wrong and how to fix it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

# (argv, files to create, what was printed before (must be gone), what must be printed now)
BAD_INPUT = [
    pytest.param(
        ["rendr"],
        {},
        "Did you mean 'render'? Did you mean 'render'?",
        "No such command 'rendr'. Did you mean 'render'? (see 'ddpctl --help')",
        id="typo-suggested-once",
    ),
    pytest.param(
        ["render", "-f", "a.yaml"],
        {"a.yaml": "node: 2\n"},
        "use one of activeDeadlineSeconds",
        "a.yaml: node: is not a known key; did you mean nodes?",
        id="unknown-key-nearest-and-file",
    ),
    pytest.param(
        ["render"],
        {"ddp.yaml": "rendezvous:\n  prot: 3\n"},
        "use one of",
        "ddp.yaml: rendezvous.prot: is not a known key; did you mean port?",
        id="unknown-nested-key",
    ),
    pytest.param(
        ["render", "-f", "b.yaml"],
        {"b.yaml": "gpusPerNode: true\n"},
        "True",
        "b.yaml: gpusPerNode: true must be an integer >= 0",
        id="yaml-spelling-of-true",
    ),
    pytest.param(
        ["render", "-f", "bin.yaml"],
        {"bin.yaml": b"name: x\x00\x01\x02\n"},
        "bin.yaml:: invalid YAML",
        "bin.yaml: not a text file; --config takes a YAML job spec",
        id="binary-file-control-chars",
    ),
    pytest.param(
        ["render", "-f", "bin.yaml"],
        {"bin.yaml": b"\x7fELF\x02\x01\x01\x00\xd0\xff\xfe"},
        "codec can't decode",
        "bin.yaml: not a text file; --config takes a YAML job spec",
        id="binary-file-not-utf8",
    ),
    pytest.param(
        ["render", "-t", "foo"],
        {},
        "is not one of job, pytorchjob, jobset, trainjob; choose one of job, pytorchjob, jobset, trainjob",
        "target: 'foo' is not a valid value; choose one of job, pytorchjob, jobset, trainjob",
        id="choices-listed-once",
    ),
    pytest.param(
        ["render", "-t", "jobst"],
        {},
        "is not one of",
        "target: 'jobst' is not a valid value; did you mean jobset? choose one of",
        id="choice-nearest",
    ),
    pytest.param(
        ["render", "--shm-size", "2GB"],
        {},
        "use values like '500m'",
        "shmSize: '2GB' is not a Kubernetes quantity; write it as 2Gi",
        id="shm-size-suggestion-from-input",
    ),
    pytest.param(
        ["render", "--memory", "512mb"],
        {},
        "use values like '500m'",
        "resources.memory: '512mb' is not a Kubernetes quantity; write it as 512Mi",
        id="memory-suggestion-from-input",
    ),
]


@pytest.mark.parametrize("argv,files,old,new", BAD_INPUT)
def test_bad_input_says_what_is_wrong_once(cli, tmp_path: Path, argv, files, old, new) -> None:
    for name, content in files.items():
        target = tmp_path / name
        target.write_bytes(content) if isinstance(content, bytes) else target.write_text(content)
    result = cli(*argv)
    assert result.code == 2, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddpctl: error: "), result.err
    assert old not in result.err
    assert new in lines[0]


@pytest.mark.parametrize("umask,expected", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_init_writes_ddp_yaml_with_the_umask_not_0600(cli, tmp_path: Path, umask: int, expected: int) -> None:
    old = os.umask(umask)
    try:
        result = cli("init")
    finally:
        os.umask(old)
    assert result.code == 0, result.err
    assert stat.S_IMODE((tmp_path / "ddp.yaml").stat().st_mode) == expected


def test_init_force_keeps_the_existing_files_mode(cli, tmp_path: Path) -> None:
    spec = tmp_path / "ddp.yaml"
    spec.write_text("nodes: 2\n")
    spec.chmod(0o640)
    assert cli("init", "--force").code == 0
    assert stat.S_IMODE(spec.stat().st_mode) == 0o640


def test_render_help_groups_the_flags_in_panels(cli) -> None:
    out = cli("render", "--help").out
    panels = ["Job", "Image and entrypoint", "Layout", "Resources", "Environment and volumes", "Placement"]
    panels += ["Lifecycle", "Security"]
    positions = [out.find(f"─ {name} ─") for name in panels]
    assert all(p >= 0 for p in positions), out
    assert positions == sorted(positions), "panels in the documented order"
    assert "─ Job spec ─" not in out, "no flat group of 36 flags any more"
    layout = out[positions[2] : positions[3]]
    assert "--nodes" in layout and "--gpus" in layout and "--shm-size" not in layout


def test_trainer_args_have_help(cli) -> None:
    out = cli("render", "--help").out
    assert "Arguments for the training" in out, out


@pytest.mark.parametrize(
    "script,warned",
    [
        ("HOST", True),  # a file on this machine, outside the image's workdir
        ("train.py", False),  # relative: a path in the image's workdir
        ("/workspace/train.py", False),
        ("/opt/app/train.py", False),  # not here: a path inside the image
    ],
)
def test_render_warns_when_the_script_is_a_host_path(cli, tmp_path: Path, script: str, warned: bool) -> None:
    host = tmp_path / "train.py"
    host.write_text("print('hi')\n")
    script = str(host) if script == "HOST" else script
    result = cli("render", "--script", script)
    assert result.code == 0, result.err
    assert f"- {script}\n" in result.out, "the manifest keeps the path as given"
    if warned:
        assert result.err.startswith(f"ddpctl: warning: script: {script} is a file on this machine"), result.err
        assert "COPY" in result.err and "ddpctl build" in result.err and len(result.err.splitlines()) == 1
    else:
        assert result.err == ""
