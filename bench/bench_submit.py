"""How long `ddpctl submit` takes against the real test cluster, against `kubectl apply --server-side`
of the very objects it renders, measured in the same run. Target: submit <= 1.1x kubectl.

Both are fresh processes doing what a user types: `ddpctl submit -n NS --target T ...` versus
`kubectl apply --server-side -f job.yaml` of `ddpctl render` output made beforehand (rendering is
not part of kubectl's time). Each run gets a namespace of its own, deleted afterwards, and the two
commands take turns so that a busy moment hits both alike. The medians are compared.

    .venv/bin/python bench/bench_submit.py [--runs 9] [--target job]   # starts the cluster if needed
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("DDPCTL_CLUSTER_DIR") or REPO / ".cluster")
KUBECTL = str(STATE / "bin" / "kubectl")


def run(cmd: list[str], env: dict[str, str], stdin: str | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, input=stdin, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed: {proc.stderr[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--target", default="job", choices=["job", "jobset", "pytorchjob", "trainjob"])
    opts = parser.parse_args()
    started = subprocess.run([sys.executable, "-m", "testcluster", "status"], cwd=REPO, capture_output=True).returncode
    if started:
        subprocess.run([sys.executable, "-m", "testcluster", "up"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    env = {**os.environ, "KUBECONFIG": str(STATE / "kubeconfig")}
    ddpctl = [str(Path(sys.executable).parent / "ddpctl")]
    job = ["--target", opts.target, "--nodes", "2", "--gpus", "4"]
    times: dict[str, list[float]] = {"ddpctl submit": [], "kubectl apply --server-side": []}
    try:
        for i in range(opts.runs):
            for tool in list(times) if i % 2 == 0 else list(times)[::-1]:
                ns = f"bench-{i}-{'d' if tool.startswith('ddpctl') else 'k'}"
                run([KUBECTL, "create", "namespace", ns], env)
                if tool.startswith("ddpctl"):
                    times[tool].append(run([*ddpctl, "submit", "-n", ns, *job], env))
                else:
                    yaml_text = subprocess.run([*ddpctl, "render", "-n", ns, *job], env=env, capture_output=True,
                                               text=True, check=True).stdout  # fmt: skip
                    apply = [KUBECTL, "apply", "--server-side", "--field-manager=ddpctl", "-f", "-"]
                    times[tool].append(run(apply, env, yaml_text))
                subprocess.run([KUBECTL, "delete", "namespace", ns, "--wait=false"], env=env, capture_output=True)
    finally:
        if started:
            subprocess.run([sys.executable, "-m", "testcluster", "down"], cwd=REPO, capture_output=True)
    base = statistics.median(times["kubectl apply --server-side"])
    for tool, samples in times.items():
        med = statistics.median(samples)
        print(f"{tool:30} median {med * 1000:7.1f} ms  ({len(samples)} runs)  ratio {med / base:.2f}")
    ratio = statistics.median(times["ddpctl submit"]) / base
    print(f"submit / kubectl apply: {ratio:.2f} (target <= 1.1): {'met' if ratio <= 1.1 else 'NOT met'}")


if __name__ == "__main__":
    main()
