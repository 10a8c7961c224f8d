"""Who is slow: the preflight's figures judged against their median and the floors. Pure (no torch).

* **The reference** is the median of the units compared; of an even count the upper middle value,
  because slowness is one-sided (a broken node is slow, never fast): with two nodes the faster is
  the reference, where the plain median (their mean) would hide a node at half speed.
* **The units**: GPU figures per rank (each rank has its own GPU); CPU figures per node, as the
  node's best rank (the ranks of a node share its cores, so a rank is not slower than its node:
  one unlucky rank must not name a node whose other rank ran the same cores at full speed).
* **Named**: a unit below ``tolerance x reference`` or below the absolute floor.
* **The network**, with three nodes or more: pairs of disjoint nodes measure their all-reduce
  side by side; then every node that was slow (its best pair below ``tolerance x`` the best
  node's), or not yet measured, is re-paired with the fastest node it has not met, until it has met two
  fast nodes (DLRover's and GCM's bisection: the slow with the fast). A node's figure is its best
  pair: a node slow with fast partners too is slow itself; a pair slow while both of its nodes are
  fast elsewhere is a slow link. Three nodes measure all three pairs.
  With two nodes there is one pair, the whole job: a slow link and a slow node look the same from
  both ends, and the report says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from .nccl import Transport, problem

# Each finding line says what kind it is first (after the tag), from this fixed vocabulary.
SLOW_NODE = "slow node"
SLOW_RANK = "slow rank"
SLOW_H2D = "slow host-to-device copy"
SLOW_NODE_NETWORK = "slow node network"
SLOW_LINK = "slow link"
LOW_BUSBW = "low bus bandwidth"
SOCKET_FALLBACK = "socket fallback"
WRONG_TRANSPORT = "wrong transport"

TWO_NODE_CAVEAT = (
    "with 2 nodes a slow link and a slow node look the same from both ends (telling them apart takes 3 nodes or more)"
)
MAX_PAIR_ROUNDS = 4  # the first pairing and up to three re-pairings
NEED_FAST_PARTNERS = 2  # a node is slow on the network once slow with two fast nodes (or all there are)


@dataclass(frozen=True)
class Place:
    """Where one rank ran."""

    rank: int
    local_rank: int
    node: int
    pod: str
    k8s_node: str | None  # the Kubernetes node (DDP_NODE_NAME, from the downward API)
    host: str
    cores: int = 1  # the CPU cores this rank may run on (its affinity: a pod's cpuset, the host's)
    threads: int = 1  # torch's intra-op threads in this rank

    @property
    def machine(self) -> str:
        """What shares CPU cores with what: the Kubernetes node, else the host name."""
        return self.k8s_node or self.host


@dataclass(frozen=True)
class Finding:
    """One named problem: one line of the report, after the finding tag."""

    kind: str
    text: str  # `<kind>: ...`, the whole line after the tag
    nodes: tuple[int, ...] = ()
    ranks: tuple[int, ...] = ()
    avoid: str | None = None  # a Kubernetes node to keep the job off (--avoid-node)

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "text": self.text, "nodes": list(self.nodes), "ranks": list(self.ranks),
                "avoid": self.avoid}  # fmt: skip


@dataclass(frozen=True)
class PairFigure:
    """One measured pair of nodes: its all-reduce bus bandwidth, in the round it ran."""

    a: int
    b: int
    round: int
    busbw: float  # GB/s

    @property
    def key(self) -> frozenset[int]:
        return frozenset((self.a, self.b))


@dataclass
class Judged:
    """Findings plus what the table marks: per rank, the checks it was named in."""

    findings: list[Finding] = field(default_factory=list)
    marks: dict[int, list[str]] = field(default_factory=dict)

    def mark(self, ranks: Iterable[int], what: str) -> None:
        for r in ranks:
            self.marks.setdefault(r, []).append(what)


# ------------------------------------------------------------------------------------ arithmetic


def busbw(nbytes: int, seconds: float, n: int) -> float:
    """All-reduce bus bandwidth in GB/s: algbw x 2(n-1)/n, the nccl-tests convention (a ring moves
    2(n-1)/n of the buffer over each rank's link), so figures compare across world sizes."""
    if seconds <= 0 or n < 2:
        return 0.0
    return algbw(nbytes, seconds) * 2 * (n - 1) / n


def algbw(nbytes: int, seconds: float) -> float:
    """Bytes per second of the buffer, in GB/s (1e9)."""
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def gemm_rate(n: int, seconds: float, scale: float) -> float:
    """An n x n x n GEMM's rate: 2n^3 flops per ``seconds``, divided by ``scale`` (1e9: GFLOP/s)."""
    return 2.0 * n**3 / seconds / scale if seconds > 0 else 0.0


def reference(values: Iterable[float]) -> float:
    """The median; of an even count the upper middle value (see the module's docstring)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[len(ordered) // 2]


def below(value: float, ref: float, tolerance: float, floor: float) -> str | None:
    """Why ``value`` is named, or None: under the floor first (absolute), then under tolerance x ref."""
    if floor > 0 and value < floor:
        return "floor"
    if ref > 0 and value < tolerance * ref:
        return "median"
    return None


def fmt(value: float) -> str:
    """3 significant figures: `61.2`, `1.93`, `0.0412`, `1230`."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def ranks_text(ranks: Sequence[int]) -> str:
    """`rank 3`, `ranks 4-7`, `ranks 1, 3, 8`."""
    rs = sorted(ranks)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if rs == list(range(rs[0], rs[-1] + 1)):
        return f"ranks {rs[0]}-{rs[-1]}"
    return "ranks " + ", ".join(map(str, rs))


# ------------------------------------------------------------------------------------ places


def nodes_of(places: Sequence[Place]) -> dict[int, list[Place]]:
    """Node rank -> its places, in rank order."""
    out: dict[int, list[Place]] = {}
    for p in sorted(places, key=lambda p: p.rank):
        out.setdefault(p.node, []).append(p)
    return dict(sorted(out.items()))


def node_slots(places: Sequence[Place]) -> list[list[int]]:
    """Slots for the CPU GEMM: on each machine one node at a time, its ranks together when the
    cores they may run on hold all their threads (as they train: side by side), else one rank at a
    time; machines in parallel. A node's ranks then never share a core, with each other or with
    another node's, and one that runs slower is slower when it trains too (a CPU limit is shared by
    the pod's ranks)."""
    per_machine: dict[str, list[list[int]]] = {}
    for ranks in nodes_of(places).values():
        fits = sum(p.threads for p in ranks) <= min(p.cores for p in ranks)
        units = [[p.rank for p in ranks]] if fits else [[p.rank] for p in ranks]
        per_machine.setdefault(ranks[0].machine, []).extend(units)
    depth = max((len(v) for v in per_machine.values()), default=0)
    return [sorted(r for units in per_machine.values() if i < len(units) for r in units[i]) for i in range(depth)]


def alone_slots(places: Sequence[Place]) -> list[list[int]]:
    """Slots of ranks that may run at once without sharing CPU cores: at most one rank of each
    machine per slot (machines in parallel, a machine's ranks in turn)."""
    per_machine: dict[str, list[int]] = {}
    for p in sorted(places, key=lambda p: p.rank):
        per_machine.setdefault(p.machine, []).append(p.rank)
    depth = max((len(v) for v in per_machine.values()), default=0)
    return [[ranks[i] for ranks in per_machine.values() if i < len(ranks)] for i in range(depth)]


def waves(pairs: Sequence[tuple[int, int]], places: Sequence[Place]) -> list[list[tuple[int, int]]]:
    """Split a round's pairs into waves that share no machine (on one host, every pair in turn)."""
    machines = {n: {p.machine for p in ps} for n, ps in nodes_of(places).items()}
    out: list[tuple[list[tuple[int, int]], set[str]]] = []
    for pair in pairs:
        need = machines.get(pair[0], set()) | machines.get(pair[1], set())
        for wave, used in out:
            if not (used & need):
                wave.append(pair)
                used |= need
                break
        else:
            out.append(([pair], set(need)))
    return [wave for wave, _ in out]


def where(node: int, places: Sequence[Place]) -> str:
    """`node 1 (pod ddp-1, k8s node w2)`."""
    first = nodes_of(places)[node][0]
    return f"node {node} ({_pod_and_node(first)})"


def _pod_and_node(p: Place) -> str:
    return f"pod {p.pod}, k8s node {p.k8s_node}" if p.k8s_node else f"pod {p.pod}"


def _rank_where(p: Place) -> str:
    return f"rank {p.rank} (node {p.node}, local rank {p.local_rank}, {_pod_and_node(p)})"


def avoid_hint(named: Sequence[Place], places: Sequence[Place]) -> str | None:
    """The Kubernetes node to avoid, when the named ranks share one that no healthy rank ran on
    (so a job kept off it runs elsewhere); None when unknown or the healthy ranks ran there too."""
    names = {p.k8s_node for p in named}
    if len(names) != 1 or None in names:
        return None
    (name,) = names
    named_ranks = {p.rank for p in named}
    healthy_elsewhere = any(p.k8s_node and p.k8s_node != name for p in places if p.rank not in named_ranks)
    return name if healthy_elsewhere else None


def _with_avoid(text: str, avoid: str | None) -> str:
    return f"{text}; avoid it: --avoid-node {avoid}" if avoid else text


def _versus(value: float, ref: float, why: str, tolerance: float, floor: float, unit: str, floor_flag: str) -> str:
    if why == "floor":
        return f"{fmt(value)} {unit}, below the floor {fmt(floor)} {unit} ({floor_flag})"
    share = value / ref if ref else 0.0
    return f"{fmt(value)} {unit}, {share:.2f} x the median {fmt(ref)} {unit} (tolerance {tolerance:g})"


# ------------------------------------------------------------------------------------ checks


def judge_compute(
    out: Judged,
    places: Sequence[Place],
    rates: Mapping[int, float],
    per_node: bool,
    tolerance: float,
    floor: float,
    unit: str,
    floor_flag: str,
) -> float:
    """Name the nodes (CPU) or ranks (GPU) whose GEMM rate is low; returns the reference."""
    by_rank = {p.rank: p for p in places}
    if per_node:
        units = {
            node: (max(rates[p.rank] for p in ps), ps)
            for node, ps in nodes_of(places).items()
            if all(p.rank in rates for p in ps)
        }
        ref = reference(v for v, _ in units.values())
        for node, (value, ps) in units.items():
            why = below(value, ref, tolerance, floor)
            if why is None:
                continue
            avoid = avoid_hint(ps, places)
            text = f"{SLOW_NODE}: {where(node, places)}: compute " + _versus(
                value, ref, why, tolerance, floor, unit, floor_flag
            )
            ranks = tuple(p.rank for p in ps)
            out.findings.append(Finding(SLOW_NODE, _with_avoid(text, avoid), (node,), ranks, avoid))
            out.mark(ranks, "compute")
        return ref
    ref = reference(rates.values())
    for rank, value in sorted(rates.items()):
        why = below(value, ref, tolerance, floor)
        if why is None:
            continue
        p = by_rank[rank]
        avoid = avoid_hint([p], places)
        text = f"{SLOW_RANK}: {_rank_where(p)}: compute " + _versus(value, ref, why, tolerance, floor, unit, floor_flag)
        out.findings.append(Finding(SLOW_RANK, _with_avoid(text, avoid), (p.node,), (rank,), avoid))
        out.mark([rank], "compute")
    return ref


def judge_h2d(
    out: Judged, places: Sequence[Place], rates: Mapping[int, float], tolerance: float, floor: float
) -> float:
    """Name the ranks whose host-to-device copy is slow (a GPU on a degraded PCIe link)."""
    by_rank = {p.rank: p for p in places}
    ref = reference(rates.values())
    for rank, value in sorted(rates.items()):
        why = below(value, ref, tolerance, floor)
        if why is None:
            continue
        p = by_rank[rank]
        avoid = avoid_hint([p], places)
        text = f"{SLOW_H2D}: {_rank_where(p)}: " + _versus(
            value, ref, why, tolerance, floor, "GB/s", "--preflight-min-h2d"
        )
        out.findings.append(Finding(SLOW_H2D, _with_avoid(text, avoid), (p.node,), (rank,), avoid))
        out.mark([rank], "h2d")
    return ref


def judge_world(out: Judged, places: Sequence[Place], world_busbw: float, floor: float) -> None:
    """The whole job's all-reduce against the floor (one figure: nothing to compare it with)."""
    if floor <= 0 or world_busbw >= floor:
        return
    nodes = nodes_of(places)
    text = (
        f"{LOW_BUSBW}: all-reduce over {len(places)} ranks ({len(nodes)} node{'s' if len(nodes) > 1 else ''}): "
        f"{fmt(world_busbw)} GB/s, "
        f"below the floor {fmt(floor)} GB/s (--preflight-min-busbw)"
    )
    if len(nodes) == 2:
        text += f"; {TWO_NODE_CAVEAT}"
    elif len(nodes) > 2:
        text += "; see the node pairs for where"
    out.findings.append(Finding(LOW_BUSBW, text, tuple(nodes), tuple(p.rank for p in places)))


def judge_transport(
    out: Judged, places: Sequence[Place], transports: Mapping[int, Transport | None], fabric: str
) -> None:
    """One finding per node whose ranks' NCCL transport is not the fabric asked for, quoting NCCL."""
    for node, ps in nodes_of(places).items():
        wrong = [(p, transports.get(p.rank)) for p in ps if problem(fabric, transports.get(p.rank)) is not None]
        if not wrong:
            continue
        first, transport = wrong[0]
        what = problem(fabric, transport)
        assert transport is not None and what is not None
        kind = SOCKET_FALLBACK if transport.is_socket else WRONG_TRANSPORT
        ranks = tuple(p.rank for p, _ in wrong)
        text = (
            f"{kind}: {ranks_text(ranks)} on {where(node, places)}: {what}; NCCL on rank {first.rank}: {transport.line}"
        )
        out.findings.append(Finding(kind, text, (node,), ranks))
        out.mark(ranks, "transport")


# ------------------------------------------------------------------------------------ node pairs


def first_pairs(nodes: Sequence[int]) -> list[tuple[int, int]]:
    """Round 1: disjoint pairs in node order (an odd node out waits for round 2); three nodes
    start the triangle (0-1, then 0-2 and 1-2 one per round)."""
    ns = sorted(nodes)
    return [(ns[i], ns[i + 1]) for i in range(0, len(ns) - 1, 2)]


def node_best(pairs: Iterable[PairFigure]) -> dict[int, tuple[float, int]]:
    """Node -> (its best pair's bus bandwidth, that partner)."""
    best: dict[int, tuple[float, int]] = {}
    for f in pairs:
        for me, other in ((f.a, f.b), (f.b, f.a)):
            if me not in best or f.busbw > best[me][0]:
                best[me] = (f.busbw, other)
    return best


def pair_best(pairs: Iterable[PairFigure]) -> dict[frozenset[int], float]:
    """Each measured pair's best bus bandwidth (a pair measured twice keeps its better figure)."""
    out: dict[frozenset[int], float] = {}
    for f in pairs:
        out[f.key] = max(out.get(f.key, 0.0), f.busbw)
    return out


def next_pairs(nodes: Sequence[int], measured: Sequence[PairFigure], tolerance: float) -> list[tuple[int, int]]:
    """The next round's disjoint pairs, empty when nothing is left to tell:

    * a suspect is a node not yet measured, or whose best pair is below tolerance x the best
      node's; each suspect that has met fewer than two fast nodes, slowest first, meets the
      fastest fast node it has not met (three nodes: the triangle's next pair);
    * a pair slow between two fast nodes (a slow link?) is measured once more, when both are free.

    Two measurements before anything is named: one noisy window must not name a node or a link."""
    ns = sorted(nodes)
    met = {f.key for f in measured}
    if len(ns) == 3:
        rest = [pair for pair in combinations(ns, 2) if frozenset(pair) not in met]
        if rest:
            return rest[:1]
    best = node_best(measured)
    # against the best node, not the median: after round 1 every node of a slow pair looks slow,
    # and with a few slow nodes those can be half of them
    top = max((v for v, _ in best.values()), default=0.0)
    suspects = {n for n in ns if n not in best or best[n][0] < tolerance * top}
    fast = sorted((n for n in ns if n not in suspects), key=lambda n: (-best[n][0], n))

    def unresolved(s: int) -> bool:
        fast_met = sum(1 for f in fast if frozenset((s, f)) in met)
        return fast_met < NEED_FAST_PARTNERS and any(frozenset((s, f)) not in met for f in fast)

    used: set[int] = set()
    pairs: list[tuple[int, int]] = []
    for s in sorted(filter(unresolved, suspects), key=lambda n: (best[n][0] if n in best else -1.0, n)):
        for f in fast:
            if f not in used and frozenset((s, f)) not in met:
                pairs.append((s, f))
                used |= {s, f}
                break
    times = Counter(f.key for f in measured)
    for key, value in sorted(pair_best(measured).items(), key=lambda kv: (kv[1], sorted(kv[0]))):
        a, b = sorted(key)
        if value < tolerance * top and times[key] < 2 and not ({a, b} & (suspects | used)):
            pairs.append((a, b))
            used |= {a, b}
    return pairs


def pair_rounds(
    nodes: Sequence[int],
    tolerance: float,
    measure: Callable[[list[tuple[int, int]], int], Mapping[tuple[int, int], float]],
) -> list[PairFigure]:
    """Pair, then re-pair round by round (``first_pairs``, ``next_pairs``), at most
    ``MAX_PAIR_ROUNDS``; ``measure(pairs, round)`` gives each pair's bus bandwidth."""
    measured: list[PairFigure] = []
    pairs = first_pairs(nodes)
    for round_no in range(1, MAX_PAIR_ROUNDS + 1):
        if not pairs:
            break
        figures = measure(pairs, round_no)
        measured += [PairFigure(a, b, round_no, figures[(a, b)]) for a, b in pairs]
        pairs = next_pairs(nodes, measured, tolerance)
    return measured


def judge_pairs(
    out: Judged, places: Sequence[Place], pairs: Sequence[PairFigure], tolerance: float, floor: float
) -> float:
    """Name the nodes slow with every partner, then the links slow between fast nodes."""
    best = node_best(pairs)
    if not best:
        return 0.0
    ref = reference(v for v, _ in best.values())
    nodes = nodes_of(places)
    named: set[int] = set()
    for node, (value, _) in sorted(best.items()):
        why = below(value, ref, tolerance, floor)
        if why is None:
            continue
        named.add(node)
        ps = nodes[node]
        avoid = avoid_hint(ps, places)
        partners = sorted({f.b if f.a == node else f.a for f in pairs if node in (f.a, f.b)})
        text = (
            f"{SLOW_NODE_NETWORK}: {where(node, places)}: best pair bus bandwidth "
            + _versus(value, ref, why, tolerance, floor, "GB/s", "--preflight-min-busbw")
            + f", slow with every partner (nodes {', '.join(map(str, partners))})"
        )
        out.findings.append(
            Finding(SLOW_NODE_NETWORK, _with_avoid(text, avoid), (node,), tuple(p.rank for p in ps), avoid)
        )
        out.mark([p.rank for p in ps], "network")
    for key, value in sorted(pair_best(pairs).items(), key=lambda kv: sorted(kv[0])):
        a, b = sorted(key)
        if a in named or b in named:
            continue
        why = below(value, ref, tolerance, floor)
        if why is None:
            continue
        text = (
            f"{SLOW_LINK}: between {where(a, places)} and {where(b, places)}: bus bandwidth "
            + _versus(value, ref, why, tolerance, floor, "GB/s", "--preflight-min-busbw")
            + "; both nodes are fast with other partners, so the path between them (NICs, cables, switches) is slow"
        )
        ranks = tuple(p.rank for n in (a, b) for p in nodes[n])
        out.findings.append(Finding(SLOW_LINK, text, (a, b), ranks))
        out.mark(ranks, "link")
    return ref
