"""The workspace tests' fixtures: a real S3 server for the object store upload (tests/support/s3.py)."""

from tests.support.s3 import s3, s3_url  # noqa: F401 - fixtures, found by name
