"""ddpctl_trainer.object_client: the obstore client's settings, and its failures classified by the
server's answer, in one scrubbed line."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl_trainer import object_client
from tests.support.s3 import require_obstore

require_obstore()


def test_the_client_gets_the_retry_and_timeout_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead server fails a request in seconds (3 retries of refused connections within 30 s, 5 s
    to connect), a slow one gets 5 minutes: what connect hands obstore."""
    import datetime

    import obstore.store

    given: dict[str, Any] = {}

    def from_url(url: str, **kwargs: Any) -> str:
        given.update(kwargs, url=url)
        return "client"

    monkeypatch.setattr(obstore.store, "from_url", from_url)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert object_client.connect("s3://bucket/run") == "client"
    seconds = datetime.timedelta(seconds=1)
    retry, options = given["retry_config"], given["client_options"]
    assert retry["max_retries"] == 3 and retry["retry_timeout"] == 30 * seconds
    assert options["connect_timeout"] == 5 * seconds and options["timeout"] == 300 * seconds
    assert options["allow_http"] is True
