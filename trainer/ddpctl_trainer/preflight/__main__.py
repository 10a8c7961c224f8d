"""``python -m ddpctl_trainer.preflight [flags]``: the preflight checks alone, as a job of their own.

Run it where the trainer would run (under torchrun or ``python -m ddpctl_trainer.launch``, with
the same env): it joins the process group as the trainer does (``dist.setup``), runs the checks,
rank 0 prints the report, and every rank exits 0 (passed, or ``--preflight warn``) or
``EXIT_PREFLIGHT`` (201: a finding under ``--preflight fail``, the default here); 2 for bad input,
1 for a runtime failure (a collective that failed or timed out), each as one error line.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence

from ..config import BACKENDS, _env_defaults, _Parser
from ..errors import TrainerError, UsageError, failure_reason, from_distributed_stack, print_error
from ..protocol import COLLECTIVE_TIMEOUT_S, ENV_PREFIX, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, PROG
from .config import PreflightConfig, add_flags, from_values


def parse_args(argv: Sequence[str] | None, env: dict[str, str] | None = None) -> tuple[PreflightConfig, str, int]:
    """(the checks' settings, --backend, --timeout-s) from flags and DDP_TRAINER_<FLAG> env."""
    import os

    parser = _Parser(
        prog=f"{PROG}.preflight",
        description="Check every node of a job before training: GEMM speed, all-reduce bus bandwidth (and "
        "node pairs from 3 nodes on), on GPU the host-to-device copy and NCCL's transport. Run it under torchrun "
        f"like the trainer; every flag may also be set as {ENV_PREFIX}<FLAG>.",
    )
    parser.add_argument("--backend", default="auto", choices=BACKENDS, help="auto: nccl with CUDA, gloo otherwise")
    parser.add_argument("--timeout-s", type=int, default=COLLECTIVE_TIMEOUT_S, help="process-group timeout, seconds")
    add_flags(parser, mode_default="fail")
    _env_defaults(parser, os.environ if env is None else env)
    values = vars(parser.parse_args(argv))
    if values["preflight"] == "off":
        raise UsageError("--preflight off: the standalone check has nothing to do; use warn or fail")
    if values["timeout_s"] < 1:
        raise UsageError(f"--timeout-s must be at least 1, got {values['timeout_s']}")
    return from_values(values), values["backend"], values["timeout_s"]


def main(argv: Sequence[str] | None = None) -> int:
    label: int | None = None  # the rank whose prefix the error lines get (None: none)
    try:
        from ..dist import detect

        ctx = detect()
        config, backend_choice, timeout_s = parse_args(argv)
        if ctx.world_size > 1:
            label = ctx.rank

        import torch

        from ..dist import resolve_backend, setup
        from . import failure_message, nccl, run_checks

        backend = resolve_backend(backend_choice, torch.cuda.is_available())
        if backend == "nccl":
            nccl.prepare_capture()  # before NCCL initialises: it reads these once
        device = setup(ctx, backend, timeout_s, need_group=False)
        report = run_checks(ctx, device, backend, config)
        if ctx.is_main:
            report.print(ctx.rank)
            if config.json_path:
                report.write_json(config.json_path)
            if report.failed:
                print_error(failure_message(report), label)
        return report.exit_code if report.failed else EXIT_OK
    except TrainerError as exc:
        print_error(str(exc), label if exc.exit_code != 2 else None)
        return exc.exit_code
    except KeyboardInterrupt:
        print_error("interrupted", label)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, never lost
        if from_distributed_stack(exc):
            print_error(f"preflight: a collective failed: {failure_reason(exc)}", label)
            return EXIT_FAILURE
        traceback.print_exc()
        print_error(f"preflight: unexpected {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", label)
        return EXIT_FAILURE
    finally:
        if "torch" in sys.modules:
            from ..dist import teardown

            teardown()


if __name__ == "__main__":
    sys.exit(main())
