"""What the ddpctl CLI and the trainer agree on, in one torch-free module both import.

The CLI starts the trainer as a process (locally, in containers, in pods) and reads back only what
a process leaves: its exit code, its log lines, the files it writes and the env it was given. Each
of those is named here once: exit codes (which the rendered failure rules test), log tags (which
runners and `ddpctl status` grep for), checkpoint file names (which local runs count), env
variable names and the trainer's default timeouts (which the spec checks against). The Helm
chart's copies are generated from this module (`tools/chart_contract.py`).

Stdlib only: the CLI imports this module and nothing else of the trainer's runtime.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import NamedTuple

PROG = "ddpctl-trainer"
TRAINER_MODULE = "ddpctl_trainer"  # `torchrun -m ddpctl_trainer`: the built-in trainer
LAUNCHER_MODULE = "ddpctl_trainer.launch"  # `python3 -m ddpctl_trainer.launch`: torchrun with exit codes
LAUNCHER_PYTHON = "python3"  # the interpreter the pods start the launcher with

# ------------------------------------------------------------------------------------ exit codes
# A pod's exit code is all that Kubernetes failure rules see: the Job's podFailurePolicy
# (onExitCodes), JobSet's rules (through the child Job's failure), PyTorchJob's restartPolicy
# ExitCode (which recreates a pod only for 130, 137, 138 and 143).

EXIT_OK = 0
EXIT_FAILURE = 1  # a runtime failure
EXIT_USAGE = 2  # bad input, found by every rank alike: a restart cannot help
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C)
EXIT_KILLED = 137  # SIGKILL: the OOM killer, or the grace period ran out
# A collective failed because a peer went away (its node died, was OOM-killed or SIGKILLed).
# 128 + SIGUSR1 is Kubeflow's documented "user-defined retryable" code: a PyTorchJob under
# restartPolicy ExitCode recreates pods only for 130, 137, 138 and 143, and an Indexed Job's
# podFailurePolicy ignores it like 143, so only the pod with the root cause counts as a failure.
EXIT_PEER_LOST = 138
# SIGTERM (128 + 15). After a checkpoint at a step boundary every rank stops with it and the next
# start resumes at that step; it equals death by SIGTERM, so rules that retry signals retry it.
EXIT_PREEMPTED = 143
# The stall watchdog ended a hung job: above 128 so signal-retrying rules retry a hang, above
# 128 + 64 so it is never read as "killed by signal N".
EXIT_STALLED = 200
# The preflight checks (`--preflight fail`) named a slow node, rank or link, or NCCL fell back to
# sockets on a job that asked for a fast fabric: every rank exits with it before the first step.
# Like a crash, it is this attempt's failure: counted on job (backoffLimit) and jobset (maxRestarts),
# so a replacement pod may land on a healthy node, and permanent under PyTorchJob's ExitCode policy
# (not in KUBEFLOW_RETRYABLE); above 128 + 64 so it is never read as a signal, and not 2 (which
# would forbid the retry that can help) nor 138/143 (which say a peer caused it).
EXIT_PREFLIGHT = 201
# `--stragglers fail`: a node stayed below the tolerance of the median speed for `windows` windows
# mid-run; every rank exits with it after the same step. Unlike 201 it is not this attempt's bad
# luck to retry: the job ends (the failure rules fail it at once, as they fail a usage error), and
# `ddpctl status` names the node to resubmit with `--avoid-node`. Above 128 + 64, never a signal.
EXIT_STRAGGLER = 202

# Why a pod stopped when the cause was elsewhere: a peer's preemption (every rank stops at the
# same step and exits 143) or a peer's death (138). Only the pod with the cause counts as a failure.
CAUSED_BY_A_PEER: tuple[int, ...] = (EXIT_PEER_LOST, EXIT_PREEMPTED)
# What Kubeflow's training operator retries under restartPolicy ExitCode (kubeflow/common
# pkg/util/train IsRetryableExitCode): SIGINT, SIGKILL, SIGUSR1 (user-defined retryable), SIGTERM.
KUBEFLOW_RETRYABLE: tuple[int, ...] = (EXIT_INTERRUPTED, EXIT_KILLED, EXIT_PEER_LOST, EXIT_PREEMPTED)

# The error line a trainer rank prints when SIGTERM stopped it (torchrun's agent passing on a stop,
# or a preemption), alone or followed by where it stopped: no failure of its own.
STOPPED_BY_SIGTERM = "stopped by SIGTERM"
STOPPED_BY_SECOND_SIGTERM = "stopped by a second SIGTERM"

_MEANINGS = {
    EXIT_USAGE: "usage error",
    EXIT_KILLED: "killed by SIGKILL",
    EXIT_PEER_LOST: "lost a peer",
    EXIT_PREEMPTED: STOPPED_BY_SIGTERM,
    EXIT_STALLED: "stalled",
    EXIT_PREFLIGHT: "failed its preflight checks",
    EXIT_STRAGGLER: "stopped for a straggler",
}
# What ends a job at once under every target's failure rules, however many retries it has left.
FAILS_THE_JOB: tuple[int, ...] = (EXIT_USAGE, EXIT_STRAGGLER)


def meaning(code: int) -> str | None:
    """What a pod's exit code says when the ddpctl launcher ran it (None for codes it does not give)."""
    return _MEANINGS.get(code)


# ------------------------------------------------------------------------------------ log lines

ERROR_TAG = f"{PROG}: error: "  # the one line a failing rank prints (then `[rank R] ` when distributed)
WARNING_TAG = f"{PROG}: warning: "
STALL_SUMMARY_TAG = f"{PROG}: stalled:"  # every line of the stall watchdog's summary starts with it
STALL_SUMMARY_FIRST = "no rank made progress"  # the first line of a job's (not a rank's) summary
ALREADY_COMPLETE = "already complete"  # a rerun of a finished job: `... already complete at step N ...`
LAUNCHER_TAG = f"{PROG}.launch: "  # the launcher's own lines
LAUNCHER_STOPPED_BY = f"{LAUNCHER_TAG}stopped by "  # + signal name: the agent itself was signalled
# The preflight report: every line rank 0 prints of it starts, after `[rank 0] `, with one of these
# (all begin `ddpctl-trainer: preflight`): the table and figures, one line per finding (a slow node,
# rank or link, NCCL's socket fallback), and the verdict, the report's last line.
PREFLIGHT_PREFIX = f"{PROG}: preflight"
PREFLIGHT_TAG = f"{PREFLIGHT_PREFIX}: "
PREFLIGHT_FINDING_TAG = f"{PREFLIGHT_PREFIX} finding: "
PREFLIGHT_VERDICT_TAG = f"{PREFLIGHT_PREFIX} verdict: "
# The straggler detector (ddpctl_trainer.stragglers): rank 0 prints one line when a node is named
# (after `[rank 0] `), and one when a named node is back within the tolerance.
STRAGGLER_TAG = f"{PROG}: straggler: "
STRAGGLER_RECOVERED_TAG = f"{PROG}: straggler recovered: "
# Pod recovery: a survivor's line once the group formed again with a replacement, and the
# replacement's once it joined; both say the step training goes on from (`recovery_step`).
RECOVERY_TAG = f"{PROG}: recovery: "
# A rank that alone got SIGTERM under pod recovery says this as it leaves (exit 143): its node is
# replaced alone, not counted, and the whole group does not restart.
LEFT_ALONE = "left alone: the others go on"
_RECOVERY_STEP = re.compile(r"\bat step (\d+)\b")


def recovery_step(text: str) -> int | None:
    """The step a pod-recovery line (with or without its `[rank R] `) says training goes on from;
    None for any other line."""
    found = parse_rank_line(text)
    body = found[1] if found else text
    if not body.startswith(RECOVERY_TAG):
        return None
    step = _RECOVERY_STEP.search(body)
    return int(step.group(1)) if step else None


_RECOVERY_NODES = re.compile(r"\b(?:nodes? (\d+(?:, \d+)*)|no node) joined\b")


def recovery_nodes_text(nodes: list[int]) -> str:
    """The replacements' node ranks as a pod-recovery line says them (`node 1`, `nodes 1, 2`)."""
    if not nodes:
        return "no node"
    return f"node{'s' if len(nodes) > 1 else ''} {', '.join(str(n) for n in nodes)}"


def recovery_nodes(text: str) -> list[int] | None:
    """The node ranks a pod-recovery line says joined; None for any other line, or one from a
    trainer that did not say them."""
    if recovery_step(text) is None:
        return None
    found = _RECOVERY_NODES.search(text)
    if not found:
        return None
    return [int(n) for n in found.group(1).split(", ")] if found.group(1) else []


def preflight_line(text: str) -> tuple[str, str] | None:
    """(`report` | `finding` | `verdict`, the rest) of a line of the preflight report (with or
    without its `[rank R] `); None for any other line."""
    found = parse_rank_line(text)
    body = found[1] if found else text
    for kind, tag in (
        ("finding", PREFLIGHT_FINDING_TAG),
        ("verdict", PREFLIGHT_VERDICT_TAG),
        ("report", PREFLIGHT_TAG),
    ):
        if body.startswith(tag):
            return kind, body[len(tag) :]
    return None


# Named tuples, not dataclasses: a dataclass compiles its methods when it is made (~1 ms each), which
# every process that imports the protocol would pay (the CLI's start included).
class StragglerNote(NamedTuple):
    """One straggler line: `straggler` (a node named: `node 1 (pod P, k8s node K): ... since step
    S[; avoid it: --avoid-node K]`) or `recovered` (`node 1 (...): back at ... at step S`)."""

    kind: str
    node: int | None  # the node rank the line names
    text: str  # the line after its tag
    avoid: str | None = None  # the Kubernetes node to resubmit away from (`--avoid-node`)


_STRAGGLER_NODE = re.compile(r"^node (\d+)\b")
_STRAGGLER_AVOID = re.compile(r"--avoid-node (\S+)$")


def straggler_line(text: str) -> StragglerNote | None:
    """The `StragglerNote` of a straggler detector's line (with or without its `[rank R] `); None
    for any other line."""
    found = parse_rank_line(text)
    body = found[1] if found else text
    for kind, tag in (("straggler", STRAGGLER_TAG), ("recovered", STRAGGLER_RECOVERED_TAG)):
        if body.startswith(tag):
            return straggler_note(kind, body[len(tag) :])
    return None


def straggler_note(kind: str, text: str) -> StragglerNote:
    """The note of a straggler line's text after its tag (or of the trainer's error line under
    `--stragglers fail`, after `straggler: `): the node rank it names, its avoid hint."""
    rest = text.rstrip()
    node, avoid = _STRAGGLER_NODE.match(rest), _STRAGGLER_AVOID.search(rest)
    return StragglerNote(kind, int(node.group(1)) if node else None, rest, avoid.group(1) if avoid else None)


def latest_stragglers(lines: Iterable[str]) -> list[StragglerNote]:
    """Each node's latest straggler line (named or recovered), in the order of those lines, from
    rank 0's lines (any other line is skipped)."""
    latest: dict[int | None, StragglerNote] = {}
    for note in filter(None, map(straggler_line, lines)):
        latest.pop(note.node, None)
        latest[note.node] = note
    return list(latest.values())


def current_stragglers(lines: Iterable[str]) -> list[StragglerNote]:
    """The nodes named as stragglers and not recovered since, in the order they were named."""
    return [n for n in latest_stragglers(lines) if n.kind == "straggler"]


# Kubernetes keeps this file's text as the container's termination message, on the pod object,
# after the container ended: the stall summary outlives a pod whose logs go with it.
TERMINATION_LOG = "/dev/termination-log"

# ------------------------------------------------------------------------------------ checkpoints

CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{8,})(\.pt)?$")  # `ckpt-<step>.pt` files, `ckpt-<step>/` sharded dirs
# what they are written as before the rename: `.ckpt-<step>.pt.tmp.<pid>`, `.ckpt-<step>.tmp`
CHECKPOINT_TEMP = re.compile(r"^\.ckpt-\d{8,}(\.pt)?\.tmp")
SHARDED_STATE_FILE = "trainer_state.pt"  # the trainer's position inside a sharded checkpoint directory


# --checkpoint-dir may also be an object store URL of one of these schemes (the client, obstore, is
# an optional extra: `pip install 'ddpctl[s3]'`, or the trainer image built with OBJECT_STORE=1).
# Under the URL's prefix every checkpoint is `ckpt-<step:08d>/` (checkpoint_name(step, sharded=True)):
# its data in `ckpt-<step>/<attempt>/`, then `ckpt-<step>/manifest.json` (written after every data
# object: a checkpoint without it is incomplete and never loaded), then the `latest` object (JSON:
# step, checkpoint), written last with a conditional write, names the newest published one.
CHECKPOINT_URL_SCHEMES: tuple[str, ...] = ("s3", "gs", "az")
URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
CHECKPOINT_MANIFEST = "manifest.json"
CHECKPOINT_LATEST = "latest"
CHECKPOINT_STATE_FILE = "state.pt"  # a full checkpoint's one data object in the object store


# An object store's bucket (S3, GCS) or container (Azure): lowercase letters, digits, '.', '_' and '-'.
BUCKET = re.compile(r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$")


def checkpoint_url_problem(url: str) -> tuple[str, str] | None:
    """What is wrong with `url` as an object store checkpoint location, as (problem, fix); None
    when nothing is. The spec (`checkpoints`) and the trainer (`--checkpoint-dir`) ask this one
    check. No problem repeats the URL: a pasted one may hold a key or a presigned signature."""
    if "@" in url:
        return (
            "the URL holds credentials (user@ or key:secret@)",
            "remove them: reference a Secret with secretEnv (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), or use the "
            "pods' workload identity",
        )
    *others, last = CHECKPOINT_URL_SCHEMES
    schemes = f"{', '.join(f'{s}://' for s in others)} or {last}://"
    example = f"give an {schemes} URL such as s3://BUCKET/PREFIX"
    if "?" in url or "#" in url:
        return "the URL holds a query or fragment (a presigned URL?)", example
    scheme, found, rest = url.partition("://")
    if not found:
        return "a path is not an object store URL", f"{example} (for a path, mount a volume)"
    if scheme.lower() not in CHECKPOINT_URL_SCHEMES:
        return f"{scheme}:// is not a supported object store", example
    bucket, _, prefix = rest.partition("/")
    if not BUCKET.fullmatch(bucket):
        problem = f"{bucket!r} is not a bucket name" if bucket else "the URL names no bucket"
        return problem, f"write it as {scheme}://BUCKET/PREFIX, the bucket in lowercase letters, digits, '.', '_', '-'"
    if any(c.isspace() or not c.isprintable() for c in prefix):
        return "the prefix holds spaces or control characters", "use a plain prefix such as runs/resnet-1"
    return None


def url_scheme(value: str) -> str | None:
    """The scheme of a URL (`s3` of `s3://bucket/run`), None for a path."""
    match = URL.match(value)
    return match.group(1).lower() if match else None


def checkpoint_name(step: int, sharded: bool = False) -> str:
    return f"ckpt-{step:08d}" if sharded else f"ckpt-{step:08d}.pt"


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint file or directory name; None for any other name."""
    match = CHECKPOINT_NAME.match(name)
    return int(match.group(1)) if match else None


# ------------------------------------------------------------------------------------ environment

ENV_PREFIX = "DDP_TRAINER_"  # DDP_TRAINER_<FLAG> sets the trainer's --<flag> (a flag on the command line wins)


def flag_env(flag: str) -> str:
    """The env variable of a trainer flag: `--checkpoint-dir` -> `DDP_TRAINER_CHECKPOINT_DIR`."""
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


BACKEND_ENV = flag_env("--backend")
STALL_TIMEOUT_ENV = flag_env("--stall-timeout")
COLLECTIVE_TIMEOUT_ENV = flag_env("--timeout-s")
CHECKPOINT_DIR_ENV = flag_env("--checkpoint-dir")
USER_BACKEND_ENV = "DDP_BACKEND"  # the backend, for a user's own training script
JOB_NAME_ENV = "DDP_JOB_NAME"
# The preflight checks inside the job (the trainer's --preflight flags, which the spec's `preflight`
# and `fabric` set through these variables): off | warn | fail, the share of the median below which
# a unit is named, what NCCL's transport must be. PREFLIGHT_ONLY makes the trainer stop after the
# checks (`ddpctl check`: the job's own layout and placement, nothing trained).
PREFLIGHT_MODES: tuple[str, ...] = ("off", "warn", "fail")
FABRICS: tuple[str, ...] = ("socket", "infiniband", "roce", "efa")
PREFLIGHT_TOLERANCE = 0.6  # --preflight-tolerance's default (ddpctl_trainer.preflight.config says why)
PREFLIGHT_ENV = flag_env("--preflight")
PREFLIGHT_TOLERANCE_ENV = flag_env("--preflight-tolerance")
PREFLIGHT_FLOOR_ENV: dict[str, str] = {  # the spec's floor keys -> their variables
    "minGflops": flag_env("--preflight-min-gflops"),
    "minTflops": flag_env("--preflight-min-tflops"),
    "minBusbw": flag_env("--preflight-min-busbw"),
    "minH2d": flag_env("--preflight-min-h2d"),
}
FABRIC_ENV = flag_env("--fabric")
PREFLIGHT_ONLY_FLAG = "--preflight-only"
# How the checks time their figures (--preflight-window seconds per window, the best of
# --preflight-repeats windows), which `render --explain` prices. A check of its own (`ddpctl check`,
# `python -m ddpctl_trainer.preflight`) takes its time; inside a job every start pays for them, so
# one window each: a node's CPU figure is still the best of its ranks' windows, and GPU figures
# agree within a few per cent. A window stays at 0.2 s or more: a CPU limit is enforced per 100 ms.
PREFLIGHT_CHECK_WINDOW_S = 0.25
PREFLIGHT_CHECK_REPEATS = 3
PREFLIGHT_JOB_WINDOW_S = 0.2
PREFLIGHT_JOB_REPEATS = 1
PREFLIGHT_WARMUP_SHARE = 0.25  # a kernel's warm-up runs for this share of a window
# Where a pod runs, for the preflight report (the downward API: fieldRef spec.nodeName and
# metadata.name). HOSTNAME is the pod's name only where no hostname is set (Indexed Job pods get
# `<job>-<index>`), so the pod name has a variable of its own; both fall back when unset.
# The straggler detector during training (the trainer's --stragglers flags; the spec's `stragglers`
# sets them through these variables): off | warn | fail (replace is the spec's, needing pod-level
# recovery), the share of the median speed below which a node is slow, the steps per window, and
# how many windows in a row name it (ddpctl_trainer.stragglers says why these defaults).
STRAGGLER_MODES: tuple[str, ...] = ("off", "warn", "fail", "replace")
STRAGGLER_MODE = "warn"
STRAGGLER_TOLERANCE = 0.6
STRAGGLER_EVERY = 10
STRAGGLER_WINDOWS = 3
STRAGGLERS_ENV = flag_env("--stragglers")
STRAGGLERS_TOLERANCE_ENV = flag_env("--stragglers-tolerance")
STRAGGLERS_EVERY_ENV = flag_env("--stragglers-every")
STRAGGLERS_WINDOWS_ENV = flag_env("--stragglers-windows")
NODE_NAME_ENV = "DDP_NODE_NAME"
POD_NAME_ENV = "DDP_POD_NAME"
# A pod's node group (the spec's nodeGroups[].name): the straggler detector compares like with like.
NODE_GROUP_ENV = "DDP_NODE_GROUP"
# Node groups: each group is its own Indexed Job whose completion index starts at 0, so the pod
# carries its group's first node rank, and node rank = offset + JOB_COMPLETION_INDEX.
NODE_RANK_OFFSET_ENV = "PET_NODE_RANK_OFFSET"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"  # set by the Job controller in every Indexed Job pod
# An object store checkpoint dir: an S3-compatible server's URL (MinIO, Ceph, SeaweedFS; an http://
# one is allowed for it). Credentials come from the environment (a Secret's keys) or from workload
# identity (IRSA's AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE, GKE's metadata server): no Secret.
OBJECT_STORE_ENDPOINT_ENV = "AWS_ENDPOINT_URL"
# The variables whose values are secrets: never in a manifest's plain env, and the trainer scrubs
# their values from every message it prints.
OBJECT_STORE_SECRET_ENV: tuple[str, ...] = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "GOOGLE_BEARER_TOKEN",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_CLIENT_SECRET",
)

# ------------------------------------------------------------------------------------ pod recovery
# A job that replaces a lost pod alone: each pod's torchrun supervises its own node only
# (--nnodes 1), and the trainer forms the global group itself through the job's coordinator, a
# store that outlives any pod (``python -m ddpctl_trainer.coordinator``). The node's place in
# the job comes from these variables instead of torchrun's: global rank = first rank + LOCAL_RANK.
COORDINATOR_ENV = "DDP_COORDINATOR"  # host:port of the coordinator's store
JOB_NODE_RANK_ENV = "DDP_NODE_RANK"
NODE_FIRST_RANK_ENV = "DDP_NODE_FIRST_RANK"  # the global rank of this node's local rank 0
JOB_WORLD_SIZE_ENV = "DDP_WORLD_SIZE"
# In a pod, where the node's place is not given outright: its node rank is PET_NODE_RANK_OFFSET +
# JOB_COMPLETION_INDEX and its first rank DDP_RANK_OFFSET + JOB_COMPLETION_INDEX x processes per
# node (each node group's own offsets; ``launch`` adds DDP_NODE_RANK and DDP_NODE_FIRST_RANK).
RANK_OFFSET_ENV = "DDP_RANK_OFFSET"
JOB_NNODES_ENV = "DDP_NNODES"  # the job's node count (PET_NNODES is 1: torchrun runs the node alone)
COORDINATOR_PORT = 29510
COORDINATOR_MODULE = "ddpctl_trainer.coordinator"
COORDINATOR_COMPONENT = "coordinator"  # its pod's app.kubernetes.io/component label and container name
# The coordinator's own job ends when every rank has finished (a count in its store), or when a
# rank ended the job at once (a usage error, a straggler, a stall: the code, in its store)
FINISHED_KEY = "finished"
ENDED_KEY = "ended"
# Which start of the whole group the keys belong to (a runner that restarts every node at once
# after too many losses keeps its coordinator: the new start must not read the last one's records)
RECOVERY_SCOPE_ENV = "DDP_RECOVERY_SCOPE"
# A warm spare: a node process started before any loss, torch imported, that waits until this
# file names the node it takes (JSON: {"env": {...}}, the node's own variables) and then joins
# as that node's replacement would.
SPARE_ENV = "DDP_SPARE_ASSIGNMENT"

# ------------------------------------------------------------------------------------ workspace
# The user's own code, shipped without a rebuild: the CLI packs the workspace into a deterministic
# tar (named by the sha256 of its uncompressed bytes), gzipped, and the pod's launcher (or
# `ddpctl_trainer.workspace` run on its own) fetches it, checks the sha256, unpacks it into an
# emptyDir, makes that the working directory and puts it first on PYTHONPATH before torchrun.
WORKSPACE_ARCHIVE_ENV = "DDP_WORKSPACE_ARCHIVE"  # a file (the mounted Secret's key) or an object store URL
WORKSPACE_SHA256_ENV = "DDP_WORKSPACE_SHA256"  # of the uncompressed tar: the archive's identity
WORKSPACE_DIR_ENV = "DDP_WORKSPACE_DIR"  # where it is unpacked (default WORKSPACE_DIR)
WORKSPACE_DIR = "/workspace"  # an emptyDir: the image's WORKDIR, writable under a read-only root FS
WORKSPACE_MOUNT = "/var/run/ddpctl/workspace"  # the in-cluster object's volume
WORKSPACE_ARCHIVE_KEY = "workspace.tar.gz"  # the archive's key in that object (a file of the volume)
# An image without ddpctl's trainer (python3 alone): the object also holds the unpacker and this
# module, and the pod runs `python3 <WORKSPACE_MOUNT>/workspace.py CMD...`, which unpacks, then execs CMD.
# It also holds the straggler detector a user's own script may import (`ddpctl_trainer.stragglers`):
# the unpacker lays it out, with this module, as that package under WORKSPACE_HELPERS (last on PYTHONPATH).
WORKSPACE_UNPACKER_FILES: tuple[str, ...] = ("workspace.py", "protocol.py", "stragglers.py")
WORKSPACE_HELPERS = ".ddpctl"  # in the unpacked workspace: ddpctl_trainer/{__init__,protocol,stragglers}.py

# ------------------------------------------------------------------------------------ timeouts

STALL_TIMEOUT_S = 300  # --stall-timeout's default: the collective timeout must exceed it
COLLECTIVE_TIMEOUT_S = 600  # --timeout-s's default (the process group's): the stall timeout stays below it

# ------------------------------------------------------------------------------------ line protocol
# Every line a rank of a distributed job prints starts `[rank R] ` (the global rank); a tagged line
# (an error, a warning) puts its tag first. The runners, `ddpctl logs` and `ddpctl status` read
# lines back with `parse_rank_line`, and rank 0's progress with `parse_progress`.

_RANK_PREFIX = re.compile(r"^(?P<tag>(?:" + re.escape(PROG) + r": (?:error|warning): )?)\[rank (?P<rank>\d+)\] ")


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS has one, as on Linux)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def rank_prefix(rank: int) -> str:
    """`[rank 3] `: what every line of global rank 3 starts with."""
    return f"[rank {rank}] "


def parse_rank_line(line: str) -> tuple[int, str] | None:
    """(rank, text) of a rank's line: `[rank 3] x` -> (3, "x"); a tagged line keeps its tag,
    `ddpctl-trainer: error: [rank 3] x` -> (3, "ddpctl-trainer: error: x"). None for other lines."""
    match = _RANK_PREFIX.match(line)
    if match is None:
        return None
    return int(match.group("rank")), match.group("tag") + line[match.end() :]


def duration_text(seconds: float) -> str:
    """`45s`, `2m05s`, `1h02m`: an ETA or an age, to the second below an hour."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> float | None:
    """The seconds of a `duration_text`; None when `text` is not one."""
    match = _DURATION.fullmatch(text)
    if match is None or not text:
        return None
    h, m, s = (int(g or 0) for g in match.groups())
    return float(h * 3600 + m * 60 + s)


class Progress(NamedTuple):
    """Rank 0's position, as its progress line says it: epochs and steps count from 1."""

    epoch: int
    epochs: int
    step: int  # in the epoch
    steps: int  # per epoch
    loss: float | None = None
    samples_per_s: float | None = None
    eta_s: float | None = None

    @property
    def percent(self) -> float:
        """How much of the whole run (every epoch) is done."""
        total = self.epochs * self.steps
        return 100.0 * ((self.epoch - 1) * self.steps + self.step) / total if total else 0.0

    def text(self) -> str:
        """`epoch 1/2 step 10/40 loss 2.3012 123.4 samples/s eta 1m05s`: rank 0's progress line."""
        out = f"epoch {self.epoch}/{self.epochs} step {self.step}/{self.steps}"
        if self.loss is not None:
            out += f" loss {self.loss:.4f}"
        if self.samples_per_s is not None:
            out += f" {self.samples_per_s:.1f} samples/s"
        if self.eta_s is not None:
            out += f" eta {duration_text(self.eta_s)}"
        return out


_PROGRESS = re.compile(
    r"^epoch (\d+)/(\d+) step (\d+)/(\d+)(?: loss (\S+))?(?: ([\d.]+) samples/s)?(?: eta (\S+))?\s*$"
)


def parse_progress(text: str) -> Progress | None:
    """The `Progress` of a progress line (with or without its `[rank R] `); None for other lines."""
    found = parse_rank_line(text)
    match = _PROGRESS.match(found[1] if found else text)
    if match is None:
        return None
    epoch, epochs, step, steps = (int(g) for g in match.groups()[:4])
    loss, rate, eta = match.groups()[4:]

    def number(value: str | None) -> float | None:
        try:
            return float(value) if value is not None else None
        except ValueError:  # `loss nan` parses; a word does not
            return None

    return Progress(epoch, epochs, step, steps, number(loss), number(rate), parse_duration(eta) if eta else None)
