"""``python -m ddpctl_trainer.launch ARGS``: torchrun, with an exit code that says why it stopped.

torchrun exits 1 whenever a worker fails, whatever the worker's own code, and with a traceback
when it is itself sent SIGTERM. A pod's exit code is all that Kubernetes failure rules see
(``podFailurePolicy`` ``onExitCodes``, PyTorchJob's ``restartPolicy: ExitCode``), so with plain
torchrun a usage error (exit 2: retrying cannot help) looks like any retriable failure. This
launcher takes the same arguments and environment (``PET_*``) as torchrun (plus the node-group
offset, see ``set_node_rank``). Before torchrun, when the pod ships the user's workspace
(``DDP_WORKSPACE_ARCHIVE``), it fetches, checks and unpacks it and works in it (``workspace.py``);
a missing or corrupt archive ends the pod there, with one line and exit 2. It exits with:

* 0 when every worker succeeded;
* 2 when any worker exited 2 (``EXIT_USAGE``: bad input, the same on every rank);
* 128 + N when the agent itself got signal N (143 for SIGTERM: preempted; the workers were
  asked to checkpoint and stop), or when the first worker to fail died by signal N;
* otherwise the exit code of the first worker to fail (143 after a preemption checkpoint, 138
  when it lost a peer during training: another node died, so this node restarts with the job;
  1 for a runtime failure, ...).
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping, Sequence
from typing import Any

from . import workspace
from .protocol import (
    CAUSED_BY_A_PEER,
    COMPLETION_INDEX_ENV,
    COORDINATOR_ENV,
    EXIT_FAILURE,
    EXIT_USAGE,
    JOB_NODE_RANK_ENV,
    LAUNCHER_STOPPED_BY,
    LAUNCHER_TAG,
    NODE_FIRST_RANK_ENV,
    NODE_RANK_OFFSET_ENV,
    RANK_OFFSET_ENV,
)


def _code(exitcode: int) -> int:
    """A worker's exit status as a shell would report it (death by signal N is 128 + N)."""
    return 128 - exitcode if exitcode < 0 else exitcode


def exit_code_for(codes_in_failure_order: Sequence[int]) -> int:
    """The launcher's exit code from its failed workers' codes, the first to fail first: a usage
    error wins; then this node's own cause (a crash, a kill, a stall) over the codes that say the
    cause was elsewhere (143 stopped with a preempted peer, 138 lost a peer), because torchrun's
    failure times are whole seconds and a worker that lost its peer on this node can be listed
    before the worker whose death caused it. Failure rules do not count 138 and 143, so the pod of
    a node that failed itself must not end with them."""
    codes = [_code(c) for c in codes_in_failure_order]
    if not codes:
        return EXIT_FAILURE
    if EXIT_USAGE in codes:
        return EXIT_USAGE
    own = [c for c in codes if c not in CAUSED_BY_A_PEER]
    return (own or codes)[0] or EXIT_FAILURE


def set_node_rank(env: MutableMapping[str, str]) -> None:
    """Node groups: each group is its own Indexed Job whose completion index starts at 0, and the
    downward API cannot add the group's first node rank, so the pod carries it as
    PET_NODE_RANK_OFFSET and the node rank is PET_NODE_RANK_OFFSET + JOB_COMPLETION_INDEX (the Job
    controller sets JOB_COMPLETION_INDEX). Without an offset, PET_NODE_RANK is left as given. With
    pod recovery (DDP_COORDINATOR) the node's place goes to the trainer instead (DDP_NODE_RANK,
    DDP_NODE_FIRST_RANK: RANK_OFFSET_ENV in protocol), unless it was given outright."""
    offset = env.get(NODE_RANK_OFFSET_ENV)
    if offset is None or COMPLETION_INDEX_ENV not in env:
        return
    index = int(env[COMPLETION_INDEX_ENV])
    if env.get(COORDINATOR_ENV):  # pod recovery: torchrun runs this node alone; the trainer reads its place
        env.setdefault(JOB_NODE_RANK_ENV, str(int(offset) + index))
        nproc = int(env.get("PET_NPROC_PER_NODE", "1"))
        env.setdefault(NODE_FIRST_RANK_ENV, str(int(env.get(RANK_OFFSET_ENV, "0")) + index * nproc))
        return
    env["PET_NODE_RANK"] = str(int(offset) + index)


def main(argv: Sequence[str] | None = None) -> int:
    code = workspace.prepare_or_report(os.environ)  # before torch's import: a bad archive fails in a blink
    if code:
        return code
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    set_node_rank(os.environ)
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        run(args)
    except ChildFailedError as exc:
        print(exc.format_msg(), file=sys.stderr, flush=True)  # torchrun's own report: which rank, which code
        failures = sorted(exc.failures.values(), key=lambda f: f.timestamp)
        code = exit_code_for([f.exitcode for f in failures])
        print(f"{LAUNCHER_TAG}workers failed; exit {code}", file=sys.stderr, flush=True)
        return code
    except Exception as exc:
        # torchrun's agent turns the signal into SignalException; when it lands in the few bytecodes
        # before a timing decorator of torch's has set its start time, that decorator's `finally`
        # raises UnboundLocalError over it: the signal is then this exception's context.
        signalled = _signal_of(exc, SignalException)
        if signalled is None:
            raise
        code = 128 + int(signalled.sigval)
        print(f"{LAUNCHER_STOPPED_BY}{signalled.sigval.name}; exit {code}", file=sys.stderr, flush=True)
        return code
    return 0


def _signal_of(exc: BaseException | None, kind: type[Exception]) -> Any:
    """The `kind` (torchrun's SignalException) that `exc` is, or was raised while handling; else None."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, kind):
            return exc
        exc, seen = exc.__context__, seen + 1
    return None


if __name__ == "__main__":
    sys.exit(main())
