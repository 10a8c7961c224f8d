"""From a one-line edit to rank 0's first step on the real node: `submit --workspace .` against
`ddpctl build` + `python -m testcluster load` (what `make cluster-load` runs) + `submit` of the same
edit, with the images this machine builds.

Three paths, each from the edit of helper.py to the moment `submit --follow` streams rank 0's
"first step" line (the project's train.py prints it after its first forward and backward):

- ship:    `ddpctl submit --workspace . --image TRAINER` (the code travels in a Secret);
- rebuild: `ddpctl build` in the project (its code on the trainer image) + load onto the node +
           `ddpctl submit --image NEW`;
- floor:   `ddpctl submit --image PROJECT` of an image already on the node, no edit: what both
           share (the pods start, torch is imported, rendezvous).

Printed: the medians, ship / rebuild (target <= 0.2) and floor / ship. Needs the test cluster
with its real node (`make cluster`, as root) and Docker with the CPU base image.

    .venv/bin/python bench/bench_workspace_edit.py [--reps 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("DDPCTL_CLUSTER_DIR") or REPO / ".cluster")
KUBECTL = [str(STATE / "bin" / "kubectl"), "--kubeconfig", str(STATE / "kubeconfig")]
ENV = {**os.environ, "KUBECONFIG": str(STATE / "kubeconfig")}  # ddpctl talks to the test cluster
BASE = os.environ.get("DDPCTL_TEST_BASE_IMAGE", "ddpctl-base:cpu")
ON_NODE = ["--node-selector", "node.ddpctl.io/real=true", "--toleration", "node.ddpctl.io/real=true:NoSchedule"]
TRAIN = """\
import torch
import torch.distributed as dist

import helper

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
model(torch.ones(4, 8)).sum().backward()
if dist.get_rank() == 0:
    print(f"first step ({helper.VERSION})", flush=True)
dist.destroy_process_group()
"""


def sh(*argv: str, cwd: Path | None = None) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd, env=ENV)
    if r.returncode:
        raise SystemExit(f"{' '.join(argv[:5])}: {r.stderr.strip()[-2000:]}")
    return r.stdout


def ddpctl(*args: str, cwd: Path = REPO) -> str:
    return sh(sys.executable, "-m", "ddpctl", *args, cwd=cwd)


def first_step(args: list[str], cwd: Path, started: float) -> float:
    """Run `ddpctl submit ... --follow`; seconds from `started` to rank 0's "first step" line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpctl", "submit", *args, "--follow"],
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    seen = None
    for line in proc.stdout:
        if "first step" in line and seen is None:
            seen = time.monotonic() - started
    err = proc.stderr.read()
    if proc.wait() != 0 or seen is None:
        raise SystemExit(f"submit {' '.join(args[:6])} did not reach its first step: {err[-2000:]}")
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2)
    opts = parser.parse_args()
    sh(sys.executable, "-m", "testcluster", "status", cwd=REPO)
    trainer = ddpctl("build", "--quiet", "--no-latest", "--base-image", BASE, "--repo", "ddpctl-trainer-test").strip()
    sh(sys.executable, "-m", "testcluster", "load", trainer, cwd=REPO)
    with tempfile.TemporaryDirectory(prefix="ddpctl-bench-") as tmp:
        project = Path(tmp) / "bench-project"
        project.mkdir()
        (project / "train.py").write_text(TRAIN)
        times: dict[str, list[float]] = {"ship": [], "rebuild": [], "floor": []}
        built = trainer  # replaced by each rep's rebuild before its floor runs
        for rep in range(opts.reps):
            for path in ("ship", "rebuild", "floor"):
                ns = f"bench-{uuid.uuid4().hex[:6]}"
                sh(*KUBECTL, "create", "namespace", ns)
                job = ["-n", ns, "--name", "edit", "--nodes", "2", "--procs", "1", "--gpus", "0", *ON_NODE,
                       "--script", "train.py", "--no-lint"]  # fmt: skip
                try:
                    if path == "floor":  # the project image of this rep's rebuild, already on the node
                        times[path].append(first_step([*job, "--image", built], project, time.monotonic()))
                    elif path == "ship":
                        (project / "helper.py").write_text(f"VERSION = '{path}-{rep}-{time.time()}'\n")
                        started = time.monotonic()
                        times[path].append(first_step([*job, "--image", trainer, "--workspace", "."], project, started))
                    else:
                        (project / "helper.py").write_text(f"VERSION = '{path}-{rep}-{time.time()}'\n")
                        started = time.monotonic()
                        built = ddpctl("build", "--quiet", "--no-latest", "--base-image", trainer, cwd=project).strip()
                        sh(sys.executable, "-m", "testcluster", "load", built, cwd=REPO)
                        times[path].append(first_step([*job, "--image", built], project, started))
                finally:
                    sh(*KUBECTL, "delete", "namespace", ns, "--wait=false")
                print(f"rep {rep} {path}: {times[path][-1]:.1f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items() if v}
    print(f"edit -> first step, medians of {opts.reps}: ship {med['ship']:.1f} s, rebuild {med['rebuild']:.1f} s, "
          f"floor {med['floor']:.1f} s")  # fmt: skip
    print(f"ship / rebuild = {med['ship'] / med['rebuild']:.3f} (target <= 0.2)")
    print(f"floor / ship = {med['floor'] / med['ship']:.3f} (the share of ship that pods, torch and rendezvous take)")


if __name__ == "__main__":
    main()
