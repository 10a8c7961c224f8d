"""devices.py: DDP001's and DDP014's severity follow the job's layout; DDP002 and DDP010 are quiet
where the script is right."""

from __future__ import annotations

from pathlib import Path

import pytest
from ddpctl.lint import Severity, api
from ddpctl.lint.program import Layout

GLOBAL = (
    "import torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
    "m = torch.nn.Linear(2, 2).to(dist.get_rank())\n"
)
ONE_DEVICE = (
    "import torch, torch.distributed as dist\ndist.init_process_group('nccl')\n"
    "m = torch.nn.Linear(2, 2)\nm.cuda()\nm = torch.nn.parallel.DistributedDataParallel(m)\n"
)

# (case, script, layout, rule, severity or None for no finding)
CASES = [
    ("global rank, standalone", GLOBAL, Layout(), "DDP001", Severity.error),
    ("global rank, several nodes", GLOBAL, Layout(2, 4), "DDP001", Severity.error),
    ("global rank, one node", GLOBAL, Layout(1, 4), "DDP001", Severity.info),
    ("one device, standalone", ONE_DEVICE, Layout(), "DDP014", Severity.error),
    ("one device, one process per node", ONE_DEVICE, Layout(4, 1), "DDP014", Severity.info),
    (
        "one device, the local rank read",
        "import os\nLR = os.environ['LOCAL_RANK']\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        None,
    ),
    (
        "--local_rank never read",
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--local_rank', type=int)\n",
        Layout(),
        "DDP002",
        None,
    ),
    (
        "--local_rank read",
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--local_rank', type=int)\n"
        "print(p.parse_args().local_rank)\n",
        Layout(),
        "DDP002",
        Severity.error,
    ),
    (
        "nccl through a config variable",
        "import torch.distributed as dist\nbackend = 'nccl'\ndist.init_process_group(backend=backend)\n",
        Layout(),
        "DDP010",
        None,
    ),
    (
        "nccl and set_device always",
        "import torch, torch.distributed as dist\ntorch.cuda.set_device(0)\ndist.init_process_group('nccl')\n",
        Layout(),
        "DDP010",
        None,
    ),
    (
        "nccl in a CPU-capable script",
        "import torch.distributed as dist\ndist.init_process_group('nccl')\n",
        Layout(),
        "DDP010",
        Severity.warning,
    ),
]


@pytest.mark.parametrize("script,layout,rule,severity", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_device_rule(tmp_path: Path, script: str, layout: Layout, rule: str, severity: Severity | None) -> None:
    path = tmp_path / "train.py"
    path.write_text(script)
    result = api.lint_sources(api.read([path], tmp_path), [path], False, cwd=tmp_path, layout=layout).result
    got = [f.severity for f in result.findings if f.rule == rule]
    assert got == ([severity] if severity else [])
