"""ddpctl.runners.procs.split_rank_line: a local run's worker lines, told apart by the marker torchrun adds."""

from __future__ import annotations


def test_a_stray_rank_marker_joined_to_a_line_is_not_the_workers_text() -> None:
    """torchrun can join the next line's prefix to a line written in two parts (seen in a local run:
    `{json}@@ddpctl-rank=2@@`); the marker is ours, so the rank's text is the line without it."""
    from ddpctl.runners.procs import RANK_MARK, split_rank_line

    assert split_rank_line(f'{RANK_MARK}2@@{{"rank": 2}}{RANK_MARK}2@@') == (2, '{"rank": 2}')
    assert split_rank_line(f"{RANK_MARK}0@@[rank 0] done") == (0, "done")
    assert split_rank_line("agent line") is None
