"""ddpctl_trainer.stop: a SIGTERM inside the training loop is a request for the next step boundary;
outside it, or a second one, stops at once."""

from __future__ import annotations

import pytest

from ddpctl_trainer import stop


@pytest.mark.parametrize(
    ("deferring", "signals", "stop_at_once"),
    [
        (False, 1, [True]),  # start-up or teardown: the first SIGTERM stops the process
        (True, 1, [False]),  # training: recorded, the loop stops at the next step boundary
        (True, 2, [False, True]),  # a second SIGTERM abandons the stop checkpoint
    ],
)
def test_sigterm_is_deferred_only_inside_the_training_loop(
    deferring: bool, signals: int, stop_at_once: list[bool]
) -> None:
    stop.defer(deferring)
    assert [stop.on_signal() for _ in range(signals)] == stop_at_once
    assert stop.requested() is deferring
    assert (stop.seconds_since_signal() is not None) is deferring


def test_a_hold_until_the_signal_ends_when_it_is_recorded() -> None:
    """``wait``: what a callback that holds a rank at a step until it is signalled blocks on."""
    assert not stop.wait(0.01)
    stop.defer(True)
    stop.on_signal()
    assert stop.wait(0.01)
    stop.reset()
    assert not stop.requested() and stop.seconds_since_signal() is None
