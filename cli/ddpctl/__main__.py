"""`python -m ddpctl` runs the CLI."""

from ddpctl.app import run

run()
