"""Checkpoints in object storage, end to end: the trainer under torchrun with ``--checkpoint-dir
s3://...`` against a real S3 server (SeaweedFS on loopback, tests/support/s3.py) that checks the
credentials it is sent.

* a rank SIGKILLed mid-run: the restarted group resumes from S3 and ends bit-identical (float64)
  to an uninterrupted run;
* SIGTERM to a node: the stop checkpoint is in S3 (``latest`` names it, complete) when the
  processes have exited, and the next start resumes there with 0 steps lost; SIGTERM while the
  server is down: still exit 143, one line saying the checkpoint could not be stored;
* the server stopped during a save: training goes on, each failed save is one warning line, the
  first save after the server's restart succeeds, and ``latest`` never names an incomplete one;
* readers polling ``latest`` while the trainer saves every step always load a complete checkpoint;
* the secret never appears in output, logs or metrics, and a wrong one is refused in one line;
* FSDP with 2 processes: every rank uploads its own shard, and a resumed run ends equal to an
  uninterrupted one.

The faults come from the test plugin tests/support/models/faults.py (--callback)."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.models.faults import hold_at, kill_at, pause_in_checkpoint, plugin_env
from tests.support.s3 import (
    ACCESS_KEY,
    SECRET_KEY,
    S3Server,
    latest_checkpoint,
    object_names,
    prefix_for,
    require_obstore,
)
from tests.support.trainer import (
    PY,
    Run,
    assert_same_params,
    clean_env,
    free_port,
    kill_tree,
    launch,
    start,
    static_node_command,
    wait_all,
)

obstore = require_obstore()

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# 128 samples / global batch 16 = 8 steps per epoch, 2 epochs = 16 steps; a checkpoint every 3
# steps (3, 6, 9, 12, 15) and at each epoch's end (8, 16); float64, so "equal" is exact.
COMMON = [
    "--synthetic-samples",
    "128",
    "--eval-samples",
    "32",
    "--image-size",
    "8",
    "--num-classes",
    "4",
    "--global-batch-size",
    "16",
    "--epochs",
    "2",
    "--lr",
    "0.1",
    "--dtype",
    "float64",
    "--save-every",
    "3",
    "--keep-last",
    "3",
    "--log-every",
    "4",
    "--progress",
    "lines",
    "--scheduler",
    "cosine",
    "--save-final",
    "final.pt",
]
RESTART = ["--max-restarts", "1"]


def _s3_args(url: str) -> list[str]:
    return ["--checkpoint-dir", url]  # the last --checkpoint-dir wins over launch()'s local one


def _launch(s3: S3Server, workdir: Path, url: str, args: list[str], **kwargs: Any) -> Run:
    env = {**s3.env(), **kwargs.pop("env", {})}
    return launch(workdir, [*args, *_s3_args(url)], env=env, **kwargs)


def _single(workdir: Path, url: str, args: list[str]) -> list[str]:
    """One trainer process (started by the test, which watches it while it runs)."""
    return [PY, "-m", "ddpctl_trainer", *args, *_s3_args(url), "--metrics-file", str(workdir / "metrics.jsonl")]


def _no_secret(run: Run) -> None:
    """The credentials are nowhere in what the run printed or wrote."""
    texts = [run.out, run.err]
    metrics = run.workdir / "metrics.jsonl"
    if metrics.exists():
        texts.append(metrics.read_text())
    for text in texts:
        assert SECRET_KEY not in text and ACCESS_KEY not in text


@pytest.fixture(scope="module")
def baselines(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Run, str]]:
    """Uninterrupted runs (ddp, fsdp sharded) with their checkpoints in S3, made on first use."""
    root = tmp_path_factory.mktemp("s3-baselines")

    class Lazy(dict):  # type: ignore[type-arg]
        def __missing__(self, strategy: str) -> tuple[Run, str]:
            url = s3.url(f"baseline-{strategy}-{time.time_ns()}")
            extra = ["--fsdp-state-dict", "sharded"] if strategy == "fsdp" else []
            run = _launch(s3, root / strategy, url, [*COMMON, "--strategy", strategy, *extra], nproc=2)
            assert run.code == 0, run.explain()
            self[strategy] = (run, url)
            return run, url

    return Lazy()


def _client(s3: S3Server, url: str) -> Any:
    return s3.client(url.split("/", 3)[3])


def test_an_uninterrupted_run_keeps_the_last_k_checkpoints_in_s3_and_latest_names_the_last(
    s3: S3Server, baselines: dict[str, tuple[Run, str]]
) -> None:
    run, url = baselines["ddp"]
    client = _client(s3, url)
    prefixes = sorted({name.split("/")[0] for name in object_names(client)})
    assert prefixes == ["ckpt-00000012", "ckpt-00000015", "ckpt-00000016", "latest"], prefixes
    found = latest_checkpoint(client)
    assert found is not None and found[0] == 16
    payload = found[1]
    assert (payload["epoch"], payload["batches_done"]) == (2, 0) and payload["optimizer"]["state"]
    saved = [e["path"] for e in run.events("checkpoint")]
    assert saved[-1] == f"{url}/ckpt-00000016" and len(saved) == 7
    assert not run.events("resume")
    _no_secret(run)


def test_sigkill_of_a_rank_then_restart_resumes_from_s3_and_ends_bit_identical(
    s3: S3Server, baselines: dict[str, tuple[Run, str]], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = s3.url(prefix_for(request))
    args = [*COMMON, "--strategy", "ddp"]
    run = _launch(
        s3, tmp_path, url, args, nproc=2, torchrun_args=RESTART, env=plugin_env(kill_at(5, rank=1, settled=True))
    )
    assert run.code == 0, run.explain()
    assert "[fault] killing rank 1 at step 5" in run.err
    (resume,) = run.events("resume")
    assert resume["path"] == f"{url}/ckpt-00000003"
    assert (resume["step"], resume["epoch"], resume["batches_done"]) == (3, 0, 3)
    assert run.events("done")[-1]["step"] == 16
    assert_same_params(run.final(), baselines["ddp"][0].final(), atol=0.0)
    _no_secret(run)


@pytest.mark.parametrize(
    ("strategy", "step"),
    [("ddp", 5), ("ddp", 6), ("fsdp", 6)],
    ids=["between-saves", "at-a-save", "at-a-sharded-save"],
)
def test_sigterm_to_a_node_leaves_the_stop_checkpoint_in_s3_before_exit_and_loses_no_step(
    s3: S3Server,
    baselines: dict[str, tuple[Run, str]],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    strategy: str,
    step: int,
) -> None:
    """Node 1's agent gets SIGTERM after step K (as the kubelet sends it): both ranks stop after
    step K, rank 0 (on node 0) stores ckpt-K in S3 and publishes it, every worker exits 143. When
    the processes are gone, `latest` names step K, complete; the restarted group resumes there.
    At K = 6 (--save-every 3) the signal lands while rank 1 is held before that step's save, which
    rank 0 already waits in: a rank that alone got SIGTERM still saves as the others do (in the
    background, full or sharded), so no rank runs a collective the others do not, and the stop
    vote after the step finds the checkpoint stored."""
    url = s3.url(prefix_for(request))
    client = _client(s3, url)
    strategy_args = ["--strategy", strategy, *(["--fsdp-state-dict", "sharded"] if strategy == "fsdp" else [])]
    args = [*COMMON, *strategy_args, *_s3_args(url)]
    hold = tmp_path / "held"
    env = {**s3.env(), **plugin_env(hold_at(step, rank=1, file=hold))}
    port = str(free_port())
    procs = [
        start(static_node_command(n, 2, 1, port, tmp_path, args, "ddpctl_trainer.launch"), tmp_path, clean_env(env))
        for n in range(2)
    ]
    try:
        deadline = time.monotonic() + 180
        while not hold.exists():  # rank 1 has finished step K and waits for a signal
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            assert time.monotonic() < deadline, "the hold never came"
            time.sleep(0.05)
        procs[1].send_signal(signal.SIGTERM)
        results = wait_all(procs, 120)
    finally:
        for p in procs:
            kill_tree(p.tag)  # type: ignore[attr-defined]
    assert [p.returncode for p in procs] == [143, 143], results
    err = results[0][1] + results[1][1]
    assert f"error: [rank 1] stopped by SIGTERM after step {step}; checkpoint {url}/ckpt-0000000{step} written" in err
    assert "Traceback" not in err, err
    found = latest_checkpoint(client)  # durable before exit: nothing runs any more
    assert found is not None and found[0] == step and found[1]["batches_done"] == step
    first = Run(143, "", err, tmp_path)
    (preempted,) = first.events("preempted")
    assert preempted["step"] == step and preempted["saved"] and preempted["path"] == f"{url}/ckpt-0000000{step}"
    again = _launch(s3, tmp_path, url, [*COMMON, *strategy_args], nproc=2)
    assert again.code == 0, again.explain()
    (resume,) = again.events("resume")
    assert (resume["step"], resume["epoch"], resume["batches_done"]) == (step, 0, step)  # 0 steps lost
    assert_same_params(again.final(), baselines[strategy][0].final(), atol=0.0)
    _no_secret(first)
    _no_secret(again)


def test_the_server_stopped_during_a_save_is_reported_training_goes_on_and_the_next_save_after_restart_succeeds(
    own_s3: S3Server, tmp_path: Path
) -> None:
    """One process saving every step. The save of step 4 pauses once its state is written; the
    test stops the server and lets it go on: saves 4, 5 and 6 fail (one warning line each) while
    training goes on. The save of step 7 pauses; the test starts the server again (same data):
    7 and every later save succeed. A reader polls `latest` whenever the server is up."""
    url = own_s3.url("run")
    client = own_s3.client("run")
    pause = tmp_path / "pause"
    args = [*COMMON, "--save-every", "1", "--max-steps", "10", "--no-eval", "--keep-last", "2"]
    cmd = _single(tmp_path, url, args)
    env = clean_env({**own_s3.env(), **plugin_env(pause_in_checkpoint([4, 7], pause))})
    proc = start(cmd, tmp_path, env)
    reads: list[int] = []
    errors: list[BaseException] = []
    serving = threading.Event()
    serving.set()
    finished = threading.Event()

    def read() -> None:
        while not finished.is_set():
            if not serving.wait(0.1):
                continue
            try:
                found = latest_checkpoint(client)
            except AssertionError as exc:
                errors.append(exc)
                return
            except Exception:  # noqa: BLE001, S112 - the server went away under this read: try again
                continue
            if found is not None:
                reads.append(found[0])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def paused(step: int) -> Path:
        marker = Path(f"{pause}.{step}")
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"{marker} never appeared"
            time.sleep(0.05)
        return Path(f"{marker}.go")

    try:
        go = paused(4)
        serving.clear()
        own_s3.stop()
        go.touch()
        go = paused(7)
        own_s3.start()
        serving.set()
        go.touch()
        out, err = proc.communicate(timeout=180)
    finally:
        finished.set()
        kill_tree(proc.tag)  # type: ignore[attr-defined]
        reader.join(30)
    run = Run(proc.returncode, out, err, tmp_path)
    assert run.code == 0, run.explain()
    warnings = [line for line in err.splitlines() if "warning: saving" in line]
    assert [w.split("saving ", 1)[1].split(" ", 1)[0] for w in warnings] == [
        f"{url}/ckpt-0000000{s}" for s in (4, 5, 6)
    ], err
    assert all("failed (StoreError: " in w and w.endswith("training goes on, the next save tries") for w in warnings)
    assert run.events("done")[-1]["step"] == 10  # training went on
    assert [e["step"] for e in run.events("checkpoint")] == [1, 2, 3, 7, 8, 9, 10]
    found = latest_checkpoint(client)
    assert found is not None and found[0] == 10
    assert not errors, errors
    assert reads and reads == sorted(reads), reads
    assert not any(n.startswith(("ckpt-00000004/", "ckpt-00000005/", "ckpt-00000006/")) for n in object_names(client))
    _no_secret(run)


def test_a_stop_checkpoint_the_store_cannot_take_still_exits_143_saying_so_and_the_next_start_resumes(
    own_s3: S3Server, tmp_path: Path
) -> None:
    """SIGTERM while the server is down: the stop checkpoint (step 3) fails, the process still
    exits 143 (retried like any preemption) with one line that says so; once the server is back,
    the next start resumes from the newest complete checkpoint (step 2)."""
    url = own_s3.url("run")
    client = own_s3.client("run")
    hold = tmp_path / "held"
    args = [*COMMON, "--save-every", "2", "--max-steps", "6", "--no-eval"]
    proc = start(
        _single(tmp_path, url, args), tmp_path, clean_env({**own_s3.env(), **plugin_env(hold_at(3, file=hold))})
    )
    try:
        deadline = time.monotonic() + 180
        while not hold.exists() or (latest_checkpoint(client) or (0, {}))[0] != 2:  # held after step 3, ckpt-2 stored
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "never held at step 3 with ckpt-2 stored"
            time.sleep(0.05)
        own_s3.stop()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc.tag)  # type: ignore[attr-defined]
    assert proc.returncode == 143, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        "ddpctl-trainer: error: stopped by SIGTERM after step 3; its checkpoint could not be stored ("
    ), err
    assert last.endswith("the next start resumes from the newest complete one") and SECRET_KEY not in err
    (preempted,) = Run(143, out, err, tmp_path).events("preempted")
    assert preempted["step"] == 3 and not preempted["saved"]
    own_s3.start()
    found = latest_checkpoint(client)
    assert found is not None and found[0] == 2
    (tmp_path / "metrics.jsonl").unlink()
    again = _launch(own_s3, tmp_path, url, args)
    assert again.code == 0, again.explain()
    assert again.events("resume")[0]["step"] == 2 and again.events("done")[-1]["step"] == 6


def test_readers_polling_latest_while_the_trainer_saves_every_step_always_load_a_complete_checkpoint(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """resnet18 (45 MB of weights and as much momentum: multipart uploads), a save after every
    step and keep-last 2, while two readers follow `latest` until the run ends."""
    url = s3.url(prefix_for(request))
    client_prefix = url.split("/", 3)[3]
    args = [*COMMON, "--model", "resnet18", "--save-every", "1", "--max-steps", "8", "--no-eval", "--keep-last", "2"]
    proc = start(_single(tmp_path, url, args), tmp_path, clean_env(s3.env()))
    reads: list[list[int]] = [[], []]
    errors: list[BaseException] = []
    finished = threading.Event()

    def read(mine: list[int]) -> None:
        client = s3.client(client_prefix)
        while not finished.is_set():
            try:
                found = latest_checkpoint(client)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
                return
            if found is not None:
                mine.append(found[0])

    readers = [threading.Thread(target=read, args=(mine,), daemon=True) for mine in reads]
    for t in readers:
        t.start()
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        finished.set()
        kill_tree(proc.tag)  # type: ignore[attr-defined]
        for t in readers:
            t.join(60)
    run = Run(proc.returncode, out, err, tmp_path)
    assert run.code == 0, run.explain()
    assert [e["step"] for e in run.events("checkpoint")] == list(range(1, 9))
    assert not errors, errors
    for mine in reads:  # each reader sees `latest` move forward only, through several checkpoints
        assert len(set(mine)) >= 3 and mine == sorted(mine), reads
    found = latest_checkpoint(s3.client(client_prefix))
    assert found is not None and found[0] == 8


def test_wrong_credentials_are_one_line_that_never_shows_the_secret(
    s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The server refuses a request signed with another secret: resume cannot list the checkpoints,
    and the run stops with one error line (exit 1) that names the refusal, not the secret."""
    url = s3.url(prefix_for(request))
    wrong = "wrong-" + SECRET_KEY[::-1]
    run = launch(tmp_path, [*COMMON, "--max-steps", "2", *_s3_args(url)], env=s3.env(secret=wrong))
    assert run.code == 1, run.explain()
    errors = [line for line in run.err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in run.err, run.err
    assert f"listing {url} failed (GenericError: 403 Forbidden, SignatureDoesNotMatch: " in errors[0], errors
    for text in (run.out, run.err):
        assert wrong not in text and SECRET_KEY not in text


def test_fsdp_sharded_checkpoints_in_s3_every_rank_its_shard_and_resume_equal_to_uninterrupted(
    s3: S3Server, baselines: dict[str, tuple[Run, str]], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    baseline, base_url = baselines["fsdp"]
    manifest = json.loads(bytes(obstore.get(_client(s3, base_url), "ckpt-00000016/manifest.json").bytes()))
    assert manifest["sharded"] and manifest["world_size"] == 2
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "trainer_state.pt"} <= set(manifest["files"]), manifest
    url = s3.url(prefix_for(request))
    args = [*COMMON, "--strategy", "fsdp", "--fsdp-state-dict", "sharded"]
    run = _launch(
        s3, tmp_path, url, args, nproc=2, torchrun_args=RESTART, env=plugin_env(kill_at(5, rank=0, settled=True))
    )
    assert run.code == 0, run.explain()
    resumes = run.events("resume")
    assert len(resumes) == 1, run.explain()
    assert resumes[0]["step"] == 3 and resumes[0]["path"] == f"{url}/ckpt-00000003"
    found = latest_checkpoint(_client(s3, url))
    assert found is not None and found[0] == 16
    assert_same_params(run.final(), baseline.final(), atol=0.0)
    _no_secret(run)
