"""Fast in-process tests: environment detection, flags, samplers, checkpoint files."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from ddpctl_trainer import checkpoint as ckpt
from ddpctl_trainer.config import parse_args, validate_for_world
from ddpctl_trainer.data import EvalShardSampler, PaddedEvalDataset, ResumableDistributedSampler, synthetic
from ddpctl_trainer.dist import DistContext, detect, device_for, resolve_backend
from ddpctl_trainer.errors import CheckpointError, UsageError

TORCHRUN_2x2_RANK3 = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "job-master-0",
    "MASTER_PORT": "23456",
    "TORCHELASTIC_RUN_ID": "x",
    "TORCHELASTIC_RESTART_COUNT": "2",
}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({}, DistContext(0, 0, 1, 1, 0, 0, "single"), id="plain-python"),
        pytest.param(
            {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "1"},
            DistContext(0, 0, 1, 1, 0, 0, "single"),
            id="trainer-v2-one-node-one-proc",
        ),
        pytest.param(TORCHRUN_2x2_RANK3, DistContext(3, 1, 4, 2, 1, 2, "torchrun"), id="torchrun-2-nodes-x-2"),
        # PyTorchJob without torchrun: RANK is the pod index, right only with one process per pod
        pytest.param(
            {
                "RANK": "2",
                "WORLD_SIZE": "3",
                "MASTER_ADDR": "job-master-0",
                "MASTER_PORT": "23456",
                "PET_NPROC_PER_NODE": "1",
            },
            DistContext(2, 0, 3, 1, 2, 0, "pod-index"),
            id="pytorchjob-plain",
        ),
        pytest.param(
            {"JOB_COMPLETION_INDEX": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "job-0.svc", "MASTER_PORT": "29500"},
            DistContext(1, 0, 2, 1, 1, 0, "pod-index"),
            id="indexed-job-plain",
        ),
    ],
)
def test_detect_reads_each_engine(env: dict[str, str], expected: DistContext) -> None:
    assert detect(env) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "0"},
            "launch with `torchrun",
            id="trainer-v2-without-torchrun",
        ),
        pytest.param(
            {"RANK": "0", "WORLD_SIZE": "8", "MASTER_ADDR": "m", "PET_NPROC_PER_NODE": "4"},
            "without torchrun",
            id="pytorchjob-4-procs-without-torchrun",
        ),
        pytest.param(
            {"RANK": "4", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "MASTER_ADDR": "m"},
            "outside 0..3",
            id="rank-past-world",
        ),
        pytest.param({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}, "MASTER_ADDR", id="no-master"),
        pytest.param({"RANK": "x", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "not an integer", id="garbage"),
    ],
)
def test_detect_rejects_inconsistent_environments(env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        detect(env)


def test_device_comes_from_local_rank_not_global_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """The article's mistake: on node 2, global rank 3 is not a GPU index; LOCAL_RANK 1 is."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    ctx = detect(TORCHRUN_2x2_RANK3)
    assert device_for(ctx, "nccl") == torch.device("cuda", 1)
    too_many = DistContext(5, 2, 6, 3, 1, 0, "torchrun")
    with pytest.raises(UsageError, match="LOCAL_RANK=2 but only 2 GPU"):
        device_for(too_many, "nccl")


@pytest.mark.parametrize(
    ("choice", "cuda", "expected"), [("auto", False, "gloo"), ("auto", True, "nccl"), ("gloo", True, "gloo")]
)
def test_backend_auto(choice: str, cuda: bool, expected: str) -> None:
    assert resolve_backend(choice, cuda) == expected


def test_nccl_without_cuda_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--backend nccl needs CUDA"):
        resolve_backend("nccl", False)


def test_flags_from_env_and_command_line_wins() -> None:
    env = {"DDP_TRAINER_EPOCHS": "7", "DDP_TRAINER_BF16": "true", "DDP_TRAINER_LR": "0.5"}
    cfg = parse_args(["--lr", "0.25"], env=env)
    assert (cfg.epochs, cfg.bf16, cfg.lr, cfg.batch_size) == (7, True, 0.25, 32)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--model", "vgg11"], {}, "unknown --model 'vgg11'"),
        (["--dataset", "mnist"], {}, "--dataset: invalid choice"),
        (["--dataset", "cifar10"], {}, "--dataset cifar10 needs --data-dir"),
        (["--batch-size", "0"], {}, "--batch-size must be at least 1"),
        (["--batch-size", "8", "--global-batch-size", "16"], {}, "exclusive"),
        (["--save-every", "sometimes"], {}, "--save-every"),
        ([], {"DDP_TRAINER_EPOCHS": "two"}, "DDP_TRAINER_EPOCHS='two'"),
        ([], {"DDP_TRAINER_STRATEGY": "zero3"}, "--strategy must be one of"),
        (["--bf16", "--dtype", "float64"], {}, "conflict"),
    ],
)
def test_bad_flags(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("'", "'")):
        parse_args(argv, env=env)


@pytest.mark.parametrize(
    ("argv", "world", "message"),
    [
        (["--global-batch-size", "2"], 4, "smaller than the world size"),
        (["--global-batch-size", "6"], 4, "not divisible"),
        (["--global-batch-size", "8", "--grad-accum", "4"], 4, "smaller than the world size x --grad-accum"),
        (["--strategy", "dp"], 2, "single-process"),
    ],
)
def test_checks_against_world_size(argv: list[str], world: int, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        validate_for_world(parse_args(argv, env={}), world)


def test_global_batch_splits_per_process() -> None:
    cfg = parse_args(["--global-batch-size", "64", "--grad-accum", "2"], env={})
    validate_for_world(cfg, 4)
    assert cfg.per_process_batch(4) == 8


@pytest.mark.parametrize("world", [2, 3, 4])
def test_step_k_batches_of_all_ranks_are_the_single_process_batch(world: int) -> None:
    """The design equivalence rests on: union over ranks of step-k batches == perm[kB:(k+1)B]."""
    ds = synthetic(48, 4, 4, seed=0)
    global_batch = 12
    per_rank = global_batch // world
    single = list(ResumableDistributedSampler(ds, 1, 0, shuffle=True, seed=5).__iter__())
    shards = [list(ResumableDistributedSampler(ds, world, r, shuffle=True, seed=5)) for r in range(world)]
    for k in range(len(ds) // global_batch):
        union = sorted(i for shard in shards for i in shard[k * per_rank : (k + 1) * per_rank])
        assert union == sorted(single[k * global_batch : (k + 1) * global_batch])


def test_resumable_sampler_skips_consumed_samples() -> None:
    ds = synthetic(20, 4, 4, seed=0)
    s = ResumableDistributedSampler(ds, 2, 1, shuffle=True, seed=1)
    s.set_epoch(3)
    full = list(s)
    s.set_start(6)
    assert list(s) == full[6:] and len(s) == len(full) - 6


@pytest.mark.parametrize(("n", "world"), [(61, 4), (61, 3), (5, 8), (64, 4)])
def test_eval_sharding_counts_each_sample_once(n: int, world: int) -> None:
    ds = synthetic(n, 4, 4, seed=0)
    total = math.ceil(n / world) * world
    padded = PaddedEvalDataset(ds, total)
    seen: list[int] = []
    per_rank = set()
    for rank in range(world):
        positions = list(EvalShardSampler(total, rank, world))
        per_rank.add(len(positions))
        _, labels, valid = padded.__getitems__(positions)
        seen += [p for p, v in zip(positions, valid.tolist()) if v]
        assert torch.equal(labels[valid], ds.labels[torch.tensor(positions)[valid]])
    assert sorted(seen) == list(range(n))
    assert len(per_rank) == 1  # same number of samples on every rank: FSDP forwards stay in lockstep


def _payload(step: int) -> dict:
    return {
        "format": ckpt.FORMAT,
        "model": {"w": torch.full((3,), float(step))},
        "optimizer": {"state": {}},
        "epoch": 0,
        "step": step,
        "batches_done": step,
        "rng": [{"torch": torch.get_rng_state(), "python": (3, (1, 2, 3), None)}],
    }


def test_atomic_save_prune_and_skip_corrupt(tmp_path: Path) -> None:
    warnings: list[str] = []
    for step in (1, 2, 3, 4):
        ckpt.atomic_save(_payload(step), ckpt.checkpoint_path(tmp_path, step))
    removed = ckpt.prune(tmp_path, 2, ckpt.checkpoint_path(tmp_path, 4))
    assert [p.name for p in removed] == ["ckpt-00000002.pt", "ckpt-00000001.pt"]
    (tmp_path / "ckpt-00000009.pt").write_bytes(b"\x00garbage")
    (tmp_path / ".ckpt-00000010.pt.tmp.123").write_bytes(b"partial")
    path, payload = ckpt.find_latest(tmp_path, warnings.append)
    assert path.name == "ckpt-00000004.pt" and payload["step"] == 4
    assert len(warnings) == 1 and "ckpt-00000009.pt" in warnings[0]
    ckpt.remove_stale_temps(tmp_path)
    assert not list(tmp_path.glob(".*tmp*"))


def test_atomic_save_shows_the_written_temp_file_and_an_interrupted_save_leaves_nothing(tmp_path: Path) -> None:
    """``on_write`` (the step hooks' on_checkpoint_write) sees the temp file with the state in it,
    before the rename; a save that ends there (an exception, as a signal's) leaves neither file."""
    path = ckpt.checkpoint_path(tmp_path, 1)
    seen: list[tuple[str, int]] = []
    ckpt.atomic_save(_payload(1), path, on_write=lambda f: seen.append((Path(f.name).name, f.tell())))
    assert len(seen) == 1 and seen[0][0].startswith(".ckpt-00000001.pt.tmp.") and seen[0][1] > 0
    assert ckpt.load_file(path)["step"] == 1

    def interrupted(f: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ckpt.atomic_save(_payload(2), ckpt.checkpoint_path(tmp_path, 2), on_write=interrupted)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-00000001.pt"]


def test_prune_never_removes_the_checkpoint_just_written(tmp_path: Path) -> None:
    """Higher-step leftovers (corrupt, or another run's) sort first by name; they must not push
    the new checkpoint and its predecessors out, and unloadable files do not count as kept."""
    for step in (1, 2):
        ckpt.atomic_save(_payload(step), ckpt.checkpoint_path(tmp_path, step))
    (tmp_path / "ckpt-00000010.pt").write_bytes(b"not a checkpoint")
    data = (tmp_path / "ckpt-00000002.pt").read_bytes()
    (tmp_path / "ckpt-00000011.pt").write_bytes(data[: len(data) // 2])
    ckpt.atomic_save(_payload(12), ckpt.checkpoint_path(tmp_path, 12))  # a loadable one of another run
    current = ckpt.checkpoint_path(tmp_path, 3)
    ckpt.atomic_save(_payload(3), current)
    removed = ckpt.prune(tmp_path, 2, current)
    assert [p.name for p in removed] == ["ckpt-00000001.pt"]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ckpt-00000002.pt", "ckpt-00000003.pt", "ckpt-00000010.pt", "ckpt-00000011.pt", "ckpt-00000012.pt"]
    assert [p.name for p in ckpt.newer_than(tmp_path, 3)] == [
        "ckpt-00000012.pt",
        "ckpt-00000011.pt",
        "ckpt-00000010.pt",
    ]
    # keep_last 1: only the one just written survives of this run's
    assert [p.name for p in ckpt.prune(tmp_path, 1, current)] == ["ckpt-00000002.pt"]
    assert current.is_file()


def test_prune_skips_unloadable_files_when_counting(tmp_path: Path) -> None:
    for step in (1, 2, 4):
        ckpt.atomic_save(_payload(step), ckpt.checkpoint_path(tmp_path, step))
    (tmp_path / "ckpt-00000003.pt").write_bytes(b"\x00garbage")
    current = ckpt.checkpoint_path(tmp_path, 4)
    removed = ckpt.prune(tmp_path, 2, current)
    # kept: 4 (current) and 2 (the newest loadable below it); 3 does not count and stays while it
    # is newer than a kept one; 1 is past the window
    assert [p.name for p in removed] == ["ckpt-00000001.pt"]
    assert (tmp_path / "ckpt-00000002.pt").is_file() and (tmp_path / "ckpt-00000003.pt").is_file()
    ckpt.atomic_save(_payload(5), ckpt.checkpoint_path(tmp_path, 5))
    removed = ckpt.prune(tmp_path, 2, ckpt.checkpoint_path(tmp_path, 5))
    assert [p.name for p in removed] == ["ckpt-00000003.pt", "ckpt-00000002.pt"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:build", r"cannot import 'no_such_module_xyz'"),
        ("umod_for_test:missing", r"umod_for_test has no callable 'missing'"),
        ("umod_for_test:NOT_CALLABLE", r"umod_for_test has no callable 'NOT_CALLABLE'"),
        (":build", r"written module:factory"),
        ("umod_for_test:", r"written module:factory"),
    ],
)
def test_custom_model_spec_errors_are_the_same_early_and_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, message: str
) -> None:
    """``check_model_spec`` (before the process group) and ``build_model`` share one check."""
    from ddpctl_trainer.models import build_model, check_model_spec

    (tmp_path / "umod_for_test.py").write_text(
        "import torch.nn as nn\nNOT_CALLABLE = 3\ndef build():\n    return nn.Linear(2, 2)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match=message) as early:
        check_model_spec(spec)
    with pytest.raises(UsageError, match=message) as late:
        build_model(spec, 4)
    assert str(early.value) == str(late.value)


def test_custom_model_factory_without_num_classes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ddpctl_trainer.models import build_model, check_model_spec

    (tmp_path / "umod_for_test2.py").write_text(
        "import torch.nn as nn\ndef build():\n    return nn.Linear(2, 2)\n"
        "def bad(num_classes):\n    return 'not a module'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    check_model_spec("umod_for_test2:build")
    assert isinstance(build_model("umod_for_test2:build", 4), torch.nn.Linear)
    with pytest.raises(UsageError, match=r"the factory returned str, not a torch nn\.Module"):
        build_model("umod_for_test2:bad", 4)


class _Evil:
    def __reduce__(self):  # would run code when unpickled without weights_only
        return (print, ("pwned",))


def test_checkpoints_load_with_weights_only(tmp_path: Path) -> None:
    path = tmp_path / "ckpt-00000001.pt"
    torch.save({**_payload(1), "extra": _Evil()}, path)
    with pytest.raises(CheckpointError, match="unreadable"):
        ckpt.load_file(path)


def test_rng_state_survives_a_weights_only_round_trip(tmp_path: Path) -> None:
    from ddpctl_trainer.checkpointer import rng_state, set_rng_state

    torch.manual_seed(1)
    state = rng_state()
    torch.save({"rng": state}, tmp_path / "r.pt")
    want = torch.rand(3)
    torch.manual_seed(99)
    set_rng_state(torch.load(tmp_path / "r.pt", weights_only=True)["rng"])
    assert torch.equal(torch.rand(3), want)


def test_package_import_is_cheap() -> None:
    import subprocess
    import sys

    code = "import sys, ddpctl_trainer, ddpctl_trainer.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_sigterm_while_an_error_is_reported_is_still_one_line_and_exit_143(monkeypatch, capsys) -> None:
    """A SIGTERM that lands while an error is being printed (or a second one during the report of
    the first) must not escape as a traceback: torchrun SIGTERMs the other ranks after a failure."""
    import os
    import signal

    from ddpctl_trainer import main as trainer_main

    real_print = trainer_main.print_error
    printed: list[str] = []

    def print_and_get_terminated(message: str, rank: int | None = None) -> None:
        printed.append(message)
        real_print(message, rank)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered at the next bytecode, inside the handler

    monkeypatch.setattr(trainer_main, "print_error", print_and_get_terminated)
    before = signal.getsignal(signal.SIGTERM)
    code = trainer_main.main(["--model", "no-such-model"])
    assert code == 143
    assert printed[-1] == "stopped by SIGTERM" and len(printed) == 2, printed
    assert "Traceback" not in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("rank,printed", [(0, True), (1, False), (3, False)])
def test_only_rank_0_prints_progress_lines(rank: int, printed: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """The values are reduced over all ranks: the other ranks would print the same lines again."""
    from ddpctl_trainer.metrics import Progress

    progress = Progress("lines", rank, epochs=2)
    progress.report(0, 4, 8, loss=2.3, rate=100.0)
    progress.line("eval epoch 1/2: loss 2.2")
    out = capsys.readouterr().out
    assert (f"[rank {rank}] epoch 1/2 step 4/8 loss 2.3000 100.0 samples/s\n" in out) == printed
    assert ("eval epoch 1/2" in out) == printed


@pytest.mark.parametrize(
    ("deferring", "signals", "stop_at_once"),
    [
        (False, 1, [True]),  # start-up or teardown: the first SIGTERM stops the process
        (True, 1, [False]),  # training: recorded, the loop stops at the next step boundary
        (True, 2, [False, True]),  # a second SIGTERM abandons the stop checkpoint
    ],
)
def test_sigterm_is_deferred_only_inside_the_training_loop(
    deferring: bool, signals: int, stop_at_once: list[bool]
) -> None:
    from ddpctl_trainer import stop

    stop.reset()
    try:
        stop.defer(deferring)
        assert [stop.on_signal() for _ in range(signals)] == stop_at_once
        assert stop.requested() is deferring
        assert (stop.seconds_since_signal() is not None) is deferring
    finally:
        stop.reset()


def test_a_stop_only_this_rank_got_leaves_a_cadence_save_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rank must run a save the same way (the foreground one runs collectives the background
    one does not): a SIGTERM that reached this rank alone, just before a --save-every save, does not
    make it save in the foreground; the save goes to the writer, as on the ranks without a signal,
    and the stop vote after the step waits for it."""
    from ddpctl_trainer import stop
    from ddpctl_trainer.trainer import Trainer

    argv = ["--synthetic-samples", "32", "--image-size", "8", "--batch-size", "16", "--no-eval", "--progress", "none"]
    cfg = parse_args([*argv, "--checkpoint-dir", str(tmp_path)], {})
    stop.reset()
    try:
        trainer = Trainer.from_config(cfg, DistContext(0, 0, 1, 1, 0, 0, "single"), torch.device("cpu"), "gloo")
        writer = trainer.checkpointer.writer
        stop.defer(True)
        assert not stop.on_signal() and stop.requested()  # this process's own SIGTERM, recorded
        submitted: list[str] = []
        real_submit = writer.submit

        def submit(what: str, save: Any) -> None:
            submitted.append(what)
            real_submit(what, save)

        monkeypatch.setattr(writer, "submit", submit)
        trainer.save_checkpoint()
        writer.wait()
        assert submitted == [str(tmp_path / "ckpt-00000000.pt")]
        assert not writer.failed and (tmp_path / "ckpt-00000000.pt").is_file()
    finally:
        stop.reset()


def test_a_failure_torch_distributed_checkpoint_wrapped_is_raised_as_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its CheckpointException (a BaseException, with every rank's failure): a TrainerError found
    in it as it is; a second SIGTERM as it is (exit 143); anything else one CheckpointError line
    naming the rank, the type and the message without secrets."""
    from ddpctl_trainer.checkpointer import dcp_failure as _dcp_failure
    from ddpctl_trainer.errors import StoreError, Terminated
    from torch.distributed.checkpoint.api import CheckpointException

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2-secret")
    refused = StoreError("reading s3://b/run/ckpt-00000003/a/__1_0.distcp failed (GenericError: 503)")
    disk = OSError(28, "No space left on device\nkey hunter2-secret")
    both = CheckpointException("read_data", {0: (disk, None), 1: (refused, None)})
    assert _dcp_failure("loading checkpoint X", both) is refused
    found = _dcp_failure("loading checkpoint X", CheckpointException("read_data", {1: (disk, None)}))
    assert isinstance(found, CheckpointError)
    assert str(found) == "loading checkpoint X failed on rank 1 (OSError: [Errno 28] No space left on device key ***)"
    second = Terminated()
    signalled = CheckpointException("write", {0: (disk, None), 1: (second, None)})
    assert _dcp_failure("saving", signalled) is second


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([1], 1),  # a runtime failure
        ([143, 143], 143),  # preempted: every worker checkpointed and stopped
        ([-9, 1], 137),  # the first to fail was SIGKILLed (node loss), its peer then failed
        ([138, 138], 138),  # another node died: this node's workers lost their peer (retried)
        ([138, -15], 138),  # the first lost its peer; torchrun then stopped the node's other worker
        ([138, -9], 137),  # a worker SIGKILLed in the same second as its local peer lost it: the node's own cause
        ([138, 1], 1),  # likewise a crash: a node that failed itself must not end with a code rules ignore
        ([143, -9], 137),  # killed while its peers stopped for a preemption
        ([138, 2], 2),  # a usage error still wins over a lost peer
        ([1, 2], 2),  # any usage error wins: retrying cannot help
        ([0], 1),  # torchrun reported a failure: never exit 0 for it
        ([], 1),
    ],
)
def test_launcher_exit_code_keeps_the_reason(codes: list[int], expected: int) -> None:
    from ddpctl_trainer.launch import exit_code_for

    assert exit_code_for(codes) == expected
