"""Stragglers during training: which node's own work has slowed down, judged across the ranks.

DDP waits for the gradient all-reduce inside ``backward()``, so a clock around a step gives every
rank the straggler's time. A rank's own is the time from the step's start until its last gradient
bucket is ready (DDP calls its comm hook then, before the all-reduce waits on anyone): each rank
stamps it, takes the mean of a window of ``every`` steps, and the ranks gather their figures (one
small gather, no other synchronisation) and judge them identically:

* **The unit is the node**, its figure its slowest rank's (one slow GPU holds its whole node back).
* **Like with like**: a node is compared with the nodes of its node group (``protocol.NODE_GROUP_ENV``,
  the spec's ``nodeGroups[].name``; without it, the nodes of as many processes), against their
  median; of an even count the faster middle value (slowness is one-sided). A node alone in its
  group (one A100 node beside L4 nodes) is compared with its own usual pace: the median of its past
  windows, both of its own time and of its share of the job's median, and it is slow only when it
  is slow by both (so the job's other nodes slowing and recovering, or the whole job slowing, does
  not name it). Its past windows are those it was within the tolerance; a node slow from its first
  window has no pace of its own to fall from, and the preflight is what names it.
* **Named**: a node below ``tolerance`` x the reference speed for ``windows`` windows in a row (a
  window short of halfway back to 1 goes on the run while the node's speed over it stays below);
  **recovered**: a named node back within it for as many windows. Rank 0 prints one line for each,
  naming the node rank, its pod, its Kubernetes node and since which step. ``fail`` ends the job
  after the same step with exit 202, ``replace`` (pod recovery) has its pod replaced alone.

Defaults: windows of 10 steps, 3 in a row, 0.6 of the median speed (docs/trainer.md).

This module is stdlib only at import (torch is imported when a detector is made), and is a single
file beside ``protocol.py``, so a user's own script can use it in any image:

    from ddpctl_trainer.stragglers import Stragglers
    watch = Stragglers(model)            # the DDP-wrapped model; settings from DDP_TRAINER_STRAGGLERS*
    for x, y in loader:
        with watch.step():
            loss = loss_fn(model(x), y); loss.backward(); optimizer.step(); optimizer.zero_grad()

Under ``fail`` the ``with`` block raises ``SystemExit(202)`` on every rank after the same step.
Only a DDP model's steps can be timed so: under FSDP (no hook marks the end of a rank's own work)
or a DDP comm hook of the script's own, the detector is off and rank 0 says so once.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

try:
    from . import protocol
except ImportError:  # a lone file beside protocol.py (the workspace's Secret ships both)
    import protocol  # type: ignore[no-redef, import-not-found]

MODES: tuple[str, ...] = ("off", "warn", "fail", "replace")  # replace: under pod recovery only (DDP_COORDINATOR)
HISTORY = 50  # the past windows a node alone in its group is judged against (its own pace)


class StragglerStop(Exception):
    """A named node, raised on every rank after the same step: under ``fail`` every rank stops with
    ``EXIT_STRAGGLER``; under ``replace`` (pod recovery) ``node``'s ranks leave to be replaced."""

    exit_code = protocol.EXIT_STRAGGLER

    def __init__(self, message: str, node: int | None = None) -> None:
        super().__init__(message)
        self.node = node  # replace: the node whose pod leaves


@dataclass(frozen=True)
class StragglerConfig:
    mode: str = protocol.STRAGGLER_MODE
    tolerance: float = protocol.STRAGGLER_TOLERANCE
    every: int = protocol.STRAGGLER_EVERY
    windows: int = protocol.STRAGGLER_WINDOWS

    @property
    def on(self) -> bool:
        return self.mode != "off"


def config_problem(cfg: StragglerConfig, env: Mapping[str, str] | None = None) -> str | None:
    """What is wrong with the settings (``env``: the process's), one line naming the flag; None if nothing."""
    if cfg.mode not in MODES:
        return f"--stragglers {cfg.mode!r}: use one of {', '.join(MODES)}"
    if cfg.mode == "replace" and not (os.environ if env is None else env).get(protocol.COORDINATOR_ENV):
        return "--stragglers replace: a straggler's pod is replaced alone only under pod recovery; use fail, or warn"
    if not 0 < cfg.tolerance < 1:
        return f"--stragglers-tolerance {cfg.tolerance:g}: give a share of the median speed between 0 and 1, e.g. 0.6"
    if cfg.every < 1:
        return f"--stragglers-every {cfg.every}: give the steps per window, 1 or more"
    if cfg.windows < 1:
        return f"--stragglers-windows {cfg.windows}: give how many windows in a row name a node, 1 or more"
    return None


def config_from_env(env: Mapping[str, str] | None = None) -> StragglerConfig:
    """The settings from ``DDP_TRAINER_STRAGGLERS*`` (the spec renders them), else defaults; ValueError: one line."""
    env = os.environ if env is None else env

    def number(name: str, cast: Callable[[str], Any], default: Any) -> Any:
        text = env.get(name, "").strip()
        try:
            return cast(text) if text else default
        except ValueError:
            raise ValueError(f"{name}={text!r} is not a number") from None

    cfg = StragglerConfig(
        mode=env.get(protocol.STRAGGLERS_ENV, "").strip() or protocol.STRAGGLER_MODE,
        tolerance=number(protocol.STRAGGLERS_TOLERANCE_ENV, float, protocol.STRAGGLER_TOLERANCE),
        every=number(protocol.STRAGGLERS_EVERY_ENV, int, protocol.STRAGGLER_EVERY),
        windows=number(protocol.STRAGGLERS_WINDOWS_ENV, int, protocol.STRAGGLER_WINDOWS),
    )
    problem = config_problem(cfg, env)
    if problem:
        raise ValueError(problem)
    return cfg


# ------------------------------------------------------------------------------------ the judge


@dataclass(frozen=True)
class Seat:
    """Where one rank runs: its node rank, the pod and Kubernetes node, the node's process count
    and node group (None without node groups)."""

    rank: int
    node: int
    pod: str
    k8s_node: str | None = None
    nproc: int = 1
    group: str | None = None

    @property
    def peers(self) -> tuple[str, str | int]:
        """What a node is compared with: its node group's other nodes, else those of as many processes."""
        return ("group", self.group) if self.group else ("nproc", self.nproc)

    def alone(self) -> str:
        return f"group {self.group}" if self.group else f"its size ({self.nproc} processes a node)"

    def where(self) -> str:
        """`node 1 (pod ddp-1, k8s node w2)`: the shape of the preflight's findings."""
        return (
            f"node {self.node} (pod {self.pod}, k8s node {self.k8s_node})"
            if self.k8s_node
            else (f"node {self.node} (pod {self.pod})")
        )


def my_seat(env: Mapping[str, str] | None = None) -> Seat:
    """This process's seat, from torchrun's env (ddpctl's under pod recovery), the downward API's and
    the spec's (``protocol.POD_NAME_ENV``, ``NODE_NAME_ENV``, ``NODE_GROUP_ENV``; pod: else the host name)."""
    env = os.environ if env is None else env
    local_world = max(int(env.get("LOCAL_WORLD_SIZE", "1") or 1), 1)
    if env.get(protocol.COORDINATOR_ENV):  # pod recovery: each torchrun runs its node alone, ddpctl gives its place
        rank = int(env.get(protocol.NODE_FIRST_RANK_ENV) or 0) + int(env.get("LOCAL_RANK") or 0)
        node = int(env.get(protocol.JOB_NODE_RANK_ENV) or 0)
    else:
        rank = int(env.get("RANK", "0") or 0)
        node = int(env.get("GROUP_RANK", "") or rank // local_world)
    pod = env.get(protocol.POD_NAME_ENV) or env.get("HOSTNAME") or os.uname().nodename
    group = env.get(protocol.NODE_GROUP_ENV, "").strip() or None
    return Seat(rank, node, pod, env.get(protocol.NODE_NAME_ENV) or None, local_world, group)


@dataclass(frozen=True)
class Verdict:
    """One line rank 0 prints: a node named (`straggler`) or back (`recovered`)."""

    kind: str
    node: int
    text: str  # after the tag
    avoid: str | None = None

    @property
    def line(self) -> str:
        tag = protocol.STRAGGLER_TAG if self.kind == "straggler" else protocol.STRAGGLER_RECOVERED_TAG
        return tag + self.text


@dataclass
class _NodeState:
    below: int = 0  # windows in a row below the tolerance
    within: int = 0  # windows in a row within it
    first_below: int = 0  # the first step of the first of those windows
    slow_t: float = 0.0  # the node's seconds a step, summed over those windows
    slow_ref: float = 0.0  # the reference's, likewise (their ratio: its speed over the run of windows)
    named: bool = False
    against: str = "the median speed"  # what it was named against
    # a node alone in its group: its past windows within the tolerance, its own seconds a step and
    # its share of the job's reference
    own: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    shares: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))


def reference(values: Sequence[float]) -> float:
    """The reference time of a set of nodes: their median, of an even count the faster middle one."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


class Judge:
    """Judges windows of per-rank figures (seconds of own work a step), identically on every rank.
    Pure: no torch, no clock, no I/O."""

    def __init__(self, cfg: StragglerConfig, seats: Sequence[Seat]) -> None:
        self.cfg = cfg
        self.seats = sorted(seats, key=lambda s: s.rank)
        self.nodes: dict[int, list[Seat]] = {}
        for s in self.seats:
            self.nodes.setdefault(s.node, []).append(s)
        self.state = {node: _NodeState() for node in self.nodes}

    def named(self) -> list[int]:
        return [node for node, st in self.state.items() if st.named]

    def window(self, first_step: int, last_step: int, seconds: Mapping[int, float]) -> list[Verdict]:
        """Judge one window (steps ``first_step``..``last_step``): ``seconds`` per rank. Returns the
        verdicts of this window (nodes named, nodes recovered), by node rank."""
        if len(self.nodes) < 2:
            return []  # one node: nobody to compare with, and nowhere else to go
        figures: dict[int, tuple[float, int]] = {}
        for node, seats in self.nodes.items():
            timed = [(seconds[s.rank], s.rank) for s in seats if seconds.get(s.rank, 0.0) > 0]
            if len(timed) == len(seats):
                figures[node] = max(timed)
        if len(figures) < 2:
            return []
        overall = reference([t for t, _ in figures.values()])
        kinds: dict[tuple[str, str | int], list[int]] = {}
        for node in figures:
            kinds.setdefault(self.nodes[node][0].peers, []).append(node)
        out: list[Verdict] = []
        for node, (t, rank) in sorted(figures.items()):
            seat = self.nodes[node][0]
            peers = kinds[seat.peers]
            st = self.state[node]
            if len(peers) >= 2:
                ref = reference([figures[p][0] for p in peers])
                of = f" of group {seat.group}" if seat.group else ""
                share, against = ref / t, (f"the median speed{of}", fmt_ms(ref))
            else:  # alone in its group: against its own usual pace
                raw = overall / t
                if st.own:
                    usual = statistics.median(st.own)
                    share = max(usual / t, raw / statistics.median(st.shares))
                else:
                    usual, share = t, 1.0  # its first window: no pace of its own yet
                against = ("its usual speed", f"{fmt_ms(usual)}, alone in {seat.alone()}")
                if share >= self.cfg.tolerance:
                    st.own.append(t)
                    st.shares.append(raw)
            verdict = self._update(node, st, share, first_step, last_step, t, rank, against)
            if verdict is not None:
                out.append(verdict)
        return out

    def _update(
        self,
        node: int,
        st: _NodeState,
        share: float,
        first: int,
        last: int,
        t: float,
        rank: int,
        against: tuple[str, str],
    ) -> Verdict | None:
        seat, tol = self.nodes[node][0], self.cfg.tolerance
        slow = share < tol
        if st.below and not st.named and not slow:  # a run of slow windows goes on through one near the
            # tolerance while the node's speed over the run stays below it (one CPU quota period more
            # or less in a window must not start the count again); a window clearly fine ends it
            slow = share < (1 + tol) / 2 and (st.slow_ref + share * t) / (st.slow_t + t) < tol
        if slow:
            if st.below == 0:
                st.first_below, st.slow_t, st.slow_ref = first, 0.0, 0.0
            st.below, st.within, st.slow_t, st.slow_ref = st.below + 1, 0, st.slow_t + t, st.slow_ref + share * t
            if not st.named and st.below >= self.cfg.windows:
                st.named, st.against = True, against[0]
                avoid = self._avoid(node)
                t, share = st.slow_t / st.below, st.slow_ref / st.slow_t  # over the windows that named it
                text = (
                    f"{seat.where()}: own work {fmt_ms(t)} a step (rank {rank}), {share:.2f} x {against[0]} "
                    f"({against[1]}; tolerance {self.cfg.tolerance:g}) for {st.below} windows of "
                    f"{self.cfg.every} steps, since step {st.first_below}"
                )
                return Verdict("straggler", node, f"{text}; avoid it: --avoid-node {avoid}" if avoid else text, avoid)
            return None
        st.within, st.below = st.within + 1, 0
        if st.named and st.within >= self.cfg.windows:
            st.named = False
            return Verdict("recovered", node, f"{seat.where()}: back at {share:.2f} x {against[0]} at step {last}")
        return None

    def _avoid(self, node: int) -> str | None:
        """The Kubernetes node to keep the job off: the straggler's, when other nodes ran elsewhere."""
        name = self.nodes[node][0].k8s_node
        if not name:
            return None
        elsewhere = any(s.k8s_node and s.k8s_node != name for n, ss in self.nodes.items() if n != node for s in ss)
        return name if elsewhere else None

    def failure(self, verdict: Verdict, replace: bool = False) -> str:
        """The line of a job that `fail` stops, or (`replace`) of the node whose pod leaves."""
        seat = self.nodes[verdict.node][0]
        st = self.state[verdict.node]
        text = f"straggler: {seat.where()} below {self.cfg.tolerance:g} x {st.against} since step {st.first_below}; "
        if replace:
            where = verdict.avoid or seat.k8s_node
            unless = f" unless the job avoids it (--avoid-node {where})" if where else ""
            return (f"{text}its pod leaves to be replaced (--stragglers replace): {protocol.LEFT_ALONE} and hand the "
                    f"replacement their state; it may land on the same Kubernetes node{unless}")  # fmt: skip
        text += f"stopping (exit {protocol.EXIT_STRAGGLER}, --stragglers fail)"
        return f"{text}; resubmit with --avoid-node {verdict.avoid}" if verdict.avoid else text


# ------------------------------------------------------------------------------------ the clock


class StepClock:
    """One rank's own work per step: from ``start()`` to its last DDP gradient bucket ready (the comm
    hook's stamp; else to ``stop()``), less the waits inside it: DDP's forward begins with a
    broadcast of the module's buffers (BatchNorm statistics) from rank 0, where every rank waits
    for the slowest, so the time from DDP's forward to its module's is taken out. On CUDA the
    stamps are events on the current stream, read once a window (``take``), so the host never
    waits for the GPU in a step."""

    def __init__(self, device_type: str = "cpu", event: Callable[[], Any] | None = None) -> None:
        if device_type == "cuda" and event is None:
            import torch

            def event() -> Any:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                return e

        self._event = event
        self._start: Any = None
        self._ready: Any = None
        self._waits: list[list[Any]] = []
        self._steps: list[tuple[Any, Any, list[list[Any]]]] = []
        self.hooked = False
        self._handles: list[Any] = []  # the forward pre-hooks, removed by ``unhook``

    def _now(self) -> Any:
        return self._event() if self._event is not None else time.perf_counter()

    def start(self) -> None:
        self._start, self._ready, self._waits = self._now(), None, []

    def wait_begins(self) -> None:
        if self._start is not None:
            self._waits.append([self._now(), None])

    def wait_ends(self) -> None:
        if self._waits and self._waits[-1][1] is None:
            self._waits[-1][1] = self._now()

    def ready(self) -> None:
        """A gradient bucket is ready (DDP's hook, in the backward pass)."""
        self._ready = self._now()

    def stop(self) -> None:
        if self._start is None:
            return
        end = self._ready if self._ready is not None else self._now()
        self._steps.append((self._start, end, [w for w in self._waits if w[1] is not None]))
        self._start = None

    def take(self) -> float:
        """The window's mean seconds of own work a step (0 when none was timed), and a new window."""
        steps, self._steps = self._steps, []
        if not steps:
            return 0.0
        if self._event is not None:
            steps[-1][1].synchronize()

            def span(a: Any, b: Any) -> float:
                return float(a.elapsed_time(b)) / 1000.0
        else:

            def span(a: Any, b: Any) -> float:
                return float(b - a)

        values = [max(span(a, b) - sum(span(w0, w1) for w0, w1 in waits), 0.0) for a, b, waits in steps]
        return sum(values) / len(values)

    def hook(self, model: Any) -> str | None:
        """Stamp a DDP ``model`` (through ``torch.compile``'s ``_orig_mod``): its gradient buckets
        (a comm hook that then runs DDP's default all-reduce) and the buffer broadcast its forward
        starts with. None when it is stamped; else why this rank's own work cannot be timed (no
        model, FSDP, no DDP, a comm hook of the script's own), and nothing is hooked."""
        if model is None:
            return "no model was given to time (Stragglers(model) takes the DDP-wrapped model)"
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel

        ddp = getattr(model, "_orig_mod", model)
        if _is_fsdp(ddp):
            return (
                "FSDP runs its collectives inside forward and backward, and nothing marks when a rank's "
                "own work is done (only DDP's steps are timed per rank)"
            )
        if not isinstance(ddp, DistributedDataParallel):
            return f"the model is a {type(ddp).__name__}, not DDP: nothing marks when a rank's own work is done"

        def stamped(state: Any, bucket: Any) -> Any:
            self.ready()
            return default_hooks.allreduce_hook(state, bucket)

        stamped.__annotations__ = {}  # DDP reads them: a string (postponed) annotation is refused
        try:
            ddp.register_comm_hook(ddp.process_group, stamped)
        except RuntimeError:  # DDP takes one comm hook: the script registered its own
            return "the script registered a DDP comm hook of its own, and DDP takes only one"
        self._handles = [
            ddp.register_forward_pre_hook(lambda module, args: self.wait_begins()),
            ddp.module.register_forward_pre_hook(lambda module, args: self.wait_ends()),
        ]
        self.hooked = True
        return None

    def unhook(self) -> None:
        """Take the forward pre-hooks off (the module outlives its DDP wrapper); the comm hook goes
        with its wrapper."""
        for handle in self._handles:
            handle.remove()
        self._handles, self.hooked = [], False


def _is_fsdp(model: Any) -> bool:
    """FSDP2's ``fully_shard`` module or FSDP1's wrapper, by class name (where they live moved
    between torch versions)."""
    return any(c.__name__ in ("FSDPModule", "FullyShardedDataParallel") for c in type(model).__mro__)


# ------------------------------------------------------------------------------------ the detector


@dataclass
class Stragglers:
    """The detector: a clock per step, a gather and a judgement every ``every`` steps, rank 0's
    lines. ``model``: the DDP-wrapped model; when its ranks' own work cannot be timed (FSDP, no
    DDP, the script's own comm hook) the detector is off, ``unwatched`` says why and rank 0 prints
    it once. ``group``: the process group to gather on (a gloo one under NCCL; made when needed)."""

    model: Any = None
    cfg: StragglerConfig | None = None
    group: Any = None
    device_type: str | None = None
    echo: Callable[[str], None] | None = None  # rank 0's printer (default: stdout, `[rank 0] ` first)
    clock: StepClock = field(init=False)
    judge: Judge | None = field(init=False, default=None)
    step_no: int = field(init=False, default=0)
    verdicts: list[Verdict] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        import torch.distributed as dist

        self.cfg = self.cfg or config_from_env()
        self.active = self.cfg.on and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        self.rank = dist.get_rank() if self.active else 0
        self.world_size = dist.get_world_size() if self.active else 1
        self._received: tuple[int, dict[int, float]] | None = None
        if self.device_type is None:
            self.device_type = _device_type(self.model)
        self.clock = StepClock(self.device_type)
        self.unwatched: str | None = None  # why the detector is off though asked for
        if self.active:
            self.unwatched = self.clock.hook(self.model)
            if self.unwatched is not None:  # every rank would time the slowest: judge nothing
                self.active = False
                if self.rank == 0:
                    why = f"stragglers are not watched (--stragglers {self.cfg.mode}): {self.unwatched}"
                    print(f"{protocol.WARNING_TAG}{protocol.rank_prefix(0)}{why}", file=sys.stderr, flush=True)
        self._first: int | None = None

    def rearm(self, model: Any) -> None:
        """Time ``model``, the DDP wrapper made after the group formed again with a replacement (pod
        recovery): the judgement starts over, the seats gathered again as a new rank's first window does."""
        if not self.active:
            return
        self.clock.unhook()
        self.model, self.clock = model, StepClock(self.device_type or "cpu")
        self._first, self._received, self.judge = None, None, None
        self.unwatched = self.clock.hook(model)
        self.active = self.unwatched is None

    def begin(self) -> None:
        if self.active:
            self.clock.start()

    def end(self, step: int | None = None) -> list[Verdict]:
        """After an optimizer step (``step``: steps done; counted here when None): every ``every``
        steps, gather and judge. Raises ``StragglerStop`` on every rank under ``fail``."""
        if not self.active:
            return []
        self.clock.stop()
        self.step_no = self.step_no + 1 if step is None else step
        if self._first is None:  # the first step timed here (a resumed run starts past 1)
            self._first = self.step_no
        if self.step_no - self._first + 1 < self.cfg.every:  # type: ignore[union-attr]
            return []
        first, self._first = self._first, self.step_no + 1
        if self._received is not None and self._received[0] == self.step_no:
            figures = self._received[1]
        else:
            figures = self._gather(self.clock.take())
        self._received = None
        found = self.judge.window(first, self.step_no, figures) if self.judge else []
        self.verdicts += found
        for v in found:
            self._say(v.line)
        if self.cfg.mode in ("fail", "replace") and self.judge is not None:  # type: ignore[union-attr]
            for v in found:
                if v.kind == "straggler":
                    replace = self.cfg.mode == "replace"  # type: ignore[union-attr]
                    raise StragglerStop(self.judge.failure(v, replace), v.node if replace else None)
        return found

    def riders(self, step: int) -> list[float] | None:
        """When ``step`` ends a window (not the first, whose gather shares the seats): this rank's figure
        in its slot of a world-sized list, to ride on the stop vote's all-reduce (MAX: the other slots
        are 0), so a window costs no collective of its own; the reduced list goes to ``receive``."""
        if not self.active or self.judge is None or (self._received is not None and self._received[0] == step):
            return None
        first = self._first if self._first is not None else step
        if step - first + 1 < self.cfg.every:  # type: ignore[union-attr]
            return None
        self.clock.stop()
        out = [0.0] * self.world_size
        out[self.rank] = self.clock.take()
        return out

    def receive(self, step: int, values: Sequence[float]) -> None:
        self._received = (step, dict(enumerate(values)))

    def restart_window(self) -> None:
        """Between epochs (evaluation, the epoch's checkpoint): the next step starts now."""
        self.clock.stop()

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Around one optimizer step of a user's own loop; ``SystemExit(202)`` under ``fail``."""
        self.begin()
        yield
        try:
            self.end()
        except StragglerStop as exc:
            if self.rank == 0:
                print(f"{protocol.ERROR_TAG}{protocol.rank_prefix(0)}{exc}", file=sys.stderr, flush=True)
            # the script's finally blocks run, then 202 without the interpreter's teardown: gloo's can
            # abort (SIGABRT, 134) once a peer has left, pytorch/pytorch#179291 (atexit: last in, first run)
            atexit.register(lambda: sys.stdout.flush() or sys.stderr.flush() or os._exit(protocol.EXIT_STRAGGLER))
            raise SystemExit(protocol.EXIT_STRAGGLER) from None

    def _gather(self, mine: float) -> dict[int, float]:
        import torch
        import torch.distributed as dist

        if self.group is None and dist.get_backend() != "gloo":
            self.group = dist.new_group(backend="gloo")  # every rank arrives here at the same step
        if self.judge is None:
            seats: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(seats, my_seat(), group=self.group)
            self.judge = Judge(self.cfg, seats)  # type: ignore[arg-type]
        n = dist.get_world_size()
        out = [torch.zeros(1, dtype=torch.float64) for _ in range(n)]
        dist.all_gather(out, torch.tensor([mine], dtype=torch.float64), group=self.group)
        return {r: float(t.item()) for r, t in enumerate(out)}

    def _say(self, line: str) -> None:
        if self.rank != 0:
            return
        if self.echo is not None:
            self.echo(line)
        else:
            print(f"{protocol.rank_prefix(0)}{line}", flush=True)


def _device_type(model: Any) -> str:
    try:
        return str(next(model.parameters()).device.type) if model is not None else "cpu"
    except (StopIteration, AttributeError):
        return "cpu"


__all__ = ["Judge", "Seat", "StepClock", "StragglerConfig", "StragglerStop", "Stragglers", "Verdict",
           "config_from_env", "config_problem", "my_seat"]  # fmt: skip
