"""ddpctl_trainer.store.ObjectStore against a real S3 server (SeaweedFS on loopback, see
tests/support/s3.py), in this process: a checkpoint is visible only when complete (data, then its
manifest, then `latest`); resume takes the newest complete one and names what it skips; keep-last
deletes only after the new one is published; `latest` never moves back, also with writers racing;
readers polling `latest` while a writer saves always load a complete checkpoint; a failed save is
one line without credentials, and the next one (server back) succeeds."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from ddpctl_trainer import store as store_mod
from ddpctl_trainer.checkpoint import FORMAT, Writer
from ddpctl_trainer.config import parse_args
from ddpctl_trainer.errors import UsageError
from ddpctl_trainer.store import ObjectStore, StoreError, scrub

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
    seen: list[int] = []

    def writer() -> None:
        store = ObjectStore(url, lambda m: None)  # a client per writer, as separate processes would have
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


def test_scrub_removes_secrets_query_strings_and_debug_dumps() -> None:
    env = {"AWS_SECRET_ACCESS_KEY": "hunter2-secret", "AWS_SESSION_TOKEN": "tok-123456"}
    text = (
        "Error performing PUT http://h:9/b/k?X-Amz-Signature=abc&X-Amz-Credential=AKIA in 3ms - "
        "key hunter2-secret tok-123456 https://user:pw@h/x\n\nDebug source:\nGeneric { secret: hunter2-secret }"
    )
    out = scrub(text, env)
    assert "hunter2" not in out and "tok-123456" not in out and "X-Amz" not in out and "pw@" not in out
    assert "\n" not in out and "Debug source" not in out
    assert out.startswith("Error performing PUT http://h:9/b/k?*** in 3ms")


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
    started = time.monotonic()
    writer.submit("ckpt-00000002", lambda: store.save(_payload(2)))
    writer.wait()
    assert time.monotonic() - started < 60  # a dead server fails a save in seconds, not minutes
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


def test_checkpoint_dir_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A supported scheme is taken; another is a usage error naming the supported ones; without
    obstore installed an s3:// dir says how to get it."""
    assert parse_args(["--checkpoint-dir", "s3://bucket/run"], env={}).checkpoint_dir == "s3://bucket/run"
    with pytest.raises(UsageError, match=r"hdfs:// is not a supported object store; .* s3://, gs://, az://$"):
        parse_args(["--checkpoint-dir", "hdfs://nn/run"], env={})
    with pytest.raises(UsageError, match=r"names no bucket"):
        parse_args(["--checkpoint-dir", "s3://"], env={})
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "obstore" else real(name, *a))
    with pytest.raises(UsageError, match=r"need the obstore package, which is not installed: pip install 'obstore"):
        parse_args(["--checkpoint-dir", "gs://bucket/run"], env={})
    assert store_mod.is_url("az://container/run") and not store_mod.is_url(str(Path("/ckpt")))
