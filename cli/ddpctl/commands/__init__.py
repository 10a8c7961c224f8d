"""One module per command; each is a thin Typer layer over the logic below it.

Each module exposes `register(app)` and imports only Typer and the light option/config modules at
the top: the logic (and kubernetes, jinja2, docker, ...) is imported inside the command's body, so
`ddpctl --help` stays fast. Keep `COMMANDS` in the order `ddpctl --help` shows them.
"""

from __future__ import annotations

from importlib import import_module

import typer

#: each command's name and its module here; a module is imported only when its command is registered
COMMANDS = {
    "init": "init_cmd",
    "lint": "lint_cmd",
    "render": "render_cmd",
    "run": "run_cmd",
    "check": "check_cmd",
    "build": "build_cmd",
    "submit": "submit_cmd",
    "status": "status_cmd",
    "logs": "logs_cmd",
    "list": "list_cmd",
    "delete": "delete_cmd",
}


def register(app: typer.Typer, only: str | None = None) -> None:
    """Add every command, or only the one named `only` (the one being run: Typer builds the
    options of each registered command on every start, and there are ~40 spec flags per command).
    The other commands' modules are not even imported: with the cluster flags they pull in, that
    is ~3 ms of `ddpctl render`'s start-up."""
    for name, module in COMMANDS.items():
        if only is None or name == only:
            import_module(f"{__name__}.{module}").register(app)
