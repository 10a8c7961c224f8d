"""Entry point: parse, check, set up the process group, train, tear down; errors as one line."""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from types import FrameType

from . import stop
from .errors import (
    Terminated,
    TrainerError,
    TrainerFailure,
    failure_reason,
    from_distributed_stack,
    keep_as_termination_message,
    print_error,
)
from .protocol import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PREEMPTED,
    EXIT_PREFLIGHT,
    EXIT_STALLED,
    EXIT_STRAGGLER,
    EXIT_USAGE,
    SPARE_ENV,
    STOPPED_BY_SECOND_SIGTERM,
    STOPPED_BY_SIGTERM,
)
from .watchdog import stalling

_armed = False  # True while a SIGTERM should interrupt the run
_swallowed = False  # True while a Terminated that Python ignored waits to be raised again
_WATCHDOG_EXIT_WAIT_S = 60.0


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """During training the first SIGTERM asks for a checkpoint at the next step boundary (see
    ``stop``); otherwise, or on a second SIGTERM, the run stops at once. Once stopping, later
    signals are ignored, so the error report and teardown are never interrupted."""
    global _armed, _swallowed
    if _swallowed:  # delivered again (below)
        if frame is not None and frame.f_code is _on_unraisable.__code__:
            _deliver_again()  # raised here, it would be dropped once more
            return
        _swallowed = False
        raise Terminated()
    if _armed and not stalling() and stop.on_signal():  # a stalled process is already on its way out (exit 200)
        _armed = False
        raise Terminated()


def _on_unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """A handler's Terminated that landed inside a weakref callback or a ``__del__`` (the garbage
    collector runs them between any two bytecodes) is printed and dropped by Python, and the rank
    would train on. The signal is delivered again once this hook has returned, and the handler
    raises it where the run sees it (or, landing in such a callback again, comes back here)."""
    global _swallowed
    if isinstance(unraisable.exc_value, Terminated):
        _swallowed = True
        _deliver_again()
    else:
        _previous_hook(unraisable)


def _deliver_again() -> None:
    """SIGTERM for the main thread from a new thread: it needs the GIL, which this thread holds until
    it waits or its switch interval (5 ms) ends, so the signal comes after the hook returned.
    (Delivered from this thread, the handler would run inside the hook.)"""
    _thread.start_new_thread(_thread.interrupt_main, (signal.SIGTERM,))


_previous_hook = sys.unraisablehook  # the hook main() replaced, for every other unraisable


def main(argv: Sequence[str] | None = None) -> int:
    """Run the trainer; returns the process exit code: 0 ok, 1 failure, 2 usage, 138 a peer was
    lost during training (``EXIT_PEER_LOST``), 143 SIGTERM (``EXIT_PREEMPTED``: after a checkpoint
    at a step boundary, or without one when the signal came outside the training loop or twice),
    201 a failed preflight (``EXIT_PREFLIGHT``: ``--preflight fail`` named a node, rank or link), 202 a
    straggler (``EXIT_STRAGGLER``: ``--stragglers fail`` named a node during training)."""
    global _armed, _swallowed, _previous_hook
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    _previous_hook, sys.unraisablehook = sys.unraisablehook, _on_unraisable
    rank: list[int | None] = [None]  # this rank, once known, where its lines carry it (world size > 1)
    _armed = True
    code = EXIT_PREEMPTED
    try:
        code = _run(argv, rank)
        return code
    except Terminated:  # also when it lands while an error is being reported
        if stop.requested():  # the second signal: the checkpoint in progress is abandoned
            print_error(
                f"{STOPPED_BY_SECOND_SIGTERM} before the checkpoint was written; the previous one is kept", rank[0]
            )
        else:
            print_error(STOPPED_BY_SIGTERM, rank[0])
        return EXIT_PREEMPTED  # 128 + SIGTERM, as death by the signal would be
    finally:
        _armed = False
        stop.defer(False)
        if "torch" in sys.modules:  # nothing to tear down before torch was even imported
            from .dist import teardown
            from .recovery import current

            membership = current()
            if membership is not None:
                membership.report_end(code)
            teardown()
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook, _swallowed = _previous_hook, False


def _leave_to_the_watchdog() -> int:
    """This rank's watchdog is ending a stalled job: a collective that failed meanwhile failed
    because a peer's watchdog ended that peer first, so it is no lost peer (exit 138) and no error
    line of its own. The watchdog prints the job's summary and exits the process with
    ``EXIT_STALLED``; wait for it (bounded, in case it cannot)."""
    threading.Event().wait(_WATCHDOG_EXIT_WAIT_S)
    return EXIT_STALLED


def _run(argv: Sequence[str] | None, label: list[int | None]) -> int:
    rank: int | None = None
    try:
        from .config import parse_args, require_object_store_client, validate_for_world
        from .dist import detect

        spare = os.environ.get(SPARE_ENV)
        if spare:  # a warm spare: torch imported now, its node's place when one is lost
            from . import trainer as _  # noqa: F401 - the trainer's modules, imported while it waits
            from .recovery import wait_as_a_spare

            wait_as_a_spare(spare)
        # Everything that can be checked without a process group is checked here, identically
        # on every rank, so bad input makes all ranks stop instead of some waiting forever.
        ctx = detect()
        cfg = parse_args(argv)
        validate_for_world(cfg, ctx.world_size)
        require_object_store_client(cfg)
        if ctx.world_size > 1:
            rank = label[0] = ctx.rank

        import torch

        from .callbacks import check_callback_specs
        from .dist import resolve_backend, setup
        from .models import check_model_spec
        from .trainer import run_trainer

        check_model_spec(cfg.model)
        check_callback_specs(cfg.callback)
        backend = resolve_backend(cfg.backend, torch.cuda.is_available())
        if cfg.preflight != "off" and backend == "nccl":
            from .preflight import nccl

            nccl.prepare_capture()  # NCCL reads its debug settings once, when it first initialises
        device = setup(ctx, backend, cfg.timeout_s, need_group=cfg.strategy == "fsdp")
        from .recovery import solo

        if cfg.preflight != "off" and not solo():  # a replacement's peers are training: no checks now
            from . import preflight

            # after the rendezvous, before anything is built: every rank measures, rank 0 reports
            preflight.run_and_report(ctx, device, backend, preflight.from_values(cfg.to_dict()))
            if cfg.preflight_only:
                return EXIT_OK
        run_trainer(cfg, ctx, device, backend)
        return EXIT_OK
    except TrainerError as exc:
        if stalling():
            return _leave_to_the_watchdog()
        # A preemption stop is the same on every rank: one line per node is enough. A failed preflight
        # or a straggler is judged the same on every rank: rank 0, which printed the report, says it once. A usage
        # error is printed by every rank that finds it: torchrun stops a node's other ranks as soon as
        # one exits, so the rank that would have printed it for the node may be gone before it could.
        per_node = exc.exit_code == EXIT_PREEMPTED
        once = exc.exit_code in (EXIT_PREFLIGHT, EXIT_STRAGGLER)
        if once:  # every pod keeps the verdict: status reads it even after node 0's pod is gone
            keep_as_termination_message([str(exc)])
        if once and rank not in (None, 0):
            return exc.exit_code
        if not per_node or int(os.environ.get("LOCAL_RANK", "0") or 0) == 0:
            print_error(str(exc), rank if exc.exit_code != EXIT_USAGE else None)
        return exc.exit_code
    except KeyboardInterrupt:
        print_error("interrupted", rank)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a rank's error is reported, never lost
        if stalling():
            return _leave_to_the_watchdog()
        if from_distributed_stack(exc):  # not a lost peer (see run_trainer): e.g. the group never came up
            print_error(f"a collective failed: {failure_reason(exc)}", rank)
            return EXIT_FAILURE
        traceback.print_exc()
        print_error(f"unexpected {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", rank)
        return EXIT_FAILURE


__all__ = ["TrainerFailure", "main"]
