"""`ddpctl submit` in two phases: `prepare` (spec -> target -> plan -> objects, nothing created:
what a dry run shows) and `start` (upload, server-side apply, then wait or follow)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpctl.cluster.flags import DryRun, Format, SubmitOptions
from ddpctl.console import plural
from ddpctl.engines import plan_for
from ddpctl.errors import DdpctlError, SpecError, UsageError
from ddpctl.records import record
from ddpctl.spec.sources import SpecInput

if TYPE_CHECKING:
    from ddpctl.cluster.config import Cluster, ClusterOptions
    from ddpctl.plan import Plan
    from ddpctl.spec.model import JobSpec
    from ddpctl.workspace.ship import Shipment


def build_image(spec: Any) -> str:
    """`--build`: build with `ddpctl build`'s builder and push; returns the pushed reference."""
    from ddpctl.image.project import build_image as build_this_folder

    def echo(line: str) -> None:
        sys.stderr.write(f"[build] {line}\n")

    return build_this_folder(spec, push=True, echo=echo)


@record
class Submission:
    """What `submit` will do, made before anything is created (`prepare`): the plan, the objects
    to apply (what --dry-run=client prints), the workspace packed for them (not uploaded yet) and
    the connection (None in a client dry run, which asks the cluster nothing)."""

    plan: Plan
    objects: list[dict[str, Any]]
    shipment: Shipment | None
    cluster: Cluster | None
    submit: SubmitOptions

    def show(self, out: Callable[[str], None], say: Callable[[str], None]) -> None:
        """The dry run: each object, as `created (dry run)` or whole in --output's format."""
        if self.submit.output is None:
            from ddpctl.cluster.kinds import kind_of

            for obj in self.objects:
                out(f"{kind_of(obj).ref(obj['metadata']['name'])} created (dry run)")
        else:
            out(_fmt(self.objects, self.submit.output).rstrip("\n"))


def _fmt(objects: list[dict[str, Any]], output: Format) -> str:
    from ddpctl.manifests.output import to_json_list, to_yaml_documents

    return to_json_list(objects) if output is Format.json else to_yaml_documents(objects)


def _refuse_flag_mixes(submit: SubmitOptions) -> None:
    rank = submit.rank
    if rank is not None and not submit.follow:
        raise UsageError("--rank: only with --follow; for a running job use `ddpctl logs NAME --rank N`")
    if rank is not None and rank < 0:
        raise UsageError(f"--rank: {rank} is negative; node ranks count from 0")
    flags = {"--wait": submit.wait, "--follow": submit.follow, "--build": submit.build, "--replace": submit.replace}
    used = [name for name, on in flags.items() if on]
    if submit.dry_run is not DryRun.none and used:
        raise UsageError(f"{used[0]} cannot be combined with --dry-run={submit.dry_run.value}; drop one of them")


@contextmanager
def prepare(
    spec_input: SpecInput, *, options: ClusterOptions, submit: SubmitOptions, say: Callable[[str], None]
) -> Iterator[Submission]:
    """The first phase of `submit`: the spec resolved, the code checked, the image built (--build),
    the target chosen, the plan made and its objects rendered; nothing created. A client dry run
    asks the cluster nothing; otherwise the Submission holds the connection while it lasts."""
    from ddpctl.cluster.flags import parse_duration
    from ddpctl.manifests import render
    from ddpctl.manifests.shipment import shipment_of

    parse_duration(submit.timeout)  # a bad --timeout is refused before anything else
    _refuse_flag_mixes(submit)
    flags = dict(spec_input.flags)
    explicit_auto = flags.get("target") == "auto"
    if explicit_auto:
        del flags["target"]
    base = spec_input.with_flags(flags)  # ddp.yaml and the environment stay as read
    chosen = base.chosen()  # what the user set (file, env, flags), no defaults
    auto = explicit_auto or "target" not in chosen

    if submit.dry_run is DryRun.client:
        plan = plan_for(base.spec())  # the spec's own target (job unless ddp.yaml chose one), as `ddpctl render`
        if auto:
            say(
                f"ddpctl: target {plan.spec.target} (--dry-run=client does not ask the cluster which engines it "
                "serves; pass --target to choose)"
            )
        check_code(plan, say)
        with shipment_of(plan, to_store=False) as shipment:
            if shipment is not None:
                say(f"ddpctl: {shipment.pack.summary()}")
            yield Submission(plan, render.render_plan(plan, shipment), shipment, None, submit)
        return

    spec0 = base.spec(target="job") if auto else base.spec()  # a bad spec fails before any cluster contact
    pods = sum(g.nodes for g in spec0.groups)  # the node count does not depend on the target
    if submit.rank is not None and submit.rank >= pods:
        raise UsageError(
            f"--rank: node rank {submit.rank} is out of range; job {spec0.name} has {plural(pods, 'node')}, "
            f"node ranks 0-{pods - 1}"
        )
    if submit.build:
        plan_for(spec0)  # what the engine refuses, refused before minutes of building
        image = build_image(spec0)
        say(f"ddpctl: built and pushed {image}")
        base = base.with_flags({**flags, "image": image})  # as if given with --image
        spec0 = base.spec(target="job") if auto else base.spec()
    first = plan_for(spec0)
    check_code(first, say)  # before any cluster contact too

    def plan_of(spec: JobSpec) -> Plan:
        """The plan of `spec`: the one made above when the cluster changed nothing (the same
        target, and the context's namespace is the spec's default)."""
        return first if spec == first.spec else plan_for(spec)

    from ddpctl.cluster import discovery
    from ddpctl.cluster.config import connect

    with connect(dataclasses.replace(options, namespace=chosen.get("namespace"))) as cluster:
        engines = discovery.discover(cluster)
        overrides: dict[str, Any] = {} if "namespace" in chosen else {"namespace": cluster.namespace}
        if auto:
            plan, why = _first_that_plans(base, discovery.candidates(engines), overrides, plan_of)
            say(f"ddpctl: target {plan.spec.target}: {why}")
        else:
            plan = plan_of(base.spec(**overrides))
            discovery.require(engines, plan.spec.target)
        for warning in (plan.restart_starts_from_scratch, plan.plain_command_warning):
            if warning:
                say(f"ddpctl: warning: {warning}")
        with shipment_of(plan, to_store=True) as shipment:
            if shipment is not None:
                say(f"ddpctl: {shipment.pack.summary()}")
            yield Submission(plan, render.render_plan(plan, shipment), shipment, cluster, submit)


def start(sub: Submission, out: Callable[[str], None], say: Callable[[str], None]) -> None:
    """The second phase: the workspace uploaded (when absent from its store), the objects applied
    server-side (a server dry run: checked by the API server, nothing kept), then, as asked, the
    job followed until it ends."""
    from ddpctl.cluster import apply as A
    from ddpctl.cluster.flags import parse_duration
    from ddpctl.cluster.follow import follow_job
    from ddpctl.cluster.kinds import BY_TARGET, is_coordinator, rank_notice

    assert sub.cluster is not None, "a client dry run is shown, not started"
    cluster, plan, submit = sub.cluster, sub.plan, sub.submit
    spec, server_dry = plan.spec, submit.dry_run is DryRun.server
    objects, shipment = sub.objects, sub.shipment
    if sub.shipment is not None:
        shipment = _upload(sub.shipment, server_dry, say)
        if shipment.url != sub.shipment.url:
            from ddpctl.manifests import render

            objects = render.render_plan(plan, shipment)  # the store named another address
    if plan.coordinator_name is not None:  # recovery: pod
        A.require_per_index(cluster, objects)
    applied = A.submit(
        cluster, objects, name=spec.name, namespace=spec.namespace, dry_run=server_dry, replace=submit.replace, say=say
    )
    kind = BY_TARGET[spec.target]
    top = next(a.obj for a in applied if a.kind is kind and not is_coordinator(a.obj))  # rank 0's workload
    if shipment is not None and shipment.secret is not None and not server_dry:
        A.own(cluster, top, applied[0].obj)
    for coordinator in [a.obj for a in applied if a.obj is not top and is_coordinator(a.obj)]:
        if not server_dry:  # a Job of its own (target job): it goes when the job's workload goes
            _own_coordinator(cluster, top, coordinator, say)
    if spec.queue or spec.workload_priority_class:
        from ddpctl.cluster.admission import queue_warnings

        for note in queue_warnings(cluster, spec.target, top, spec.queue):
            say(f"ddpctl: warning: {note}")
    if submit.output is not None:
        out(_fmt([a.obj for a in applied], submit.output).rstrip("\n"))
    else:
        suffix = " (server dry run)" if server_dry else ""
        for a in applied:
            out(f"{a.kind.ref(a.obj['metadata']['name'])} {'created' if a.created else 'configured'}{suffix}")
    if server_dry:
        return
    job = top
    if not (submit.wait or submit.follow):
        say(
            f"ddpctl: follow it with `ddpctl logs {spec.name} -n {spec.namespace} -f`, or `ddpctl status "
            f"{spec.name} -n {spec.namespace}`"
        )
        return
    rank = submit.rank
    notice = rank_notice(job, spec.name, rank) if rank is not None else None
    if notice:
        say(notice)
    timeout_s = parse_duration(submit.timeout)
    follow_job(cluster, kind, job, timeout=timeout_s, follow=submit.follow, rank=rank, say=say)


def _own_coordinator(
    cluster: Cluster, top: dict[str, Any], coordinator: dict[str, Any], say: Callable[[str], None]
) -> None:
    """The coordinator's Job, owned by rank 0's workload: the garbage collector deletes it with that
    workload (its TTL, `kubectl delete`), where a failed job's coordinator would otherwise run on
    until `ddpctl delete`. Without the patch it stays until then: said, not an error."""
    from ddpctl.cluster import apply as A

    try:
        A.own(cluster, top, coordinator)
    except DdpctlError as exc:
        say(f"ddpctl: warning: the coordinator is not owned by the job ({exc.message}); `ddpctl delete` removes it")


def check_code(plan: Plan, say: Callable[[str], None]) -> None:
    """Before anything is created: the job's code in this folder is carried to the pods (a
    workspace, a project image of its current code), or, in the user's own image, the local engine
    shows it at WORKDIR + the path (not local: said, and not checked). Exit 2 when it is not."""
    from ddpctl.manifests.shipment import code_in_image, code_not_carried

    problem = code_not_carried(plan)
    if problem:
        raise UsageError(problem)
    if plan.ships_workspace:
        from ddpctl.image.requirements import image_lacks
        from ddpctl.manifests.shipment import is_trainer_image

        folder = (Path.cwd() / str(plan.spec.workspace.dir)).resolve()
        for said in image_lacks(folder, plan.spec.image, is_trainer_image(plan.spec.image)):
            say(f"ddpctl: {said}")
    wanted = code_in_image(plan)
    if wanted is None:
        return
    from ddpctl.image.contents import Wanted, built_folder_version, check_code_in_image

    for note in check_code_in_image(plan.spec.image, Wanted(*wanted), folder_hash=built_folder_version):
        say(f"ddpctl: {note}")


def _upload(shipment: Shipment, dry_run: bool, say: Callable[[str], None]) -> Shipment:
    """Put a large workspace in its store (unless a dry run), only when absent."""
    if shipment.url is None:
        return shipment
    if dry_run:
        say(f"ddpctl: workspace: {shipment.url} (server dry run: not uploaded)")
        return shipment
    from ddpctl.workspace.ship import uploaded

    done = uploaded(shipment, "workspace.store")
    say(f"ddpctl: workspace: {done.where()}")
    return done


def _first_that_plans(
    base: SpecInput,
    candidates: list[tuple[str, str]],
    overrides: dict[str, Any],
    plan_of: Callable[[JobSpec], Plan] = plan_for,
) -> tuple[Plan, str]:
    """--target auto: the first engine (best first) that can run the spec, and why it was chosen."""
    notes: list[str] = []
    for target, reason in candidates:
        try:
            return plan_of(base.spec(target=target, **overrides)), reason + (f"; {notes[0]}" if notes else "")
        except SpecError as exc:
            notes.append(f"{target} cannot run this spec ({exc.message})")
    raise AssertionError(f"no engine can run the spec ({'; '.join(notes)})")  # job, the last candidate, runs any
