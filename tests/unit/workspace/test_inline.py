"""The workspace as an immutable Secret in the job's namespace: its name, labels, data and size
limit; valid against the Kubernetes schema."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest

from ddpctl.workspace.inline import (
    INLINE_LIMIT,
    SHA256_ANNOTATION,
    TooLarge,
    inline_size,
    object_name,
    unpacker_files,
    workspace_secret,
)
from ddpctl.workspace.pack import pack_workspace
from ddpctl_trainer.protocol import WORKSPACE_ARCHIVE_KEY
from tests.support.k8s_schemas import validate_core
from tests.unit.workspace.trees import make_tree

SHA = "3f2a9c1e04b7" + "0" * 52


def test_the_secret(tmp_path: Path) -> None:
    out = io.BytesIO()
    packed = pack_workspace(make_tree(tmp_path / "ws", {"train.py": "print('hi')\n"}), out)
    archive = out.getvalue()
    secret = workspace_secret("resnet", archive, packed.sha256, labels={"team": "vision"}, namespace="ml")
    assert not isinstance(secret, TooLarge)
    assert validate_core(secret) == []
    assert secret["kind"] == "Secret" and secret["type"] == "Opaque"
    assert secret["immutable"] is True
    meta = secret["metadata"]
    assert meta["name"] == f"resnet-workspace-{packed.sha256[:10]}"
    assert meta["namespace"] == "ml"
    assert meta["labels"] == {
        "app.kubernetes.io/component": "workspace",
        "app.kubernetes.io/instance": "resnet",
        "app.kubernetes.io/managed-by": "ddpctl",
        "app.kubernetes.io/name": "ddp-job",
        "team": "vision",
    }
    assert meta["annotations"] == {SHA256_ANNOTATION: packed.sha256}
    assert base64.b64decode(secret["data"][WORKSPACE_ARCHIVE_KEY]) == archive
    assert workspace_secret("resnet", archive, packed.sha256, labels={"team": "vision"}, namespace="ml") == secret


def test_ddpctls_labels_win_over_the_users() -> None:
    secret = workspace_secret(
        "j", b"x", SHA, labels={"app.kubernetes.io/managed-by": "me", "app.kubernetes.io/instance": "k"}
    )
    assert not isinstance(secret, TooLarge)
    assert secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ddpctl"
    assert secret["metadata"]["labels"]["app.kubernetes.io/instance"] == "j"


def test_the_limit_counts_every_keys_bytes() -> None:
    """The API server's check: the data's decoded bytes, at most 1 MiB, together."""
    files = {"workspace.py": b"a" * 1000}
    assert inline_size(INLINE_LIMIT - 1000, files) == INLINE_LIMIT
    fits = workspace_secret("j", bytes(INLINE_LIMIT - 1000), SHA, files=files)
    assert not isinstance(fits, TooLarge)
    too_large = workspace_secret("j", bytes(INLINE_LIMIT - 999), SHA, files=files)
    assert too_large == TooLarge(INLINE_LIMIT + 1, INLINE_LIMIT)
    assert isinstance(too_large, TooLarge)
    assert (
        too_large.message == "the workspace is 1.0 MiB compressed, more than the 1.0 MiB an object in the cluster holds"
    )
    assert "--workspace-store" in too_large.fix


def test_the_name_is_a_dns_subdomain_for_the_longest_job_name() -> None:
    name = object_name("j" * 63, SHA)
    assert len(name) == 63 + len("-workspace-") + 10


@pytest.mark.parametrize(("job", "sha"), [("Bad_Name", SHA), ("", SHA)])
def test_a_bad_job_name_is_refused(job: str, sha: str) -> None:
    with pytest.raises(ValueError):
        object_name(job, sha)


def test_the_sha256_must_be_one() -> None:
    with pytest.raises(ValueError, match="sha256"):
        workspace_secret("j", b"x", "not-a-sha")


def test_the_unpacker_ships_as_three_files() -> None:
    """For an image without ddpctl's trainer: workspace.py, the protocol.py it imports, and the
    straggler detector a user's own script may import (laid out as ddpctl_trainer by the unpacker)."""
    files = unpacker_files()
    assert sorted(files) == ["protocol.py", "stragglers.py", "workspace.py"]
    assert b"def prepare(" in files["workspace.py"]
    assert b"WORKSPACE_ARCHIVE_ENV" in files["protocol.py"]
    assert b"class Stragglers" in files["stragglers.py"]
