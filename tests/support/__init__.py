"""What many tests share: the repository's root, and the rule that CI lacks nothing a test needs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI") == "true"


def skip_unless(condition: bool, reason: str) -> None:
    """Skip on a user's machine that lacks a resource; under CI=true the lack is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)
