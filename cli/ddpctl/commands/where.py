"""Which backend a command asks for a job: where the user said (`--on`), else the cluster when one
is configured here (a kubeconfig, in-cluster config), else this machine's ./ddp-runs.

A cluster that does not have the job, or that cannot be reached, hands the name on to a local run
of that name when there is one, and says so; a cluster that answered with an error (401, 403, 500)
is the answer: its error is reported, never a local folder's contents in its place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import typer

from ddpctl.backend import Backend, Listing, Where
from ddpctl.errors import NotFound, Unreachable

T = TypeVar("T")


def on_option() -> Any:
    return typer.Option(
        None,
        "--on",
        help="Where the job runs: cluster, local or docker (default: the cluster when a kubeconfig exists, else "
        "./ddp-runs; a job the cluster does not have is looked for in ./ddp-runs too).",
        show_default=False,
        case_sensitive=False,
    )


def spec_choices() -> dict[str, Any]:
    """What ./ddp.yaml (or DDPCTL_CONFIG's file) and the DDPCTL_* environment set, read once by a
    command that names a job without a spec of its own (status, logs, list, delete): the job's name
    and namespace, as `run` and `submit` chose them."""
    from ddpctl.spec.sources import merged_layers

    return merged_layers({})


def job_name(name: str | None, chosen: Mapping[str, Any]) -> str:
    """NAME not given: the spec's name (`spec_choices`), else the default job name."""
    if name:
        return name
    from ddpctl.spec.model import JobSpec

    return str(chosen["name"]) if chosen.get("name") else JobSpec().name


def backends(on: Where | None, options: Any, chosen: Mapping[str, Any] | None = None) -> list[Backend[Any]]:
    """The backends to ask, in order; `options` are the cluster flags (ClusterOptions), and
    `chosen` the spec's choices (`spec_choices`): its namespace is the cluster's without -n."""
    from ddpctl.cluster.kube_backend import ClusterBackend, kubeconfig_found
    from ddpctl.runners.machine_backends import DockerBackend, LocalBackend

    spec_namespace = str(chosen["namespace"]) if chosen and chosen.get("namespace") else None
    if on is Where.cluster:
        return [ClusterBackend(options, spec_namespace=spec_namespace)]
    if on is Where.local:
        return [LocalBackend()]
    if on is Where.docker:
        return [DockerBackend()]
    if kubeconfig_found(options):
        return [ClusterBackend(options, spec_namespace=spec_namespace), LocalBackend()]
    return [LocalBackend(hint=" and no kubeconfig to look in a cluster (set KUBECONFIG or pass --kubeconfig)")]


def ask(name: str, candidates: list[Backend[Any]], call: Callable[[Backend[Any]], T], say: Callable[[str], None]) -> T:
    """`call` on the first backend that has job `name`: the next one is asked only when one could
    not find it or not be reached, and when the next one has a job of that name."""
    first, *rest = candidates
    try:
        return call(first)
    except (NotFound, Unreachable) as exc:
        for backend in rest:
            if backend.has(name):
                say(f"ddpctl: {exc.message}; {name} is a {backend.where.value} run in {backend.describe()}: showing it")
                return call(backend)
        raise


def list_from(candidates: list[Backend[Any]], all_namespaces: bool, say: Callable[[str], None]) -> Listing:
    """The first backend's jobs; an unreachable cluster hands on to ./ddp-runs when runs are there,
    saying so (with none there, the cluster's error is the answer)."""
    first, *rest = candidates
    try:
        return first.list(all_namespaces)
    except Unreachable as exc:
        found = rest[0].list(all_namespaces) if rest else None
        if found is None or not found.jobs:
            raise
        say(f"ddpctl: {exc.message}; listing {rest[0].describe()} instead")
        return found
