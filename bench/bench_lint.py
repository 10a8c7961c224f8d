"""How long `ddpctl lint` takes on a 2,000-line training script, as a fresh process, against floors
measured in the same run.

- The floors: `python -c pass` (the interpreter's start) and `python -c "import ast; ast.parse(...)"`
  of the same file (reading it at all). Target: well under a second in absolute terms.
- The script, generated: a DDP training module of ~2,000 lines that follows the recipe (no finding),
  linted (1) as it is: TorchFix has nothing to look at and is never imported; (2) with one
  `torch.load` without `weights_only` added: TorchFix is imported and runs on the marked statement,
  first with an empty cache (`XDG_CACHE_HOME` fresh each run), then with the cache of the run before;
  (3) with `--no-torchfix`.
- A program of 5,000 lines (a script and four local modules it imports, linted as one program),
  in-process CPU time without TorchFix; target <= 1 s, and no torch import.
- The corpus and held-out figures (tools/lint_docs.py's `corpus_figures`): false errors, false
  warnings per 10 programs, precision and recall per rule, the same table docs/lint-rules.md shows.
- For scale, TorchFix itself on the whole file, in-process (`TorchChecker`, what its flake8 plugin
  does), the cost ddpctl's pre-filter avoids; fewer rounds, it is slow.

The commands run in turn, the order rotating from round to round; medians are compared, and the
CPU time (user + system) is given beside the wall clock, as it varies less on a busy machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 1.0

HEAD = '''"""A generated DDP training module (bench/bench_lint.py)."""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def setup() -> torch.device:
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        return torch.device("cuda", local_rank)
    dist.init_process_group("gloo")
    return torch.device("cpu")
'''

BLOCK = '''

class Block{i}(nn.Module):
    """Residual block {i}."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc2(F.gelu(self.fc1(self.norm(x))))
        return x + h


def loader_{i}(batch: int) -> tuple[DataLoader, DistributedSampler]:
    data = TensorDataset(torch.randn(256, 32), torch.randint(0, 2, (256,)))
    sampler = DistributedSampler(data, shuffle=True)
    return DataLoader(data, batch_size=batch, sampler=sampler, num_workers=2), sampler


def train_{i}(device: torch.device, epochs: int, path: str) -> float:
    model = DDP(Block{i}().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader, sampler = loader_{i}(batch=16)
    total = 0.0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x)[:, :2], y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        if dist.get_rank() == 0:
            torch.save({{"model": model.module.state_dict(), "epoch": epoch}}, path)
        dist.barrier()
    state = torch.load(path, map_location=device, weights_only=True)
    model.module.load_state_dict(state["model"])
    return total
'''

UNSAFE = '''

def resume(path: str) -> dict:
    return torch.load(path, map_location="cpu")
'''


def script(lines: int) -> str:
    parts, i = [HEAD], 0
    while sum(p.count("\n") for p in parts) < lines:
        parts.append(BLOCK.format(i=i))
        i += 1
    return "".join(parts)


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc


def program_timing(lines: int) -> tuple[float, int, bool]:
    """CPU seconds to lint a `lines`-line program (a script plus four local modules), its line count,
    and whether torch was imported."""
    sys.path.insert(0, str(REPO))
    from ddpctl.lint import lint_paths

    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        per = lines // 5
        names = [f"part{i}" for i in range(4)]
        for name in names:
            (cwd / f"{name}.py").write_text(script(per))
        entry = "".join(f"import {n}\n" for n in names) + script(per)
        (cwd / "train.py").write_text(entry)
        total = sum(len((cwd / f).read_text().splitlines()) for f in ["train.py", *(f"{n}.py" for n in names)])
        start = time.process_time()
        result = lint_paths([cwd / "train.py"], cwd, use_torchfix=False)
        spent = time.process_time() - start
        if len(result.files) != 5 or result.findings:
            raise SystemExit(f"unexpected lint of the program: {result.files} {[f.text() for f in result.findings]}")
    return spent, total, "torch" in sys.modules


def corpus_report() -> None:
    sys.path.insert(0, str(REPO))
    from tools.lint_docs import CORPUS, HELDOUT, _figures_table, corpus_figures

    for name, folder in (("Corpus", CORPUS), ("Held out", HELDOUT)):
        for line in _figures_table(name, corpus_figures(folder)):
            print(f"  {line}")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--torchfix-runs", type=int, default=3, help="rounds of TorchFix on the whole file")
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--program-lines", type=int, default=5000)
    opts = parser.parse_args()
    spent, total, torch_loaded = program_timing(opts.program_lines)
    verdict = "met" if spent <= TARGET_S and not torch_loaded else "NOT met"
    print(
        f"a {total}-line program (script + 4 local modules): {spent * 1000:.0f} ms CPU, torch imported: "
        f"{torch_loaded}  target <= 1 s: {verdict}"
    )
    corpus_report()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "cli")], check=True, stdout=subprocess.DEVNULL)
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("DDPCTL_")}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        clean = script(opts.lines)
        (cwd / "clean.py").write_text(clean)
        (cwd / "unsafe.py").write_text(clean + UNSAFE)
        size = len(clean.splitlines())
        warm = {**base_env, "XDG_CACHE_HOME": str(cwd / "warm-cache")}
        lint = [sys.executable, "-m", "ddpctl", "lint"]
        # sanity: the clean script has no finding, the other exactly TorchFix's TOR102
        for name, expect in (("clean.py", ""), ("unsafe.py", "TOR102")):
            _, _, proc = timed([*lint, name], cwd, warm)
            rules = [line.split()[1] for line in proc.stdout.splitlines()]
            if proc.returncode != 0 or rules != ([expect] if expect else []):
                raise SystemExit(f"unexpected lint of {name}: {proc.returncode} {proc.stdout} {proc.stderr}")
        cases: dict[str, tuple[list[str], str]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], "warm"),
            "ast.parse of the file": (
                [sys.executable, "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())", "clean.py"],
                "warm",
            ),
            "lint (TorchFix not needed)": ([*lint, "clean.py"], "warm"),
            "lint --no-torchfix": ([*lint, "--no-torchfix", "unsafe.py"], "warm"),
            "lint (TorchFix, empty cache)": ([*lint, "unsafe.py"], "cold"),
            "lint (TorchFix, cached)": ([*lint, "unsafe.py"], "warm"),
        }
        wall: dict[str, list[float]] = {k: [] for k in cases}
        cpu: dict[str, list[float]] = {k: [] for k in cases}
        names = list(cases)
        for r in range(opts.runs):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                cmd, cache = cases[name]
                env = warm if cache == "warm" else {**base_env, "XDG_CACHE_HOME": str(cwd / f"cold-{r}")}
                w, c, proc = timed(cmd, cwd, env)
                if proc.returncode != 0:
                    raise SystemExit(f"{name} failed: {proc.stderr[-500:]}")
                wall[name].append(w)
                cpu[name].append(c)
        whole = (
            "import sys, time\nt = time.perf_counter()\nfrom torchfix.torchfix import TorchChecker\n"
            "found = list(TorchChecker(None, open(sys.argv[1]).readlines()).run())\n"
            "print(len(found), time.perf_counter() - t)\n"
        )
        torchfix_wall = []
        for _ in range(opts.torchfix_runs):
            w, c, proc = timed([sys.executable, "-c", whole, "unsafe.py"], cwd, warm)
            if proc.returncode != 0:
                print(f"TorchFix on the whole file: not measured ({proc.stderr.strip()[-200:]})")
                break
            torchfix_wall.append(w)

    floor = statistics.median(wall["python -c pass"])
    parse = statistics.median(wall["ast.parse of the file"])
    print(f"ddpctl lint on a generated {size}-line script ({opts.runs} rounds, medians; CPU time beside)")
    for name in names:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        ratios = f"{w / floor:5.2f}x python -c pass, {w / parse:5.2f}x ast.parse"
        verdict = (
            ""
            if name in ("python -c pass", "ast.parse of the file")
            else ("  target < 1 s: met" if w < TARGET_S else "  target < 1 s: NOT met")
        )
        print(f"  {name:30s} {w * 1000:7.0f} ms wall {c * 1000:7.0f} ms CPU  = {ratios}{verdict}")
    if torchfix_wall:
        w = statistics.median(torchfix_wall)
        print(
            f"  {'TorchFix on the whole file':30s} {w * 1000:7.0f} ms wall ({len(torchfix_wall)} rounds) = "
            f"{w / statistics.median(wall['lint (TorchFix, empty cache)']):.1f}x lint with TorchFix, empty cache"
        )


if __name__ == "__main__":
    main()
