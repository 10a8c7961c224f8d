"""The workspace in an object store, against a real S3 server (SeaweedFS on loopback): at
`<store>/<sha256>.tar.gz`, uploaded only when absent, credentials from the environment and never in
a message."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ddpctl.errors import RuntimeFailure, SpecError
from ddpctl.workspace.pack import pack_workspace
from ddpctl.workspace.upload import archive_url, upload
from tests.support.s3 import SECRET_KEY, S3Server, prefix_for, require_obstore
from tests.unit.workspace.trees import make_tree

obstore = require_obstore()

pytestmark = [pytest.mark.timeout(300)]


@pytest.fixture
def env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """This process's environment as a user's shell: the server's endpoint and credentials."""
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return s3


def _archive(tmp_path: Path) -> tuple[Path, str]:
    out = io.BytesIO()
    packed = pack_workspace(make_tree(tmp_path / "ws", {"train.py": "print(1)\n", "lib/util.py": "X = 2\n"}), out)
    path = tmp_path / "ws.tar.gz"
    path.write_bytes(out.getvalue())
    return path, packed.sha256


def test_uploaded_once_then_only_found(env: S3Server, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The second upload of the same content sends nothing: the object is replaced, on the server,
    by a marker between the two, and the marker is still there after the second."""
    prefix = prefix_for(request)
    store = env.url(prefix)
    archive, sha = _archive(tmp_path)
    first = upload(archive, sha, store)
    assert first.uploaded is True
    assert first.url == f"{store}/{sha}.tar.gz" == archive_url(store + "/", sha)
    client = env.client(prefix)
    assert bytes(obstore.get(client, f"{sha}.tar.gz").bytes()) == archive.read_bytes()

    obstore.put(client, f"{sha}.tar.gz", b"marker: not re-uploaded")
    second = upload(archive, sha, store)
    assert second.uploaded is False
    assert second.url == first.url
    assert bytes(obstore.get(client, f"{sha}.tar.gz").bytes()) == b"marker: not re-uploaded"
    assert [m["path"] for m in obstore.list(client).collect()] == [f"{sha}.tar.gz"]


def test_refused_credentials_fail_in_one_line_without_the_secret(
    env: S3Server, s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, sha = _archive(tmp_path)
    wrong = "wr0ng-" + SECRET_KEY[::-1]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    with pytest.raises(RuntimeFailure) as raised:
        upload(archive, sha, s3_url)
    message = str(raised.value)
    assert message.startswith(f"checking for the workspace at {s3_url}/{sha}.tar.gz failed (")
    assert "\n" not in message and wrong not in message and SECRET_KEY not in message
    assert raised.value.exit_code == 1


@pytest.mark.parametrize(
    ("store", "says"),
    [
        ("s3://user:pass@bucket/p", "holds credentials"),
        ("s3://bucket/p?X-Amz-Signature=abc", "query"),
        ("ftp://bucket/p", "not a supported object store"),
        ("/local/folder", "not an object store URL"),
    ],
)
def test_a_bad_store_url_is_a_usage_error(store: str, says: str, tmp_path: Path) -> None:
    archive, sha = _archive(tmp_path)
    with pytest.raises(SpecError) as raised:
        upload(archive, sha, store, field_name="workspace.store")
    assert raised.value.field == "workspace.store"
    assert says in str(raised.value)
    assert "pass" not in str(raised.value) and "abc" not in str(raised.value)
