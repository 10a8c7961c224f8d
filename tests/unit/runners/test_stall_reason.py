"""The trainer's stall summary condensed into one failure reason (ddpctl.runners.stall), from real output."""

from __future__ import annotations

import pytest

from ddpctl.runners.stall import stall_reason
from ddpctl_trainer.protocol import STALL_SUMMARY_TAG as SUMMARY_TAG

FORWARD = """\
[rank 1] epoch 1/3 step 2/2 loss 2.3119 2041.8 samples/s
[rank 2] [stall-test] rank 2 blocks in forward at step 3
[rank 1] Thread 0x00007fce4cf3cb80 (most recent call first):
[rank 0] ddpctl-trainer: stalled: no rank made progress for 6 s (--stall-timeout 6); stopping the job (exit code 200)
[rank 0] ddpctl-trainer: stalled: rank 2 (node 1, local rank 0, host vm) stopped 7 s ago in forward of step 3:
[rank 0] ddpctl-trainer: stalled:     at /work/tests/support/models/stall_models.py:54 in hook: threading.Event().wait()
[rank 0] ddpctl-trainer: stalled:     at /work/tests/support/models/stall_models.py:46 in forward: self.hook()
[rank 0] ddpctl-trainer: stalled: ranks 0, 1, 3 (nodes 0, 1) wait for it in backward+all-reduce of step 3 (for 7 s)
[rank 0] ddpctl-trainer: stalled: every rank's Python stacks are in its log (faulthandler)
[node 1]   exitcode  : 200 (pid: 25371)
"""

ALL_ALIKE = """\
ddpctl-trainer: stalled: no rank made progress for 300 s (--stall-timeout 300); stopping the job (exit code 200)
ddpctl-trainer: stalled: every rank stopped in backward+all-reduce of step 41 301 s ago: a collective that never \
completes, or the same blocking call on every rank; rank 0:
ddpctl-trainer: stalled:     at /usr/lib/python3.11/site-packages/torch/autograd/graph.py:829 in _engine_run_backward: x
ddpctl-trainer: stalled: every rank's Python stacks are in its log (faulthandler)
"""

ALONE = (
    "2026-12-01T10:00:00Z ddpctl-trainer: stalled: no rank made progress for 6 s; the watchdogs could not agree "
    "(RuntimeError: Connection reset by peer). This is rank 5 (node 2, local rank 1, host pod-2), in forward of "
    "step 10; stopping (exit code 200)\n"
)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param(
            FORWARD,
            "rank 2 (node 1, local rank 0, host vm) stopped 7 s ago in forward of step 3 at "
            "/work/tests/support/models/stall_models.py:54 in hook; ranks 0, 1, 3 (nodes 0, 1) wait for it in "
            "backward+all-reduce of step 3 (for 7 s)",
            id="one-rank-behind",
        ),
        pytest.param(
            ALL_ALIKE,
            "every rank stopped in backward+all-reduce of step 41 301 s ago: a collective that never completes, or "
            "the same blocking call on every rank; rank 0 at "
            "/usr/lib/python3.11/site-packages/torch/autograd/graph.py:829 in _engine_run_backward",
            id="every-rank-alike",
        ),
        pytest.param(ALONE, ALONE.split("stalled: ", 1)[1].strip(), id="a-rank-alone"),
        pytest.param(FORWARD.replace(SUMMARY_TAG, "ddpctl-trainer: error:"), None, id="no-summary"),
        pytest.param(ALL_ALIKE + FORWARD, stall_reason(FORWARD.splitlines()), id="the-last-summary-wins"),
        # a rank that lost the store after the job's summary was printed: the summary still says where
        pytest.param(FORWARD + ALONE, stall_reason(FORWARD.splitlines()), id="a-later-lone-line-does-not-win"),
    ],
)
def test_stall_reason(text: str, reason: str | None) -> None:
    assert stall_reason(text.splitlines(keepends=True)) == reason
