"""The trainer tests' fixtures: no process outlives its test (tests/support/trainer.py); a real S3
server for the checkpoint tests (tests/support/s3.py)."""

from tests.support.s3 import own_s3, s3, s3_url  # noqa: F401 - fixtures, found by name
from tests.support.trainer import _no_orphans, trainer_tmp  # noqa: F401 - fixtures, found by name
