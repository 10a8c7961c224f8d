"""One module per command; each is a thin Typer layer over the logic below it.

Each module exposes `register(app)`. Keep this list in the order `ddpctl --help` shows them.
"""

from __future__ import annotations

import importlib

import typer

COMMAND_MODULES = (
    "init_cmd",
    "render_cmd",
    "run_cmd",
    "build_cmd",
    "submit_cmd",
    "status_cmd",
    "logs_cmd",
    "list_cmd",
    "delete_cmd",
)


def register(app: typer.Typer) -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"ddpctl.commands.{name}").register(app)
