"""devices.py: DDP001's and DDP014's severity follow the job's layout; DDP002 and DDP010 are quiet
where the script is right; which arguments name a device, and which backend a call names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ddpctl.lint import Severity, api, devices
from ddpctl.lint.index import Index
from ddpctl.lint.program import Layout

GLOBAL = (
    "import torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
    "m = torch.nn.Linear(2, 2).to(dist.get_rank())\n"
)
ONE_DEVICE = (
    "import torch, torch.distributed as dist\ndist.init_process_group('nccl')\n"
    "m = torch.nn.Linear(2, 2)\nm.cuda()\nm = torch.nn.parallel.DistributedDataParallel(m)\n"
)

NCCL = (
    "import os, torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\nm = torch.nn.Linear(2, 2)\n"
)

# (case, script, layout, rule, severity or None for no finding)
CASES = [
    ("global rank, standalone", GLOBAL, Layout(), "DDP001", Severity.error),
    ("global rank, several nodes", GLOBAL, Layout(2, 4), "DDP001", Severity.error),
    ("global rank, one node", GLOBAL, Layout(1, 4), "DDP001", Severity.info),
    ("one device, standalone", ONE_DEVICE, Layout(), "DDP014", Severity.error),
    ("one device, one process per node", ONE_DEVICE, Layout(4, 1), "DDP014", Severity.info),
    (
        "one device, the local rank only printed",
        "import os\nprint(os.environ['LOCAL_RANK'])\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        Severity.error,
    ),
    (
        "one device, the local rank read into a name no device uses",
        "import os\nLR = int(os.environ['LOCAL_RANK'])\nprint(f'local rank {LR}')\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        Severity.error,
    ),
    (
        "one device, the local rank only logged by a helper",
        "import os, logging\ndef log():\n    logging.info('on %s', os.environ.get('LOCAL_RANK'))\nlog()\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        Severity.error,
    ),
    (
        "set_device from the local rank",
        "import os, torch\ntorch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        None,
    ),
    (
        "set_device from a local rank in args",
        "import os, torch\nclass A: pass\nargs = A()\nargs.gpu = int(os.environ['LOCAL_RANK'])\n"
        "torch.cuda.set_device(args.gpu)\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        None,
    ),
    (
        "set_device from a device built by f-string",
        "import os, torch\nlr = int(os.environ['LOCAL_RANK'])\ndev = torch.device(f'cuda:{lr}')\n"
        "torch.cuda.set_device(dev)\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        None,
    ),
    (
        "set_device from a device built by %",
        "import os, torch\ntorch.cuda.set_device('cuda:%d' % int(os.environ['LOCAL_RANK']))\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        None,
    ),
    (
        "set_device from a device built by format",
        "import os, torch\ntorch.cuda.set_device('cuda:{}'.format(os.environ['LOCAL_RANK']))\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        None,
    ),
    (
        "set_device from rank % gpus",
        "import torch, torch.distributed as dist\ntorch.cuda.set_device(dist.get_rank() % 8)\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        None,
    ),
    (
        "set_device to a constant string built by %",
        "import torch\ntorch.cuda.set_device('cuda:%d' % 0)\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        Severity.error,
    ),
    (
        "CUDA_VISIBLE_DEVICES from the local rank",
        "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = os.environ['LOCAL_RANK']\n" + ONE_DEVICE,
        Layout(),
        "DDP014",
        None,
    ),
    (
        "a device chosen from the local rank in a helper module's function",
        "import os, torch\ndef setup(local_rank):\n    torch.cuda.set_device(local_rank)\n"
        "setup(int(os.environ['LOCAL_RANK']))\n" + ONE_DEVICE,
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
        "nccl and a device string built by %",
        NCCL + "m.to('cuda:%d' % dist.get_rank())\n",
        Layout(),
        "DDP010",
        None,
    ),
    (
        "nccl and a device string in a name",
        NCCL + "device = 'cuda'\nm.to(device)\n",
        Layout(),
        "DDP010",
        None,
    ),
    (
        "nccl and torch.device built by f-string",
        NCCL + "lr = int(os.environ['LOCAL_RANK'])\ndevice = torch.device(f'cuda:{lr}')\nm = m.to(device)\n",
        Layout(),
        "DDP010",
        None,
    ),
    (
        "nccl and torch.device('cuda', i)",
        NCCL + "lr = int(os.environ['LOCAL_RANK'])\nx = torch.zeros(2, device=torch.device('cuda', lr))\n",
        Layout(),
        "DDP010",
        None,
    ),
    (
        "nccl and a device built by format, kept by self",
        NCCL + "class T:\n    def __init__(self, r):\n        self.dev = 'cuda:{}'.format(r)\n"
        "    def fit(self, m):\n        return m.to(self.dev)\n",
        Layout(),
        "DDP010",
        None,
    ),
    (
        "nccl and a device string built by +",
        NCCL + "m.to('cuda:' + os.environ['LOCAL_RANK'])\n",
        Layout(),
        "DDP010",
        None,
    ),
    (
        "nccl and a device chosen by CUDA's presence",
        NCCL + "device = 'cuda' if torch.cuda.is_available() else 'cpu'\nm.to(device)\n",
        Layout(),
        "DDP010",
        Severity.warning,
    ),
    (
        "nccl and a CUDA device assigned only under a CUDA check",
        NCCL + "device = 'cpu'\nif torch.cuda.is_available():\n    device = 'cuda'\nm.to(device)\n",
        Layout(),
        "DDP010",
        Severity.warning,
    ),
    (
        "nccl and a device from a command-line argument",
        NCCL + "import argparse\np = argparse.ArgumentParser()\np.add_argument('--device', default='cuda')\n"
        "args = p.parse_args()\nm.to(torch.device(args.device))\n",
        Layout(),
        "DDP010",
        Severity.warning,
    ),
    (
        "nccl and a CPU device string",
        NCCL + "m.to('cpu')\nx = torch.zeros(2, device='cpu')\n",
        Layout(),
        "DDP010",
        Severity.warning,
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


def _index(source: str) -> Index:
    return Index(ast.parse(source))


@pytest.mark.parametrize(
    "source,backend,nccl",
    [
        ("dist.init_process_group('nccl')", "'nccl'", True),
        ("dist.init_process_group(backend=dist.Backend.NCCL)", "dist.Backend.NCCL", True),
        ("dist.init_process_group('gloo')", "'gloo'", False),
        ("dist.init_process_group(*a)", None, False),
        ("dist.init_process_group()", None, False),
    ],
)
def test_the_backend_an_init_call_names(source: str, backend: str | None, nccl: bool) -> None:
    found = devices.arg_backend(_index(source).calls[0])
    assert (ast.unparse(found) if found is not None else None) == backend
    assert (found is not None and devices._nccl(found)) is nccl
