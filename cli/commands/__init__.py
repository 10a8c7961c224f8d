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

COMMANDS = {
    "init": init_cmd,
    "render": render_cmd,
    "run": run_cmd,
    "build": build_cmd,
    "submit": submit_cmd,
    "status": status_cmd,
    "logs": logs_cmd,
    "list": list_cmd,
    "delete": delete_cmd,
}


def register(app: typer.Typer, only: str | None = None) -> None:
    """Add every command, or only the one named `only` (the one being run: Typer builds the
    options of each registered command on every start, and there are ~40 spec flags per command)."""
    for name, module in COMMANDS.items():
        if only is None or name == only:
            module.register(app)
