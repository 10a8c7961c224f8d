"""ddpctl_trainer.preflight.config and the standalone check's flags: defaults by device, env
below the command line, one-line usage errors."""

from __future__ import annotations

import pytest

from ddpctl_trainer.errors import UsageError
from ddpctl_trainer.preflight import PreflightConfig
from ddpctl_trainer.preflight.__main__ import parse_args

# ------------------------------------------------------------------------------------ flags


def test_flags_and_env() -> None:
    cfg, backend, timeout = parse_args([], env={})
    assert (cfg.mode, cfg.tolerance, cfg.fabric, cfg.repeats, backend, timeout) == (
        "fail",
        0.6,
        "socket",
        3,
        "auto",
        600,
    )
    env = {"DDP_TRAINER_PREFLIGHT_TOLERANCE": "0.8", "DDP_TRAINER_FABRIC": "efa", "DDP_TRAINER_PREFLIGHT": "warn"}
    cfg, _, _ = parse_args(["--preflight-tolerance", "0.7"], env=env)
    assert (cfg.mode, cfg.tolerance, cfg.fabric) == ("warn", 0.7, "efa")  # the command line wins
    cfg, _, _ = parse_args(["--preflight-min-busbw", "5", "--preflight-allreduce-mib", "64"], env={})
    assert cfg.min_busbw == 5.0 and cfg.allreduce_bytes("cuda") == 64 * 2**20


def test_sizes_default_by_device() -> None:
    cfg = PreflightConfig()
    assert (cfg.gemm_size("cpu"), cfg.gemm_size("cuda")) == (512, 8192)
    assert (cfg.allreduce_bytes("cpu"), cfg.allreduce_bytes("cuda")) == (4 * 2**20, 256 * 2**20)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--preflight-tolerance", "1.5"], {}, "--preflight-tolerance must be above 0 and at most 1"),
        (["--preflight-tolerance", "0"], {}, "--preflight-tolerance must be above 0"),
        (["--preflight-min-busbw", "-1"], {}, "--preflight-min-busbw must be 0 (no floor) or a positive number"),
        (["--preflight-repeats", "0"], {}, "--preflight-repeats must be 1..100"),
        (["--preflight-window", "0"], {}, "--preflight-window must be above 0"),
        (["--fabric", "myrinet"], {}, "argument --fabric: invalid choice: 'myrinet'"),
        ([], {"DDP_TRAINER_FABRIC": "myrinet"}, "DDP_TRAINER_FABRIC='myrinet': --fabric must be one of"),
        ([], {"DDP_TRAINER_PREFLIGHT_TOLERANCE": "most"}, "is not a valid value for --preflight-tolerance"),
        (["--preflight", "off"], {}, "--preflight off: the standalone check has nothing to do"),
    ],
)
def test_bad_flags_are_one_line_usage_errors(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=None) as info:
        parse_args(argv, env=env)
    assert message in str(info.value)
