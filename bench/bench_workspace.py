"""Packing a workspace: ddpctl's `select` + `pack` against `git ls-files | tar czf`, in the same run.

A git repository of 10,000 small files (Python modules of 100 B to 2 KiB, in 50 packages of 7
folders each, a .gitignore, some ignored files that neither side packs) is made in a temporary
folder. Both sides are timed alternately, `--repeats` times each, and the best of each is compared
(the least disturbed by the machine's other work):

* baseline: `git ls-files -z | tar --null -T - -czf OUT` (the files git tracks; GNU tar and gzip
  -6, gzip in its own process);
* ddpctl: `select(root)` (walking the folder, .gitignore through pathspec, the secrets check) then
  `pack(selection, OUT)` (the deterministic tar, its sha256, gzip -6), in this process.

Both archives are checked to hold the same files. Wall time and CPU time (user + system: for the
baseline its three processes', for ddpctl its threads') are printed; on a machine that other work
shares, the CPU ratio is the steadier figure. Target: ratio <= 1.5.

    .venv/bin/python bench/bench_workspace.py [--files 10000] [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from ddpctl.workspace.pack import pack
from ddpctl.workspace.select import select

TARGET = 1.5


def make_repo(root: Path, files: int, seed: int = 1) -> None:
    """A git repository of `files` small committed files, plus ignored ones (a cache folder and
    compiled files) that neither side should pack."""
    rng = random.Random(seed)  # noqa: S311 - file sizes, not secrets
    root.mkdir(parents=True)
    for i in range(files):
        folder = root / f"pkg{i % 50}" / f"sub{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{i}.py").write_text(f"VALUE_{i} = {i}\n" * rng.randint(6, 120))
    (root / ".gitignore").write_text("__pycache__/\n*.pyc\n.venv/\n")
    cache = root / "pkg0" / "__pycache__"
    cache.mkdir()
    for i in range(200):
        (cache / f"mod{i}.cpython-311.pyc").write_bytes(os.urandom(512))
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@x"}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "bench"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def baseline(root: Path, out: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of `git ls-files | tar czf` (git, tar and gzip together)."""
    cpu, start = _children_cpu(), time.perf_counter()
    command = "git ls-files -z | tar --null -T - -czf " + str(out)
    subprocess.run(command, shell=True, cwd=root, check=True)  # noqa: S602 - the baseline is this pipeline
    return time.perf_counter() - start, _children_cpu() - cpu


def ours(root: Path, out: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of select + pack in this process (its compressing thread included)."""
    cpu, start = time.process_time(), time.perf_counter()
    with open(out, "wb") as f:
        pack(select(root), f)
    return time.perf_counter() - start, time.process_time() - cpu


def members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {m.name for m in tar.getmembers() if m.isfile()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if shutil.which("git") is None or shutil.which("tar") is None:
        print("bench_workspace: needs git and tar on PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-workspace-") as tmp:
        root = Path(tmp) / "repo"
        make_repo(root, args.files)
        base_out, our_out = Path(tmp) / "base.tar.gz", Path(tmp) / "ours.tar.gz"
        ours(root, our_out), baseline(root, base_out)  # warm the page cache and imports
        base_runs, our_runs = [], []
        for _ in range(args.repeats):
            base_runs.append(baseline(root, base_out))
            our_runs.append(ours(root, our_out))
        same = members(base_out) == members(our_out)
        size = our_out.stat().st_size
    base_wall, our_wall = min(w for w, _ in base_runs), min(w for w, _ in our_runs)
    base_cpu, our_cpu = min(c for _, c in base_runs), min(c for _, c in our_runs)
    ratio, cpu_ratio = our_wall / base_wall, our_cpu / base_cpu
    result = {
        "files": args.files,
        "repeats": args.repeats,
        "baseline_s": round(base_wall, 4),
        "ddpctl_s": round(our_wall, 4),
        "ratio": round(ratio, 3),
        "baseline_cpu_s": round(base_cpu, 4),
        "ddpctl_cpu_s": round(our_cpu, 4),
        "cpu_ratio": round(cpu_ratio, 3),
        "target": TARGET,
        "same_files": same,
        "compressed_bytes": size,
        "load_average": os.getloadavg()[0],
    }
    print(
        f"workspace pack, {args.files} files: git ls-files | tar czf {base_wall * 1000:.0f} ms "
        f"({base_cpu * 1000:.0f} ms CPU), ddpctl select + pack {our_wall * 1000:.0f} ms ({our_cpu * 1000:.0f} ms "
        f"CPU): ratio {ratio:.2f}, CPU {cpu_ratio:.2f} (target <= {TARGET}); same files: {same}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
