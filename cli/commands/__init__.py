"""One module per command; each is a thin Typer layer over the logic below it."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from ddpctl.commands import init_cmd, render_cmd

    for module in (init_cmd, render_cmd):
        module.register(app)
