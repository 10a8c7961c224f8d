"""ddpctl_trainer.launch: torchrun's failure becomes the exit code that keeps its workers' reason."""

from __future__ import annotations

import pytest

from ddpctl_trainer.launch import exit_code_for


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([1], 1),  # a runtime failure
        ([143, 143], 143),  # preempted: every worker checkpointed and stopped
        ([-9, 1], 137),  # the first to fail was SIGKILLed (node loss), its peer then failed
        ([138, 138], 138),  # another node died: this node's workers lost their peer (retried)
        ([138, -15], 138),  # the first lost its peer; torchrun then stopped the node's other worker
        ([138, -9], 137),  # a worker SIGKILLed in the same second as its local peer lost it: the node's own cause
        ([138, 1], 1),  # likewise a crash: a node that failed itself must not end with a code rules ignore
        ([143, -9], 137),  # killed while its peers stopped for a preemption
        ([138, 2], 2),  # a usage error still wins over a lost peer
        ([1, 2], 2),  # any usage error wins: retrying cannot help
        ([0], 1),  # torchrun reported a failure: never exit 0 for it
        ([], 1),
    ],
)
def test_launcher_exit_code_keeps_the_reason(codes: list[int], expected: int) -> None:

    assert exit_code_for(codes) == expected


def _torch_timing_decorator_hit_by(signal_exc: BaseException) -> None:
    """What torch's elastic `prof` decorator does when the signal lands before its start time is
    set: its `finally` raises UnboundLocalError while the SignalException is being handled."""
    try:
        raise signal_exc
    finally:
        raise UnboundLocalError("cannot access local variable 'start' where it is not associated with a value")


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_sigterm_to_the_agent_is_143_even_when_torch_masks_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], wrapped: bool
) -> None:
    import signal

    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from ddpctl_trainer import launch

    exc = SignalException("got SIGTERM", sigval=signal.SIGTERM)

    def run(args: object) -> None:
        if wrapped:
            _torch_timing_decorator_hit_by(exc)
        raise exc

    monkeypatch.setattr(torchrun, "run", run)
    monkeypatch.setattr(torchrun, "parse_args", lambda argv: argv)
    assert launch.main(["train.py"]) == 143
    assert "ddpctl-trainer.launch: stopped by SIGTERM; exit 143" in capsys.readouterr().err


def test_any_other_error_of_the_agent_is_not_taken_for_a_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed.run as torchrun

    from ddpctl_trainer import launch

    def run(args: object) -> None:
        raise RuntimeError("the rendezvous failed")

    monkeypatch.setattr(torchrun, "run", run)
    monkeypatch.setattr(torchrun, "parse_args", lambda argv: argv)
    with pytest.raises(RuntimeError, match="rendezvous"):
        launch.main(["train.py"])


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        # node groups, gang: torchrun's node rank from the group's offset and the completion index
        ({"PET_NODE_RANK_OFFSET": "2", "JOB_COMPLETION_INDEX": "1"}, {"PET_NODE_RANK": "3"}),
        # pod recovery: torchrun runs the node alone; the trainer gets its place (uneven groups: 2 procs)
        (
            {"PET_NODE_RANK_OFFSET": "1", "DDP_RANK_OFFSET": "2", "JOB_COMPLETION_INDEX": "1",
             "PET_NPROC_PER_NODE": "2", "DDP_COORDINATOR": "c:29510"},
            {"DDP_NODE_RANK": "2", "DDP_NODE_FIRST_RANK": "4"},
        ),
        # given outright (run --local), the place is kept
        (
            {"PET_NODE_RANK_OFFSET": "0", "JOB_COMPLETION_INDEX": "1", "DDP_COORDINATOR": "c:1",
             "DDP_NODE_RANK": "7", "DDP_NODE_FIRST_RANK": "9"},
            {"DDP_NODE_RANK": "7", "DDP_NODE_FIRST_RANK": "9"},
        ),
        ({"JOB_COMPLETION_INDEX": "1"}, {}),  # no offset: as given
    ],
)  # fmt: skip
def test_a_pods_place_comes_from_its_index_and_its_groups_offsets(env: dict, expected: dict) -> None:
    from ddpctl_trainer.launch import set_node_rank

    out = dict(env)
    set_node_rank(out)
    assert {k: v for k, v in out.items() if k not in env or env[k] != v} | {
        k: out[k] for k in expected if k in env
    } == expected
    assert ("PET_NODE_RANK" in out) == ("DDP_COORDINATOR" not in env and "PET_NODE_RANK_OFFSET" in env)
