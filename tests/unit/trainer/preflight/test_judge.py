"""ddpctl_trainer.preflight.judge: the medians, the tolerance and the floors, CPU figures per
node and GPU figures per rank, pairing and re-pairing nodes to tell a slow node from a slow link,
the 2-node caveat, on figures made up here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from ddpctl_trainer.preflight import PreflightConfig
from ddpctl_trainer.preflight.judge import (
    MAX_PAIR_ROUNDS,
    Judged,
    PairFigure,
    Place,
    alone_slots,
    avoid_hint,
    below,
    busbw,
    first_pairs,
    gemm_rate,
    judge_pairs,
    node_slots,
    pair_rounds,
    ranks_text,
    reference,
    waves,
)
from ddpctl_trainer.preflight.report import Figures, assemble
from ddpctl_trainer.protocol import (
    EXIT_PREFLIGHT,
)
from tests.unit.trainer.preflight.made_up import GFLOP, cpu_report, places, seconds_for

# ------------------------------------------------------------------------------------ arithmetic


@pytest.mark.parametrize(
    ("nbytes", "seconds", "n", "expected"),
    [
        (10**9, 1.0, 2, 1.0),  # 2(n-1)/n = 1 for two ranks: busbw = algbw
        (10**9, 1.0, 4, 1.5),
        (10**9, 0.5, 8, 3.5),  # algbw 2 GB/s x 1.75
        (4 * 2**20, 0.01, 16, 4 * 2**20 / 0.01 / 1e9 * 30 / 16),
        (10**9, 1.0, 1, 0.0),  # one rank: no collective, no bus
        (10**9, 0.0, 4, 0.0),
    ],
)
def test_busbw_is_algbw_times_2_n_minus_1_over_n(nbytes: int, seconds: float, n: int, expected: float) -> None:
    assert busbw(nbytes, seconds, n) == pytest.approx(expected)


def test_gemm_rate_counts_2n_cubed() -> None:
    assert gemm_rate(1000, 1.0, GFLOP) == pytest.approx(2.0)
    assert gemm_rate(8192, 2 * 8192**3 / 700e12, 1e12) == pytest.approx(700.0)


@pytest.mark.parametrize(
    ("values", "ref"),
    [([5.0], 5.0), ([1.0, 9.0], 9.0), ([3.0, 1.0, 2.0], 2.0), ([4.0, 1.0, 3.0, 2.0], 3.0), ([], 0.0)],
)
def test_reference_is_the_median_upper_for_even_counts(values: list[float], ref: float) -> None:
    assert reference(values) == ref


@pytest.mark.parametrize(
    ("value", "ref", "tolerance", "floor", "why"),
    [
        (59.0, 100.0, 0.6, 0.0, "median"),
        (60.0, 100.0, 0.6, 0.0, None),  # at the tolerance: not below it
        (90.0, 100.0, 0.6, 95.0, "floor"),  # the floor is absolute
        (50.0, 100.0, 0.6, 40.0, "median"),
        (30.0, 100.0, 0.6, 40.0, "floor"),  # both: the floor is said
        (5.0, 0.0, 0.6, 0.0, None),  # nothing to compare with
    ],
)
def test_below(value: float, ref: float, tolerance: float, floor: float, why: str | None) -> None:
    assert below(value, ref, tolerance, floor) == why


def test_ranks_text() -> None:
    assert [ranks_text(r) for r in ([3], [7, 4, 5, 6], [1, 3, 8])] == ["rank 3", "ranks 4-7", "ranks 1, 3, 8"]


# ------------------------------------------------------------------------------------ compute


def test_a_slow_cpu_node_is_named_with_its_pod_node_figure_and_median() -> None:
    report = cpu_report({0: 61.0, 1: 59.0, 2: 20.0, 3: 18.0})
    (finding,) = report.findings
    assert finding.kind == "slow node" and finding.nodes == (1,) and finding.ranks == (2, 3)
    assert finding.text == (
        "slow node: node 1 (pod ddp-1, k8s node w-1): compute 20 GFLOP/s, 0.33 x the median 61 GFLOP/s "
        "(tolerance 0.6); avoid it: --avoid-node w-1"
    )
    assert finding.avoid == "w-1"
    assert report.failed and report.exit_code == EXIT_PREFLIGHT == 201


def test_cpu_nodes_are_judged_by_their_best_rank() -> None:
    """The ranks of a node share its cores: one rank unlucky in every window does not name its node."""
    assert cpu_report({0: 61.0, 1: 12.0, 2: 58.0, 3: 60.0}).findings == []


def test_healthy_figures_within_tolerance_pass() -> None:
    report = cpu_report({0: 61.0, 1: 40.0, 2: 38.0, 3: 37.0})  # node 1 at 0.62 of node 0
    assert report.findings == [] and not report.failed and report.exit_code == 0


def test_the_tolerance_is_a_setting() -> None:
    rates = {0: 61.0, 1: 40.0, 2: 45.0, 3: 44.0}  # node 1 at 0.74
    assert cpu_report(rates).findings == []
    assert [f.nodes for f in cpu_report(rates, tolerance=0.8).findings] == [(1,)]


def test_a_floor_names_every_node_below_it_even_when_all_agree() -> None:
    report = cpu_report({0: 30.0, 1: 29.0, 2: 31.0, 3: 30.0}, min_gflops=50.0)
    assert [f.nodes for f in report.findings] == [(0,), (1,)]
    assert "compute 30 GFLOP/s, below the floor 50 GFLOP/s (--preflight-min-gflops)" in report.findings[0].text


def test_with_one_node_only_a_floor_can_name_it() -> None:
    assert cpu_report({0: 5.0, 1: 4.0}, nodes=1).findings == []
    assert len(cpu_report({0: 5.0, 1: 4.0}, nodes=1, min_gflops=10.0).findings) == 1


def test_gpu_figures_are_per_rank_in_tflops() -> None:
    ps = places(2, 4)
    rates = dict.fromkeys(range(8), 700.0) | {6: 350.0}
    figures = Figures(ps, "cuda", "nccl", 8192, "bfloat16", seconds_for(rates, 8192, 1e12))
    report = assemble(figures, PreflightConfig(tolerance=0.8))
    (finding,) = report.findings
    assert finding.kind == "slow rank" and finding.ranks == (6,)
    assert finding.text == (
        "slow rank: rank 6 (node 1, local rank 2, pod ddp-1, k8s node w-1): compute 350 TFLOP/s, 0.50 x the median "
        "700 TFLOP/s (tolerance 0.8); avoid it: --avoid-node w-1"
    )
    assert report.compute_unit == "TFLOP/s" and report.gemm_dtype == "bfloat16"


def test_a_slow_host_to_device_copy_is_named_per_rank() -> None:
    ps = places(1, 4)
    figures = Figures(
        ps, "cuda", "nccl", 8192, "bfloat16", seconds_for(dict.fromkeys(range(4), 700.0), 8192, 1e12),
        h2d_bytes=2**28, h2d_s={0: 2**28 / 50e9, 1: 2**28 / 50e9, 2: 2**28 / 12e9, 3: 2**28 / 51e9},
    )  # fmt: skip
    (finding,) = assemble(figures, PreflightConfig()).findings
    assert finding.kind == "slow host-to-device copy" and finding.ranks == (2,)
    assert "12 GB/s, 0.24 x the median 50 GB/s" in finding.text
    assert finding.avoid is None  # every rank ran on w-0: avoiding it leaves nowhere to run


@pytest.mark.parametrize(
    ("named", "expected"),
    [
        ([Place(2, 0, 1, "p1", "w-1", "p1")], "w-1"),
        ([Place(2, 0, 1, "p1", None, "p1")], None),  # the Kubernetes node is unknown
        ([Place(0, 0, 0, "p0", "w-0", "p0"), Place(2, 0, 1, "p1", "w-1", "p1")], None),  # two nodes named
    ],
)
def test_avoid_hint(named: list[Place], expected: str | None) -> None:
    assert avoid_hint(named, places(2, 2)) == expected


def test_no_avoid_hint_when_every_rank_ran_on_the_same_kubernetes_node() -> None:
    ps = places(2, 2, machine="kind-worker")
    assert avoid_hint([p for p in ps if p.node == 1], ps) is None


# ------------------------------------------------------------------------------------ the collective


def test_the_world_all_reduce_against_its_floor_with_the_two_node_caveat() -> None:
    figures = Figures(
        places(2, 2), "cpu", "gloo", 512, "float32", seconds_for(dict.fromkeys(range(4), 50.0)),
        allreduce_bytes=4 * 2**20, world_s={0: 0.010, 1: 0.011, 2: 0.012, 3: 0.012},
    )  # fmt: skip
    report = assemble(figures, PreflightConfig(min_busbw=1.0))
    assert report.world is not None
    assert report.world.seconds == 0.012  # the slowest rank's view: the collective ends with it
    assert report.world.busbw == pytest.approx(4 * 2**20 / 0.012 / 1e9 * 1.5)
    (finding,) = report.findings
    assert finding.kind == "low bus bandwidth"
    assert finding.text == (
        "low bus bandwidth: all-reduce over 4 ranks (2 nodes): 0.524 GB/s, below the floor 1 GB/s "
        "(--preflight-min-busbw); with 2 nodes a slow link and a slow node look the same from both ends "
        "(telling them apart takes 3 nodes or more)"
    )
    assert "with 2 nodes a slow link and a slow node look the same from both ends" in "\n".join(report.figures())
    assert assemble(figures, PreflightConfig()).findings == []  # no floor: one figure has nothing to compare with


# ------------------------------------------------------------------------------------ node pairs


def network(
    n: int, slow_nodes: dict[int, float] | None = None, slow_links: dict[tuple[int, int], float] | None = None
) -> Callable[[list[tuple[int, int]], int], dict[tuple[int, int], float]]:
    """A made-up network of `n` nodes at 10 GB/s a pair: a slow node scales every pair it is in,
    a slow link its one pair. Records the rounds it was asked for."""
    slow_nodes, slow_links = slow_nodes or {}, slow_links or {}

    def measure(pairs: list[tuple[int, int]], round_no: int) -> dict[tuple[int, int], float]:
        asked.append(list(pairs))
        assert len({x for p in pairs for x in p}) == 2 * len(pairs), f"round {round_no} is not disjoint: {pairs}"
        out = {}
        for a, b in pairs:
            factor = slow_nodes.get(a, 1.0) * slow_nodes.get(b, 1.0)
            factor *= slow_links.get((min(a, b), max(a, b)), 1.0)
            out[(a, b)] = 10.0 * factor
        return out

    asked: list[list[tuple[int, int]]] = []
    measure.asked = asked  # type: ignore[attr-defined]
    return measure


def bisect(n: int, **kw: dict) -> tuple[list[PairFigure], Judged, list[list[tuple[int, int]]]]:  # type: ignore[type-arg]
    measure = network(n, **kw)
    pairs = pair_rounds(list(range(n)), 0.6, measure)
    judged = Judged()
    judge_pairs(judged, places(n, 1), pairs, 0.6, 0.0)
    return pairs, judged, measure.asked  # type: ignore[attr-defined]


def test_first_pairs_are_disjoint_in_node_order() -> None:
    assert first_pairs([0, 1, 2, 3, 4]) == [(0, 1), (2, 3)]
    assert first_pairs([0, 1]) == [(0, 1)]


def test_healthy_nodes_cost_one_round() -> None:
    _pairs, judged, asked = bisect(8)
    assert asked == [[(0, 1), (2, 3), (4, 5), (6, 7)]]
    assert judged.findings == []


def test_a_slow_node_is_re_paired_with_fast_ones_and_named() -> None:
    _pairs, judged, asked = bisect(4, slow_nodes={2: 0.3})
    assert asked[0] == [(0, 1), (2, 3)]
    # round 2: each node of the slow pair meets a fast node, the slowest first, with the fastest
    assert asked[1] == [(2, 0), (3, 1)]
    # node 3 was fast with node 1: cleared; node 2 was slow with two nodes that are fast elsewhere
    assert len(asked) == 2
    (finding,) = judged.findings
    assert finding.kind == "slow node network" and finding.nodes == (2,)
    assert finding.text == (
        "slow node network: node 2 (pod ddp-2, k8s node w-2): best pair bus bandwidth 3 GB/s, 0.30 x the median "
        "10 GB/s (tolerance 0.6), slow with every partner (nodes 0, 3); avoid it: --avoid-node w-2"
    )


def test_a_slow_link_between_fast_nodes_is_measured_twice_then_named_as_a_link() -> None:
    _pairs, judged, asked = bisect(4, slow_links={(0, 1): 0.2})
    assert asked[0] == [(0, 1), (2, 3)]
    assert asked[1] == [(0, 2), (1, 3)]  # both ends re-paired with the fast nodes: fast there
    assert asked[2:] == [[(0, 1)]]  # the link once more: one noisy window must not name it
    (finding,) = judged.findings
    assert finding.kind == "slow link" and finding.nodes == (0, 1) and finding.avoid is None
    assert finding.text.startswith(
        "slow link: between node 0 (pod ddp-0, k8s node w-0) and node 1 (pod ddp-1, k8s node w-1): "
        "bus bandwidth 2 GB/s, 0.20 x the median 10 GB/s (tolerance 0.6); both nodes are fast with other partners"
    )


def test_a_link_that_was_slow_once_is_not_named() -> None:
    """A window slowed by something else: measured again, the pair keeps its better figure."""
    calls = {"n": 0}

    def measure(pairs: list[tuple[int, int]], round_no: int) -> dict[tuple[int, int], float]:
        out = {}
        for pair in pairs:
            first_time = pair == (0, 1) and calls["n"] == 0
            out[pair] = 2.0 if first_time else 10.0
        calls["n"] += 1
        return out

    pairs = pair_rounds([0, 1, 2, 3], 0.6, measure)
    judged = Judged()
    judge_pairs(judged, places(4, 1), pairs, 0.6, 0.0)
    assert judged.findings == []
    assert [(p.a, p.b, p.round, p.busbw) for p in pairs] == [
        (0, 1, 1, 2.0), (2, 3, 1, 10.0), (0, 2, 2, 10.0), (1, 3, 2, 10.0), (0, 1, 3, 10.0)
    ]  # fmt: skip


@pytest.mark.parametrize("slow", [0, 1, 2])
def test_three_nodes_measure_the_triangle_and_name_the_slow_node(slow: int) -> None:
    _pairs, judged, asked = bisect(3, slow_nodes={slow: 0.4})
    assert asked[:3] == [[(0, 1)], [(0, 2)], [(1, 2)]]
    assert [f.nodes for f in judged.findings] == [(slow,)]
    assert judged.findings[0].kind == "slow node network"


def test_three_nodes_tell_a_slow_link() -> None:
    _pairs, judged, _asked = bisect(3, slow_links={(1, 2): 0.3})
    assert [f.kind for f in judged.findings] == ["slow link"] and judged.findings[0].nodes == (1, 2)


def test_an_odd_node_out_is_paired_in_the_next_round() -> None:
    _pairs, judged, asked = bisect(5, slow_nodes={4: 0.2})
    assert asked[0] == [(0, 1), (2, 3)]
    assert asked[1] == [(4, 0)]  # not yet measured: a suspect, with the fastest node
    assert [f.nodes for f in judged.findings] == [(4,)]


def test_two_slow_nodes_of_six_are_both_named_and_only_they() -> None:
    _pairs, judged, asked = bisect(6, slow_nodes={0: 0.3, 2: 0.3})
    assert sorted(f.nodes for f in judged.findings) == [(0,), (2,)]
    assert all(f.kind == "slow node network" for f in judged.findings)
    assert len(asked) <= MAX_PAIR_ROUNDS


def test_pairs_of_a_shared_host_take_turns() -> None:
    one_host = places(4, 1, machine="vm")
    assert waves([(0, 1), (2, 3)], one_host) == [[(0, 1)], [(2, 3)]]
    assert waves([(0, 1), (2, 3)], places(4, 1)) == [[(0, 1), (2, 3)]]


def _with(ps: list[Place], cores: int, threads: int = 1) -> list[Place]:
    return [dataclasses.replace(p, cores=cores, threads=threads) for p in ps]


@pytest.mark.parametrize(
    ("ps", "slots"),
    [
        # one node per machine, cores for both ranks: every rank at once
        (_with(places(2, 2), cores=8), [[0, 1, 2, 3]]),
        # one host: its nodes in turn, each node's ranks together
        (_with(places(2, 2, machine="vm"), cores=2), [[0, 1], [2, 3]]),
        # more threads than cores: the node's ranks one at a time, the machines side by side
        (_with(places(2, 2), cores=2, threads=2), [[0, 2], [1, 3]]),
        (_with(places(2, 2, machine="vm"), cores=2, threads=2), [[0], [1], [2], [3]]),
        (places(2, 2, machine="vm"), [[0], [1], [2], [3]]),  # one core each: no two ranks together
    ],
)
def test_a_machine_runs_one_node_at_a_time_its_ranks_together_when_they_fit(
    ps: list[Place], slots: list[list[int]]
) -> None:
    assert node_slots(ps) == slots


def test_uneven_nodes_on_one_host_fill_their_slots_in_turn() -> None:
    """Node 0 (2 ranks) fits its cores, node 1 (3 ranks, 2 threads each) does not: one slot for node
    0, then node 1's ranks one by one."""
    ps = [Place(0, 0, 0, "a", None, "vm", 4), Place(1, 1, 0, "a", None, "vm", 4)]
    ps += [Place(2 + i, i, 1, "b", None, "vm", 4, 2) for i in range(3)]
    assert node_slots(ps) == [[0, 1], [2], [3], [4]]


def test_ranks_run_alone_on_their_machine() -> None:
    assert alone_slots(places(2, 2)) == [[0, 2], [1, 3]]  # a rank of each node at a time
    assert alone_slots(places(2, 2, machine="vm")) == [[0], [1], [2], [3]]  # one host: one rank at a time
