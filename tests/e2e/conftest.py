"""The real S3 server's fixtures (tests/support/s3.py) for the end-to-end tests in this folder."""

from tests.support.s3 import s3, s3_url  # noqa: F401 - fixtures, found by name
