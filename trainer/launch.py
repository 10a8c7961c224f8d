"""``python -m ddpctl_trainer.launch ARGS``: torchrun, with an exit code that says why it stopped.

torchrun exits 1 whenever a worker fails, whatever the worker's own code, and with a traceback
when it is itself sent SIGTERM. A pod's exit code is all that Kubernetes failure rules see
(``podFailurePolicy`` ``onExitCodes``, PyTorchJob's ``restartPolicy: ExitCode``), so with plain
torchrun a usage error (exit 2: retrying cannot help) looks like any retriable failure. This
launcher takes the same arguments and environment (``PET_*``) as torchrun and exits with:

* 0 when every worker succeeded;
* 2 when any worker exited 2 (``EXIT_USAGE``: bad input, the same on every rank);
* 128 + N when the agent itself got signal N (143 for SIGTERM: preempted; the workers were
  asked to checkpoint and stop), or when the first worker to fail died by signal N;
* otherwise the exit code of the first worker to fail (143 after a preemption checkpoint, 1 for
  a runtime failure, ...).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .errors import EXIT_FAILURE, EXIT_USAGE


def _code(exitcode: int) -> int:
    """A worker's exit status as a shell would report it (death by signal N is 128 + N)."""
    return 128 - exitcode if exitcode < 0 else exitcode


def exit_code_for(codes_in_failure_order: Sequence[int]) -> int:
    """The launcher's exit code from its failed workers' codes, the first to fail first."""
    codes = [_code(c) for c in codes_in_failure_order]
    if not codes:
        return EXIT_FAILURE
    if EXIT_USAGE in codes:
        return EXIT_USAGE
    return codes[0] or EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        run(args)
    except ChildFailedError as exc:
        print(exc.format_msg(), file=sys.stderr, flush=True)  # torchrun's own report: which rank, which code
        failures = sorted(exc.failures.values(), key=lambda f: f.timestamp)
        code = exit_code_for([f.exitcode for f in failures])
        print(f"ddpctl-trainer.launch: workers failed; exit {code}", file=sys.stderr, flush=True)
        return code
    except SignalException as exc:
        code = 128 + int(exc.sigval)
        print(f"ddpctl-trainer.launch: stopped by {exc.sigval.name}; exit {code}", file=sys.stderr, flush=True)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
