"""The trainer tests' fixtures (tests/support/trainer.py): no process outlives its test."""

from tests.support.trainer import _no_orphans, trainer_tmp  # noqa: F401 - fixtures, found by name
