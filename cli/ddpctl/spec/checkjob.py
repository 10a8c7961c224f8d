"""`ddpctl check`'s job: the preflight checks as a job of their own, derived from the job's spec.

It keeps what decides where and how the job runs (the layout, the engine, the image, the placement:
node selectors, tolerations, affinity, avoided nodes, Kueue's queue and topology, the fabric and its
devices, the resources, the env), so the checks meet the nodes, devices and network the training
would; it drops what only training needs (the trainer's arguments, volumes, checkpoints, the
workspace of the user's code) and runs
the ddpctl trainer with `--preflight-only`: the checks after the rendezvous, then the exit. So it
runs under the same launcher, exit codes and failure rules as a training job; a user's own module,
script or command is replaced (the image must hold ddpctl's trainer, as `ddpctl build` makes it).
"""

from __future__ import annotations

import dataclasses

from ddpctl.spec.model import JobSpec
from ddpctl.spec.parts import Workspace
from ddpctl_trainer import protocol

CHECK_SUFFIX = "-check"


def check_job(spec: JobSpec) -> JobSpec:
    """The check's spec: named `<name>-check`, `fail` unless the spec's preflight says warn, timed as
    a check of its own is (windows of PREFLIGHT_CHECK_WINDOW_S, the best of PREFLIGHT_CHECK_REPEATS:
    it pays for them once, not at every start), never restarted (a check reports, it does not retry:
    recovery gang, so no coordinator pod is made for a pod that will not be replaced), with no
    straggler watch (it trains nothing)."""
    mode = spec.preflight.mode if spec.preflight.on else "fail"
    args = (
        protocol.PREFLIGHT_ONLY_FLAG,
        "--preflight-window",
        str(protocol.PREFLIGHT_CHECK_WINDOW_S),
        "--preflight-repeats",
        str(protocol.PREFLIGHT_CHECK_REPEATS),
    )
    return spec.replace(
        name=spec.name + CHECK_SUFFIX,
        module=protocol.TRAINER_MODULE,
        script=None,
        command=(),
        args=args,
        volumes={},
        checkpoints=None,
        workspace=Workspace(),
        backoff_limit=0,
        recovery="gang",
        preflight=dataclasses.replace(spec.preflight, mode=mode),
        stragglers=dataclasses.replace(spec.stragglers, mode="off"),  # nothing is trained to watch
    )
