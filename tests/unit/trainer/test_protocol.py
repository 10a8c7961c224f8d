"""The line protocol the trainer writes and the CLI reads back: one format, one parser each."""

from __future__ import annotations

import pytest

from ddpctl_trainer import protocol


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ("[rank 3] hello", (3, "hello")),
        ("[rank 0] ", (0, "")),
        ("ddpctl-trainer: error: [rank 12] bad flag", (12, "ddpctl-trainer: error: bad flag")),
        ("ddpctl-trainer: warning: [rank 1] slow", (1, "ddpctl-trainer: warning: slow")),
        ("[rank3]: torch's own prefix", None),
        ("[node 1] an agent's line", None),
        ("ddpctl-trainer: error: no rank", None),
        ("text [rank 2] in the middle", None),
    ],
)
def test_parse_rank_line(line: str, parsed: tuple[int, str] | None) -> None:
    assert protocol.parse_rank_line(line) == parsed


@pytest.mark.parametrize("rank", [0, 7, 1023])
def test_rank_prefix_parses_back(rank: int) -> None:
    assert protocol.parse_rank_line(protocol.rank_prefix(rank) + "x") == (rank, "x")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (45.4, "45s"), (59.6, "1m00s"), (125, "2m05s"), (3599, "59m59s"), (3725, "1h02m"), (-3, "0s")],
)
def test_duration_text(seconds: float, text: str) -> None:
    assert protocol.duration_text(seconds) == text


@pytest.mark.parametrize(("text", "seconds"), [("45s", 45), ("2m05s", 125), ("1h02m", 3720), ("", None), ("5x", None)])
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert protocol.parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[rank 0] epoch 3/3 step 254/313 loss 0.1234 424.6 samples/s eta 2m05s",
            protocol.Progress(3, 3, 254, 313, 0.1234, 424.6, 125.0),
        ),
        ("epoch 1/2 step 4/8 loss 2.3000 100.0 samples/s", protocol.Progress(1, 2, 4, 8, 2.3, 100.0, None)),
        ("epoch 1/2 step 4/8", protocol.Progress(1, 2, 4, 8)),
        ("epoch 1/2 step 4/8 loss nan 1.0 samples/s", None),  # nan parses as a float: compared below
        ("resumed from ckpt-00000008.pt (epoch 2, step 8)", None),
        ("[rank 0] done: 8 steps, 10.0 samples/s (global), 1.0s", None),
    ],
)
def test_parse_progress(line: str, expected: protocol.Progress | None) -> None:
    found = protocol.parse_progress(line)
    if "nan" in line:
        assert found is not None and found.loss != found.loss  # NaN: a diverged run still shows where it is
        return
    assert found == expected


def test_progress_text_parses_back_and_counts_every_epoch() -> None:
    p = protocol.Progress(2, 4, 5, 10, 0.5, 12.5, 61.0)
    assert protocol.parse_progress(p.text()) == p
    assert p.percent == pytest.approx(100 * 15 / 40)
    assert protocol.Progress(1, 1, 0, 0).percent == 0.0


@pytest.mark.parametrize(
    ("line", "step"),
    [
        ("[rank 0] ddpctl-trainer: recovery: the group formed again (generation 1), going on at step 4 after 4.4s", 4),
        ("ddpctl-trainer: recovery: replaced a lost process: joined the running job at step 12 (generation 2)", 12),
        ("[rank 0] epoch 1/2 step 4/6 loss 1.37", None),
        ("[rank 2] lost a peer after step 4 (Read error)", None),
    ],
)
def test_a_recovery_line_says_the_step_training_goes_on_from(line: str, step: int | None) -> None:
    assert protocol.recovery_step(line) == step


FORMED = "[rank 0] ddpctl-trainer: recovery: the group formed again (generation 2, {} joined), going on at step 4"


@pytest.mark.parametrize(
    ("nodes", "said"),
    [([1], "node 1"), ([1, 12], "nodes 1, 12"), ([], "no node")],
)
def test_a_recovery_line_names_the_nodes_that_joined(nodes: list[int], said: str) -> None:
    assert protocol.recovery_nodes_text(nodes) == said
    assert protocol.recovery_nodes(FORMED.format(said)) == nodes


@pytest.mark.parametrize(
    "line",
    [
        "[rank 0] ddpctl-trainer: recovery: the group formed again (generation 1), going on at step 4 after 4.4s",
        "[rank 0] epoch 1/2 step 4/6 loss 1.37: node 1 joined",  # not a recovery line
    ],
)
def test_a_line_that_names_no_node_says_none(line: str) -> None:
    assert protocol.recovery_nodes(line) is None
