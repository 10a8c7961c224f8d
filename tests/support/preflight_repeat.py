"""``python -m tests.support.preflight_repeat N [preflight flags]``: the standalone preflight's set-up,
then ``run_checks`` N times in the same process group; rank 0 prints each report as one
``REPORT_MARK <json>`` line on stdout.

Each round is a whole check (every measurement, the gathering and the judging), so N rounds
sample the timing noise N times for the price of one job start (importing torch in four
processes on two busy cores takes longer than the checks themselves).
"""

from __future__ import annotations

import json
import sys

REPORT_MARK = "PREFLIGHT-REPORT "


def main() -> int:
    rounds, *argv = sys.argv[1:]
    import torch
    from ddpctl_trainer.dist import detect, resolve_backend, setup, teardown
    from ddpctl_trainer.preflight import run_checks
    from ddpctl_trainer.preflight.__main__ import parse_args

    ctx = detect()
    config, backend_choice, timeout_s = parse_args(argv)
    backend = resolve_backend(backend_choice, torch.cuda.is_available())
    device = setup(ctx, backend, timeout_s, need_group=False)
    try:
        for _ in range(int(rounds)):
            report = run_checks(ctx, device, backend, config)
            if ctx.is_main:
                sys.stdout.write(REPORT_MARK + json.dumps(report.to_dict()) + "\n")
                sys.stdout.flush()
    finally:
        teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
