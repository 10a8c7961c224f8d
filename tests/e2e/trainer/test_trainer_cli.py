"""The trainer as users start it: bad input ends in one line, every launcher shape works,
and the optional features (dp, custom models, --callback step hooks, image folders, workers,
bf16, ...) run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.support.trainer import PROG_PREFIX, PY, clean_env, free_port, launch, start, static_node_command, wait_all

pytestmark = [pytest.mark.timeout(300)]

SMALL = ["--synthetic-samples", "64", "--eval-samples", "20", "--image-size", "8", "--progress", "lines"]


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(PROG_PREFIX), err
    return lines[0]


@pytest.fixture(scope="module")
def corrupt_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bad") / "ckpt-00000001.pt"
    path.write_bytes(b"PK\x03\x04 this is no checkpoint")
    return path


@pytest.mark.parametrize(
    ("args", "code", "pattern"),
    [
        (["--model", "vgg11"], 2, r"unknown --model 'vgg11'.*convnet"),
        (["--model", "no_such_module_xyz:build"], 2, r"--model .*cannot import"),
        (["--dataset", "mnist"], 2, r"--dataset: invalid choice"),
        (
            ["--dataset", "cifar10", "--data-dir", "/no/such/dir"],
            2,
            r"--data-dir /no/such/dir does not exist.*--download",
        ),
        (["--dataset", "cifar10", "--data-dir", "{empty}"], 2, r"has no CIFAR-10.*--download"),
        (["--dataset", "imagefolder", "--data-dir", "{empty}"], 2, r"--data-dir .* is not an image folder"),
        (["--dataset", "imagefolder"], 2, r"--dataset imagefolder needs --data-dir"),
        (["--batch-size", "0"], 2, r"--batch-size must be at least 1"),
        (["--backend", "nccl"], 2, r"--backend nccl needs CUDA"),
        (["--resume", "{corrupt}"], 1, r"checkpoint .*ckpt-00000001.pt is unreadable"),
        (["--resume", "/no/such/ckpt.pt"], 1, r"--resume /no/such/ckpt.pt: no such file"),
        # a URL of a scheme without an object store would have become a local folder named `ftp:`
        (
            ["--checkpoint-dir", "ftp://host/run"],
            2,
            r"error: --checkpoint-dir: ftp:// is not a supported object store; give an s3://, gs:// or az:// URL",
        ),
        # never echoed: a pasted URL may hold a key (the test checks SeCrEt is nowhere in the output)
        (
            ["--checkpoint-dir", "ftp://AKIA:SeCrEt@host/run"],
            2,
            r"error: --checkpoint-dir: the URL holds credentials .*; remove them",
        ),
        (["--resume", "gs://AKIA:SeCrEt@bucket/ckpt.pt"], 2, r"error: --resume: .*not gs:// URLs; mount"),
        (["--callback", "no_such_module_xyz:Hook"], 2, r"--callback .*cannot import 'no_such_module_xyz'"),
        (["--callback", "hooks"], 2, r"--callback 'hooks': a callback is written module:name"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, corrupt_ckpt: Path, args: list[str], code: int, pattern: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [a.replace("{empty}", str(empty)).replace("{corrupt}", str(corrupt_ckpt)) for a in args]
    run = launch(tmp_path, [*SMALL, *args], metrics=False, timeout=120)
    assert run.code == code, run.explain()
    assert re.search(pattern, _one_line(run.err)), run.err
    assert "Traceback" not in run.err and "SeCrEt" not in run.err


@pytest.mark.slow
def test_batch_smaller_than_world_stops_all_ranks(tmp_path: Path) -> None:
    """Checked before the process group exists, so no rank is left waiting for the others."""
    run = launch(tmp_path, [*SMALL, "--global-batch-size", "1"], nproc=2, metrics=False, timeout=120)
    assert run.code != 0
    ours = [line for line in run.err.splitlines() if line.startswith(PROG_PREFIX)]
    usage = (
        f"{PROG_PREFIX} --global-batch-size 1 is smaller than the world size x --grad-accum (2 x 1 = 2): "
        "give at least 2"
    )
    assert usage in ours, run.err
    # the only other possible line: a rank that torchrun stopped after the first one exited (without
    # its rank label when the signal came before it knew its rank, as on a loaded machine)
    stopped = {f"{PROG_PREFIX} [rank 1] stopped by SIGTERM", f"{PROG_PREFIX} stopped by SIGTERM"}
    assert set(ours) <= {usage, *stopped}, run.err
    assert "exitcode  : 2" in run.err  # torchrun's report: the workers exited with the usage code
    assert "[rank0]: Traceback" not in run.err and "[rank1]: Traceback" not in run.err


def test_checkpoint_of_another_model_is_one_line(tmp_path: Path) -> None:
    first = launch(tmp_path, [*SMALL, "--num-classes", "4", "--max-steps", "1", "--no-eval", "--progress", "none"])
    assert first.code == 0, first.explain()
    second = launch(tmp_path, [*SMALL, "--num-classes", "10", "--no-eval", "--progress", "none"], metrics=False)
    assert second.code == 1
    assert re.search(r"checkpoint .*ckpt-00000001.pt does not fit this run", _one_line(second.err))


@pytest.mark.slow
def test_two_nodes_of_two_processes(tmp_path: Path) -> None:
    """The default job's shape (2 nodes x 2 processes, CPU/gloo, defaults otherwise) as two
    torchrun agents with static rendezvous: RANK != LOCAL_RANK on the second node."""
    port = str(free_port())
    procs = []
    for node in (0, 1):
        work = tmp_path / f"node{node}"
        work.mkdir()
        cmd = static_node_command(node, 2, 2, port, work, ["--progress", "lines"])
        procs.append(start(cmd, work, clean_env()))
    outs = wait_all(procs, timeout=240)
    assert [p.returncode for p in procs] == [0, 0], outs
    text = outs[0][0] + outs[1][0]
    # rank 0 reports the global progress; the other ranks would only repeat it
    # ... and the time left: the last step's line has nothing left to wait for
    assert re.search(r"^\[rank 0\] epoch 2/2 step 8/8 loss \d+\.\d+ \d+\.\d samples/s eta 0s$", text, re.M), text
    assert re.search(r"^\[rank 0\] epoch 1/2 step \d/8 .* eta \d+s$", text, re.M), text
    assert not re.search(r"^\[rank [1-3]\] (eval )?epoch", text, re.M), text
    assert "world size 4" in outs[0][0]
    # rank 0 (on node 0) writes checkpoints and metrics; node 1 writes nothing
    assert (tmp_path / "node0" / "ckpt" / "ckpt-00000016.pt").is_file()
    assert not (tmp_path / "node1" / "ckpt").exists() and not (tmp_path / "node1" / "metrics.jsonl").exists()
    events = list((tmp_path / "node0" / "metrics.jsonl").read_text().splitlines())
    assert any('"first_step"' in e for e in events) and any('"world_size": 4' in e for e in events)


@pytest.mark.slow
def test_pytorchjob_style_plain_python_processes(tmp_path: Path) -> None:
    """A PyTorchJob pod without torchrun: RANK=pod index, WORLD_SIZE=pods, one process each."""
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = clean_env(
            {
                "RANK": str(rank),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "PET_NPROC_PER_NODE": "1",
                "PET_NNODES": "2",
            }
        )
        cmd = [
            PY,
            "-m",
            "ddpctl_trainer",
            *SMALL,
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
            "--save-final",
            str(tmp_path / "final-{rank}.pt"),
            "--max-steps",
            "3",
        ]
        procs.append(start(cmd, tmp_path, env))
    outs = wait_all(procs, timeout=180)
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "world size 2" in outs[0][0]
    a, b = (torch.load(tmp_path / f"final-{r}.pt", weights_only=True)["model"] for r in (0, 1))
    assert all(torch.equal(a[k], b[k]) for k in a)


def _write_user_model(tmp_path: Path) -> Path:
    pkg = tmp_path / "usermods"
    pkg.mkdir()
    (pkg / "tiny_user_model.py").write_text(
        "import torch.nn as nn\n"
        "def build(num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 32), nn.ReLU(), nn.Linear(32, num_classes))\n"
    )
    return pkg


USER_HOOKS = """\
class Hooks:
    def on_step_end(self, trainer):
        trainer.metrics.emit("user_step", step=trainer.step, rank=trainer.ctx.rank)

    def on_epoch_end(self, trainer):
        trainer.metrics.emit("user_epoch", epoch=trainer.epoch)
"""


def test_a_users_callback_runs_after_every_step_and_epoch(tmp_path: Path) -> None:
    """The documented seam, as a user loads their own hooks: --callback MODULE:NAME (a class, made
    by the trainer), from the user's code on PYTHONPATH."""
    pkg = tmp_path / "usermods"
    pkg.mkdir()
    (pkg / "tiny_user_hooks.py").write_text(USER_HOOKS)
    args = [*SMALL, "--batch-size", "16", "--epochs", "2", "--no-eval", "--callback", "tiny_user_hooks:Hooks"]
    run = launch(tmp_path, args, env={"PYTHONPATH": str(pkg)})
    assert run.code == 0, run.explain()
    assert [e["step"] for e in run.events("user_step")] == [1, 2, 3, 4, 5, 6, 7, 8]  # 64 samples / 16
    assert [e["epoch"] for e in run.events("user_epoch")] == [1, 2]


def _write_image_folder(root: Path) -> None:
    from PIL import Image

    for split, per_class in (("train", 6), ("val", 3)):
        for cls, color in (("cat", (200, 30, 30)), ("dog", (30, 30, 200))):
            d = root / split / cls
            d.mkdir(parents=True)
            for i in range(per_class):
                Image.new("RGB", (12, 12), tuple(min(255, c + 5 * i) for c in color)).save(d / f"{i}.png")


def test_features_dp_user_model_bf16_accum_clip_adamw(tmp_path: Path) -> None:
    pkg = _write_user_model(tmp_path)
    run = launch(
        tmp_path,
        [
            *SMALL,
            "--strategy",
            "dp",
            "--model",
            "tiny_user_model:build",
            "--bf16",
            "--grad-accum",
            "2",
            "--clip-grad",
            "1.0",
            "--optimizer",
            "adamw",
            "--scheduler",
            "cosine",
            "--epochs",
            "1",
            "--batch-size",
            "8",
        ],
        env={"PYTHONPATH": str(pkg)},
    )
    assert run.code == 0, run.explain()
    assert run.events("done")[0]["step"] == 4  # 64 samples / 8 per micro-batch / 2 accumulated
    assert run.events("first_step")


@pytest.mark.slow
def test_features_imagefolder_workers_resnet18_under_torchrun(tmp_path: Path) -> None:
    _write_image_folder(tmp_path / "images")
    run = launch(
        tmp_path,
        [
            "--dataset",
            "imagefolder",
            "--data-dir",
            str(tmp_path / "images"),
            "--image-size",
            "8",
            "--model",
            "resnet18",
            "--batch-size",
            "2",
            "--epochs",
            "1",
            "--num-workers",
            "1",
            "--static-graph",
            "--no-gradient-as-bucket-view",
            "--bucket-cap-mb",
            "5",
            "--progress",
            "lines",
        ],
        nproc=2,
    )
    assert run.code == 0, run.explain()
    (ev,) = run.events("eval")
    assert ev["samples"] == 6  # 2 classes x 3 validation images, counted once across 2 ranks
    assert run.events("done")[0]["step"] == 3  # 12 images / (2 ranks x 2)


@pytest.mark.timeout(420)
@pytest.mark.slow
def test_compile_under_ddp_trains_like_eager(tmp_path: Path) -> None:
    """torch.compile of the DDP-wrapped model (the slowest test: inductor compiles on CPU)."""
    args = [*SMALL, "--no-eval", "--epochs", "1", "--batch-size", "8", "--save-final", "final.pt"]
    eager = launch(tmp_path / "eager", args, nproc=2)
    compiled = launch(tmp_path / "compiled", [*args, "--compile"], nproc=2, timeout=400)
    assert eager.code == 0, eager.explain()
    assert compiled.code == 0, compiled.explain()
    a, b = eager.final(), compiled.final()
    assert a.keys() == b.keys()
    for k in a:  # fused kernels round differently; 4 SGD steps stay within 1e-4
        torch.testing.assert_close(b[k], a[k], atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_a_timed_out_torchrun_leaves_no_worker_behind(tmp_path: Path) -> None:
    """torchrun starts each worker in a session of its own, so killing torchrun's process group
    alone orphans the workers (they were found running long after such a test)."""
    from tests.support.trainer import _SESSION, tagged_pids

    with pytest.raises(AssertionError, match="timed out") as info:
        launch(tmp_path, [*SMALL, "--epochs", "100000", "--log-every", "1"], nproc=2, timeout=25)
    assert re.search(r"\[rank 0\] .*epoch \d+/100000", str(info.value)), "no worker ran: nothing was tested"
    assert not tagged_pids(_SESSION)


@pytest.mark.parametrize(
    ("flag", "shown"),
    [
        ("--epochs", "(default: 2)"),  # no help text of its own: argparse showed no default at all
        ("--checkpoint-dir", "(default: ./checkpoints)"),
        ("--batch-size", "(default 32)"),  # its text gives it: not repeated as "(default: None)"
        ("--stall-timeout", "(default: 300.0)"),
    ],
)
def test_trainer_help_shows_each_default_once(flag: str, shown: str) -> None:
    from ddpctl_trainer.config import build_parser

    action = build_parser()._option_string_actions[flag]
    assert action.help is not None and action.help.endswith(shown), action.help
    assert action.help.count("default") == 1 and "(default: None)" not in action.help
