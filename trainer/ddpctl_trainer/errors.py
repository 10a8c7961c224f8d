"""Errors the trainer reports as one line (``ddpctl-trainer: error: ...``), never a traceback.

``UsageError`` (exit 2) is bad input that every rank detects the same way before the process
group exists, so all ranks stop together. ``TrainerFailure`` (exit 1) is a runtime failure.
``PeerLost`` (exit 138) is a collective that failed because another rank went away after the
process group was set up: this rank is not the cause, and the job is worth restarting (see
``is_peer_lost``). ``StoreError`` is an object store that refused or failed a request. The exit
codes, and why they are these numbers, are in ``protocol``. No message carries a credential
(``scrub``).
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from collections.abc import Mapping

from .protocol import (
    ERROR_TAG,
    EXIT_FAILURE,
    EXIT_PEER_LOST,
    EXIT_PREEMPTED,
    EXIT_STRAGGLER,
    EXIT_USAGE,
    OBJECT_STORE_SECRET_ENV,
    TERMINATION_LOG,
    rank_prefix,
)


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


class StoreError(CheckpointError):
    """The object store refused or failed a request: one line, credentials scrubbed."""


class Straggling(TrainerError):
    """``--stragglers fail`` named a node: every rank stops after the same step (a checkpoint of it
    first), so a resubmit that avoids the node resumes there."""

    exit_code = EXIT_STRAGGLER


class Preempted(TrainerError):
    """The run stopped on SIGTERM at a step boundary, after its checkpoint became durable."""

    exit_code = EXIT_PREEMPTED


class Left(Preempted):
    """Pod recovery: this rank alone got SIGTERM (its pod evicted, its node drained) and left after
    a step; the others go on and meet its replacement, so there is nothing to write (exit 143)."""


class PeersLeft(TrainerFailure):
    """Pod recovery: some ranks (not all) got SIGTERM and left after this step: form the group again
    with their replacements (``Trainer._recover``), as after a lost peer."""


class PeerLost(TrainerFailure):
    """Another rank went away during training: this rank's collective failed because of it."""

    exit_code = EXIT_PEER_LOST


class Terminated(BaseException):
    """Raised from the SIGTERM handler so ``finally`` blocks tear the process group down.

    A ``BaseException`` so that generic ``except Exception`` clauses do not swallow it.
    """


def print_error(message: str, rank: int | None = None) -> None:
    """Print the single error line on stderr (after the tag, ``rank``'s prefix: None for none), in
    one write: ranks that share the stream (torchrun's) may print at once, and print() writes the
    text and its newline separately."""
    label = "" if rank is None else rank_prefix(rank)
    sys.stderr.write(f"{ERROR_TAG}{label}{message}\n")
    sys.stderr.flush()


def keep_as_termination_message(lines: list[str], path: str = TERMINATION_LOG) -> None:
    """Write why the job stopped where Kubernetes keeps it in the pod's status (one write, whole),
    where the file exists, i.e. in a Kubernetes container; elsewhere the runners have every node's
    output anyway. Every rank of a pod writes the same lines, so they outlive a pod whose logs go
    with it (the Job controller deletes a failed job's other pods, node 0's, whose rank printed
    them, among them)."""
    if not os.path.exists(path):
        return
    try:
        with open(path, "w") as f:
            f.write("\n".join(lines)[-4000:] + "\n")  # the kubelet keeps at most 4096 bytes
    except OSError:
        pass


_QUERY = re.compile(r"(https?://[^\s?]+)\?\S*")  # presigned URLs and SAS tokens carry secrets in the query
_USERINFO = re.compile(r"(://)[^/@\s]+@")


def scrub(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` as one line without credentials: the values of the secret variables
    (``protocol.OBJECT_STORE_SECRET_ENV``), URL query strings and user:password@ parts go."""
    env = os.environ if env is None else env
    text = text.split("\n\nDebug source:", 1)[0]  # obstore appends the Rust error's debug dump
    text = " ".join(text.split())
    for name in OBJECT_STORE_SECRET_ENV:
        value = env.get(name, "")
        if len(value) >= 4:
            text = text.replace(value, "***")
    text = _QUERY.sub(r"\1?***", text)
    return _USERINFO.sub(r"\1***@", text)


def without_userinfo(url: str) -> str:
    """``url`` without a ``user:password@`` part."""
    return _USERINFO.sub(r"\1", url)


# What gloo, NCCL and c10d say when the process at the other end of a connection is gone or
# stopped answering (torch 2.14.1; the gloo texts as measured with a SIGKILLed peer):
#   gloo  "[.../gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:12174: Connection reset by peer. ..."
#   gloo  "[.../gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:13226. ..."
#   gloo  "[.../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation to complete"
#   NCCL  "NCCL communicator was aborted on rank N", "Watchdog caught collective operation timeout: ...",
#         "... remote process exited or there was a network error ..." (ncclRemoteError)
#   c10d  "connection reset by peer", "broken pipe", "failed to recv, got 0 bytes" (store and socket errors)
# A timeout is not among them: a peer that is slow or hung is not lost (a long data download, a
# hang before the stall watchdog runs), and on the job target a lost peer's 138 is not counted,
# so a timeout read as one could restart a job forever. Timeouts stay failures (exit 1).
_PEER_SIGNATURES = re.compile(
    r"connection reset by peer|connection closed by peer|broken pipe|got 0 bytes"
    r"|nccl communicator was aborted|remote process exited or there was a network error|ncclremoteerror",
    re.IGNORECASE,
)
# ...and only when the text comes from the distributed stack: user code's RuntimeError that
# happens to say "broken pipe" is the user's bug.
_DIST_SOURCES = re.compile(r"gloo|nccl|c10d|processgroup", re.IGNORECASE)
_SOURCE_PREFIX = re.compile(r"^\s*\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\]\s*")  # "[.../pair.cc:545] "


def _is_dist_error(exc: BaseException) -> bool:
    """A ``torch.distributed.DistError`` (DistBackendError, DistNetworkError, DistStoreError, ...).
    Without torch imported no exception can be one, so this never imports torch itself."""
    if "torch" not in sys.modules:
        return False
    import torch.distributed as dist

    return dist.is_available() and isinstance(exc, dist.DistError)


def from_distributed_stack(exc: BaseException) -> bool:
    """A ``DistError``, or a RuntimeError whose text names gloo, NCCL, c10d or a process group."""
    return _is_dist_error(exc) or (isinstance(exc, RuntimeError) and bool(_DIST_SOURCES.search(str(exc))))


def is_peer_lost(exc: BaseException, after_setup: bool) -> bool:
    """Whether ``exc`` means that a peer went away, for an exception raised ``after_setup``: once
    ``init_process_group`` has returned (the ranks did connect) and the trainer runs, whether it
    builds the model, downloads data or trains. ``DistError``s and RuntimeErrors from
    gloo/NCCL/c10d with a peer-failure text (not a timeout) qualify. A rendezvous or ``init_process_group``
    failure stays a plain failure (exit 1): a network that never works must not be retried forever."""
    if not after_setup:
        return False
    # A DistError too needs a peer's text: NCCL raises DistBackendError for this rank's own CUDA
    # errors as well, and a failure of this rank must count.
    return from_distributed_stack(exc) and bool(_PEER_SIGNATURES.search(str(exc)))


def failure_reason(exc: BaseException) -> str:
    """The informative part of a distributed error, on one line: gloo's source location and its
    advice ("This is typically caused by ...") are dropped; the peer's address is kept."""
    text = " ".join(str(exc).split())
    text = _SOURCE_PREFIX.sub("", text)
    text = re.split(r"\.\s+This is typically caused by", text, maxsplit=1)[0]
    return text.rstrip(". ")[:200] or type(exc).__name__


def failed_collective(exc: BaseException) -> str:
    """Which collective ``exc`` came out of, from its traceback: the outermost
    ``torch.distributed`` API call (``all_reduce``, ``barrier``, ``broadcast_object_list``, ...),
    DDP's sync of the model when it is built, DDP's gradient all-reduce (whose failure surfaces in
    backward or the next forward), an FSDP collective, or "a collective" when the traceback does
    not say."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in frames:
        if os.path.basename(frame.filename) == "distributed_c10d.py":
            return frame.name
    for frame in frames:
        path = frame.filename.replace(os.sep, "/")
        if path.endswith("nn/parallel/distributed.py"):  # DDP checks and broadcasts the model when built
            return "DDP's start-up sync of the model" if frame.name == "__init__" else "DDP's gradient all-reduce"
        if "/torch/autograd/" in path:
            return "DDP's gradient all-reduce"
        if "/torch/distributed/fsdp/" in path:
            return "an FSDP collective"
    return "a collective"


def peer_lost(exc: BaseException, step: int | None) -> PeerLost:
    """The one-line error for a peer lost after optimizer step ``step`` (None: before training).
    It keeps "a collective failed", the phrase ``ddpctl``'s run supervisor looks for to tell such
    ranks from the one that caused it."""
    when = "before training started" if step is None else f"after step {step}"
    return PeerLost(
        f"lost a peer during {failed_collective(exc)} {when} ({failure_reason(exc)}): "
        f"a collective failed because another rank stopped; exit {EXIT_PEER_LOST} so the job restarts"
    )
