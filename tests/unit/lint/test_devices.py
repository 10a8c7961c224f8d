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


def _index(source: str) -> Index:
    return Index(ast.parse(source))


@pytest.mark.parametrize(
    "call,sinks",
    [
        ("torch.cuda.set_device(d)", [("d", "torch.cuda.set_device")]),
        ("torch.accelerator.set_device_index(d)", [("d", "torch.accelerator.set_device_index")]),
        ("m.to(d)", [("d", ".to()")]),
        ("m.cuda(d)", [("d", ".cuda()")]),
        ("m.cuda()", []),
        (
            "DDP(m, device_ids=[d, e], output_device=o)",
            [("d", "device_ids"), ("e", "device_ids"), ("o", "output_device=")],
        ),
        ("torch.zeros(2, device=d)", [("d", "device=")]),
        ("torch.load(p, map_location=d)", [("d", "map_location=")]),
        ("obj.set_device(d)", []),  # some other object's set_device
    ],
)
def test_the_arguments_that_name_a_device(call: str, sinks: list[tuple[str, str]]) -> None:
    idx = _index("import torch\n" + call + "\n")
    node = idx.tree.body[1].value  # type: ignore[attr-defined]
    assert [(ast.unparse(e), where) for e, where in devices.device_sinks(idx, node)] == sinks


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
