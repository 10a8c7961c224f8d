"""The image tests' fixtures: a fake docker serving images from folders (fake_engine.py)."""

from tests.unit.image.fake_engine import fake_engine  # noqa: F401 - a fixture, found by name
