"""ddpctl_trainer.object_store.ObjectStore against a real S3 server (SeaweedFS on loopback, see
tests/support/s3.py), in this process: a checkpoint is visible only when complete (data, then its
manifest, then `latest`); resume takes the newest complete one and names what it skips; keep-last
deletes only after the new one is published; `latest` never moves back, also with writers racing;
readers polling `latest` while a writer saves always load a complete checkpoint; a failed save is
one line without credentials, and the next one (server back) succeeds; an object gone between a
listing and its GET, a rank's failed shard upload, a failure after the manifest, a conditional
write the server cannot do (said by the server, not the URL) each end as they should, in one line.
The checkpointer's sharded saves through it: test_checkpointer.py."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from ddpctl_trainer import object_store
from ddpctl_trainer.checkpoint import FORMAT, Writer
from ddpctl_trainer.dist import DistContext
from ddpctl_trainer.errors import CheckpointError, StoreError
from ddpctl_trainer.object_store import ObjectMissing, ObjectStore
from tests.support.s3 import SECRET_KEY, S3Server, latest_checkpoint, object_names, prefix_for, require_obstore

obstore = require_obstore()

pytestmark = [pytest.mark.timeout(300)]


def _payload(step: int, mb: float = 0.0) -> dict[str, Any]:
    weights = torch.arange(max(int(mb * (1 << 20) / 8), 4), dtype=torch.float64) + step
    return {
        "format": FORMAT,
        "model": {"w": weights},
        "optimizer": {"state": {}},
        "epoch": 0,
        "step": step,
        "batches_done": step,
    }


@pytest.fixture
def env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """This process's environment as the trainer's: the server's endpoint and credentials."""
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3


def _store(server: S3Server, request: pytest.FixtureRequest, warnings: list[str] | None = None) -> ObjectStore:
    sink = warnings if warnings is not None else []
    return ObjectStore(server.url(prefix_for(request)), sink.append)


def _prefix(store: ObjectStore) -> str:
    return store.url.split("/", 3)[3]


def test_a_save_is_data_then_manifest_then_latest_and_resume_loads_it(
    env: S3Server, request: pytest.FixtureRequest
) -> None:
    store = _store(env, request)
    client = env.client(_prefix(store))
    assert store.find_latest(lambda m: None) is None
    for step in (1, 2):
        assert store.save(_payload(step)) == f"{store.url}/ckpt-0000000{step}"
    names = object_names(client)
    assert names[-1] == "latest" and len(names) == 5, names
    manifest = json.loads(bytes(obstore.get(client, "ckpt-00000002/manifest.json").bytes()))
    data = f"ckpt-00000002/{manifest['data']}/state.pt"
    assert data in names and manifest["step"] == 2 and not manifest["sharded"]
    assert manifest["files"] == {"state.pt": obstore.head(client, data)["size"]}
    assert json.loads(bytes(obstore.get(client, "latest").bytes())) == {"step": 2, "checkpoint": "ckpt-00000002"}
    found = store.find_latest(lambda m: None)
    assert found is not None and found[0] == f"{store.url}/ckpt-00000002"
    assert torch.equal(found[1]["model"]["w"], _payload(2)["model"]["w"])


def test_partial_corrupt_and_short_checkpoints_are_skipped_with_a_warning_naming_each(
    env: S3Server, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(env, request)
    client = env.client(_prefix(store))
    store.save(_payload(2))
    # ckpt-3: the save died after its data, before its manifest (the server went away)
    real_put = store._put

    def no_manifest(path: str, data: Any, mode: Any = None) -> dict[str, Any]:
        if path.endswith("manifest.json"):
            raise StoreError("writing manifest.json failed (GenericError: connection refused)")
        return real_put(path, data, mode)

    monkeypatch.setattr(store, "_put", no_manifest)
    with pytest.raises(StoreError):
        store.save(_payload(3))
    monkeypatch.undo()
    # ckpt-4: complete to the manifest, but its data is garbage of the same size (corrupt)
    store.save(_payload(4))
    manifest = json.loads(bytes(obstore.get(client, "ckpt-00000004/manifest.json").bytes()))
    size = manifest["files"]["state.pt"]
    obstore.put(client, f"ckpt-00000004/{manifest['data']}/state.pt", b"\x00" * size)
    # ckpt-5: its data is shorter than the manifest says
    store.save(_payload(5))
    manifest = json.loads(bytes(obstore.get(client, "ckpt-00000005/manifest.json").bytes()))
    obstore.put(client, f"ckpt-00000005/{manifest['data']}/state.pt", b"short")
    warnings: list[str] = []
    found = store.find_latest(warnings.append)
    assert found is not None and found[1]["step"] == 2
    assert len(warnings) == 3, warnings
    assert warnings[0].startswith(f"skipping checkpoint {store.url}/ckpt-00000005 is incomplete (")
    assert "has 5 bytes, the manifest says" in warnings[0]
    assert warnings[1].startswith(f"skipping checkpoint {store.url}/ckpt-00000004 is unreadable (")
    assert warnings[2] == (
        f"skipping checkpoint {store.url}/ckpt-00000003 is incomplete (no manifest.json: its save did not finish)"
    )
    assert all("\n" not in w for w in warnings)


def test_keep_last_deletes_whole_old_checkpoints_only_after_latest_names_the_new_one(
    env: S3Server, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(env, request)
    client = env.client(_prefix(store))
    for step in (1, 2, 3):
        store.save(_payload(step))
    seen: list[tuple[int | None, list[str]]] = []
    real_delete = store._delete

    def watched(paths: list[str]) -> None:
        pointer = store.read_latest()
        seen.append((pointer[0] if pointer else None, list(paths)))
        real_delete(paths)

    monkeypatch.setattr(store, "_delete", watched)
    store.save(_payload(4))
    removed = store.prune(2, 4, sharded=False)
    assert removed == [f"{store.url}/ckpt-00000002", f"{store.url}/ckpt-00000001"]
    old_deletes = [(latest, paths) for latest, paths in seen if any(p.startswith("ckpt-0000000") for p in paths)]
    assert old_deletes and all(latest == 4 for latest, _ in old_deletes), seen
    # the manifest goes first: a checkpoint half-deleted is incomplete, never complete and broken
    first_of_1 = next(paths for _, paths in seen if any(p.startswith("ckpt-00000001/") for p in paths))
    assert first_of_1 == ["ckpt-00000001/manifest.json"]
    assert {n.split("/")[0] for n in object_names(client)} == {"ckpt-00000003", "ckpt-00000004", "latest"}


def test_latest_never_moves_back_with_writers_racing_and_readers_watching(
    env: S3Server, request: pytest.FixtureRequest
) -> None:
    """Eight threads publish steps 1..40 in a shuffled order through the conditional writes; a
    reader polling `latest` never sees it go back, and it ends at 40."""
    url = env.url(prefix_for(request))
    steps = list(range(1, 41))
    random.Random(7).shuffle(steps)
    queue = list(steps)
    lock, done = threading.Lock(), threading.Event()
    errors: list[BaseException] = []
    warnings: list[str] = []  # a fallback to unconditional writes would say so here
    seen: list[int] = []

    def writer() -> None:
        store = ObjectStore(url, warnings.append)  # a client per writer, as separate processes would have
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    step = queue.pop()
                store.point_latest(step)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def reader() -> None:
        store = ObjectStore(url, lambda m: None)
        while not done.is_set():
            pointer = store.read_latest()
            if pointer is not None:
                seen.append(pointer[0])

    threads = [threading.Thread(target=writer) for _ in range(8)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    done.set()
    watcher.join(30)
    assert not errors, errors
    assert not warnings, warnings  # every write was conditional: the race was decided by the server
    final = ObjectStore(url, lambda m: None).read_latest()
    assert final is not None and final[0] == 40
    assert seen and seen == sorted(seen), seen


def test_a_server_without_conditional_writes_gets_a_plain_write_and_one_warning(
    env: S3Server, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_put = obstore.put

    def no_conditions(store: Any, path: str, data: Any, **kwargs: Any) -> Any:
        if kwargs.get("mode") not in (None, "overwrite"):
            raise obstore.exceptions.NotSupportedError("Operation not supported: 501 Not Implemented")
        return real_put(store, path, data, **kwargs)

    monkeypatch.setattr(obstore, "put", no_conditions)
    warnings: list[str] = []
    store = _store(env, request, warnings)
    for step in (1, 3, 2):
        store.point_latest(step)
    assert store.read_latest() is not None and store.read_latest()[0] == 3  # type: ignore[index]
    assert len(warnings) == 1 and "does not support conditional writes" in warnings[0], warnings


def test_wrong_credentials_fail_in_one_line_without_the_secret(
    s3: S3Server, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server checks signatures: a wrong secret is refused (so the right one was sent)."""
    wrong = "wrong-" + SECRET_KEY[::-1]
    for name, value in s3.env(secret=wrong).items():
        monkeypatch.setenv(name, value)
    store = _store(s3, request)
    with pytest.raises(StoreError) as failed:
        store.save(_payload(1))
    message = str(failed.value)
    assert "\n" not in message and wrong not in message and SECRET_KEY not in message
    assert "PermissionDeniedError" in message and "SignatureDoesNotMatch" in message, message


def test_a_stopped_server_fails_a_background_save_in_one_line_and_the_next_save_after_its_restart_works(
    own_s3: S3Server, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in own_s3.env().items():
        monkeypatch.setenv(name, value)
    store = _store(own_s3, request)
    client = own_s3.client(_prefix(store))
    warnings: list[str] = []
    writer = Writer(warnings.append)
    writer.submit("ckpt-00000001", lambda: store.save(_payload(1)))
    writer.wait()
    own_s3.stop()
    writer.submit("ckpt-00000002", lambda: store.save(_payload(2)))
    writer.wait()
    assert writer.failed and len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert warnings[0].startswith("saving ckpt-00000002 failed (StoreError: writing s3://"), warnings
    assert SECRET_KEY not in warnings[0]
    own_s3.start()
    found = latest_checkpoint(client)
    assert found is not None and found[0] == 1  # the failed save left nothing visible
    writer.submit("ckpt-00000003", lambda: store.save(_payload(3)))
    writer.wait()
    assert not writer.failed and len(warnings) == 1
    found = latest_checkpoint(client)
    assert found is not None and found[0] == 3
    assert not any(n.startswith("ckpt-00000002/") for n in object_names(client))


def test_readers_polling_latest_always_load_a_complete_checkpoint_while_a_writer_saves(
    env: S3Server, request: pytest.FixtureRequest
) -> None:
    """12 MB checkpoints (multipart uploads), saved and pruned (keep-last 2) back to back by a
    writer thread, while two readers follow `latest` as fast as they can: every read finds the
    checkpoint `latest` names complete and loadable, with the step it says."""
    store = _store(env, request)
    client_url = _prefix(store)
    stop = threading.Event()
    reads: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def read(mine: list[int]) -> None:
        client = env.client(client_url)
        while not stop.is_set():
            try:
                found = latest_checkpoint(client)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
                return
            if found is not None:
                mine.append(found[0])

    readers = [threading.Thread(target=read, args=(mine,)) for mine in reads]
    for t in readers:
        t.start()
    try:
        for step in range(1, 9):
            store.save(_payload(step, mb=12))
            store.prune(2, step, sharded=False)
    finally:
        stop.set()
        for t in readers:
            t.join(60)
    assert not errors, errors
    for mine in reads:  # each reader sees `latest` move forward only
        assert len(mine) >= 4 and mine == sorted(mine) and mine[-1] >= 7, reads


def test_an_object_deleted_between_listing_and_reading_is_skipped_not_a_raw_error(
    env: S3Server, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer prunes while resume reads: a manifest or data object that the listing showed
    is gone by the GET. Resume skips that checkpoint with a warning naming it and takes the next;
    a missing object is a one-line ObjectMissing (a StoreError), never obstore's raw
    FileNotFoundError with its debug dump."""
    store = _store(env, request)
    client = env.client(_prefix(store))
    for step in (1, 2, 3):
        store.save(_payload(step))
    listing = store._scan()
    manifest = json.loads(bytes(obstore.get(client, "ckpt-00000003/manifest.json").bytes()))
    obstore.delete(client, f"ckpt-00000003/{manifest['data']}/state.pt")
    obstore.delete(client, "ckpt-00000002/manifest.json")
    monkeypatch.setattr(store, "_scan", lambda: listing)
    warnings: list[str] = []
    found = store.find_latest(warnings.append)
    assert found is not None and found[0] == f"{store.url}/ckpt-00000001", warnings
    assert warnings == [
        f"skipping checkpoint {store.url}/ckpt-00000003 is incomplete ({manifest['data']}/state.pt is missing)",
        f"skipping checkpoint {store.url}/ckpt-00000002 is incomplete (no manifest.json)",
    ]
    with pytest.raises(ObjectMissing) as missing:
        store._get("ckpt-00000009/manifest.json")
    text = str(missing.value)
    assert text.startswith(f"reading {store.url}/ckpt-00000009/manifest.json failed (FileNotFoundError: ")
    assert "\n" not in text and "Debug source" not in text


class _Marks:
    """The job's c10d store as a sharded save uses it (set, get, wait, delete_key), in memory."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def get(self, key: str) -> bytes:
        return self.values[key].encode()

    def wait(self, keys: list[str], timeout: Any) -> None:
        missing = [k for k in keys if k not in self.values]
        if missing:  # the real store would block for `timeout`: here that is the failure under test
            raise RuntimeError(f"wait timeout after {timeout}: {missing}")

    def delete_key(self, key: str) -> bool:
        return self.values.pop(key, None) is not None


@pytest.mark.parametrize("failure", ["not-found", "any-exception"])
def test_a_rank_whose_shard_upload_fails_in_any_way_reports_it_so_rank_0_does_not_wait(
    env: S3Server, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, failure: str
) -> None:
    """Rank 1's upload fails (obstore's FileNotFoundError, e.g. the bucket gone, or any other
    exception): its mark still carries the reason, so rank 0 stops publishing at once, naming it
    (instead of waiting --timeout-s for a mark that never comes)."""
    store = _store(env, request)
    marks = _Marks()
    store._marks = marks
    real_put = obstore.put

    def failing_put(client: Any, path: str, data: Any, **kwargs: Any) -> Any:
        if path.endswith("__1_0.distcp"):
            raise FileNotFoundError(
                f"Object at location {path} not found\n\nDebug source:\nNotFound {{ {SECRET_KEY} }}"
            )
        return real_put(client, path, data, **kwargs)

    if failure == "not-found":
        monkeypatch.setattr(obstore, "put", failing_put)
    else:
        real_store_put = store._put

        def broken(path: str, data: Any, mode: Any = None) -> dict[str, Any]:
            if path.endswith("__1_0.distcp"):
                raise RuntimeError(f"boom {SECRET_KEY}")
            return real_store_put(path, data, mode)

        monkeypatch.setattr(store, "_put", broken)
    saves = []
    for rank in (1, 0):
        ctx = DistContext(rank, rank, 2, 2, 0, 0, "torchrun")
        staging = tmp_path / f"rank{rank}"
        staging.mkdir()
        (staging / f"__{rank}_0.distcp").write_bytes(b"shard")
        saves.append(object_store._ObjectShardedSave(store, 3, "ckpt-00000003", "a1", staging, ctx))
    with pytest.raises(CheckpointError) as on_rank_1:
        saves[0].commit()
    reported = json.loads(marks.values["ckpt-00000003/a1/rank1"])["error"]
    assert str(on_rank_1.value) == reported and SECRET_KEY not in reported and "\n" not in reported
    kind = "FileNotFoundError" if failure == "not-found" else "RuntimeError: boom ***"
    assert kind in reported, reported
    with pytest.raises(CheckpointError, match=r"not published: rank 1: ") as on_rank_0:
        saves[1].commit()
    assert reported in str(on_rank_0.value)
    assert store.read_latest() is None


@pytest.mark.parametrize("after", ["latest", "stale-attempt"])
def test_a_checkpoint_whose_manifest_is_stored_is_saved_even_if_the_steps_after_it_fail(
    env: S3Server, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    """Moving `latest` (e.g. S3's 409 ConditionalRequestConflict, again and again) or deleting an
    earlier attempt's data fails once the manifest is stored: resume finds the checkpoint by listing,
    so the save returns it, with one warning, instead of failing."""
    warnings: list[str] = []
    store = _store(env, request, warnings)
    store.save(_payload(1))
    refused = StoreError("writing latest failed (GenericError: 409 Conflict, ConditionalRequestConflict)")

    def fail(*args: Any, **kwargs: Any) -> None:
        raise refused

    monkeypatch.setattr(store, "point_latest" if after == "latest" else "_delete", fail)
    assert store.save(_payload(2)) == f"{store.url}/ckpt-00000002"
    assert len(warnings) == 1 and warnings[0].startswith(f"{store.url}/ckpt-00000002 is saved, but "), warnings
    assert str(refused) in warnings[0]
    monkeypatch.undo()
    found = store.find_latest(lambda m: None)
    assert found is not None and found[1]["step"] == 2


def _conditional_put_fails_with(monkeypatch: pytest.MonkeyPatch, error: BaseException, times: int) -> list[str]:
    """obstore.put fails ``times`` conditional writes with ``error`` (then writes); returns the paths refused."""
    real_put = obstore.put
    refused: list[str] = []

    def put(client: Any, path: str, data: Any, **kwargs: Any) -> Any:
        if kwargs.get("mode") not in (None, "overwrite") and len(refused) < times:
            refused.append(path)
            raise error
        return real_put(client, path, data, **kwargs)

    monkeypatch.setattr(obstore, "put", put)
    return refused


@pytest.mark.parametrize(
    ("answer", "unsupported"),
    [
        ("Server returned non-2xx status code: 503 Service Unavailable: <Code>SlowDown</Code>", False),
        ("Server returned non-2xx status code: 501 Not Implemented: <Code>NotImplemented</Code>", True),
    ],
)
def test_conditional_writes_count_as_unsupported_only_when_the_server_says_so_not_when_the_url_does(
    env: S3Server, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, answer: str, unsupported: bool
) -> None:
    """A prefix with "501" in it: a failed conditional write of `latest` (the request's URL in the
    error) is a failure, not "conditional writes unsupported" (which would stay for the run); a
    server that answers 501 is."""
    warnings: list[str] = []
    store = ObjectStore(env.url(f"{prefix_for(request)}-501/NotImplemented"), warnings.append)
    url = f"{env.endpoint}/ddpctl-test/{_prefix(store)}/latest"
    _conditional_put_fails_with(
        monkeypatch, obstore.exceptions.GenericError(f"Error performing PUT {url} in 2ms - {answer}"), times=1
    )
    if unsupported:
        store.point_latest(1)
        assert len(warnings) == 1 and "does not support conditional writes" in warnings[0], warnings
        assert store._unconditional
    else:
        with pytest.raises(StoreError, match=r"503 Service Unavailable, SlowDown"):
            store.point_latest(1)
        assert not warnings and not store._unconditional
        assert store.read_latest() is None


def test_a_conditional_request_conflict_is_retried_like_a_lost_race(
    env: S3Server, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 answers 409 ConditionalRequestConflict when a conditional write meets a concurrent one
    ("retry the request"): `latest` is read and written again, and ends where it should."""
    warnings: list[str] = []
    store = _store(env, request, warnings)
    conflict = obstore.exceptions.GenericError(
        "Error performing PUT http://h/b/latest in 2ms - Server returned non-2xx status code: 409 Conflict: "
        "<Code>ConditionalRequestConflict</Code>"
    )
    refused = _conditional_put_fails_with(monkeypatch, conflict, times=2)
    store.point_latest(4)
    assert refused == ["latest", "latest"] and not warnings
    pointer = store.read_latest()
    assert pointer is not None and pointer[0] == 4


def test_keep_last_counts_only_checkpoints_that_are_complete(env: S3Server, request: pytest.FixtureRequest) -> None:
    """A checkpoint with a manifest whose data is short does not count towards keep-last (resume
    would skip it), as the local prune counts only loadable files: keep-last 2 keeps 4 and 2."""
    store = _store(env, request)
    client = env.client(_prefix(store))
    for step in (1, 2, 3, 4):
        store.save(_payload(step))
    manifest = json.loads(bytes(obstore.get(client, "ckpt-00000003/manifest.json").bytes()))
    obstore.put(client, f"ckpt-00000003/{manifest['data']}/state.pt", b"short")
    assert store.prune(2, 4, sharded=False) == [f"{store.url}/ckpt-00000001"]
    assert {n.split("/")[0] for n in object_names(client)} == {
        "ckpt-00000002",
        "ckpt-00000003",
        "ckpt-00000004",
        "latest",
    }


# --------------------------------------------------------------------------------------------
# The trainer with FSDP sharded checkpoints in the store: one process, in this one
# --------------------------------------------------------------------------------------------
