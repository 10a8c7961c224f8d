"""checks.py: the rules quiet where a correct script does what they look for (a Subset loader, a
checkpoint loaded back into the wrapper, a positional download), and loud where it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.lint import api, checks

DIST = (
    "import os, torch, torchvision\nimport torch.distributed as dist\n"
    "from torch.utils.data import DataLoader, Subset\ndist.init_process_group('gloo')\n"
)

# (case, script after DIST, rule, flagged)
CASES = [
    (
        "a loader over a Subset",
        "ds = torchvision.datasets.FakeData()\nsub = Subset(ds, range(3))\nDataLoader(sub)\n",
        "DDP005",
        False,
    ),
    ("a loader over the whole dataset", "ds = torchvision.datasets.FakeData()\nDataLoader(ds)\n", "DDP005", True),
    (
        "a wrapper's state_dict loaded back",
        "m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))\n"
        "if dist.get_rank() == 0:\n    torch.save(m.state_dict(), 'a.pt')\n"
        "m.load_state_dict(torch.load('a.pt', weights_only=True))\n",
        "DDP009",
        False,
    ),
    (
        "a wrapper's state_dict for a plain model",
        "m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))\n"
        "if dist.get_rank() == 0:\n    torch.save(m.state_dict(), 'a.pt')\n",
        "DDP009",
        True,
    ),
    ("download=True by position", "torchvision.datasets.MNIST('d', True, None, None, True)\n", "DDP011", True),
    ("download=False by position", "torchvision.datasets.MNIST('d', True, None, None, False)\n", "DDP011", False),
    ("train=True is no download", "torchvision.datasets.MNIST('d', True)\n", "DDP011", False),
    (
        "a save under a flag torchrun leaves False",
        "import argparse\np = argparse.ArgumentParser()\n"
        "p.add_argument('--mp', action='store_true')\na = p.parse_args()\n"
        "if not a.mp or dist.get_rank() == 0:\n    torch.save({}, 'a.pt')\n",
        "DDP008",
        True,
    ),
]


@pytest.mark.parametrize("body,rule,flagged", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_rule_where_it_is_right_and_wrong(tmp_path: Path, body: str, rule: str, flagged: bool) -> None:
    path = tmp_path / "train.py"
    path.write_text(DIST + body)
    result = api.lint_sources(api.read([path], tmp_path), [path], False, cwd=tmp_path).result
    assert any(f.rule == rule for f in result.findings) is flagged, [f.text() for f in result.findings]


def test_every_rule_but_the_ignore_rule_has_a_checker() -> None:
    names = {c.__name__ for c in checks.CHECKS}
    assert len(names) == len(checks.CHECKS) == 10
