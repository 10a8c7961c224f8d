"""`ddpctl run --docker`: each replica of the job's pod as a container on a private network.

Containers get the pod's hostname (`--hostname <job>-<i>`) and the DNS name other pods use for it
in the cluster as a network alias (`<job>-0.<svc>` for the Indexed Job), so MASTER_ADDR is the very
name the cluster gives; the env is the pod's (`node_env.cluster_env`), the command the pod's
(torchrun of the trainer), /dev/shm the spec's size, and the spec's volumes are host directories.
Restricted pods drop every capability and forbid privilege escalation here too.

Everything ddpctl creates carries the label `ddpctl.io/run=<id>` and is removed at the end,
whatever the end is (success, failure, Ctrl-C, an error while starting).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.backend import Where
from ddpctl.console import make_console, relative_path
from ddpctl.engines import plan_for
from ddpctl.errors import RuntimeFailure, UsageError, WaitTimeout
from ddpctl.plan import Plan
from ddpctl.records import record
from ddpctl.runners.common import check_trainer_args, parse_mounts, remap_paths, remove_checkpoints, volume_dirs
from ddpctl.runners.failures import NodeFailed, describe_failure, failure_code, start_failure
from ddpctl.runners.node_env import cluster_env
from ddpctl.runners.runs import RunRecord, node_log
from ddpctl.runners.state import JobState, layout_phrase
from ddpctl.runners.supervise import STOP_GRACE_S, Launcher, run_job
from ddpctl.spec.model import JobSpec
from ddpctl.spec.names import QUANTITY
from ddpctl.workspace.inline import unpacker_files
from ddpctl_trainer import protocol
from ddpctl_trainer.protocol import WORKSPACE_DIR, WORKSPACE_MOUNT

if TYPE_CHECKING:
    from ddpctl.runners.procs import Child
    from ddpctl.workspace.ship import Shipment

RUN_LABEL = "ddpctl.io/run"
JOB_LABEL = "ddpctl.io/job"
LOCAL_CHECKPOINTS = "/checkpoints"
_UNITS = {
    "": 1,
    "k": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "P": 1000**5,
    "E": 1000**6,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "Pi": 1024**5,
    "Ei": 1024**6,
}


def quantity_bytes(text: str) -> int:
    """A Kubernetes memory quantity ('2Gi', '512M', '1e9') in bytes, for --shm-size."""
    match = QUANTITY.fullmatch(text)
    if not match:
        raise UsageError(f"shmSize: {text!r} is not a size docker understands; use values like 2Gi or 512Mi")
    number, unit = float(match["number"]), match["suffix"] or ""
    if unit == "m":  # milli: a thousandth of a byte
        return int(number / 1000)
    factor = 10 ** int(unit[1:]) if unit.startswith("e") else _UNITS[unit]
    return int(number * factor)


@record
class ContainerPlan:
    index: int
    name: str
    hostname: str
    aliases: tuple[str, ...]
    argv: tuple[str, ...]  # the full `docker run ...` command


@record
class DockerPlan:
    job: Plan  # the spec's Plan: what its pods would get in the cluster
    engine: str
    run_id: str
    network: str
    run_dir: Path
    checkpoint_dir: Path | str | None  # a host directory, or an object store's URL
    containers: tuple[ContainerPlan, ...]
    host_dirs: Mapping[str, Path]
    notes: tuple[str, ...] = ()

    @property
    def spec(self) -> JobSpec:
        return self.job.spec


def require_engine_cli(engine: str) -> str:
    path = shutil.which(engine)
    if path is None:
        raise RuntimeFailure(
            f"--engine {engine}: {engine} is not installed (not on PATH); install it (Docker: bash "
            "scripts/install-docker.sh) or use ddpctl run --local"
        )
    from ddpctl.image.build import require_engine

    require_engine(engine)
    return path


def ensure_image(engine: str, spec: JobSpec) -> None:
    """The image must exist locally, or be pullable unless imagePullPolicy is Never."""
    from ddpctl.image.build import image_exists

    if spec.image_pull_policy != "Always" and image_exists(engine, spec.image):
        return
    if spec.image_pull_policy == "Never":
        raise UsageError(
            f"image: {spec.image} is not in the local {engine} images and imagePullPolicy is Never; build it (ddpctl "
            "build) or pass --image"
        )
    try:
        proc = subprocess.run([engine, "pull", spec.image], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise RuntimeFailure(
            f"image: pulling {spec.image} took more than 10 minutes; pull it yourself or pass --image"
        ) from None
    if proc.returncode != 0:
        why = " ".join((proc.stderr or proc.stdout).split())[-240:] or f"exit code {proc.returncode}"
        raise UsageError(
            f"image: {spec.image} does not exist locally and cannot be pulled ({why}); build it with ddpctl build "
            "(it tags ddpctl-trainer:latest) or pass --image"
        )


IMAGE_UID = 1000  # the Dockerfile's user (ARG UID/GID); the pod runs as it in the cluster too
IMAGE_GID = 1000


def writable_by(path: Path, uid: int = IMAGE_UID, gid: int = IMAGE_GID) -> bool:
    """Can `uid:gid` create files in the existing directory `path` (mode bits; ACLs not read)?"""
    st = path.stat()
    if uid == 0:
        return True
    if st.st_uid == uid:
        need = 0o300
    elif st.st_gid == gid:
        need = 0o030
    else:
        need = 0o003
    return st.st_mode & need == need


def prepare_volume_dir(path: Path, *, read_only: bool, given_as: str | None, ours: bool) -> None:
    """Make sure a host directory a container mounts exists and, when mounted read-write, that the
    image's user (uid 1000) can write to it.

    Only ddpctl's own directories are opened up (chmod 0777: the host user may be anyone, and
    files the container writes must stay deletable by them): one it creates now, or, with `ours`,
    one in its default layout (./ddp-runs/NAME/VOLUME, made by an earlier run). Any other existing
    directory is the user's (--mount DIR, or under --run-dir): its mode is never changed (a --mount
    of $HOME/data must not become world-writable); if uid 1000 cannot write to it, that is a
    one-line error with the fix. Running the container as the directory's owner (--user) instead
    would run it as root for a root-owned directory, unlike the pod in the cluster: not done.
    `given_as` names the --mount that chose the directory, for the message."""
    if path.is_dir():
        if read_only or writable_by(path):
            return
        if not ours:
            how = f"--mount {given_as}: {path}" if given_as else f"{path}"
            fix = f"sudo chown -R {IMAGE_UID} {path}, or chmod o+rwx {path}"
            alt = (
                f"or drop --mount {given_as} to let ddpctl make one"
                if given_as
                else "or remove it so ddpctl makes it anew"
            )
            raise UsageError(
                f"{how} is not writable by uid {IMAGE_UID}, the user the image runs as; make it writable ({fix}) {alt}"
            )
    else:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RuntimeFailure(f"cannot create {path}: {exc.strerror or exc}") from None
    if not read_only:
        try:
            path.chmod(0o777)
        except PermissionError:
            pass


def plan_docker(
    spec: JobSpec,
    *,
    engine: str = "docker",
    run_dir: Path | None = None,
    mounts: Sequence[str] = (),
    fresh: bool = False,
    run_id: str | None = None,
    dry_run: bool = False,
    shipment: Shipment | None = None,
) -> DockerPlan:
    """Check the engine and image, compute every `docker run`; creates host directories only.
    (No host port is used: each container has a network namespace of its own.)"""
    job = plan_for(spec)
    if spec.gpus_per_node:
        raise UsageError(
            f"gpusPerNode: {spec.gpus_per_node} GPUs per node cannot be given to local containers by ddpctl; use "
            "--gpus 0 (CPU + gloo)"
        )
    cwd = Path.cwd().resolve()
    default_run_dir = run_dir is None
    run_dir = (run_dir or cwd / "ddp-runs" / spec.name).resolve()
    given = parse_mounts(mounts)
    dirs = volume_dirs(spec, run_dir, given)
    if spec.uses_trainer:  # before the image is looked for or pulled: a bad flag is found at once
        host_paths = {vol.mount_path: dirs[name] for name, vol in spec.volumes.items()}
        check_trainer_args(remap_paths(job.trainer_args, host_paths), cluster_env(job, 0), job.world_size)
    if fresh and job.checkpoint_url:
        remove_checkpoints(job.checkpoint_url)  # refuses, before any image is looked for or pulled
    if not dry_run:  # a dry run computes the commands only: no image pulled, no directory made
        require_engine_cli(engine)
        ensure_image(engine, spec)
    run_id = run_id or secrets.token_hex(3)
    network = f"ddpctl-{spec.name}-{run_id}"
    labels = {RUN_LABEL: run_id, JOB_LABEL: spec.name}

    volumes: list[tuple[Path, str, bool]] = []  # (host dir, mount path, read-only)
    checkpoint_dir: Path | str | None = job.checkpoint_url
    extra_env: dict[str, str] = {}
    for vname, vol in spec.volumes.items():
        volumes.append((dirs[vname], vol.mount_path, vol.read_only))
        if vname == "checkpoints":
            checkpoint_dir = dirs[vname]
    if (
        spec.uses_trainer
        and checkpoint_dir is None
        and "--checkpoint-dir" not in " ".join(job.trainer_args)
        and protocol.CHECKPOINT_DIR_ENV not in spec.env
    ):
        # No checkpoint volume in the spec: keep them on the host all the same.
        checkpoint_dir = dirs.get("checkpoints", run_dir / "checkpoints")
        volumes.append((checkpoint_dir, LOCAL_CHECKPOINTS, False))
        extra_env[protocol.CHECKPOINT_DIR_ENV] = LOCAL_CHECKPOINTS
    if fresh and not dry_run:
        remove_checkpoints(checkpoint_dir)
    mounted_by = {path: name for name, path in given.items()}
    for host, _, read_only in volumes:
        mount_name = mounted_by.get(host)
        if not dry_run:
            prepare_volume_dir(
                host, read_only=read_only, given_as=mount_name, ours=mount_name is None and default_run_dir
            )
    if not dry_run:
        run_dir.mkdir(parents=True, exist_ok=True)  # logs: written by ddpctl on the host, not mounted

    if shipment is not None:  # the pods' Secret, as a read-only folder: the archive and the unpacker
        folder = shipment.archive.parent
        for name, data in unpacker_files().items():
            (folder / name).write_bytes(data)
        for path in (folder, *folder.iterdir()):  # readable by the image's user, as the Secret's files are
            path.chmod(0o755 if path.is_dir() else 0o444)
        volumes.append((folder, WORKSPACE_MOUNT, True))
        extra_env.update(shipment.env())
    shm = quantity_bytes(spec.shm_size)
    passed, notes = credentials_passed(job)
    containers = []
    for index, (hostname, names) in enumerate(zip(job.pod_hostnames, job.dns_names)):
        env = {**cluster_env(job, index), **extra_env}
        name = f"ddpctl-{run_id}-{hostname}"
        argv = [engine, "run", "--name", name, "--hostname", hostname, "--network", network]
        for alias in names:
            argv += ["--network-alias", alias]
        for key, value in {**labels, "ddpctl.io/node": str(index)}.items():
            argv += ["--label", f"{key}={value}"]
        argv += ["--shm-size", str(shm)]
        if spec.pod_security == "restricted":
            argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        for host, target, read_only in volumes:
            argv += ["-v", f"{host}:{target}{':ro' if read_only else ''}"]
        for key, value in env.items():
            argv += ["-e", f"{key}={value}"]
        for key in passed:  # by name: the engine reads the value from its environment, argv never holds it
            argv += ["-e", key]
        # the pod's command: for the built-in trainer `python3 -m ddpctl_trainer.launch`, the
        # container's PID 1, so a SIGTERM to the container (docker stop, the kubelet's) reaches it
        if shipment is not None:  # the pods' emptyDir: the image's user owns it (docker ignores a tmpfs mode)
            argv += ["--tmpfs", f"{WORKSPACE_DIR}:rw,uid={IMAGE_UID},gid={IMAGE_GID}"]
        entry = job.groups[job.nodes[index].group_index].command
        if shipment is not None and not job.uses_launcher:
            entry = shipment.wrap(entry)
        argv += ["--entrypoint", entry[0], spec.image, *entry[1:], *job.trainer_args]
        containers.append(ContainerPlan(index, name, hostname, names, tuple(argv)))
    return DockerPlan(job, engine, run_id, network, run_dir, checkpoint_dir, tuple(containers), dirs, notes)


# What an object store client reads from the environment besides the secrets (protocol's list).
_STORE_SETTINGS = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ALLOW_HTTP",
    protocol.OBJECT_STORE_ENDPOINT_ENV,
    "AZURE_STORAGE_ACCOUNT_NAME",
)


def credentials_passed(job: Plan, environ: Mapping[str, str] | None = None) -> tuple[list[str], tuple[str, ...]]:
    """The variables a container gets from this shell, by name only: the spec's secretEnv (a Secret's
    keys in the cluster) and, when the checkpoints go to an object store, its client's credentials
    and settings. Also the notes to say: what is missing, and an endpoint on loopback, which the
    containers (each in its own network namespace) cannot reach."""
    environ = os.environ if environ is None else environ
    spec, notes = job.spec, []
    wanted = list(spec.secret_env)
    if job.checkpoint_url:
        wanted += [*protocol.OBJECT_STORE_SECRET_ENV, *_STORE_SETTINGS]
    passed = [k for k in dict.fromkeys(wanted) if k in environ and k not in spec.env]
    missing = [k for k in spec.secret_env if k not in environ]
    if missing:
        notes.append(f"secretEnv {', '.join(missing)} come from Secrets in the cluster; export them to set them here")
    endpoint = environ.get(protocol.OBJECT_STORE_ENDPOINT_ENV, "") if job.checkpoint_url else ""
    host = endpoint.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    if host in ("localhost", "127.0.0.1", "::1"):
        notes.append(
            f"{protocol.OBJECT_STORE_ENDPOINT_ENV} is {endpoint}: this machine's loopback, which the containers "
            "cannot reach; give the store's address on the container network"
        )
    return passed, tuple(notes)


def _docker(engine: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([engine, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def remove_containers(engine: str, run_id: str) -> None:
    """Remove every container labelled with this run (a restart runs them again by the same names)."""
    ids = _docker(engine, "ps", "-aq", "--filter", f"label={RUN_LABEL}={run_id}").stdout.split()
    if ids:
        _docker(engine, "rm", "-f", *ids)


def cleanup(engine: str, run_id: str) -> list[str]:
    """Remove every container and network labelled with this run; returns what is left (should be
    nothing). Uses the label, so containers created by a half-finished start are found too."""
    flt = f"label={RUN_LABEL}={run_id}"
    remove_containers(engine, run_id)
    nets = _docker(engine, "network", "ls", "-q", "--filter", flt).stdout.split()
    if nets:
        _docker(engine, "network", "rm", *nets)
    left = (
        _docker(engine, "ps", "-aq", "--filter", flt).stdout.split()
        + _docker(engine, "network", "ls", "-q", "--filter", flt).stdout.split()
    )
    return left


def _exit_state(engine: str, name: str) -> tuple[int | None, bool]:
    """(exit code, OOM-killed) of a container, as the engine recorded it."""
    proc = _docker(engine, "inspect", "--format", "{{.State.ExitCode}} {{.State.OOMKilled}}", name)
    if proc.returncode != 0:
        return None, False
    code, oom = (proc.stdout.split() + ["", ""])[:2]
    return (int(code) if code.lstrip("-").isdigit() else None), oom == "true"


class DockerLauncher(Launcher):
    """Each node a container on the run's own network; every container and the network carry the
    run's label and are removed after each start and at the end, whatever the end is."""

    unit = "container"

    def __init__(self, plan: DockerPlan) -> None:
        self.plan = plan
        self.by_index = {c.index: c for c in plan.containers}
        self.exit_states: dict[int, tuple[int | None, bool]] = {}
        self.logs = relative_path(plan.run_dir / "logs", Path.cwd())

    def setup(self) -> None:
        labels = [f"--label={RUN_LABEL}={self.plan.run_id}", f"--label={JOB_LABEL}={self.plan.spec.name}"]
        made = _docker(self.plan.engine, "network", "create", *labels, self.plan.network)
        if made.returncode != 0:
            raise RuntimeFailure(
                f"{self.plan.engine} network create {self.plan.network} failed: {' '.join(made.stderr.split())[:300]}"
            )

    def teardown(self) -> list[str]:
        return cleanup(self.plan.engine, self.plan.run_id)

    def start_node(self, index: int, attempt: int) -> Child:
        """Rank 0's container first: its name must resolve when the others look it up."""
        from ddpctl.runners import procs

        c = self.by_index[index]
        try:
            return procs.start_child(
                c.index,
                f"node {c.index} ({c.name})",
                c.argv,
                os.environ,
                log_path=node_log(self.plan.run_dir, c.index, attempt),
            )
        except OSError as exc:
            raise start_failure(
                c.argv, exc, user_command=False, what=f"node {c.index} ({self.plan.engine} run)"
            ) from None

    def stop(self, children: list[Child]) -> None:
        from ddpctl.runners import procs

        running = [c for c in children if c.poll() is None]
        for child in running:
            child.stopping = True  # its exit is ours, not a failure of its own (supervise.blamed_node)
        names = [self.by_index[c.index].name for c in running]
        if names:
            _docker(self.plan.engine, "stop", "-t", str(int(STOP_GRACE_S)), *names, timeout=STOP_GRACE_S + 60)
        procs.stop_children([c for c in children if c.poll() is None], grace_s=5)

    def collect(self, state: JobState) -> None:
        self.exit_states = {c.index: _exit_state(self.plan.engine, c.name) for c in self.plan.containers}

    def after_start(self) -> None:
        remove_containers(self.plan.engine, self.plan.run_id)

    def node_failed(self, state: JobState, failed: Child) -> NodeFailed | None:
        engine, job = self.plan.engine, self.plan.job
        code, oom = self.exit_states.get(failed.index, (None, False))
        code = failure_code(state, code if code is not None else (failed.returncode or 1))
        if code == 125 and not state.ranks_spoke:  # the engine could not run the container: no restart helps
            raise RuntimeFailure(f"{engine} run of node {failed.index} failed: see {self.logs}/node-{failed.index}.log")
        text = describe_failure(state, failed.index, code, job.nodes[failed.index].ranks)
        if oom:
            text += " (out of memory)"
        container = self.by_index[failed.index].hostname
        return NodeFailed(failed.index, code, f"{text} (container {container}, exit code {code}; logs in {self.logs})")

    def timed_out(self, timeout: float | None) -> WaitTimeout:
        return WaitTimeout(
            f"job {self.plan.spec.name} was still running after --timeout {timeout or 0:g}s; stopped and removed "
            f"its containers (logs in {self.logs})"
        )


def run_docker(plan: DockerPlan, *, color: bool | None = None, timeout: float | None = None) -> int:
    """Create the network, run every container, stream, wait, and always remove it all. A failed
    node restarts the whole group as the target's rules say (as run --local): every container is
    removed and run again on the same network, with the same volumes (so the trainer resumes from
    the same checkpoints)."""
    spec, job = plan.spec, plan.job
    console = make_console(None, None, color)
    for note in plan.notes:
        console.note(note)
    console.note(
        f"running {spec.name} in {plan.engine}: {layout_phrase(job, 'container')} = world size {job.world_size}, "
        f"{job.backend}, rank 0 at {job.rdzv_endpoint} on network {plan.network}"
    )
    record = RunRecord(plan.run_dir, job, Where.docker, layout_phrase(job, "container"), plan.checkpoint_dir)
    return run_job(
        job,
        DockerLauncher(plan),
        console,
        record=record,
        checkpoint_dir=plan.checkpoint_dir,
        cwd=Path.cwd(),
        logs=plan.run_dir / "logs",
        timeout=timeout,
    )
