"""The trainer tests' fixtures: no process outlives its test (tests/support/trainer.py); a real S3
server for the checkpoint tests (tests/support/s3.py); no stop request outlives its test."""

from collections.abc import Iterator

import pytest

from ddpctl_trainer import stop
from tests.support.s3 import own_s3, s3, s3_url  # noqa: F401 - fixtures, found by name
from tests.support.trainer import _no_orphans, trainer_tmp  # noqa: F401 - fixtures, found by name


@pytest.fixture(autouse=True)
def _no_stop_request_left() -> Iterator[None]:
    """A SIGTERM request (``stop``) is this process's state: tests that record one must not pass it on."""
    stop.reset()
    yield
    stop.reset()
