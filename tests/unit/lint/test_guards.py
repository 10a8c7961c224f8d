"""guards.py: a test's verdict under torchrun (WORLD_SIZE > 1, argparse defaults), one expression
per case, and where a statement counts as guarded."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ddpctl.lint import guards, program

PRELUDE = """\
import argparse, os
import torch.distributed as dist
p = argparse.ArgumentParser()
p.add_argument("--multiprocessing-distributed", action="store_true")
p.add_argument("--gpu", default=None, type=int)
p.add_argument("--local_rank", default=-1, type=int)
args = p.parse_args()
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
RANK = int(os.getenv("RANK", -1))
LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))
legacy_rank = args.local_rank
is_master = rank == 0
def is_main_process():
    return dist.get_rank() == 0
"""

# (test, holds only on rank 0, its negation does)
CASES = [
    ("rank == 0", True, False),
    ("rank != 0", False, True),
    ("local_rank == 0", True, False),
    ("rank % 8 == 0", True, False),
    ("is_master", True, False),
    ("is_main_process()", True, False),
    ("rank == 0 and epoch > 3", True, False),
    ("rank == 0 or epoch > 3", False, False),
    ("not args.multiprocessing_distributed", False, True),
    ("not args.multiprocessing_distributed or (args.multiprocessing_distributed and rank % 8 == 0)", False, True),
    ("not distributed or rank == 0", True, False),
    ("dist.get_world_size() == 1", True, False),
    ("int(os.environ['RANK']) != -1", False, True),
    ("'WORLD_SIZE' in os.environ", False, True),
    ("args.gpu is not None", True, False),
    ("epoch > 3", False, False),
    ("RANK in {-1, 0}", True, False),
    ("LOCAL_RANK in [-1, 0]", True, False),
    ("local_rank in (-1, 0)", True, False),
    ("RANK not in {-1, 0}", False, True),
    ("RANK in {-1}", True, False),
    ("rank in [0, 1]", False, False),
    ("args.local_rank in [-1, 0]", False, True),
    ("args.local_rank not in [-1, 0]", True, False),
    ("legacy_rank in [-1, 0]", False, True),
]


@pytest.mark.parametrize("test,only,unless", CASES, ids=[c[0] for c in CASES])
def test_a_verdict_under_torchrun(tmp_path: Path, test: str, only: bool, unless: bool) -> None:
    (tmp_path / "train.py").write_text(PRELUDE + f"verdict = ({test})\n")
    (prog,) = program.load([tmp_path / "train.py"], tmp_path)
    module = prog.modules[0]
    last = module.src.tree.body[-1]
    assert isinstance(last, ast.Assign)
    assert guards.truth(module.idx, last.value) == guards.Truth(only, unless)


def test_negation_swaps_the_two_facts() -> None:
    assert guards.RANK0.negate() == guards.OFF0 and guards.TRUE.negate() == guards.FALSE
