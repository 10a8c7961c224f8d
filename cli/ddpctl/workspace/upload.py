"""A larger workspace in an object store: content-addressed, uploaded only when absent.

The archive goes to `<store>/<sha256>.tar.gz`, the sha256 being of the uncompressed tar (what the
pod checks). A HEAD first: when the object is there, nothing is uploaded (the same code, submitted
again or by a colleague, costs one request). Two submits racing both upload, each a whole object
(one PUT, or a multipart upload the server completes atomically), and either is the same tar.

The store is an `s3://`, `gs://` or `az://` URL, checked by the same rules as a checkpoint URL
(`protocol.checkpoint_url_problem`: no credentials, query or fragment in it); the client is
obstore (the optional `s3` extra, imported here only), configured from the environment exactly as
the trainer's checkpoints are (AWS_ENDPOINT_URL, AWS_* keys, GOOGLE_*, AZURE_*, or workload
identity). Messages never carry a credential: the values of `protocol.OBJECT_STORE_SECRET_ENV`,
URL queries and `user:password@` parts are replaced by `***`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpctl.errors import RuntimeFailure, SpecError, UsageError
from ddpctl.records import record
from ddpctl_trainer.protocol import (
    OBJECT_STORE_ENDPOINT_ENV,
    OBJECT_STORE_SECRET_ENV,
    checkpoint_url_problem,
    url_scheme,
)

if TYPE_CHECKING:
    from obstore.store import ObjectStore as _Client

FIELD = "workspaceStore"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_QUERY = re.compile(r"(https?://[^\s?]+)\?\S*")
_USERINFO = re.compile(r"(://)[^/@\s]+@")
_CONNECT_TIMEOUT_S = 5
_REQUEST_TIMEOUT_S = 300
_RETRIES = 3


def scrub(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` on one line, without credentials (see the module's doc)."""
    env = os.environ if env is None else env
    text = " ".join(text.split("\n\nDebug source:", 1)[0].split())
    for name in OBJECT_STORE_SECRET_ENV:
        value = env.get(name, "")
        if len(value) >= 4:
            text = text.replace(value, "***")
    return _USERINFO.sub(r"\1***@", _QUERY.sub(r"\1?***", text))


def archive_name(sha256: str) -> str:
    """`<sha256>.tar.gz`: the object's name under the store's prefix."""
    return f"{sha256}.tar.gz"


def archive_url(store: str, sha256: str) -> str:
    """`<store>/<sha256>.tar.gz`: where the pods fetch it (DDP_WORKSPACE_ARCHIVE)."""
    return f"{store.rstrip('/')}/{archive_name(sha256)}"


def check_store(store: str, field_name: str = FIELD) -> None:
    """A usage error naming `field_name` when `store` is not an object store URL we take."""
    problem = checkpoint_url_problem(store)
    if problem is not None:
        raise SpecError(field_name, *problem)


@record
class Uploaded:
    url: str  # the archive's URL (no credentials: check_store refuses a URL with them)
    uploaded: bool  # False: it was there already, nothing was sent
    size: int  # the .tar.gz's bytes


def connect(store: str, field_name: str = FIELD) -> _Client:
    """An obstore client of `store`; configuration and credentials from the environment."""
    from datetime import timedelta

    try:
        from obstore.store import from_url
    except ImportError:
        raise UsageError(f"{field_name}: an object store needs the obstore package: pip install 'ddpctl[s3]'") from None
    client_options: dict[str, Any] = {
        "connect_timeout": timedelta(seconds=_CONNECT_TIMEOUT_S),
        "timeout": timedelta(seconds=_REQUEST_TIMEOUT_S),
    }
    if url_scheme(store) == "s3" and os.environ.get(OBJECT_STORE_ENDPOINT_ENV, "").lower().startswith("http://"):
        client_options["allow_http"] = True  # a MinIO/Ceph/SeaweedFS endpoint without TLS, named explicitly
    retry: Any = {"max_retries": _RETRIES, "retry_timeout": timedelta(seconds=30)}
    try:
        client: _Client = from_url(store, client_options=client_options, retry_config=retry)  # type: ignore[call-overload]
    except Exception as exc:  # noqa: BLE001 - a malformed URL or configuration: one line
        raise UsageError(f"{field_name}: {scrub(str(exc))}") from None
    return client


def upload(
    archive: Path,
    sha256: str,
    store: str,
    *,
    client: _Client | None = None,
    field_name: str = FIELD,
) -> Uploaded:
    """Put the .tar.gz `archive` at `<store>/<sha256>.tar.gz` unless an object is there already.
    A failure is one line (RuntimeFailure), without credentials."""
    if not _SHA256.fullmatch(sha256):
        raise ValueError("sha256 must be 64 lowercase hex digits")
    check_store(store, field_name)
    import obstore

    client = connect(store, field_name) if client is None else client
    url, name = archive_url(store, sha256), archive_name(sha256)
    size = archive.stat().st_size
    try:
        obstore.head(client, name)
        return Uploaded(url, uploaded=False, size=size)
    except FileNotFoundError:
        pass
    except Exception as exc:  # noqa: BLE001 - obstore's errors: refused credentials, a server down
        raise RuntimeFailure(f"checking for the workspace at {url} failed ({_reason(exc)})") from None
    try:
        obstore.put(client, name, archive)
    except Exception as exc:  # noqa: BLE001 - as above
        raise RuntimeFailure(f"uploading the workspace to {url} failed ({_reason(exc)})") from None
    return Uploaded(url, uploaded=True, size=size)


_STATUS = re.compile(r"status code: (\d{3}[^:<]*)")
_S3_CODE = re.compile(r"<Code>([^<]+)</Code>")


def _reason(exc: BaseException) -> str:
    """An obstore error in a few words: its kind and the server's status and code when it answered,
    else what the transport said (at most 300 characters, scrubbed)."""
    text = scrub(str(exc))
    status, code = _STATUS.search(text), _S3_CODE.search(text)
    if status or code:
        text = ", ".join(m.group(1).strip() for m in (status, code) if m)
    elif len(text) > 300:
        text = text[:297] + "..."
    return f"{type(exc).__name__}: {text}"
