"""`ddpctl submit`: spec -> target -> objects -> server-side apply -> (wait | follow)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ddpctl.config import SpecInput
from ddpctl.console import plural
from ddpctl.errors import SpecError, UsageError
from ddpctl.kube.flags import DryRun, Format

if TYPE_CHECKING:
    from ddpctl.spec import JobSpec


def build_image(spec: Any) -> str:
    """`--build`: build with `ddpctl build`'s builder and push; returns the pushed reference."""
    from ddpctl import build

    def echo(line: str) -> None:
        sys.stderr.write(f"[build] {line}\n")

    return build.build_image(spec, push=True, echo=echo)


def run(
    spec_input: SpecInput,
    *,
    kubeconfig: str | None,
    request_timeout: str | None = None,
    context: str | None,
    dry_run: DryRun,
    output: Format | None,
    build: bool,
    replace: bool,
    wait: bool,
    follow: bool,
    rank: int | None,
    timeout: str | None,
    out: Callable[[str], None],
    say: Callable[[str], None],
) -> None:
    from ddpctl import render
    from ddpctl.kube.config import ClusterOptions
    from ddpctl.kube.flags import parse_duration

    timeout_s = parse_duration(timeout)
    if rank is not None and not follow:
        raise UsageError("--rank: only with --follow; for a running job use `ddpctl logs NAME --rank N`")
    if rank is not None and rank < 0:
        raise UsageError(f"--rank: {rank} is negative; node ranks count from 0")
    if dry_run is not DryRun.none and (wait or follow or build or replace):
        used = next(
            f for f, on in (("--wait", wait), ("--follow", follow), ("--build", build), ("--replace", replace)) if on
        )
        raise UsageError(f"{used} cannot be combined with --dry-run={dry_run.value}; drop one of them")

    flags = dict(spec_input.flags)
    explicit_auto = flags.get("target") == "auto"
    if explicit_auto:
        del flags["target"]
    base = SpecInput(flags=flags, config=spec_input.config)
    chosen = base.chosen()  # what the user set (file, env, flags), no defaults
    auto = explicit_auto or "target" not in chosen

    def fmt(objects: list[dict[str, Any]]) -> str:
        return render.to_json_list(objects) if output is Format.json else render.to_yaml_documents(objects)

    if dry_run is DryRun.client:
        spec = base.spec()  # the spec's own target (job unless ddp.yaml chose one), as `ddpctl render`
        if auto:
            say(
                f"ddpctl: target {spec.target} (--dry-run=client does not ask the cluster which engines it serves; "
                "pass --target to choose)"
            )
        objects = render.render(spec)
        if output is None:
            for obj in objects:
                from ddpctl.kube.kinds import kind_of

                out(f"{kind_of(obj).ref(obj['metadata']['name'])} created (dry run)")
        else:
            out(fmt(objects).rstrip("\n"))
        return

    spec0 = base.spec(target="job") if auto else base.spec()  # a bad spec fails before any cluster contact
    if rank is not None and rank >= spec0.replicas:  # the node count does not depend on the target
        raise UsageError(
            f"--rank: node rank {rank} is out of range; job {spec0.name} has {plural(spec0.replicas, 'node')}, "
            f"node ranks 0-{spec0.replicas - 1}"
        )
    if build:
        image = build_image(spec0)
        say(f"ddpctl: built and pushed {image}")
        flags["image"] = image
        base = SpecInput(flags=flags, config=spec_input.config)

    from ddpctl.kube import apply as A
    from ddpctl.kube import discovery
    from ddpctl.kube.config import connect
    from ddpctl.kube.follow import follow_job
    from ddpctl.kube.kinds import BY_TARGET, rank_notice

    with connect(ClusterOptions(kubeconfig, context, chosen.get("namespace"), request_timeout)) as cluster:
        engines = discovery.discover(cluster)
        overrides: dict[str, Any] = {}
        if "namespace" not in chosen:
            overrides["namespace"] = cluster.namespace
        if auto:
            spec, objects, why = _first_that_renders(base, discovery.candidates(engines), overrides)
            say(f"ddpctl: target {spec.target}: {why}")
        else:
            spec = base.spec(**overrides)
            discovery.require(engines, spec.target)
            objects = render.render(spec)
        server_dry = dry_run is DryRun.server
        if spec.restart_starts_from_scratch:
            say(f"ddpctl: warning: {spec.restart_starts_from_scratch}")
        applied = A.submit(
            cluster, objects, name=spec.name, namespace=spec.namespace, dry_run=server_dry, replace=replace, say=say
        )
        if spec.queue or spec.workload_priority_class:
            from ddpctl.kube.admission import queue_warnings

            top = next(a.obj for a in applied if a.kind is BY_TARGET[spec.target])
            for note in queue_warnings(cluster, spec.target, top, spec.queue):
                say(f"ddpctl: warning: {note}")
        if output is not None:
            out(fmt([a.obj for a in applied]).rstrip("\n"))
        else:
            suffix = " (server dry run)" if server_dry else ""
            for a in applied:
                out(f"{a.kind.ref(a.obj['metadata']['name'])} {'created' if a.created else 'configured'}{suffix}")
        if server_dry:
            return
        kind = BY_TARGET[spec.target]
        job = next(a.obj for a in applied if a.kind is kind)
        if not (wait or follow):
            say(
                f"ddpctl: follow it with `ddpctl logs {spec.name} -n {spec.namespace} -f`, or `ddpctl status "
                f"{spec.name} -n {spec.namespace}`"
            )
            return
        notice = rank_notice(job, spec.name, rank) if rank is not None else None
        if notice:
            say(notice)
        follow_job(cluster, kind, job, timeout=timeout_s, follow=follow, rank=rank, say=say)


def _first_that_renders(
    base: SpecInput, candidates: list[tuple[str, str]], overrides: dict[str, Any]
) -> tuple[JobSpec, list[dict[str, Any]], str]:
    """--target auto: the first engine (best first) that can run the spec, and why it was chosen."""
    from ddpctl import render

    notes: list[str] = []
    for target, reason in candidates:
        try:
            spec = base.spec(target=target, **overrides)
            return spec, render.render(spec), reason + (f"; {notes[0]}" if notes else "")
        except SpecError as exc:
            notes.append(f"{target} cannot run this spec ({exc.message})")
    raise AssertionError(f"no engine can run the spec ({'; '.join(notes)})")  # job, the last candidate, runs any
