"""What comes after `--` goes to the trainer: a ddpctl flag there is a mistake worth one line.

`ddpctl render -- --epochs 3 --script train.py` rendered `--script train.py` as an argument of the
built-in trainer, which has no such flag: the pods would fail on a usage error after scheduling.
The opposite mistake (a trainer flag before `--`) is caught by click and explained in ddpctl.app.
"""

from __future__ import annotations

from ddpctl.errors import UsageError
from ddpctl.spec.model import JobSpec


def refuse_ddpctl_flags_for_the_trainer(spec: JobSpec) -> None:
    """A flag of the running ddpctl command among the built-in trainer's arguments (after `--`,
    or in the spec's `args`), which the trainer does not have: one line saying where it goes."""
    if not spec.uses_trainer or not spec.args:
        return
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    ours = {name for param in ctx.command.params for name in getattr(param, "opts", ())}
    from ddpctl.runners.common import is_trainer_flag

    for arg in spec.args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("-") and flag in ours and not is_trainer_flag(flag):
            raise UsageError(
                f"{flag} is a flag of ddpctl {ctx.info_name}, not of the trainer, but it is among the trainer's "
                f"arguments (after --, or in args:); put it before --, e.g. `ddpctl {ctx.info_name} {flag} ... -- ...`"
            )
