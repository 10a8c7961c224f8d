"""Command-line flags -> a frozen ``TrainConfig``.

Every flag can also come from an environment variable ``DDP_TRAINER_<FLAG>`` (dashes become
underscores, e.g. ``DDP_TRAINER_BATCH_SIZE=64``); a flag on the command line wins. That lets a
Kubernetes manifest tune a job without rewriting the container's command.

Nothing here imports torch: parsing and the checks that need no process group run first, on
every rank alike, so bad input stops all ranks the same way instead of leaving some waiting.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from . import stragglers
from .errors import UsageError
from .preflight import config as preflight_config
from .protocol import (
    COLLECTIVE_TIMEOUT_S,
    ENV_PREFIX,
    EXIT_STRAGGLER,
    OBJECT_STORE_ENDPOINT_ENV,
    PREFLIGHT_JOB_REPEATS,
    PREFLIGHT_JOB_WINDOW_S,
    PREFLIGHT_ONLY_FLAG,
    PREFLIGHT_TOLERANCE,
    PROG,
    STALL_TIMEOUT_S,
    STRAGGLER_EVERY,
    STRAGGLER_MODE,
    STRAGGLER_TOLERANCE,
    STRAGGLER_WINDOWS,
    checkpoint_url_problem,
    flag_env,
    url_scheme,
)

STRATEGIES = ("ddp", "fsdp", "dp")
BACKENDS = ("auto", "gloo", "nccl")
BUILTIN_MODELS = ("convnet", "resnet18", "resnet50")
DATASETS = ("synthetic", "cifar10", "imagefolder")
OPTIMIZERS = ("sgd", "adamw")
SCHEDULERS = ("none", "cosine", "step")
DTYPES = ("float32", "float64")
PROGRESS = ("auto", "bar", "lines", "none")
FSDP_STATE_DICTS = ("full", "sharded")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs, validated; immutable so no code path edits it by accident."""

    # what to train
    model: str = "convnet"
    dataset: str = "synthetic"
    data_dir: str | None = None
    download: bool = False
    synthetic_samples: int = 1024
    eval_samples: int = 256
    image_size: int = 32
    num_classes: int = 10
    # how
    strategy: str = "ddp"
    backend: str = "auto"
    epochs: int = 2
    batch_size: int | None = 32
    global_batch_size: int | None = None
    max_steps: int = 0
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    optimizer: str = "sgd"
    scheduler: str = "none"
    grad_accum: int = 1
    clip_grad: float = 0.0
    bf16: bool = False
    dtype: str = "float32"
    compile: bool = False
    channels_last: bool = False
    seed: int = 0
    eval: bool = True
    # data loading
    num_workers: int = 0
    pin_memory: bool | None = None
    persistent_workers: bool = True
    prefetch_factor: int = 2
    # DDP knobs
    bucket_cap_mb: float = 25.0
    gradient_as_bucket_view: bool = True
    static_graph: bool = False
    find_unused_parameters: bool = False
    # checkpoints
    checkpoint_dir: str = "./checkpoints"
    keep_last: int = 3
    save_every: str = "epoch"
    resume: str = "auto"
    fsdp_state_dict: str = "full"
    save_final: str | None = None
    # output
    metrics_file: str | None = None
    log_every: int = 10
    progress: str = "auto"
    timeout_s: int = COLLECTIVE_TIMEOUT_S
    stall_timeout: float = float(STALL_TIMEOUT_S)
    # step hooks
    callback: tuple[str, ...] = ()
    # the preflight checks before the first step (ddpctl_trainer.preflight.config names them)
    preflight: str = "off"
    preflight_tolerance: float = PREFLIGHT_TOLERANCE
    preflight_min_gflops: float = 0.0
    preflight_min_tflops: float = 0.0
    preflight_min_busbw: float = 0.0
    preflight_min_h2d: float = 0.0
    fabric: str = "socket"
    preflight_gemm_n: int = 0
    preflight_allreduce_mib: float = 0.0
    preflight_h2d_mib: float = preflight_config.H2D_MIB
    preflight_repeats: int = PREFLIGHT_JOB_REPEATS
    preflight_window: float = PREFLIGHT_JOB_WINDOW_S
    preflight_json: str | None = None
    preflight_only: bool = False
    # the straggler detector during training (ddpctl_trainer.stragglers)
    stragglers: str = STRAGGLER_MODE
    stragglers_tolerance: float = STRAGGLER_TOLERANCE
    stragglers_every: int = STRAGGLER_EVERY
    stragglers_windows: int = STRAGGLER_WINDOWS

    @property
    def save_every_steps(self) -> int:
        """Steps between checkpoints; 0 means once per epoch only."""
        return 0 if self.save_every in ("epoch", "0") else int(self.save_every)

    def per_process_batch(self, world_size: int) -> int:
        """The batch each process loads per micro-step."""
        if self.global_batch_size is not None:
            return self.global_batch_size // (world_size * self.grad_accum)
        assert self.batch_size is not None
        return self.batch_size

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, so the dict can go into a weights_only checkpoint and JSON."""
        return dataclasses.asdict(self)


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


class _Repeatable(argparse.Action):
    """A flag that may be given several times (a list). Its default (from the environment) is
    replaced, not extended, by the values on the command line: the command line wins."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        given = getattr(namespace, self.dest, None)
        items = [] if given is None or given is self.default else list(given)
        setattr(namespace, self.dest, [*items, values])


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors become one-line ``UsageError``s (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    """All flags, grouped as in ``--help``."""
    p = _Parser(
        prog=PROG,
        description="Train a model with PyTorch DDP/FSDP. Run under torchrun for several processes; "
        f"every flag may also be set as an environment variable {ENV_PREFIX}<FLAG>.",
    )
    bo = argparse.BooleanOptionalAction
    g = p.add_argument_group("model and data")
    g.add_argument(
        "--model",
        default="convnet",
        help=f"one of {', '.join(BUILTIN_MODELS)}, or module:factory for your own nn.Module",
    )
    g.add_argument("--dataset", default="synthetic", choices=DATASETS)
    g.add_argument("--data-dir", default=None, help="dataset root (cifar10, imagefolder)")
    g.add_argument("--download", action=bo, default=False, help="download cifar10 into --data-dir if missing")
    g.add_argument("--synthetic-samples", type=int, default=1024, help="training samples of the synthetic dataset")
    g.add_argument("--eval-samples", type=int, default=256, help="evaluation samples of the synthetic dataset")
    g.add_argument("--image-size", type=int, default=32, help="synthetic/imagefolder image side")
    g.add_argument("--num-classes", type=int, default=10, help="classes of the synthetic dataset")

    g = p.add_argument_group("training")
    g.add_argument("--strategy", default="ddp", choices=STRATEGIES)
    g.add_argument("--backend", default="auto", choices=BACKENDS, help="auto: nccl with CUDA, gloo otherwise")
    g.add_argument("--epochs", type=int, default=2)
    g.add_argument("--batch-size", type=int, default=None, help="batch per process (default 32)")
    g.add_argument(
        "--global-batch-size",
        type=int,
        default=None,
        help="batch over all processes and accumulation steps (instead of --batch-size)",
    )
    g.add_argument("--max-steps", type=int, default=0, help="stop after this many optimizer steps (0: no limit)")
    g.add_argument("--lr", type=float, default=0.05)
    g.add_argument("--momentum", type=float, default=0.9)
    g.add_argument("--weight-decay", type=float, default=0.0)
    g.add_argument("--optimizer", default="sgd", choices=OPTIMIZERS)
    g.add_argument("--scheduler", default="none", choices=SCHEDULERS)
    g.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (no_sync between)")
    g.add_argument("--clip-grad", type=float, default=0.0, help="max gradient norm (0: off)")
    g.add_argument("--bf16", action=bo, default=False, help="bfloat16 autocast")
    g.add_argument("--dtype", default="float32", choices=DTYPES, help="parameter dtype (float64 for exact tests)")
    g.add_argument("--compile", action=bo, default=False, help="torch.compile the wrapped model")
    g.add_argument("--channels-last", action=bo, default=False, help="channels_last memory format")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--eval", action=bo, default=True, help="evaluate after every epoch")

    g = p.add_argument_group("data loading")
    g.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes per rank")
    g.add_argument("--pin-memory", action=bo, default=None, help="pinned host memory (default: on with CUDA)")
    g.add_argument("--persistent-workers", action=bo, default=True)
    g.add_argument("--prefetch-factor", type=int, default=2)

    g = p.add_argument_group("DDP")
    g.add_argument("--bucket-cap-mb", type=float, default=25.0)
    g.add_argument("--gradient-as-bucket-view", action=bo, default=True)
    g.add_argument("--static-graph", action=bo, default=False)
    g.add_argument("--find-unused-parameters", action=bo, default=False)

    g = p.add_argument_group("checkpoints")
    g.add_argument(
        "--checkpoint-dir",
        default="./checkpoints",
        help="a local directory, or an object store URL: s3://BUCKET/PREFIX (an S3-compatible server: "
        f"{OBJECT_STORE_ENDPOINT_ENV}), gs://BUCKET/PREFIX or az://CONTAINER/PREFIX; credentials from the "
        "environment or workload identity (needs the obstore package)",
    )
    g.add_argument("--keep-last", type=int, default=3, help="checkpoints to keep")
    g.add_argument("--save-every", default="epoch", help="'epoch' or a number of optimizer steps")
    g.add_argument(
        "--resume",
        default="auto",
        help="'auto' (newest valid checkpoint in --checkpoint-dir), 'never' (start at step 0; `ddpctl run "
        "--fresh` deletes the old checkpoints instead), or a checkpoint path",
    )
    g.add_argument(
        "--fsdp-state-dict",
        default="full",
        choices=FSDP_STATE_DICTS,
        help="fsdp checkpoints: one full file from rank 0, or sharded: every rank writes its own shard (needs "
        "a shared --checkpoint-dir, or an object store URL)",
    )
    g.add_argument(
        "--save-final",
        default=None,
        help="also write the final model weights here ({rank} in the path: every rank writes)",
    )

    g = p.add_argument_group("output")
    g.add_argument("--metrics-file", default=None, help="JSON lines of metrics, written by rank 0")
    g.add_argument("--log-every", type=int, default=10, help="optimizer steps between progress lines")
    g.add_argument(
        "--progress",
        default="auto",
        choices=PROGRESS,
        help="auto: a bar on rank 0 when stderr is a terminal, plain lines otherwise",
    )
    g.add_argument(
        "--timeout-s",
        type=int,
        default=COLLECTIVE_TIMEOUT_S,
        help="process-group timeout: seconds a collective waits for a peer before this rank fails (so a rank "
        "that died mid-collective stops the group instead of hanging it); keep it above the longest checkpoint "
        "write",
    )
    g.add_argument(
        "--stall-timeout",
        type=float,
        default=float(STALL_TIMEOUT_S),
        help="seconds without progress on any rank before the job is stopped with a summary of who "
        "stalled and where (exit code 200); 0: off. Must exceed the longest checkpoint write or eval batch",
    )

    g = p.add_argument_group("step hooks")
    g.add_argument(
        "--callback",
        action=_Repeatable,
        default=None,
        metavar="MODULE:NAME",
        help="your own step hooks: an object (or a class or function that makes one) with some of the methods "
        "on_epoch_start, on_step_end, on_epoch_end and on_checkpoint_write, each given a view of the run "
        "(ddpctl_trainer.callbacks.TrainerView: the position, the last loss, requests to save or stop), called "
        "on every rank after the trainer's own logging and before its checkpoints and stop vote; repeat the flag "
        f"for several ({flag_env('--callback')}: comma-separated)",
    )

    g = p.add_argument_group("preflight")
    preflight_config.add_flags(g, mode_default="off", in_job=True)
    g.add_argument(
        PREFLIGHT_ONLY_FLAG,
        action=bo,
        default=False,
        help="run the preflight checks (--preflight warn or fail), print the report and stop: no data, model or "
        "training (`ddpctl check`)",
    )
    g = p.add_argument_group("stragglers")
    g.add_argument(
        "--stragglers",
        choices=stragglers.MODES,
        default=STRAGGLER_MODE,
        help="during training, name a node whose own work per step stays below --stragglers-tolerance x the "
        "median speed for --stragglers-windows windows of --stragglers-every steps (rank 0 prints one line); "
        f"fail: then every rank stops after the same step with exit code {EXIT_STRAGGLER}",
    )
    g.add_argument(
        "--stragglers-tolerance",
        type=float,
        default=STRAGGLER_TOLERANCE,
        metavar="SHARE",
        help="the share of the median speed below which a node is slow",
    )
    g.add_argument("--stragglers-every", type=int, default=STRAGGLER_EVERY, metavar="STEPS", help="steps per window")
    g.add_argument(
        "--stragglers-windows",
        type=int,
        default=STRAGGLER_WINDOWS,
        metavar="N",
        help="windows in a row below the tolerance that name a node (and within it that say it recovered)",
    )
    _show_defaults(p)
    return p


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every flag's help ends with its default, once: argparse's ArgumentDefaultsHelpFormatter
    skips flags without a help text (--epochs, --lr) and repeats a default the text already gives
    (`batch per process (default 32) (default: None)`)."""
    for action in parser._actions:  # argparse has no public iterator over actions
        if not action.option_strings or action.dest == "help":
            continue
        text = action.help or ""
        if "default" not in text and action.default not in (None, argparse.SUPPRESS):
            shown = str(action.default).replace("%", "%%")
            text = f"{text} (default: {shown})".strip()
        action.help = text


def _env_defaults(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """Turn ``DDP_TRAINER_<FLAG>`` variables into defaults (the command line still wins)."""
    for action in parser._actions:  # argparse has no public iterator over actions
        if not action.option_strings or action.dest == "help":
            continue
        flag = action.option_strings[0]
        name = flag_env(flag)
        if name not in env:
            continue
        raw = env[name]
        try:
            if isinstance(action, argparse.BooleanOptionalAction):
                value: Any = _bool(raw)
            elif isinstance(action, _Repeatable):
                value = [part.strip() for part in raw.split(",") if part.strip()]
            elif action.type is not None:
                value = action.type(raw)  # type: ignore[operator]  # typeshed allows str types; ours are callables
            else:
                value = raw
        except ValueError:
            raise UsageError(f"{name}={raw!r} is not a valid value for {flag}") from None
        if action.choices is not None and value not in action.choices:
            raise UsageError(f"{name}={raw!r}: {flag} must be one of {', '.join(map(str, action.choices))}")
        parser.set_defaults(**{action.dest: value})


def _local_path(flag: str, value: str | None) -> None:
    """A URL given where the trainer takes a path would become a local folder named `s3:` (lost
    with the pod): refuse it, naming what works instead (and only its scheme: a URL may hold a key)."""
    scheme = url_scheme(value) if value else None
    if scheme is not None:
        raise UsageError(
            f"{flag}: the trainer reads and writes local paths only, not {scheme}:// URLs; mount the "
            "storage as a volume (e.g. --volume checkpoints=CLAIM:/checkpoints) and give its path"
        )


def _checkpoint_dir(value: str) -> None:
    """A local path, or an object store URL the trainer can use (``protocol.checkpoint_url_problem``,
    which the spec's `checkpoints` asks too): any other URL would become a local folder named `ftp:`
    (lost with the pod). The message never repeats the URL: a pasted one may hold a secret. Whether
    the client is installed is asked where the trainer starts (``require_object_store_client``),
    not here: the CLI runs these checks on a host that need not have it."""
    if url_scheme(value) is None:
        return
    wrong = checkpoint_url_problem(value)
    if wrong is not None:
        problem, fix = wrong
        raise UsageError(f"--checkpoint-dir: {problem}; {fix}")


def require_object_store_client(cfg: TrainConfig) -> None:
    """An object store ``--checkpoint-dir`` needs obstore in the trainer's environment: checked
    when the trainer starts, on every rank alike (before the process group), not in the static
    checks the CLI also runs on its host (a ``run --docker`` image may have it, the host not)."""
    if url_scheme(cfg.checkpoint_dir) is not None and importlib.util.find_spec("obstore") is None:
        raise UsageError(
            "--checkpoint-dir: checkpoints in object storage need the obstore package, which is not installed: "
            "pip install 'obstore>=0.12,<0.13' (or 'ddpctl[s3]'); ddpctl build --build-arg OBJECT_STORE=1 puts "
            "it in the trainer image"
        )


def parse_args(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> TrainConfig:
    """Parse flags (and env defaults) into a ``TrainConfig``; raise ``UsageError`` on bad input."""
    env = os.environ if env is None else env
    parser = build_parser()
    _env_defaults(parser, env)
    ns = parser.parse_args(argv)
    values = vars(ns)
    if values["batch_size"] is not None and values["global_batch_size"] is not None:
        raise UsageError("--batch-size and --global-batch-size are exclusive: give only one")
    if values["batch_size"] is None and values["global_batch_size"] is None:
        values["batch_size"] = 32
    values["callback"] = tuple(values["callback"] or ())
    preflight_config.from_values(values)  # its flags' own checks, as the standalone check makes them
    if values["preflight_only"] and values["preflight"] == "off":
        raise UsageError(f"{PREFLIGHT_ONLY_FLAG} needs --preflight warn or fail: with it off there is nothing to run")
    cfg = TrainConfig(**values)
    problem = stragglers.config_problem(straggler_config(cfg), env)
    if problem:
        raise UsageError(problem)
    validate_static(cfg)
    return cfg


def straggler_config(cfg: TrainConfig) -> stragglers.StragglerConfig:
    return stragglers.StragglerConfig(
        cfg.stragglers, cfg.stragglers_tolerance, cfg.stragglers_every, cfg.stragglers_windows
    )


def validate_static(cfg: TrainConfig) -> None:
    """Checks that need neither torch nor the world size."""
    positive = {
        "--epochs": cfg.epochs,
        "--grad-accum": cfg.grad_accum,
        "--synthetic-samples": cfg.synthetic_samples,
        "--image-size": cfg.image_size,
        "--log-every": cfg.log_every,
        "--keep-last": cfg.keep_last,
        "--timeout-s": cfg.timeout_s,
        "--prefetch-factor": cfg.prefetch_factor,
    }
    if cfg.batch_size is not None:
        positive["--batch-size"] = cfg.batch_size
    if cfg.global_batch_size is not None:
        positive["--global-batch-size"] = cfg.global_batch_size
    for flag, value in positive.items():
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    for flag, value in {
        "--num-workers": cfg.num_workers,
        "--max-steps": cfg.max_steps,
        "--eval-samples": cfg.eval_samples,
    }.items():
        if value < 0:
            raise UsageError(f"{flag} must be 0 or more, got {value}")
    if cfg.num_classes < 2:
        raise UsageError(f"--num-classes must be at least 2, got {cfg.num_classes}")
    if cfg.lr <= 0:
        raise UsageError(f"--lr must be positive, got {cfg.lr}")
    if cfg.clip_grad < 0:
        raise UsageError(f"--clip-grad must be 0 (off) or positive, got {cfg.clip_grad}")
    if cfg.bucket_cap_mb <= 0:
        raise UsageError(f"--bucket-cap-mb must be positive, got {cfg.bucket_cap_mb}")
    if not (cfg.save_every == "epoch" or cfg.save_every.isdigit()):
        raise UsageError(f"--save-every must be 'epoch' or a number of steps, got {cfg.save_every!r}")
    if cfg.model not in BUILTIN_MODELS and ":" not in cfg.model:
        raise UsageError(f"unknown --model {cfg.model!r}: use one of {', '.join(BUILTIN_MODELS)} or module:factory")
    for spec in cfg.callback:
        module_name, _, name = spec.partition(":")
        if not module_name or not name:
            raise UsageError(f"--callback {spec!r}: a callback is written module:name, e.g. mypkg.hooks:Checkpointer")
    if cfg.bf16 and cfg.dtype == "float64":
        raise UsageError("--bf16 and --dtype float64 conflict: drop one")
    _checkpoint_dir(cfg.checkpoint_dir)
    paths = {
        "--save-final": cfg.save_final,
        "--data-dir": cfg.data_dir,
        "--metrics-file": cfg.metrics_file,
        "--resume": None if cfg.resume in ("auto", "never") else cfg.resume,
    }
    for path_flag, path_value in paths.items():
        _local_path(path_flag, path_value)
    if cfg.dataset in ("cifar10", "imagefolder"):
        if not cfg.data_dir:
            raise UsageError(f"--dataset {cfg.dataset} needs --data-dir DIR")
        path = Path(cfg.data_dir)
        if not path.is_dir() and not (cfg.dataset == "cifar10" and cfg.download):
            hint = " (or add --download)" if cfg.dataset == "cifar10" else ""
            raise UsageError(f"--data-dir {cfg.data_dir} does not exist or is not a directory{hint}")
    if cfg.resume not in ("auto", "never") and not cfg.resume:
        raise UsageError("--resume must be 'auto', 'never' or a checkpoint path")
    if not cfg.stall_timeout >= 0:  # also NaN
        raise UsageError(f"--stall-timeout must be 0 (off) or a number of seconds, got {cfg.stall_timeout:g}")
    if cfg.stall_timeout >= cfg.timeout_s:
        raise UsageError(
            f"--stall-timeout {cfg.stall_timeout:g} is not below --timeout-s {cfg.timeout_s}: the process-group "
            "timeout would end a hung job first, without a summary; lower it (or 0 to turn the watchdog off)"
        )


def validate_for_world(cfg: TrainConfig, world_size: int) -> None:
    """Checks that depend on the number of processes (known from the environment before init)."""
    if cfg.strategy == "dp" and world_size > 1:
        raise UsageError(
            f"--strategy dp is single-process (nn.DataParallel) but WORLD_SIZE is {world_size}: "
            "use --strategy ddp under torchrun, or run dp with one process"
        )
    if cfg.global_batch_size is not None:
        per_step = world_size * cfg.grad_accum
        if cfg.global_batch_size < per_step:
            raise UsageError(
                f"--global-batch-size {cfg.global_batch_size} is smaller than the world size x --grad-accum "
                f"({world_size} x {cfg.grad_accum} = {per_step}): give at least {per_step}"
            )
        if cfg.global_batch_size % per_step:
            raise UsageError(
                f"--global-batch-size {cfg.global_batch_size} is not divisible by world size x --grad-accum "
                f"({per_step}): use a multiple of {per_step}"
            )
