"""ddpctl_trainer.recovery: the generations of a pod-recovery job's group, kept in a real TCPStore
(the coordinator's kind): a fresh rank joins the current generation, a replacement the next, and
the generation moves once however many ranks notice a loss; the rank whose state everyone takes."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import torch.distributed as dist

from ddpctl_trainer import recovery
from ddpctl_trainer.recovery import Membership, source_rank

TIMEOUT = datetime.timedelta(seconds=30)


@pytest.fixture
def coordinator() -> Iterator[str]:
    """The store the coordinator hosts, in this process (its address)."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    yield f"127.0.0.1:{store.port}"
    del store


def member(address: str, rank: int, scope: str = "") -> Membership:
    return Membership(address, rank, 3, "gloo", TIMEOUT, scope)


def record_joined(m: Membership) -> None:
    """What `join` records once the group formed (the group itself is not formed here)."""
    m.store.set(f"{m.prefix}member/{m.rank}", str(m.generation))


def test_fresh_ranks_join_the_current_generation(coordinator: str) -> None:
    ranks = [member(coordinator, r) for r in range(3)]
    assert [(m.generation, m.solo, m.rejoined) for m in ranks] == [(0, False, False)] * 3


def test_a_replacement_joins_the_next_generation_and_it_moves_once(coordinator: str) -> None:
    ranks = [member(coordinator, r) for r in range(3)]
    for m in ranks:
        record_joined(m)
    replacement = member(coordinator, 1)  # rank 1 ran before: it is a replacement
    assert (replacement.generation, replacement.solo, replacement.rejoined) == (1, True, True)
    for survivor in (ranks[0], ranks[2]):  # each survivor moves it too, from the one it was in
        survivor.store.compare_set(survivor.generation_key, "0", "1")
    assert replacement.store.get(replacement.generation_key) == b"1"
    never_joined = Membership(coordinator, 3, 4, "gloo", TIMEOUT)  # no record: it takes the current one
    assert (never_joined.generation, never_joined.solo) == (1, False)


def test_a_process_without_a_coordinator_has_no_membership() -> None:
    assert recovery.current() is None and not recovery.solo()


@pytest.mark.parametrize(
    ("steps", "source"),
    [
        ([4, 4, 4], 0),  # all alike: the lowest rank
        ([0, 4, 4], 1),  # rank 0 is the replacement
        ([4, 5, 4], 1),  # rank 1 completed a step the others did not
        ([3, 0, 5], 2),
    ],
)
def test_the_state_comes_from_the_rank_furthest_along(steps: list[int], source: int) -> None:
    assert source_rank(steps) == source


@pytest.mark.parametrize(("value", "address"), [("", None), ("coord:29510", "coord:29510"), ("[::1]:5", "[::1]:5")])
def test_the_coordinators_address(value: str, address: str | None) -> None:
    assert recovery.coordinator_address({"DDP_COORDINATOR": value} if value else {}) == address


def test_a_new_start_of_the_whole_group_has_records_of_its_own(coordinator: str) -> None:
    """After a whole-group restart the coordinator still holds the last start's records: the ranks
    of the new start (another scope) are fresh, not replacements."""
    first = member(coordinator, 1, scope="0")
    record_joined(first)
    assert member(coordinator, 1, scope="0").solo
    again = member(coordinator, 1, scope="1")
    assert (again.generation, again.solo) == (0, False)


def test_a_spare_takes_on_the_env_of_the_node_it_stands_in_for(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    assignment = tmp_path / "spare-0.json"
    assignment.write_text('{"env": {"DDP_NODE_RANK": "2", "DDP_NODE_FIRST_RANK": "4"}}')
    monkeypatch.setenv("DDP_NODE_RANK", "0")  # node 0's, which the spare was started with
    monkeypatch.setenv("DDP_NODE_FIRST_RANK", "0")  # (and so restored when the test ends)
    recovery.wait_as_a_spare(str(assignment))
    import os

    assert (os.environ["DDP_NODE_RANK"], os.environ["DDP_NODE_FIRST_RANK"]) == ("2", "4")


@pytest.mark.parametrize(
    ("codes", "finished", "ended"),
    [
        ([0, 0], 2, None),
        ([0, 1], 1, None),  # a crash: the pod is replaced, the job is not over
        ([0, 143], 1, None),  # preempted: the whole group starts again
        ([2, 0], 1, "2"),  # a usage error ends the job at once
        ([202], 0, "202"),
        ([200], 0, "200"),
    ],
)
def test_each_rank_tells_the_coordinator_how_it_ended(
    coordinator: str, codes: list[int], finished: int, ended: str | None
) -> None:
    for rank, code in enumerate(codes):
        member(coordinator, rank).report_end(code)
    store = member(coordinator, 2).store
    assert store.add("ddpctl/finished", 0) == finished
    assert (store.get("ddpctl/ended").decode() if store.check(["ddpctl/ended"]) else None) == ended


def _coordinator_process(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpctl_trainer.coordinator", "--host", "127.0.0.1", "--port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "[ddpctl] coordinator listening on port N", once it listens
    assert "listening on port" in line, line
    return proc, f"127.0.0.1:{line.split()[-1]}"


@pytest.mark.parametrize(("codes", "said"), [([0, 0, 0], "all 3 ranks finished"), ([2], "a rank ended the job")])
def test_the_coordinator_ends_once_the_training_has(codes: list[int], said: str) -> None:
    """In a cluster the coordinator is a pod of its own: it ends (exit 0) when every rank finished,
    or when one ended the job at once; before that it runs on."""
    proc, address = _coordinator_process("--world-size", "3")
    try:
        for rank, code in enumerate(codes[:-1]):
            member(address, rank).report_end(code)
        assert proc.poll() is None  # not every rank has finished: still serving
        member(address, len(codes) - 1).report_end(codes[-1])
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert said in out, out


WAITER = """
import datetime, signal, sys
from ddpctl_trainer.recovery import Membership
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # as the trainer's handler ends a waiting rank
Membership(sys.argv[1], 0, 2, "gloo", datetime.timedelta(seconds=600)).join()
"""


def test_a_rank_waiting_for_the_others_to_form_the_group_stops_at_its_sigterm(coordinator: str) -> None:
    """The pods of a job deleted (or failed) while its survivors wait for a replacement must leave
    at their SIGTERM, not hold the node until the grace period's SIGKILL: the wait is in Python."""
    proc = subprocess.Popen([sys.executable, "-c", WAITER, coordinator], stderr=subprocess.PIPE, text=True)
    try:
        store = member(coordinator, 1).store
        arrived = "ddpctl/generation/0/" + recovery.ARRIVED_KEY
        while not store.check([arrived]) and proc.poll() is None:  # counted in: it waits for rank 1 now
            store.wait([arrived], datetime.timedelta(seconds=30))
        assert proc.poll() is None, proc.communicate()[1]
        proc.terminate()
        _, err = proc.communicate(timeout=20)  # well inside its 600 s group timeout
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err


def test_a_group_that_never_forms_times_out_naming_who_came(coordinator: str) -> None:
    lonely = Membership(coordinator, 0, 3, "gloo", datetime.timedelta(seconds=0.3))
    with pytest.raises(dist.DistStoreError, match="1 of 3 ranks came"):
        lonely.join()


class Coordinator:
    """A coordinator's store in this process, which a test can lose and replace at the same port
    (as the coordinator's Job replaces its lost pod under the same DNS name): the new one is empty."""

    def __init__(self) -> None:
        self.store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
        self.address = f"127.0.0.1:{self.store.port}"

    def replace(self) -> None:
        port = self.store.port
        del self.store  # its server stops: every client's connection breaks
        self.store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=TIMEOUT)


def formed(ranks: list[Membership]) -> None:
    """As `join` leaves each rank once the group formed (the group itself is not formed here)."""
    for m in ranks:
        record_joined(m)
        m.joined, m.unplaced = m.generation, False


def heading_on(m: Membership) -> None:
    """What `rejoin` does before it waits for the next group: move the generation on."""
    m.generation += 1
    m._on_store(lambda s: s.compare_set(m.generation_key, str(m.generation - 1), str(m.generation)))


def test_a_survivor_tells_a_new_coordinator_the_generations_and_the_replacement_finds_them() -> None:
    c = Coordinator()
    ranks = [member(c.address, r) for r in range(3)]
    formed(ranks)
    c.replace()
    for survivor in (ranks[0], ranks[2]):  # rank 1 lost: each survivor's next use of the store reconnects
        heading_on(survivor)
    assert c.store.get("ddpctl/member/0") == b"0" and c.store.get("ddpctl/generation") == b"1"
    replacement = member(c.address, 1)  # no record of its own at the new coordinator: the seed says
    assert (replacement.generation, replacement.solo, replacement.rejoined) == (1, True, True)


def test_a_replacement_that_came_first_moves_to_the_seeded_generation() -> None:
    c = Coordinator()
    ranks = [member(c.address, r) for r in range(3)]
    formed(ranks)
    c.replace()
    replacement = member(c.address, 1)  # before any survivor noticed: it looks like a fresh start
    assert (replacement.generation, replacement.solo) == (0, False)
    heading_on(ranks[0])  # a survivor seeds the new coordinator
    assert replacement._await_everyone(time.monotonic() + 30) is False  # it stops waiting at generation 0 ...
    assert (replacement.generation, replacement.solo, replacement.rejoined) == (1, True, True)  # ... for 1


def test_a_fresh_job_at_a_fresh_coordinator_is_no_replacement() -> None:
    """No seed: ranks new at a new coordinator all start at generation 0, as on the job's first start."""
    c = Coordinator()
    ranks = [member(c.address, r) for r in range(3)]
    assert [(m.generation, m.solo, m.unplaced) for m in ranks] == [(0, False, True)] * 3
    formed(ranks)
    assert not any(m.unplaced for m in ranks)


def test_the_end_is_reported_to_a_coordinator_that_replaced_the_first() -> None:
    c = Coordinator()
    ranks = [member(c.address, r) for r in range(3)]
    formed(ranks)
    c.replace()
    for m in ranks:
        m.report_end(0)
    assert c.store.add("ddpctl/finished", 0) == 3
    assert c.store.get("ddpctl/seeded") == b"1"  # and the new one was told the generations


def test_a_coordinator_stopped_before_the_training_ended_fails_so_its_job_replaces_it() -> None:
    """Its pod evicted or deleted: an exit 0 would complete its Job and leave the job without one."""
    proc, _ = _coordinator_process("--world-size", "3")
    try:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out
    assert "stopped before the training ended" in out, out
