"""What `run --local` and `run --docker` both need to plan a job: the host directories that stand
in for the spec's volumes, paths in the trainer's arguments mapped onto them, the built-in
trainer's flags checked before anything starts, and `--fresh`'s checkpoint removal."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from ddpctl.errors import UsageError
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol


def parse_mounts(items: Sequence[str]) -> dict[str, Path]:
    """--mount NAME=DIR: the host directory that stands in for the spec's volume NAME."""
    mounts: dict[str, Path] = {}
    for item in items:
        name, found, path = item.partition("=")
        if not found or not name or not path:
            raise UsageError(f"--mount: {item!r} is not NAME=DIR; e.g. --mount data=./data")
        mounts[name] = Path(path).expanduser().resolve()
    return mounts


def volume_dirs(spec: JobSpec, run_dir: Path, mounts: Mapping[str, Path]) -> dict[str, Path]:
    """Host directory per spec volume: --mount's, else <run-dir>/<volume name>."""
    unknown = sorted(set(mounts) - set(spec.volumes) - {"checkpoints"})
    if unknown:
        known = ", ".join(sorted(set(spec.volumes) | {"checkpoints"}))
        raise UsageError(f"--mount: the spec has no volume {unknown[0]!r}; mount one of {known}")
    dirs = {name: mounts.get(name, run_dir / name) for name in spec.volumes}
    if "checkpoints" in mounts:
        dirs.setdefault("checkpoints", mounts["checkpoints"])
    return dirs


def remap_paths(args: Sequence[str], mapping: Mapping[str, Path]) -> list[str]:
    """Replace container mount paths in arguments (`/ckpt`, `/data/x`, `--data-dir=/data`)."""
    out = []
    for arg in args:
        key, eq, value = arg.partition("=") if arg.startswith("--") and "=" in arg else ("", "", arg)
        for mount, host in sorted(mapping.items(), key=lambda kv: -len(kv[0])):
            if value == mount or value.startswith(mount.rstrip("/") + "/"):
                value = str(host) + value[len(mount.rstrip("/")) :]
                break
        out.append(f"{key}{eq}{value}" if eq else value)
    return out


def arg_value(args: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in `args`: the last one given, as argparse takes it."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def check_trainer_args(args: Sequence[str], env: Mapping[str, str], world_size: int) -> None:
    """The built-in trainer's flags (and DDP_TRAINER_* env), checked with the trainer's own parser
    before any process starts (ddpctl_trainer.config imports no torch): a bad flag is one line and
    exit 2 here, not a usage error from every rank after the job started. `--help` is left to the
    trainer."""
    if any(arg in ("-h", "--help") for arg in args):
        return
    from ddpctl_trainer.config import parse_args, validate_for_world
    from ddpctl_trainer.errors import UsageError as TrainerUsageError

    try:
        validate_for_world(parse_args(list(args), env), world_size)
    except TrainerUsageError as exc:
        raise UsageError(
            f"trainer: {exc}; fix the trainer's arguments after -- (python -m ddpctl_trainer --help lists them)"
        ) from None


def is_trainer_flag(option: str) -> bool:
    """Whether the built-in trainer has the flag `option` (`--epochs`), asked of its torch-free parser."""
    from ddpctl_trainer.config import build_parser

    return option.split("=", 1)[0] in build_parser()._option_string_actions  # argparse's own index


def remove_checkpoints(directory: Path | str | None) -> list[Path]:
    """--fresh: delete the trainer's checkpoints (and their temp files) in `directory`, which the
    trainer would resume from otherwise. Nothing else is touched: not the directory itself, not
    any other file in it (`--checkpoint-dir .` is a user's own directory). Returns what it removed.
    Checkpoints in an object store (a URL) are the store's to delete, not ddpctl's: they may be
    another run's, and the bucket's rules may keep them; --fresh then says how to start over."""
    if isinstance(directory, str):
        raise UsageError(
            f"--fresh: the checkpoints are in {directory}, an object store that ddpctl does not delete from; "
            "give a new prefix (--checkpoints s3://BUCKET/NEW-PREFIX) to start over"
        )
    removed: list[Path] = []
    if directory is None or not directory.is_dir():
        return removed
    for entry in sorted(directory.iterdir()):
        if not (protocol.CHECKPOINT_NAME.match(entry.name) or protocol.CHECKPOINT_TEMP.match(entry.name)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed
