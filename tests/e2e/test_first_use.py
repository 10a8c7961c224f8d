"""What a new user sees: each case runs the command as the user typed it, checks that
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
        ["run", "--local", "--epochs", "3"],
        {},
        "Did you mean '--procs'",
        "--epochs is a flag of the trainer, not of ddpctl run: put the trainer's flags after --",
        id="trainer-flag-before-the-double-dash",
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


def test_logs_help_says_only_once_and_keeps_node_n(cli) -> None:
    out = " ".join(cli("logs", "--help").out.replace("│", " ").split())
    assert "Only only" not in out and "Only node N's logs" in out, out
    assert "Prefix lines with [node N]" in out, out
    assert "N*G" not in out and "N*P to N*P+P-1 with P processes per node" in out, out


def test_trainer_args_have_help(cli) -> None:
    out = cli("render", "--help").out
    assert "Arguments for the training" in out, out


@pytest.mark.parametrize(
    "script,warning",
    [
        # a file on this machine, outside the image's workdir
        ("HOST", "ddpctl: warning: script: {script} is a file on this machine"),
        # relative and here, but the default image was not built from this folder
        ("train.py", "ddpctl: warning: train.py is in "),
        ("other.py", None),  # relative and not here: a path in the image's workdir
        ("/workspace/train.py", None),
        ("/opt/app/train.py", None),  # not here: a path inside the image
    ],
)
def test_render_warns_when_the_script_is_a_host_path(cli, tmp_path: Path, script: str, warning: str | None) -> None:
    host = tmp_path / "train.py"
    host.write_text("print('hi')\n")
    script = str(host) if script == "HOST" else script
    result = cli("render", "--script", script)
    assert result.code == 0, result.err
    assert f"- {script}\n" in result.out, "the manifest keeps the path as given"
    if warning is None:
        assert result.err == ""
        return
    assert result.err.startswith(warning.format(script=script)), result.err
    assert "ddpctl build" in result.err and len(result.err.splitlines()) == 1


# --------------------------------------------------------------------------------------------
# run --local / --docker: what can be checked is checked before anything starts
# --------------------------------------------------------------------------------------------

RUN_BAD_INPUT = [
    pytest.param(
        ["run", "--local", "--", "--epochs", "-3"],
        "job ddp-train failed: rank",  # was: 4 processes started, two torchrun FAILED blocks, the wrong rank
        "trainer: --epochs must be at least 1, got -3; fix the trainer's arguments after --",
        id="trainer-flag-value",
    ),
    pytest.param(
        ["run", "--local", "--", "--bogus"],
        "job ddp-train failed",
        "trainer: unrecognized arguments: --bogus",
        id="trainer-unknown-flag",
    ),
    pytest.param(
        ["run", "--local", "--", "--global-batch-size", "6"],
        "job ddp-train failed",
        "trainer: --global-batch-size 6 is not divisible by world size x --grad-accum (4)",
        id="trainer-flag-vs-world-size",
    ),
    pytest.param(
        ["run", "--local", "-e", "DDP_TRAINER_EPOCHS=many"],
        "job ddp-train failed",
        "trainer: DDP_TRAINER_EPOCHS='many' is not a valid value for --epochs",
        id="trainer-env-value",
    ),
    pytest.param(
        ["run", "--local", "--script", "nope.py", "--nodes", "1", "--procs", "1"],
        "1 nodes x 1 processes",  # was: torchrun started, then "can't open file"
        "script: nope.py does not exist in",
        id="missing-script",
    ),
    pytest.param(
        ["run", "--docker", "--", "--epochs", "0"],
        "job ddp-train failed",
        "trainer: --epochs must be at least 1, got 0",  # before the engine or image is even looked for
        id="docker-trainer-flag",
    ),
]


@pytest.mark.parametrize("argv,old,new", RUN_BAD_INPUT)
def test_run_checks_before_starting_anything(cli, tmp_path: Path, argv, old, new) -> None:
    result = cli(*argv)
    assert result.code == 2, result.err
    assert result.out == "" and old not in result.err
    assert result.err.startswith("ddpctl: error: ") and len(result.err.splitlines()) == 1, result.err
    assert new in result.err
    assert not (tmp_path / "ddp-runs").exists(), "nothing was started or created"


def test_checking_the_trainers_flags_does_not_import_torch(tmp_path: Path) -> None:
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from ddpctl.app import main\n"
        "code = main(['run', '--local', '--', '--epochs', '-3'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'kubernetes', 'tqdm'))\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "trainer: --epochs" in proc.stderr, proc.stderr
    assert "HEAVY=\n" in proc.stderr


@pytest.mark.parametrize(
    "argv,old,new",
    [
        (["--nodes", "1", "--procs", "1"], "1 nodes x 1 processes", "1 node x 1 process"),
        (["--nodes", "1", "--procs", "1"], "1 node(s)", "nodes:              1 node (pods)"),
        (["--nodes", "3", "--procs", "2"], "node(s)", "6 = 3 nodes x 2 processes"),
        (["--gpus", "1"], "1 GPU(s)", "1 (1 GPU per node, backend nccl)"),
        (["--gpus", "4"], "4 GPU(s)", "4 (4 GPUs per node, backend nccl)"),
    ],
)
def test_counts_are_pluralised(cli, argv, old, new) -> None:
    out = cli("render", "--explain", *argv).out
    assert old not in out and new in out, out


# --------------------------------------------------------------------------------------------
# run --local end to end: failures, progress, reruns (real torchrun agents, gloo on loopback)
# --------------------------------------------------------------------------------------------

_FAIL_AT_ONCE = "import os\nraise ValueError(f\"bad batch on rank {os.environ['RANK']}\")\n"


def _root_causes(log_dir: Path) -> list[tuple[str, int]]:
    """torchrun's "Root Cause (first observed failure)" entries in the node log files: (time, rank)."""
    import re

    found = []
    for log in sorted(log_dir.glob("node-*.log")):
        text = log.read_text()
        for block in text.split("Root Cause (first observed failure):")[1:]:
            when = re.search(r"time\s*:\s*(\S+)", block)
            rank = re.search(r"rank\s*:\s*(\d+)", block)
            assert when and rank, block
            found.append((when.group(1), int(rank.group(1))))
    return found


@pytest.mark.slow
def test_a_failure_blames_the_first_failing_rank_and_shows_its_error_once(tmp_path: Path) -> None:
    """Was: two ~25-line torchrun FAILED blocks on screen and the first rank listed in them
    blamed; now torchrun's root cause (the earliest, over all nodes) and its error, in one line."""
    from tests.support.procs import run_ddpctl as _ddpctl

    (tmp_path / "train.py").write_text(_FAIL_AT_ONCE)
    result = _ddpctl("run", "--local", "--backoff-limit", "0", "--script", "train.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ddpctl: error:")]
    assert len(errors) == 1, result.stderr
    first = min(_root_causes(tmp_path / "ddp-runs" / "ddp-train" / "logs"))
    blamed = f"rank {first[1]} (node {first[1] // 2}, local rank {first[1] % 2}) exited with code 1"
    assert f"job ddp-train failed: {blamed}: ValueError: bad batch on rank {first[1]}" in errors[0], (first, errors)
    assert "FAILED" not in result.stdout and "Root Cause" not in result.stdout  # they stay in the logs
    assert "failed (exitcode:" not in result.stdout
    assert "FAILED" in (tmp_path / "ddp-runs" / "ddp-train" / "logs" / "node-0.log").read_text()
    assert "Setting OMP_NUM_THREADS" not in result.stdout  # ddpctl sets it: torchrun has no banner to print


def _run_on_a_terminal(args: list[str], cwd: Path, timeout: float = 240) -> tuple[int, str, str]:
    """`ddpctl ARGS` with stderr on a pseudo-terminal (where the status line lives), stdout a pipe."""
    import os
    import pty
    import selectors
    import subprocess
    import sys
    import time

    from tests.support.procs import ddpctl_env as _env

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpctl", *args], cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=slave
    )
    os.close(slave)
    chunks: list[bytes] = []
    sel = selectors.DefaultSelector()
    sel.register(master, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=1):
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return proc.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_progress_is_a_live_bar_on_a_terminal_and_a_rerun_says_the_job_was_complete(tmp_path: Path) -> None:
    """Was: every rank printing every progress line, `ranks seen 1/4` while 4 trained, no bar on a
    terminal; a rerun printing `done: 8 steps, 0.0 samples/s`; the logs folder never named."""
    small = ["--", "--synthetic-samples", "256", "--eval-samples", "64", "--log-every", "1"]
    code, out, err = _run_on_a_terminal(["run", "--local", *small], tmp_path)
    assert code == 0, err[-2000:] + out[-2000:]
    assert "[rank 0] epoch" not in out, "on a terminal rank 0's progress is the status line's bar"
    assert "[rank 0] eval epoch 2/2" in out and not any(f"[rank {r}] eval" in out for r in (1, 2, 3))
    assert "epoch 2/2 [####################] step 2/2 loss " in err, err[-2000:]
    assert "2/2 nodes running, world size 4" in err and "ranks seen" not in err
    assert "succeeded in" in err and "; logs in ddp-runs/ddp-train/logs" in err

    code, out, err = _run_on_a_terminal(["run", "--local", *small], tmp_path)
    assert code == 0, err[-2000:]
    assert "0.0 samples/s" not in out and "resumed from" not in out
    assert "[rank 0] already complete at step 4 (epoch 2/2)" in out
    assert (
        "ddp-train was already complete at step 4 (checkpoint ddp-runs/ddp-train/checkpoints/ckpt-00000004.pt), "
        "so nothing was trained; to train it again from the start, add --fresh (logs in ddp-runs/ddp-train/logs)"
    ) in err


def test_an_agent_that_dies_on_its_own_is_named_with_its_exception() -> None:
    """Was: `node 0 (ranks 0-1) exited with code 1` and nothing else (the agent's traceback is kept
    off the screen); now the agent's exception ends that line."""
    import io

    from ddpctl.console import Console
    from ddpctl.runners.failures import describe_failure
    from ddpctl.runners.state import JobState, show_line

    state = JobState("ddp-train", 2, 4)
    console = Console(io.StringIO(), io.StringIO(), color=False, live_status=False)

    for line in [
        "Traceback (most recent call last):",
        '  File "torch/distributed/run.py", line 1, in main',
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
    ]:
        show_line(console, state, 0, line)
    text = describe_failure(state, 0, 1, range(2))
    assert text.startswith("job ddp-train failed: node 0 (ranks 0-1) exited with code 1: torch.distributed.DistNet")
    assert "address already in use" in text
    assert "Traceback" not in console.out.getvalue()  # type: ignore[attr-defined]


def _report(node_failures: list[tuple[str, int, int, int]], root: tuple[str, int, int, int]) -> list[str]:
    """torchrun's FAILED block as an agent prints it: (time, rank, local rank, exit code) entries."""

    def entry(n: int, when: str, rank: int, local: int, code: int) -> list[str]:
        return [
            f"[{n}]:",
            f"  time      : {when}",
            "  host      : localhost",
            f"  rank      : {rank} (local_rank: {local})",
            f"  exitcode  : {code} (pid: 1{rank})",
            "  error_file: <N/A>",
        ]

    lines = ["=" * 60, "ddpctl_trainer FAILED", "-" * 60, "Failures:"]
    for i, failure in enumerate(node_failures, start=1):
        lines += entry(i, *failure)
    lines += ["-" * 60, "Root Cause (first observed failure):", *entry(0, *root), "=" * 60]
    return lines


T0, T1 = "2026-12-01_09:57:20", "2026-12-01_09:57:21"


@pytest.mark.parametrize(
    "reports,rank_errors,expected",
    [
        pytest.param(  # the issue's `-- --epochs -3`: node 1 reported first, and listed rank 3 first
            {1: _report([(T0, 3, 1, 2)], (T0, 2, 0, 2)), 0: _report([(T0, 1, 1, 2)], (T0, 0, 0, 2))},
            {0: "ddpctl-trainer: error: --epochs must be at least 1, got -3"},
            "rank 0 (node 0, local rank 0) exited with code 2: --epochs must be at least 1, got -3; "
            "ranks 1, 2, 3 failed too",
            id="simultaneous-usage-error",
        ),
        pytest.param(  # node 1's root cause a second earlier than node 0's
            {0: _report([], (T1, 0, 0, 1)), 1: _report([], (T0, 3, 1, 1))},
            {3: "ValueError: bad batch", 0: "ValueError: other"},
            "rank 3 (node 1, local rank 1) exited with code 1: ValueError: bad batch; rank 0 failed too",
            id="earliest-across-nodes",
        ),
        pytest.param(  # a SIGKILLed rank explains its peers' collective failures
            {0: _report([], (T0, 0, 0, 1)), 1: _report([(T0, 2, 0, -15)], (T0, 3, 1, -9))},
            {0: "ddpctl-trainer: error: [rank 0] a collective failed, most likely another rank died: x"},
            "rank 3 (node 1, local rank 1) was killed by SIGKILL; rank 0 only lost its peer; rank 2 stopped after it",
            id="killed-rank",
        ),
        pytest.param(  # a script that ends without destroy_process_group(): gloo's threads at exit
            {0: _report([(T0, 0, 0, -15)], (T0, 1, 1, -6))},
            {1: "terminate called without an active exception"},
            'rank 1 (node 0, local rank 1) was killed by SIGABRT ("terminate called without an active exception" '
            "at exit: the process group was still alive; end the script with "
            "torch.distributed.destroy_process_group(), with the DDP model already gone: train inside a "
            "function, as PyTorch's DDP tutorial does); rank 0 stopped after it",
            id="abort-at-exit",
        ),
    ],
)
def test_the_failure_summary_blames_torchruns_root_cause(reports, rank_errors, expected) -> None:
    from ddpctl.runners.failures import describe_failure
    from ddpctl.runners.state import JobState

    state = JobState("ddp-train", 2, 4)
    for rank, error in rank_errors.items():
        state.on_rank_line(rank, error)
    for node, lines in reports.items():
        assert not any(state.on_node_line(node, line) for line in lines), "the block stays in the log file"
    assert describe_failure(state, 0, 1, range(2)) == f"job ddp-train failed: {expected}"


def test_torchruns_omp_banner_is_shown_once_and_other_agent_lines_stay() -> None:
    from ddpctl.runners.state import JobState

    banner = [
        "",
        "*****************************************",
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, ...",
        "*****************************************",
    ]
    state = JobState("ddp-train", 2, 4)
    assert [state.on_node_line(0, line) for line in banner] == [True] * 4
    assert [state.on_node_line(1, line) for line in banner] == [False] * 4
    assert state.on_node_line(1, "W1201 10:00:00.000000 1 torch/distributed/run.py:1] a warning of node 1")
    # torch in an image may log the banner with its log prefix (run --docker)
    logged = JobState("ddp-train", 2, 4)
    prefix = "W1201 10:26:24.824000 1 torch/distributed/run.py:874] "
    assert [logged.on_node_line(0, prefix + line) for line in banner] == [True] * 4
    assert [logged.on_node_line(1, prefix + line) for line in banner] == [False] * 4
