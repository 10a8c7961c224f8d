"""What the cluster command tests share: every cluster command, as a fixture that runs a test once each."""

from __future__ import annotations

import pytest

from tests.support.api import NAME

COMMANDS = {
    "submit": ["submit", "--target", "job"],
    "status": ["status", NAME],
    "logs": ["logs", NAME],
    "list": ["list"],
    "delete": ["delete", NAME],
}


@pytest.fixture(params=sorted(COMMANDS))
def command(request):
    return COMMANDS[request.param]
