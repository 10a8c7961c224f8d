"""This machine as a `Backend`: a job's nodes as local torchrun agents (`LocalBackend`) or as
containers (`DockerBackend`), and the run directories they leave in ./ddp-runs, which `status`,
`logs`, `list` and `delete` read alike for both."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.backend import Backend, JobStatus, Listing, LogOptions, Where
from ddpctl.backend.base import RequestT, Say
from ddpctl.records import record
from ddpctl.runners import runs

if TYPE_CHECKING:
    from ddpctl.runners.docker import DockerPlan
    from ddpctl.runners.local import LocalPlan
    from ddpctl.spec.sources import SpecInput


@record
class RunOptions:
    """`ddpctl run`'s own flags (the spec's come with the SpecInput)."""

    run_dir: Path | None = None
    mounts: tuple[str, ...] = ()
    fresh: bool = False
    timeout: float | None = None
    color: bool | None = None  # None: colour on a terminal
    engine: str = "docker"  # with --docker: the container engine's CLI
    spares: int = 0  # with --recovery pod: warm spares started ahead


class _RunsHere(Backend[RequestT]):
    """Finding a job again in ./ddp-runs: the same for processes and containers (the run's record
    says which ran it)."""

    def __init__(self, options: RunOptions | None = None, cwd: Path | None = None, *, hint: str = "") -> None:
        self.options = options or RunOptions()
        self.cwd = cwd
        self.hint = hint  # said when a name is not found here (e.g. that no kubeconfig exists either)

    def describe(self) -> str:
        return f"./{runs.RUNS_DIR}"

    def has(self, name: str) -> bool:
        return runs.find_run(name, self.cwd) is not None

    def _run(self, name: str) -> Path:
        return runs.require_run(name, self.cwd, hint=self.hint)

    def status(self, name: str) -> JobStatus:
        return runs.run_status(self._run(name), self.cwd)

    def wait(self, name: str, timeout: float | None, say: Say) -> None:
        runs.wait_run(self._run(name), timeout, say)

    def logs(self, name: str, options: LogOptions, out: Say, say: Say) -> None:
        runs.run_logs(self._run(name), options, out, say)

    def list(self, all_namespaces: bool = False) -> Listing:
        found = runs.list_runs(self.cwd)
        return Listing(found.jobs, found.looked_in + self.hint)

    def delete(
        self, names: Sequence[str], *, ignore_not_found: bool, wait: bool, timeout: float | None, out: Say
    ) -> None:
        missing = []
        for name in names:
            found = runs.find_run(name, self.cwd)
            if found is None:
                missing.append(name)
                continue
            runs.delete_run(found, wait=wait, timeout=timeout, out=out)
        if missing and not ignore_not_found:
            raise runs.not_found(missing[0], self.cwd, hint=self.hint)


@record
class LocalRun:
    """A local run, prepared: every node's torchrun agent, its env and argv."""

    plan: LocalPlan

    def show(self, out: Say, say: Say) -> None:
        plan = self.plan
        say(f"ddpctl: {plan.spec.name}: {len(plan.nodes)} torchrun agents would start in {plan.cwd} (dry run)")
        inherited = _inherited()
        if plan.coordinator_port is not None:
            from ddpctl.runners.local import coordinator_argv

            out("# the job's coordinator (--recovery pod: a lost node is started again alone)")
            out(shlex.join(coordinator_argv(plan)))
        for node in plan.nodes:
            env = {k: v for k, v in node.env.items() if inherited.get(k) != v}
            out(f"# node {node.index} ({node.hostname})")
            out(" ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())) + " \\")
            out("  " + shlex.join(node.argv))


class LocalBackend(_RunsHere[LocalRun]):
    """Every node a torchrun agent on this machine, on loopback (`run --local`)."""

    where = Where.local

    @contextmanager
    def prepare(self, spec_input: SpecInput, say: Say, *, dry_run: bool = False) -> Iterator[LocalRun]:
        from ddpctl.runners.local import plan_local, port_asked_for

        yield LocalRun(
            plan_local(
                spec_input.spec(),
                run_dir=self.options.run_dir,
                port_explicit=port_asked_for(spec_input.chosen()),
                mounts=_mounts(self.options.mounts),
                cwd=self.cwd,
                spares=self.options.spares,
            )
        )

    def start(self, request: LocalRun, out: Say, say: Say) -> int:
        from ddpctl.runners.local import clean_run_dir, run_local

        if self.options.fresh:
            clean_run_dir(request.plan)
        return run_local(request.plan, color=self.options.color, timeout=self.options.timeout)


@record
class DockerRun:
    """A containers run, prepared: its network and every node's `docker run`."""

    plan: DockerPlan

    def show(self, out: Say, say: Say) -> None:
        plan = self.plan
        say(
            f"ddpctl: {plan.spec.name}: {len(plan.containers)} containers would run on network {plan.network} (dry run)"
        )
        out(shlex.join([plan.engine, "network", "create", plan.network]))
        for container in plan.containers:
            out(shlex.join(container.argv))


class DockerBackend(_RunsHere[DockerRun]):
    """Every node a container on a private network of a local container engine (`run --docker`)."""

    where = Where.docker

    @contextmanager
    def prepare(self, spec_input: SpecInput, say: Say, *, dry_run: bool = False) -> Iterator[DockerRun]:
        """The containers to run, with the spec's workspace (as its pods would get it) while it lasts."""
        from ddpctl.engines import plan_for
        from ddpctl.manifests.shipment import shipment_of
        from ddpctl.runners.docker import plan_docker

        spec = spec_input.spec()
        if spec.recovery == "auto":  # containers restart as a group: no coordinator runs beside them
            spec = spec.replace(recovery="gang")
        with shipment_of(plan_for(spec), cwd=self.cwd, to_store=False) as shipment:
            if shipment is not None:
                say(f"ddpctl: {shipment.pack.summary()}")
            yield DockerRun(
                plan_docker(
                    spec,
                    engine=self.options.engine,
                    run_dir=self.options.run_dir,
                    mounts=list(self.options.mounts),
                    fresh=self.options.fresh,
                    dry_run=dry_run,
                    shipment=shipment,
                )
            )

    def start(self, request: DockerRun, out: Say, say: Say) -> int:
        from ddpctl.runners.docker import run_docker

        return run_docker(request.plan, color=self.options.color, timeout=self.options.timeout)


def _mounts(items: Sequence[str]) -> dict[str, Path]:
    from ddpctl.runners.common import parse_mounts

    return parse_mounts(items)


def _inherited() -> dict[str, str]:
    import os

    from ddpctl.runners.node_env import inherited_env

    return inherited_env(os.environ)
