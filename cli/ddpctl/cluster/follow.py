"""Wait for a job to finish, with its status line and (optionally) its logs: `submit --wait/--follow`
and `status --wait` share it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ddpctl.cluster import pods as P
from ddpctl.cluster import watch as W
from ddpctl.cluster.config import Cluster
from ddpctl.cluster.kinds import Kind
from ddpctl.cluster.logs import Follower, Output
from ddpctl.console import StatusLine


def follow_job(
    cluster: Cluster,
    kind: Kind,
    job: dict[str, Any],
    *,
    timeout: float | None,
    follow: bool,
    rank: int | None,
    say: Callable[[str], None],
    status_enabled: bool = True,
) -> None:
    """Wait (and stream logs) until the job finishes; a failed job raises with the reason."""

    status = StatusLine(enabled=status_enabled)
    follower = Follower(cluster, kind, out=Output(), prefix=rank is None, rank=rank) if follow else None
    try:
        outcome = W.wait(
            cluster, kind, job, timeout=timeout, status=status, on_pods=follower.observe if follower else None
        )
        if follower:
            follower.drain(W.DRAIN_SECONDS)
    finally:
        if follower:
            follower.stop()
    log_errors = follower.errors if follower else []
    if outcome.result == "Failed":
        for err in log_errors[:1]:  # the job's failure is the error; that its logs could not be read is said too
            status.say(f"ddpctl: could not follow the logs: {err}")
        raise P.explain_failure(cluster, kind, outcome, status.say)
    name, ns = job["metadata"]["name"], job["metadata"].get("namespace")
    status.say(f"ddpctl: {kind.ref(name)} in namespace \"{ns}\" succeeded")
    for err in log_errors[:1]:  # as `ddpctl logs -f`: logs asked for and not shown are an error
        raise err
