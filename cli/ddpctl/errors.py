"""The one small error tree of ddpctl.

Every failure a user can cause or meet is one of these. `ddpctl.app.main` is the single place that
turns them into a one-line message and an exit code, so no command prints a traceback.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """Keep a message on one line: user-supplied keys may hold newlines or escapes."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


class DdpctlError(Exception):
    """Base of all errors ddpctl reports to a user. Runtime failures exit 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(DdpctlError):
    """Bad input from the user: a flag, a config file, an environment variable. Exit code 2."""

    exit_code = 2


class SpecError(UsageError):
    """A JobSpec field is invalid: the message names the field and the fix."""

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        text = f"{printable(field)}: {printable(problem)}"
        if fix:
            text += f"; {fix}"
        super().__init__(text)


class RuntimeFailure(DdpctlError):
    """Something outside the user's input failed (a process, an engine, a cluster). Exit 1."""


class ClusterError(RuntimeFailure):
    """The Kubernetes API refused or could not be reached."""


class NotFound(RuntimeFailure):
    """The job named is not where ddpctl looked (a cluster's namespace, ./ddp-runs): unlike a
    refusal, another backend may still have it."""


class Unreachable(ClusterError):
    """No cluster answered: no kubeconfig, or the API server could not be reached in time. Unlike
    an answer (401, 403, 500), it says nothing about the job."""


class Interrupted(DdpctlError):
    """Ctrl-C (or SIGTERM/SIGHUP) stopped a run: the message says where it stopped and how to go on.
    Not a KeyboardInterrupt: Typer would turn that into a bare exit 130 before ddpctl could say so."""

    exit_code = 130


class WaitTimeout(RuntimeFailure):
    """`--wait/--follow` ran past `--timeout`: a distinct exit code so scripts can tell."""

    exit_code = 3
