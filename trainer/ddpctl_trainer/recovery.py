"""Pod recovery: the global process group formed through the job's coordinator, and formed again
with a lone replacement when a rank is lost, while the survivors keep their training state.

Set ``DDP_COORDINATOR=HOST:PORT`` (``python -m ddpctl_trainer.coordinator`` listens there) and
start each node's torchrun for that node alone (``--nnodes 1``), with the node's place in the job
in ``DDP_NODE_RANK``, ``DDP_NODE_FIRST_RANK`` and ``DDP_WORLD_SIZE`` (``dist.detect``). No pod
hosts the store, so losing any pod, node 0's included, leaves the others a place to meet.

Generations: each formation of the group is a generation with a key prefix of its own in the
store (gloo's peer addresses of a dead process must not be read by the next one). Every rank
records the generation it joined. A rank with a record is a replacement: it joins the next
generation. A survivor whose collective failed because a peer went away joins the next one too.
Both move the store's current generation forward with compare-and-set, so it moves once however
many ranks notice. The new group forms when every rank has joined, the replacement included:
the world never shrinks silently.

The replacement sets itself up alone (``solo``: the trainer's own collectives are skipped until
it has joined the others' state), then every rank takes the state of the rank furthest along
(``Trainer.handoff``).

A lost coordinator: its Job starts a new one at the same address, which knows nothing of the job.
The ranks hold what it knew: a rank whose store connection broke connects to the new one and,
finding no record of itself there, writes back its record and the generation it is heading for,
and marks the store seeded. A rank with no record that meets a seeded store is a replacement;
one that came to the new store before any survivor did joins the generation it finds and moves
to the seeded one once it appears. The training itself never needs the coordinator (gloo's pairs
are connected when a group forms), so it runs on while the coordinator is away.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .errors import UsageError
from .protocol import (
    COORDINATOR_ENV,
    ENDED_KEY,
    EXIT_STALLED,
    FAILS_THE_JOB,
    FINISHED_KEY,
    RECOVERY_SCOPE_ENV,
    rank_prefix,
)

ARRIVED_KEY = "arrived"  # under a generation's prefix: how many ranks came to form it
SEEDED_KEY = "seeded"  # a new coordinator was told the job's generations by a survivor
_R = TypeVar("_R")
# A waiting rank reads the count after 50 ms, then ever less often, up to twice a second: a
# replacement's wait is seconds to minutes, and the coordinator answers every rank of the job.
ARRIVAL_POLL_S = (0.05, 0.5)
CONNECT_TRY_S = 2.0  # each try to reach the coordinator; a pause of a quarter of it between tries
END_REPORT_WAIT_S = 10.0  # for a replaced coordinator to answer that this rank finished


def coordinator_address(env: Mapping[str, str] | None = None) -> str | None:
    """``DDP_COORDINATOR`` as HOST:PORT, or None when the job does not recover pods."""
    value = (os.environ if env is None else env).get(COORDINATOR_ENV, "")
    if not value:
        return None
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"{COORDINATOR_ENV}={value!r} is not HOST:PORT (the job's coordinator)")
    return value


class Membership:
    """This rank's place in the generations of the job's group (see the module docstring)."""

    def __init__(
        self,
        address: str,
        rank: int,
        world_size: int,
        backend: str,
        timeout: datetime.timedelta,
        scope: str = "",
    ) -> None:
        self.address = address
        self.rank, self.world_size, self.backend, self.timeout = rank, world_size, backend, timeout
        self.store = _connect(address, timeout)
        self.prefix = f"ddpctl/{scope}/" if scope else "ddpctl/"
        self.generation_key = self.prefix + "generation"
        self.seeded_key = self.prefix + SEEDED_KEY
        self.recoveries = 0
        self.joined: int | None = None  # the generation this process last formed the group in
        self.unplaced = False  # new at a new coordinator: a survivor may yet seed it (see join)
        key = self._member_key()
        if self.store.check([key]):  # this rank ran before: a replacement joins the next generation
            last = int(self.store.get(key))
            self.generation = last + 1
            self.store.compare_set(self.generation_key, str(last), str(self.generation))
            self.solo = True
        elif self.store.check([self.seeded_key]):  # a new coordinator the survivors told: a replacement
            self.generation = int(self.store.get(self.generation_key))
            self.solo = True
        else:
            self.generation = int(self.store.add(self.generation_key, 0))  # made at 0 by the first to come
            self.solo = False
            self.unplaced = self.generation == 0

    def _member_key(self) -> str:
        return f"{self.prefix}member/{self.rank}"

    @property
    def rejoined(self) -> bool:
        """Whether this process replaced a lost one (it took the others' state, or will)."""
        return self.generation > 0 and self.recoveries == 0

    def join(self, **kwargs: Any) -> None:
        """Form this generation's group with every other rank (blocks until all have joined)."""
        import torch.distributed as dist

        deadline = time.monotonic() + self.timeout.total_seconds()
        while not self._await_everyone(deadline):
            pass  # the coordinator was replaced, or seeded, while this rank waited: count in again
        store = dist.PrefixStore(self._generation_prefix(), self.store)
        dist.init_process_group(
            self.backend, store=store, rank=self.rank, world_size=self.world_size, timeout=self.timeout, **kwargs
        )
        self.joined, self.unplaced = self.generation, False
        self._on_store(lambda s: s.set(self._member_key(), str(self.generation)))

    def _generation_prefix(self) -> str:
        return f"{self.prefix}generation/{self.generation}"

    def _await_everyone(self, deadline: float) -> bool:
        """Count this rank in, then wait in Python until every rank has: the group's own rendezvous
        waits inside the store's C++ client, where a SIGTERM's handler cannot run, so the pods of a
        job failed or deleted while its survivors wait for a replacement would hold their node for
        the whole grace period. Once all have come, forming the group takes no wait. False when the
        wait must start again: the coordinator went away (this rank counted in at one that is gone),
        or a survivor seeded the new coordinator this rank came to first (it is a replacement)."""
        import torch.distributed as dist

        try:
            store = dist.PrefixStore(self._generation_prefix(), self.store)
            store.add(ARRIVED_KEY, 1)
            pause, longest = ARRIVAL_POLL_S
            while (arrived := int(store.add(ARRIVED_KEY, 0))) < self.world_size:
                if self.unplaced and self.store.check([self.seeded_key]):
                    self.generation, self.solo, self.unplaced = int(self.store.get(self.generation_key)), True, False
                    return False
                if time.monotonic() > deadline:
                    raise dist.DistStoreError(
                        f"timed out after {self.timeout.total_seconds():.0f} s waiting for the group of generation "
                        f"{self.generation}: {arrived} of {self.world_size} ranks came"
                    )
                time.sleep(pause)  # a signal's handler runs here
                pause = min(pause * 1.5, longest)
        except dist.DistNetworkError:
            self._reconnect()
            return False
        return True

    def _on_store(self, op: Callable[[Any], _R], wait_s: float | None = None) -> _R:
        """``op`` on the coordinator's store; if the connection broke (the coordinator's pod was
        lost), once more on the new coordinator at the same address (see ``_reconnect``)."""
        import torch.distributed as dist

        try:
            return op(self.store)
        except dist.DistNetworkError:
            self._reconnect(wait_s)
            return op(self.store)

    def _reconnect(self, wait_s: float | None = None) -> None:
        """Connect to the coordinator's replacement (waiting up to ``wait_s``, default the timeout,
        for it to listen) and, if it knows nothing of this rank, tell it this rank's record and the
        generation the job is heading for, and mark it seeded (see the module docstring)."""
        self.store = _connect(self.address, self.timeout, wait_s)
        if self.joined is None or self.store.check([self._member_key()]):
            return  # nothing to tell (a rank yet to join), or told already
        self.store.set(self._member_key(), str(self.joined))
        self.store.set(self.generation_key, str(self.generation))
        self.store.set(self.seeded_key, "1")
        print(
            f"{rank_prefix(self.rank)}the coordinator was replaced: told the new one this rank's generation "
            f"({self.joined}, heading for {self.generation})",
            flush=True,
        )

    def rejoin(self, **kwargs: Any) -> None:
        """After a lost peer: leave the broken group and form the next generation with its replacement."""
        import torch.distributed as dist

        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001, S110 - the broken group's teardown must not stop the recovery
            pass
        self.generation += 1
        self.recoveries += 1
        self._on_store(lambda s: s.compare_set(self.generation_key, str(self.generation - 1), str(self.generation)))
        self.join(**kwargs)

    def report_end(self, code: int) -> None:
        """Tell the coordinator how this rank ended, so that its own job ends with the training:
        every rank finished, or one ended the job at once (a code no restart helps)."""
        try:
            if code == 0:
                self._on_store(lambda s: s.add(self.prefix + FINISHED_KEY, 1), END_REPORT_WAIT_S)
            elif code in (*FAILS_THE_JOB, EXIT_STALLED):  # gone by now: most likely ended by another's report
                self._on_store(lambda s: s.set(self.prefix + ENDED_KEY, str(code)), 0.0)
        except Exception:  # noqa: BLE001, S110 - a coordinator gone by now must not change this rank's exit
            pass


def _connect(address: str, timeout: datetime.timedelta, wait_s: float | None = None) -> Any:
    """A client of the coordinator's store, once the coordinator listens (its pod may be starting,
    or replacing a lost one): waited for in Python, so that a SIGTERM's handler runs meanwhile, up
    to ``wait_s`` (default: the timeout). The store's own client would wait inside C++ and log a
    stack trace for each try."""
    import socket

    import torch.distributed as dist

    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + (timeout.total_seconds() if wait_s is None else wait_s)
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=CONNECT_TRY_S):
                break  # it listens (a name not yet in DNS, a refused connection: not yet)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise dist.DistNetworkError(f"the job's coordinator at {address} did not answer ({exc})") from exc
            time.sleep(CONNECT_TRY_S / 4)
    return dist.TCPStore(host, int(port), is_master=False, timeout=timeout)


_current: Membership | None = None


def current() -> Membership | None:
    """This process's membership, when its job recovers pods (``dist.setup`` makes it)."""
    return _current


def start(address: str, rank: int, world_size: int, backend: str, timeout: datetime.timedelta) -> Membership:
    global _current
    _current = Membership(address, rank, world_size, backend, timeout, os.environ.get(RECOVERY_SCOPE_ENV, ""))
    return _current


def solo() -> bool:
    """Whether this rank is a replacement still setting itself up alone: the trainer's own
    collectives (data preparation, the setup check, resume) are skipped until the handoff."""
    return _current is not None and _current.solo


def wait_as_a_spare(assignment: str, poll_s: float = 0.05) -> None:
    """A warm spare: import what a replacement needs (torch, the trainer), then wait until the
    runner writes ``assignment`` (it does so atomically) with the env of the node this process
    takes, and take it on. Stopped by the runner's SIGTERM while it waits."""
    import json
    from pathlib import Path

    import torch.distributed  # noqa: F401 - the import a spare is there to have done already

    path = Path(assignment)
    while not path.exists():
        time.sleep(poll_s)  # the runner's file is the only signal a spare gets
    os.environ.update({str(k): str(v) for k, v in json.loads(path.read_text())["env"].items()})


def source_rank(steps: list[int]) -> int:
    """The rank whose state every rank takes: the furthest along (the lowest such rank on a tie).
    A survivor whose gradient all-reduce finished before the peer died completed a step the others
    did not; only its state is exact."""
    return max(range(len(steps)), key=lambda r: (steps[r], -r))
