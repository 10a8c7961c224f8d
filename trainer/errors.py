"""Errors the trainer reports as one line (``ddpctl-trainer: error: ...``), never a traceback.

``UsageError`` (exit 2) is bad input that every rank detects the same way before the process
group exists, so all ranks stop together. ``TrainerFailure`` (exit 1) is a runtime failure.
"""

from __future__ import annotations

import sys

PROG = "ddpctl-trainer"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_SIGTERM = 128 + 15
# Stopped on SIGTERM after writing a checkpoint at a step boundary: every rank exits with it, and
# the next start resumes at exactly that step. The same value as death by SIGTERM, so launchers
# and operators that retry "killed by a signal" (PyTorchJob ExitCode, podFailurePolicy) retry it.
EXIT_PREEMPTED = EXIT_SIGTERM


class TrainerError(Exception):
    """Base class: a failure with a one-line message and an exit code."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str) -> None:
        # Keep it one line whatever the caller passed (e.g. an OSError text with newlines).
        super().__init__(" ".join(str(message).split()))


class UsageError(TrainerError):
    """Bad flags, environment or input paths: the user must change the command."""

    exit_code = EXIT_USAGE


class TrainerFailure(TrainerError):
    """A runtime failure (unreadable checkpoint, failed download, lost peer)."""

    exit_code = EXIT_FAILURE


class CheckpointError(TrainerFailure):
    """A checkpoint file that cannot be read or does not hold a trainer checkpoint."""


class Preempted(TrainerError):
    """The run stopped on SIGTERM at a step boundary, after its checkpoint became durable."""

    exit_code = EXIT_PREEMPTED


class Terminated(BaseException):
    """Raised from the SIGTERM handler so ``finally`` blocks tear the process group down.

    A ``BaseException`` so that generic ``except Exception`` clauses do not swallow it.
    """


def print_error(message: str, rank_label: str = "") -> None:
    """Print the single error line on stderr, in one write: ranks that share the stream (torchrun's)
    may print at once, and print() writes the text and its newline separately."""
    sys.stderr.write(f"{PROG}: error: {rank_label}{message}\n")
    sys.stderr.flush()
