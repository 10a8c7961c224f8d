"""The `ddpctl` command: one Typer app, one module per command, errors translated in one place.

Start-up stays light: this module and the command modules import neither torch nor kubernetes;
commands import what they need inside their bodies.
"""

from __future__ import annotations

import gc
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperCommand

from ddpctl import __version__
from ddpctl.commands import COMMANDS, register
from ddpctl.commands.options import SpecCommand
from ddpctl.errors import DdpctlError, Interrupted, printable


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ddpctl {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Package multi-node PyTorch DDP training for Kubernetes."""


def build_app(args: Sequence[str] = ()) -> typer.Typer:
    """The Typer app. When `args` name a command, only that command is registered: the others
    would not run, and building their options is most of a start-up's own cost."""
    command = next((a for a in args if not a.startswith("-")), None)  # the root options take no value
    app = typer.Typer(
        name="ddpctl",
        help="Package multi-node PyTorch DDP training for Kubernetes: render manifests, build the "
        "trainer image, run locally on CPU, submit and follow jobs.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    register(app, only=command if command in COMMANDS else None)
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = SpecCommand  # keeps TRAINER_ARGS' help (see SpecCommand)
    return app


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"ddpctl: error: {printable(message)}\n")
    return code


def _trainer_flag(exc: Any) -> str | None:
    """`run --local --epochs 3`: a flag of the built-in trainer given to ddpctl. click would suggest
    a ddpctl flag of a similar name (--procs); the fix is to put it after `--`."""
    ctx = getattr(exc, "ctx", None)
    option = getattr(exc, "option_name", "") or ""
    if ctx is None or ctx.info_name not in ("run", "submit", "render") or not option.startswith("--"):
        return None
    from ddpctl.runners.common import is_trainer_flag

    if not is_trainer_flag(option):
        return None
    return (
        f"{option} is a flag of the trainer, not of ddpctl {ctx.info_name}: put the trainer's flags after --, "
        f"e.g. `ddpctl {ctx.info_name} ... -- {option} ...`"
    )


def _once_each(message: str) -> str:
    """Drop a repeated sentence: click and Typer may both append "Did you mean 'render'?"."""
    seen: list[str] = []
    for sentence in re.split(r"(?<=[.?!]) +", message.strip()):
        if sentence not in seen:
            seen.append(sentence)
    return " ".join(seen)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the only place where errors become messages and exit codes."""
    from click import exceptions as click  # Typer < 0.23 is built on click (see pyproject.toml)

    args = list(argv) if argv is not None else sys.argv[1:]
    try:
        result = build_app(args)(args=args, prog_name="ddpctl", standalone_mode=False)
    except Interrupted as exc:  # not an error: the user stopped the run
        sys.stderr.write(f"ddpctl: {printable(exc.message)}\n")
        return exc.exit_code
    except DdpctlError as exc:
        return _fail(exc.message, exc.exit_code)
    except click.NoArgsIsHelpError as exc:  # `ddpctl` alone: help, as usage (exit 2)
        typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        return 2
    except click.NoSuchOption as exc:
        trainer = _trainer_flag(exc)
        if trainer:
            return _fail(trainer, 2)
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        return _fail(_once_each(exc.format_message()) + hint, 2)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        return _fail(_once_each(exc.format_message()) + hint, 2)
    except click.ClickException as exc:
        return _fail(exc.format_message(), exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("ddpctl: interrupted\n")
        return 130
    except Exception as exc:  # the last line of defence against tracebacks
        if os.environ.get("DDPCTL_DEBUG"):
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        return _fail(f"internal error: {type(exc).__name__}: {first} (set DDPCTL_DEBUG=1 for a traceback)", 1)
    return result if isinstance(result, int) else 0


def run() -> None:
    """The `ddpctl` command (console script and `python -m ddpctl`): `main`, then exit. What the command
    made lives until the process ends, so the collector's pass over it at exit is frozen out: it
    would only cost time (most of a `render`'s own), and nothing here cleans up in a finalizer."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
