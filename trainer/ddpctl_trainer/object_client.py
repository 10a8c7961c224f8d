"""The object store client (obstore): how it is set up, and what its failures mean.

Every request the object store checkpoints make goes through one obstore client (``connect``: the
credentials, region and endpoint from the environment, and bounded patience), and every failure
becomes one ``StoreError`` line without credentials (``failed``): the kind of error and the
server's answer (its status, S3 error code and message), classified by that answer alone, never
by the rest of the text, which holds the request's URL (``classify``).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from typing import TYPE_CHECKING

from .errors import StoreError, scrub
from .protocol import OBJECT_STORE_ENDPOINT_ENV, url_scheme

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig
    from obstore.store import ObjectStore as Client

# The client's patience: a dead server fails a request in seconds (refused connections retried 3
# times), a slow one gets 5 minutes per request; well inside a 120 s grace period only when the
# server answers, which is the case the stop checkpoint can do anything about.
RETRIES = 3
RETRY_TIMEOUT_S = 30
CONNECT_TIMEOUT_S = 5
REQUEST_TIMEOUT_S = 300


class ObjectMissing(StoreError):
    """The object is not there (never written, or deleted since it was listed)."""


class Conflict(StoreError):
    """A conditional write lost: someone else wrote the object since it was read."""


class Unsupported(StoreError):
    """The server cannot do what was asked (a conditional write): 501 Not Implemented and kin."""


_STATUS = re.compile(r"status code: (\d{3}[^:<]*)")
_S3_CODE = re.compile(r"<Code>([^<]+)</Code>")
_S3_MESSAGE = re.compile(r"<Message>([^<]+)</Message>")
_REQUEST = re.compile(r"Error performing ([A-Z]+) https?://\S+")


def reason(exc: BaseException) -> str:
    """An obstore error in a few words: its kind, and the server's answer (status, S3 error code and
    message) or, when none came, what the transport said (the request URL, which the caller names
    already, is left out)."""
    kind = type(exc).__name__
    text = scrub(str(exc))
    status, code, said = _STATUS.search(text), _S3_CODE.search(text), _S3_MESSAGE.search(text)
    if status or code:
        answer = ", ".join(m.group(1).strip() for m in (status, code) if m)
        text = f"{answer}: {said.group(1)}" if said else answer
    else:
        text = _REQUEST.sub(r"\1 request", text).replace("Error performing list request: ", "list: ")
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{kind}: {text}"


def _from_obstore(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("obstore")


_STATUS_CODE = re.compile(r"status code: (\d{3})\b")


def classify(exc: BaseException) -> type[StoreError]:
    """Which ``StoreError`` a raw failure becomes, from its type and the server's answer (its status
    and S3 error code, never the rest of the text, which holds the request's URL): ``ObjectMissing``
    (obstore raises the builtin ``FileNotFoundError``), ``Conflict`` (a conditional write that lost,
    or S3's 409 ConditionalRequestConflict), ``Unsupported`` (501 Not Implemented and kin)."""
    name = type(exc).__name__ if _from_obstore(exc) else ""
    if (isinstance(exc, FileNotFoundError) and exc.filename is None) or name == "NotFoundError":
        return ObjectMissing  # (a staging file's FileNotFoundError names its file)
    if not name:
        return StoreError  # an OSError of a staging file, or a bug: no server answer to read
    text = str(exc)
    status = next((m.group(1) for m in _STATUS_CODE.finditer(text)), None)
    code = next((m.group(1) for m in _S3_CODE.finditer(text)), None)
    if name == "NotSupportedError" or status == "501" or code == "NotImplemented":
        return Unsupported
    if name in ("AlreadyExistsError", "PreconditionError") or code == "ConditionalRequestConflict":
        return Conflict
    return StoreError


def connect(url: str) -> Client:
    """An obstore client of ``url``; credentials, region and endpoint from the environment."""
    from obstore.store import from_url

    endpoint = os.environ.get(OBJECT_STORE_ENDPOINT_ENV, "")
    client_options: ClientConfig = {
        "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT_S),
        "timeout": timedelta(seconds=REQUEST_TIMEOUT_S),
    }
    if url_scheme(url) == "s3" and endpoint.lower().startswith("http://"):
        client_options["allow_http"] = True  # a MinIO/Ceph/SeaweedFS endpoint without TLS, named explicitly
    retry: RetryConfig = {
        "max_retries": RETRIES,
        "retry_timeout": timedelta(seconds=RETRY_TIMEOUT_S),
        "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2), "base": 2},
    }
    try:
        client: Client = from_url(url, client_options=client_options, retry_config=retry)
    except Exception as exc:  # noqa: BLE001 - a malformed URL or configuration: one line
        raise StoreError(f"--checkpoint-dir {url}: {reason(exc)}") from None
    return client


def failed(what: str, exc: BaseException) -> StoreError:
    """``what`` failed, as the ``StoreError`` its raw failure is (``classify``), in one line."""
    return classify(exc)(f"{what} failed ({reason(exc)})")


__all__ = ["Conflict", "ObjectMissing", "StoreError", "Unsupported", "classify", "connect", "failed", "reason"]
