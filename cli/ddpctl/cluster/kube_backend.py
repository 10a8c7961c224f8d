"""The cluster as a `Backend`: submit (server-side apply), status, logs, list and delete of jobs
in a Kubernetes cluster, through the official client (`ddpctl.cluster.config.connect`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from ddpctl.backend import Backend, JobStatus, Listing, LogOptions, Where
from ddpctl.backend.base import Say
from ddpctl.cluster.config import ClusterOptions
from ddpctl.cluster.flags import DryRun, SubmitOptions

if TYPE_CHECKING:
    from ddpctl.cluster.config import Cluster
    from ddpctl.cluster.submit import Submission
    from ddpctl.spec.sources import SpecInput


def kubeconfig_found(options: ClusterOptions) -> bool:
    """Whether a cluster is configured here (--kubeconfig or --context given, KUBECONFIG naming a
    file that exists, ~/.kube/config, or in-cluster config): then a name is looked up there first."""
    from ddpctl.cluster.config import in_cluster_available, kubeconfig_paths

    if options.kubeconfig or options.context:
        return True
    return kubeconfig_paths(None)[0] is not None or in_cluster_available()


class ClusterBackend(Backend["Submission"]):
    """Jobs in the cluster of --kubeconfig/--context, in the namespace given (-n, DDPCTL_NAMESPACE,
    ddp.yaml's), else the context's."""

    where = Where.cluster

    def __init__(
        self, options: ClusterOptions, submit: SubmitOptions | None = None, *, spec_namespace: str | None = None
    ) -> None:
        self.options = options
        self.submit = submit or SubmitOptions()
        self.spec_namespace = spec_namespace  # ddp.yaml's or DDPCTL_NAMESPACE, where submit put the job

    def describe(self) -> str:
        from ddpctl.cluster.config import kubeconfig_paths

        if self.options.kubeconfig:
            return f"the cluster of --kubeconfig {self.options.kubeconfig}"
        return f"the cluster of {kubeconfig_paths(None)[1]}"

    @contextmanager
    def _connect(self, all_namespaces: bool = False) -> Iterator[Cluster]:
        from ddpctl.cluster.config import connect

        namespace = self.options.namespace
        if namespace is None and not all_namespaces:
            namespace = self.spec_namespace
        with connect(dataclasses.replace(self.options, namespace=namespace)) as cluster:
            yield cluster

    def prepare(self, spec_input: SpecInput, say: Say, *, dry_run: bool = False) -> AbstractContextManager[Submission]:
        from ddpctl.cluster.submit import prepare

        submit = self.submit
        if dry_run and submit.dry_run is DryRun.none:
            submit = dataclasses.replace(submit, dry_run=DryRun.client)  # shown: the cluster is not asked
        # the spec's namespace wins over --namespace's place in the options
        return prepare(spec_input, options=dataclasses.replace(self.options, namespace=None), submit=submit, say=say)

    def start(self, request: Submission, out: Say, say: Say) -> int:
        from ddpctl.cluster.submit import start

        start(request, out, say)
        return 0

    def dry_run(self, spec_input: SpecInput, out: Say, say: Say) -> None:
        """--dry-run=client (the default) shows the objects and asks the cluster nothing;
        --dry-run=server sends them to the API server, which checks them and keeps nothing."""
        if self.submit.dry_run is DryRun.server:
            self.run(spec_input, out, say)
        else:
            super().dry_run(spec_input, out, say)

    def status(self, name: str) -> JobStatus:
        from ddpctl.cluster.operate import job_status

        with self._connect() as cluster:
            return job_status(cluster, name)

    def wait(self, name: str, timeout: float | None, say: Say) -> None:
        from ddpctl.cluster.operate import wait_for

        with self._connect() as cluster:
            wait_for(cluster, name, timeout, say)

    def logs(self, name: str, options: LogOptions, out: Say, say: Say) -> None:
        from ddpctl.cluster.operate import logs

        with self._connect() as cluster:
            logs(cluster, name, options, out, say)

    def list(self, all_namespaces: bool = False) -> Listing:
        from ddpctl.cluster.operate import list_jobs

        with self._connect(all_namespaces) as cluster:
            where = "any namespace" if all_namespaces else f'namespace "{cluster.namespace}"'
            return Listing(list_jobs(cluster, all_namespaces), where)

    def delete(
        self, names: Sequence[str], *, ignore_not_found: bool, wait: bool, timeout: float | None, out: Say
    ) -> None:
        from ddpctl.cluster.operate import delete

        with self._connect() as cluster:
            delete(cluster, names, ignore_not_found=ignore_not_found, wait=wait, timeout=timeout, out=out)
