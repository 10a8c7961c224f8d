"""One module per command; each is a thin Typer layer over the logic below it.

Each module exposes `register(app)` and imports only Typer and the light option/config modules at
the top: the logic (and kubernetes, jinja2, docker, ...) is imported inside the command's body, so
`ddpctl --help` stays fast. Keep `COMMANDS` in the order `ddpctl --help` shows them.
"""

from __future__ import annotations

import typer
from ddpctl.commands import (
    build_cmd,
    delete_cmd,
    init_cmd,
    list_cmd,
    logs_cmd,
    render_cmd,
    run_cmd,
    status_cmd,
    submit_cmd,
)

COMMANDS = (init_cmd, render_cmd, run_cmd, build_cmd, submit_cmd, status_cmd, logs_cmd, list_cmd, delete_cmd)


def register(app: typer.Typer) -> None:
    for module in COMMANDS:
        module.register(app)
