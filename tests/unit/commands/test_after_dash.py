"""A ddpctl flag among the built-in trainer's arguments (after `--`) is one line and exit 2, on
every command that takes a spec; the trainer's own flags, and a user's script's arguments, pass."""

from __future__ import annotations

import pytest

from tests.support.api import one_error


@pytest.mark.parametrize("command", [["render"], ["run", "--local", "--dry-run"], ["submit", "--dry-run", "client"]])
@pytest.mark.parametrize("flag", ["--script", "--nodes=3", "--image"])
def test_a_ddpctl_flag_after_dash_is_named_with_its_place(cli, command, flag) -> None:
    r = cli(*command, "--", "--epochs", "3", flag, *([] if "=" in flag else ["x"]))
    name = flag.split("=")[0]
    err = one_error(r, 2, f"{name} is a flag of ddpctl {command[0]}, not of the trainer", "put it before --")
    assert f"`ddpctl {command[0]} {name} ... -- ...`" in err


@pytest.mark.parametrize(
    "args",
    [
        ["--", "--epochs", "3", "--batch-size", "8"],  # the trainer's own flags
        ["--module", "mypkg.train", "--", "--script", "x"],  # a user's module: its arguments are its own
    ],
)
def test_the_trainers_flags_and_a_users_arguments_pass(cli, args) -> None:
    r = cli("render", *args)
    assert r.code == 0, r.err
