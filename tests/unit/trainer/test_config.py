"""ddpctl_trainer.config: flags and their DDP_TRAINER_* variables into a frozen TrainConfig, and every
check that needs neither torch nor a process group (the CLI runs them too)."""

from __future__ import annotations

import pytest

from ddpctl_trainer import callbacks
from ddpctl_trainer.config import TrainConfig, build_parser, parse_args, validate_for_world
from ddpctl_trainer.errors import UsageError
from ddpctl_trainer.protocol import EXIT_STALLED


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


def test_package_import_is_cheap() -> None:
    import subprocess
    import sys

    # what the CLI imports of the trainer: the protocol, the flags and their errors
    code = "import sys, ddpctl_trainer.config, ddpctl_trainer.errors; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, ()),
        (["--callback", "a:B", "--callback", "c.d:e"], {}, ("a:B", "c.d:e")),  # repeatable, in order
        ([], {"DDP_TRAINER_CALLBACK": "a:B, c.d:e"}, ("a:B", "c.d:e")),  # the env: comma-separated
        ([], {"DDP_TRAINER_CALLBACK": ""}, ()),
        (["--callback", "x:Y"], {"DDP_TRAINER_CALLBACK": "a:B"}, ("x:Y",)),  # the command line wins
    ],
)
def test_the_callback_flag_is_repeatable_and_comes_from_the_env_too(
    argv: list[str], env: dict[str, str], expected: tuple[str, ...]
) -> None:
    assert parse_args(argv, env).callback == expected


@pytest.mark.parametrize("spec", ["nocolon", ":Name", "module:"])
def test_a_callback_not_written_module_name_is_a_usage_error_before_anything_imports(spec: str) -> None:
    with pytest.raises(UsageError, match=r"--callback .*: a callback is written module:name"):
        parse_args(["--callback", spec], {})


def test_the_trainers_help_names_the_hooks_what_they_are_given_and_the_env_variable() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "--callback MODULE:NAME" in text and "DDP_TRAINER_CALLBACK: comma-separated" in text
    assert "ddpctl_trainer.callbacks.TrainerView" in text
    for method in callbacks.HOOK_METHODS:
        assert method in text


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, 300.0),
        (["--stall-timeout", "7.5"], {}, 7.5),
        ([], {"DDP_TRAINER_STALL_TIMEOUT": "42"}, 42.0),
        (["--stall-timeout", "0"], {"DDP_TRAINER_STALL_TIMEOUT": "42"}, 0.0),  # the command line wins; 0 = off
    ],
)
def test_stall_timeout_flag_and_env(argv: list[str], env: dict[str, str], expected: float) -> None:
    assert parse_args(argv, env).stall_timeout == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stall-timeout", "-1"], "--stall-timeout must be 0 (off) or a number of seconds"),
        (["--stall-timeout", "nan"], "--stall-timeout must be 0 (off) or a number of seconds"),
        (["--stall-timeout", "600"], "--stall-timeout 600 is not below --timeout-s 600"),  # the default timeout
        (["--stall-timeout", "90", "--timeout-s", "60"], "--stall-timeout 90 is not below --timeout-s 60"),
    ],
)
def test_bad_stall_timeout_is_a_usage_error(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_args(argv, {})


def test_flag_help_names_the_exit_code() -> None:
    assert f"exit code {EXIT_STALLED}" in " ".join(build_parser().format_help().split())


def test_checkpoint_dir_urls_are_checked_without_repeating_them() -> None:
    """A supported URL is taken; anything else is a usage error saying what is wrong and how to
    write it (protocol.checkpoint_url_problem, as the spec's `checkpoints`), never repeating the
    URL, which may hold a key; a URL where a path belongs names only its scheme."""
    assert parse_args(["--checkpoint-dir", "s3://bucket/run"], env={}).checkpoint_dir == "s3://bucket/run"
    assert parse_args(["--checkpoint-dir", "./a@b"], env={}).checkpoint_dir == "./a@b"  # a path: no URL checks
    cases = [
        ("hdfs://nn/run", r"^--checkpoint-dir: hdfs:// is not a supported object store; give an s3://, gs:// or az://"),
        ("s3://", r"^--checkpoint-dir: the URL names no bucket; write it as s3://BUCKET/PREFIX"),
        ("ftp://AKIAXAMPLE:SeCrEt99@b/x", r"^--checkpoint-dir: the URL holds credentials .*; remove them"),
        ("s3://AKIAXAMPLE:SeCrEt99@bucket/x", r"^--checkpoint-dir: the URL holds credentials"),
        ("s3://bucket/x?X-Amz-Signature=SeCrEt99", r"^--checkpoint-dir: the URL holds a query or fragment"),
    ]
    for url, message in cases:
        with pytest.raises(UsageError, match=message) as refused:
            parse_args(["--checkpoint-dir", url], env={})
        text = str(refused.value)
        assert url.partition("://")[2] not in text or url == "s3://", text
        assert "SeCrEt99" not in text and "AKIAXAMPLE" not in text, text
    with pytest.raises(UsageError, match=r"^--resume: the trainer reads and writes local paths only, not gs:// URLs"):
        parse_args(["--resume", "gs://AKIAXAMPLE:SeCrEt99@bucket/ckpt.pt"], env={})


@pytest.mark.parametrize(("save_every", "steps"), [("epoch", 0), ("0", 0), ("1", 1), ("250", 250)])
def test_save_every_is_a_number_of_steps_or_each_epoch(save_every: str, steps: int) -> None:
    assert parse_args(["--save-every", save_every], {}).save_every_steps == steps


@pytest.mark.parametrize(
    ("argv", "world", "batch"),
    [
        ([], 4, 32),  # --batch-size's default, per process
        (["--batch-size", "8"], 16, 8),
        (["--global-batch-size", "64"], 4, 16),
        (["--global-batch-size", "64", "--grad-accum", "2"], 4, 8),
        (["--global-batch-size", "96", "--grad-accum", "4"], 3, 8),
    ],
)
def test_the_batch_a_process_loads(argv: list[str], world: int, batch: int) -> None:
    cfg = parse_args(argv, {})
    validate_for_world(cfg, world)
    assert cfg.per_process_batch(world) == batch


def test_the_config_is_frozen_and_plain_values_for_a_weights_only_checkpoint() -> None:
    cfg = parse_args(["--callback", "a:B", "--pin-memory"], {})
    with pytest.raises(AttributeError):
        cfg.epochs = 3  # type: ignore[misc]
    plain = cfg.to_dict()
    assert plain["callback"] == ("a:B",) and plain["pin_memory"] is True
    assert all(isinstance(v, (str, int, float, bool, tuple, type(None))) for v in plain.values())
    assert TrainConfig(**plain) == cfg


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, ("off", 0.6, "socket", 1, 0.2, False)),
        (["--preflight", "warn"], {}, ("warn", 0.6, "socket", 1, 0.2, False)),
        (
            ["--preflight-only"],
            {"DDP_TRAINER_PREFLIGHT": "fail", "DDP_TRAINER_FABRIC": "efa", "DDP_TRAINER_PREFLIGHT_TOLERANCE": "0.8"},
            ("fail", 0.8, "efa", 1, 0.2, True),
        ),
        (
            ["--preflight", "warn", "--preflight-repeats", "3", "--preflight-window", "0.25"],
            {},
            ("warn", 0.6, "socket", 3, 0.25, False),
        ),
    ],
)
def test_the_preflight_flags_and_their_variables(
    argv: list[str], env: dict[str, str], expected: tuple[object, ...]
) -> None:
    """Inside a job the checks time one window of 0.2 s each (every start pays for them); the
    spec sets them through DDP_TRAINER_PREFLIGHT*, and ddpctl check adds --preflight-only."""
    cfg = parse_args(argv, env=env)
    got = (cfg.preflight, cfg.preflight_tolerance, cfg.fabric, cfg.preflight_repeats, cfg.preflight_window)
    assert (*got, cfg.preflight_only) == expected


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--preflight-only"], {}, "--preflight-only needs --preflight warn or fail"),
        (["--preflight", "warn", "--preflight-tolerance", "1.5"], {}, "--preflight-tolerance must be above 0"),
        ([], {"DDP_TRAINER_PREFLIGHT": "always"}, "--preflight must be one of off, warn, fail"),
        ([], {"DDP_TRAINER_FABRIC": "ib"}, "--fabric must be one of socket, infiniband, roce, efa"),
        (["--preflight-min-busbw", "-1"], {}, "--preflight-min-busbw must be 0"),
    ],
)
def test_bad_preflight_flags_are_usage_errors_before_any_process_group(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        parse_args(argv, env=env)
