"""ddpctl_trainer.errors: each error's exit code and one line; the lost-peer classifier, which
exceptions mean "another rank went away" (exit 138, retried), on the real exception types and the
texts torch 2.14.1 produces (the gloo ones measured with a SIGKILLed peer; the NCCL ones as they
stand in libtorch_cuda.so / libnccl.so); messages without credentials."""

from __future__ import annotations

import signal

import pytest
import torch
import torch.distributed as dist

from ddpctl_trainer.errors import (
    CheckpointError,
    PeerLost,
    Preempted,
    StoreError,
    TrainerError,
    TrainerFailure,
    UsageError,
    failed_collective,
    failure_reason,
    is_peer_lost,
    keep_as_termination_message,
    peer_lost,
    print_error,
    scrub,
    without_userinfo,
)
from ddpctl_trainer.protocol import EXIT_PEER_LOST

GLOO_RESET = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:12174: "
    "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application. "
    "Check the logs of the remote worker before reporting an error. GLHF! "
    "\N{BEACH WITH UMBRELLA}\N{VARIATION SELECTOR-16}"
)
GLOO_CLOSED = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer "
    "[127.0.0.1]:13226. This is typically caused by a remote worker crashing. Check the logs of the remote "
    "worker before reporting an error. GLHF! \N{BEACH WITH UMBRELLA}\N{VARIATION SELECTOR-16}"
)
GLOO_TIMEOUT = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 3000ms for recv operation to complete"
)
NCCL_REMOTE = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, remote process exited or there "
    "was a network error, NCCL version 2.27.7\nncclRemoteError: A call failed possibly due to a network "
    "error or a remote process exiting prematurely."
)
NCCL_ABORTED = "NCCL communicator was aborted on rank 1."
NCCL_WATCHDOG = (
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, "
    "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
)
CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which "
    "1.06 GiB is free. Process 4711 has 78.04 GiB memory in use."
)


@pytest.mark.parametrize(
    ("exc", "after_setup", "lost"),
    [
        pytest.param(RuntimeError(GLOO_RESET), True, True, id="gloo-reset-by-peer"),
        pytest.param(RuntimeError(GLOO_CLOSED), True, True, id="gloo-closed-by-peer"),
        pytest.param(RuntimeError(GLOO_TIMEOUT), True, False, id="gloo-collective-timeout-is-not-a-lost-peer"),
        pytest.param(dist.DistBackendError(NCCL_REMOTE), True, True, id="nccl-remote-error"),
        pytest.param(RuntimeError(NCCL_ABORTED), True, True, id="nccl-communicator-aborted"),
        pytest.param(dist.DistBackendError(NCCL_WATCHDOG), True, False, id="nccl-watchdog-timeout-is-not-a-lost-peer"),
        pytest.param(
            dist.DistBackendError("CUDA error: an illegal memory access was encountered"),
            True,
            False,
            id="this-ranks-own-nccl-error",
        ),
        pytest.param(dist.DistNetworkError("failed to recv, got 0 bytes"), True, True, id="dist-network-error"),
        pytest.param(dist.DistStoreError("Socket Timeout"), True, False, id="store-timeout-is-not-a-lost-peer"),
        # negatives
        pytest.param(RuntimeError(GLOO_RESET), False, False, id="gloo-reset-before-the-group-existed"),
        pytest.param(
            dist.DistStoreError("Timed out after 601 seconds waiting for clients. 1/2 clients joined."),
            False,
            False,
            id="setup-phase-store-error",
        ),
        pytest.param(ValueError("Connection reset by peer"), True, False, id="value-error"),
        pytest.param(
            RuntimeError("mat1 and mat2 shapes cannot be multiplied (16x192 and 64x4)"),
            True,
            False,
            id="user-runtime-error",
        ),
        pytest.param(RuntimeError("my queue: broken pipe"), True, False, id="user-text-without-a-dist-source"),
        pytest.param(torch.OutOfMemoryError(CUDA_OOM), True, False, id="cuda-oom"),
        pytest.param(KeyboardInterrupt(), True, False, id="keyboard-interrupt"),
    ],
)
def test_is_peer_lost(exc: BaseException, after_setup: bool, lost: bool) -> None:
    assert is_peer_lost(exc, after_setup) is lost


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (GLOO_RESET, "Read error [127.0.0.1]:12174: Connection reset by peer"),
        (GLOO_CLOSED, "Connection closed by peer [127.0.0.1]:13226"),
        (GLOO_TIMEOUT, "Timed out waiting 3000ms for recv operation to complete"),
        (NCCL_ABORTED, "NCCL communicator was aborted on rank 1"),
    ],
)
def test_failure_reason_keeps_the_cause_and_the_peers_address(text: str, reason: str) -> None:
    assert failure_reason(RuntimeError(text)) == reason


def _raised_in(filename: str, function: str) -> RuntimeError:
    """A RuntimeError whose traceback has a frame ``function`` of ``filename`` (as torch's own)."""
    namespace: dict[str, object] = {}
    exec(compile(f"def {function}():\n    raise RuntimeError('x')\n", filename, "exec"), namespace)  # noqa: S102
    try:
        namespace[function]()  # type: ignore[operator]
    except RuntimeError as exc:
        return exc
    raise AssertionError("not raised")


@pytest.mark.parametrize(
    ("filename", "function", "expected"),
    [
        ("/site-packages/torch/distributed/distributed_c10d.py", "all_reduce", "all_reduce"),
        ("/site-packages/torch/distributed/distributed_c10d.py", "barrier", "barrier"),
        ("/site-packages/torch/nn/parallel/distributed.py", "_pre_forward", "DDP's gradient all-reduce"),
        ("/site-packages/torch/nn/parallel/distributed.py", "__init__", "DDP's start-up sync of the model"),
        ("/site-packages/torch/autograd/graph.py", "_engine_run_backward", "DDP's gradient all-reduce"),
        ("/site-packages/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", "all_gather", "an FSDP collective"),
        ("/work/train.py", "step", "a collective"),
    ],
)
def test_failed_collective_is_read_from_the_traceback(filename: str, function: str, expected: str) -> None:
    assert failed_collective(_raised_in(filename, function)) == expected


def test_peer_lost_is_one_line_with_the_step_the_reason_and_exit_138() -> None:
    exc = _raised_in("/site-packages/torch/distributed/distributed_c10d.py", "all_reduce")
    exc.args = (GLOO_RESET,)
    error = peer_lost(exc, 7)
    assert isinstance(error, PeerLost) and error.exit_code == EXIT_PEER_LOST == 138
    assert str(error) == (
        "lost a peer during all_reduce after step 7 (Read error [127.0.0.1]:12174: Connection reset by peer): "
        "a collective failed because another rank stopped; exit 138 so the job restarts"
    )


def test_a_peer_lost_while_setting_up_says_so_instead_of_a_step() -> None:
    exc = _raised_in("/site-packages/torch/distributed/distributed_c10d.py", "all_reduce")
    exc.args = (GLOO_CLOSED,)
    assert str(peer_lost(exc, None)).startswith(
        "lost a peer during all_reduce before training started (Connection closed by peer [127.0.0.1]:13226): "
    )


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (TrainerError, 1),
        (TrainerFailure, 1),
        (CheckpointError, 1),
        (StoreError, 1),
        (UsageError, 2),
        (Preempted, 143),
        (PeerLost, 138),
    ],
)
def test_each_error_exits_with_its_code_and_is_one_line(error: type[TrainerError], code: int) -> None:
    raised = error("checkpoint /ckpt/ckpt-00000003.pt\nis unreadable  (OSError)")
    assert raised.exit_code == code
    assert str(raised) == "checkpoint /ckpt/ckpt-00000003.pt is unreadable (OSError)"


def test_138_is_the_retryable_code_kubeflow_documents() -> None:
    from ddpctl_trainer import protocol

    assert EXIT_PEER_LOST == 128 + signal.SIGUSR1
    assert EXIT_PEER_LOST in protocol.KUBEFLOW_RETRYABLE and EXIT_PEER_LOST in protocol.CAUSED_BY_A_PEER


@pytest.mark.parametrize(
    ("rank", "line"),
    [
        (None, "ddpctl-trainer: error: no such file\n"),
        (0, "ddpctl-trainer: error: [rank 0] no such file\n"),
        (12, "ddpctl-trainer: error: [rank 12] no such file\n"),
    ],
)
def test_print_error_writes_the_tag_then_the_ranks_prefix(
    rank: int | None, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ddpctl_trainer.protocol import parse_rank_line

    print_error("no such file", rank)
    err = capsys.readouterr().err
    assert err == line
    parsed = parse_rank_line(err.rstrip("\n"))  # what the runners and `ddpctl status` read back
    assert parsed == (None if rank is None else (rank, "ddpctl-trainer: error: no such file"))


def test_scrub_removes_secrets_query_strings_and_debug_dumps() -> None:
    env = {"AWS_SECRET_ACCESS_KEY": "hunter2-secret", "AWS_SESSION_TOKEN": "tok-123456"}
    text = (
        "Error performing PUT http://h:9/b/k?X-Amz-Signature=abc&X-Amz-Credential=AKIA in 3ms - "
        "key hunter2-secret tok-123456 https://user:pw@h/x\n\nDebug source:\nGeneric { secret: hunter2-secret }"
    )
    out = scrub(text, env)
    assert "hunter2" not in out and "tok-123456" not in out and "X-Amz" not in out and "pw@" not in out
    assert "\n" not in out and "Debug source" not in out
    assert out.startswith("Error performing PUT http://h:9/b/k?*** in 3ms")


@pytest.mark.parametrize(
    ("url", "bare"),
    [
        ("s3://AKIA:secret@bucket/run", "s3://bucket/run"),
        ("s3://bucket/run", "s3://bucket/run"),
        ("https://user@host/x", "https://host/x"),
    ],
)
def test_without_userinfo(url: str, bare: str) -> None:
    assert without_userinfo(url) == bare


def test_a_termination_message_is_kept_where_kubernetes_gives_one(tmp_path) -> None:
    """In a container the kubelet mounts /dev/termination-log: what it is given goes there whole (and
    stays on the pod object); where the file does not exist nothing is created."""
    log = tmp_path / "termination-log"
    log.write_text("")
    keep_as_termination_message(["ddpctl-trainer: stalled: a", "ddpctl-trainer: stalled: b"], str(log))
    assert log.read_text() == "ddpctl-trainer: stalled: a\nddpctl-trainer: stalled: b\n"
    keep_as_termination_message(["x" * 5000], str(log))
    assert len(log.read_text()) <= 4096
    keep_as_termination_message(["a"], str(tmp_path / "absent"))
    assert not (tmp_path / "absent").exists()
