"""What the checks take for a rank-0 guard and for a global rank, one small script per case.

The guard cases are read through DDP008 (torch.save on every rank), the rank cases through DDP001
(the device from the global rank): each script says whether its last statement is flagged. Then
`Index` alone, on one file: names, where a value comes from, scopes, sites and CUDA checks."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from ddpctl.lint import index, lint_paths

GUARD_PRELUDE = """\
import io
import os
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
state = {}
epoch = 3
"""

# (case, body, flagged): does `torch.save` in body run on every rank?
GUARDS = [
    ("rank == 0", "if rank == 0:\n    torch.save(state, 'a.pt')", False),
    ("0 == rank", "if 0 == rank:\n    torch.save(state, 'a.pt')", False),
    ("dist.get_rank() == 0", "if dist.get_rank() == 0:\n    torch.save(state, 'a.pt')", False),
    ("RANK from the environment", "if int(os.environ['RANK']) == 0:\n    torch.save(state, 'a.pt')", False),
    ("not rank", "if not rank:\n    torch.save(state, 'a.pt')", False),
    ("the local rank: one writer per node", "if local_rank == 0:\n    torch.save(state, 'a.pt')", False),
    ("rank % gpus == 0: local rank 0", "if rank % 4 == 0:\n    torch.save(state, 'a.pt')", False),
    ("a main-process flag", "is_main = rank == 0\nif is_main:\n    torch.save(state, 'a.pt')", False),
    (
        "an attribute flag",
        "class C: is_master = True\nctx = C()\nif ctx.is_master:\n    torch.save(state, 'a.pt')",
        False,
    ),
    ("a method flag", "if accelerator.is_main_process:\n    torch.save(state, 'a.pt')", False),
    ("Lightning's flag", "if trainer.is_global_zero:\n    torch.save(state, 'a.pt')", False),
    ("a single process", "if dist.get_world_size() == 1:\n    torch.save(state, 'a.pt')", False),
    ("and with a guard", "if rank == 0 and epoch % 5 == 0:\n    torch.save(state, 'a.pt')", False),
    ("or with a non-guard", "if rank == 0 or epoch == 0:\n    torch.save(state, 'a.pt')", True),
    ("an unrelated test", "if epoch % 5 == 0:\n    torch.save(state, 'a.pt')", True),
    ("the else of rank != 0", "if rank != 0:\n    pass\nelse:\n    torch.save(state, 'a.pt')", False),
    ("a conditional expression", "x = torch.save(state, 'a.pt') if rank == 0 else None", False),
    ("no guard at all", "torch.save(state, 'a.pt')", True),
    ("an early return", "def f():\n    if rank != 0:\n        return\n    torch.save(state, 'a.pt')\nf()", False),
    (
        "an early continue",
        "for e in range(3):\n    if rank > 0:\n        continue\n    torch.save(state, 'a.pt')",
        False,
    ),
    ("decorated rank_zero_only", "@rank_zero_only\ndef f():\n    torch.save(state, 'a.pt')\nf()", False),
    ("called only under a guard", "def f():\n    torch.save(state, 'a.pt')\nif rank == 0:\n    f()", False),
    ("called once without a guard", "def f():\n    torch.save(state, 'a.pt')\nif rank == 0:\n    f()\nf()", True),
    ("never called here: cannot tell", "def f():\n    torch.save(state, 'a.pt')", False),
    (
        "a method called under a guard",
        "class T:\n    def save(self):\n        torch.save(state, 'a.pt')\n    def fit(self):\n"
        "        if rank == 0:\n            self.save()\nT().fit()",
        False,
    ),
    (
        "a function named like torch.save",
        "def save():\n    torch.save(state, 'a.pt')\nif rank == 0:\n    save()",
        False,
    ),
    ("a file per rank", "torch.save(state, f'ckpt-{rank}.pt')", False),
    ("an in-memory buffer", "buf = io.BytesIO()\ntorch.save(state, buf)", False),
]


def _lint(tmp_path: Path, source: str, rule: str) -> list[int]:
    path = tmp_path / "train.py"
    path.write_text(source)
    return [f.line for f in lint_paths([path], tmp_path).findings if f.rule == rule]


@pytest.mark.parametrize("body,flagged", [g[1:] for g in GUARDS], ids=[g[0] for g in GUARDS])
def test_what_counts_as_a_rank_0_guard(tmp_path: Path, body: str, flagged: bool) -> None:
    assert bool(_lint(tmp_path, GUARD_PRELUDE + body + "\n", "DDP008")) is flagged


def test_a_save_is_judged_only_where_a_process_group_is_initialised(tmp_path: Path) -> None:
    assert _lint(tmp_path, "import torch\ntorch.save({}, 'a.pt')\n", "DDP008") == []
    assert _lint(
        tmp_path,
        "import torch\nimport torch.distributed as d\nd.init_process_group('gloo')\ntorch.save({}, 'a.pt')\n",
        "DDP008",
    ) == [4]


RANK_PRELUDE = """\
import os
import torch
import torch.distributed as dist
from torch import nn
model = nn.Linear(2, 2)
"""

# (case, lines before the sink, sink expression, flagged): is `model.to(SINK)` the global rank?
RANKS = [
    ("dist.get_rank()", "r = dist.get_rank()", "r", True),
    ("the full name", "r = torch.distributed.get_rank()", "r", True),
    ("an imported function", "from torch.distributed import get_rank\nr = get_rank()", "r", True),
    ("RANK", "r = int(os.environ['RANK'])", "r", True),
    ("RANK with a default", "r = int(os.environ.get('RANK', 0))", "r", True),
    ("getenv", "r = int(os.getenv('RANK'))", "r", True),
    ("SLURM_PROCID", "r = int(os.environ['SLURM_PROCID'])", "r", True),
    ("a tuple assignment", "r, w = dist.get_rank(), dist.get_world_size()", "r", True),
    ("through another name", "g = dist.get_rank()\nr = g", "r", True),
    ("a %d device string", "r = dist.get_rank()", "'cuda:%d' % r", True),
    ("LOCAL_RANK", "r = int(os.environ['LOCAL_RANK'])", "r", False),
    ("rank % device_count()", "r = dist.get_rank() % torch.cuda.device_count()", "r", False),
    ("other arithmetic", "r = dist.get_rank() - 4", "r", False),
    ("a function's parameter", "def f(r):\n    return model.to(r)\nr = 0", "r", False),
]


@pytest.mark.parametrize("before,sink,flagged", [r[1:] for r in RANKS], ids=[r[0] for r in RANKS])
def test_what_counts_as_the_global_rank(tmp_path: Path, before: str, sink: str, flagged: bool) -> None:
    source = RANK_PRELUDE + before + f"\nmodel = model.to({sink})\n"
    last = len(source.splitlines())
    assert (last in _lint(tmp_path, source, "DDP001")) is flagged


def test_a_device_built_from_the_global_rank_is_reported_where_it_is_built(tmp_path: Path) -> None:
    source = RANK_PRELUDE + textwrap.dedent(
        """\
        r = dist.get_rank()
        device = torch.device("cuda", r)
        model = model.to(device)
        batch = torch.zeros(2, device=device)
        """
    )
    assert _lint(tmp_path, source, "DDP001") == [7]


# ---------------------------------------------------------------------------- Index, one file alone


def _expr(idx: index.Index, text: str) -> ast.expr:
    """The last expression statement's value whose source is `text`."""
    found = [n.value for n in ast.walk(idx.tree) if isinstance(n, ast.Expr) and ast.unparse(n.value) == text]
    assert found, text
    return found[-1]


def test_names_read_as_their_imports() -> None:
    idx = index.Index(
        ast.parse(
            "import torch.distributed as dist\nimport os\nfrom torch.distributed import get_rank as gr\n"
            "from . import helpers\ndist.get_rank()\ngr()\nos.environ.get('RANK')\nf().g()\n"
        )
    )
    assert idx.imports == {
        "dist": "torch.distributed",
        "os": "os",
        "gr": "torch.distributed.get_rank",
        "helpers": ".helpers",
    }
    assert sorted(idx.callee(c) for c in idx.calls) == [
        "f",
        "g",  # the method of a call's result: only its last name
        "os.environ.get",
        "torch.distributed.get_rank",
        "torch.distributed.get_rank",
    ]
    assert idx.env_name(_expr(idx, "os.environ.get('RANK')")) == "RANK"


@pytest.mark.parametrize(
    "source,expr,kinds",
    [
        ("import os\nr = int(os.environ['RANK'])\nr", "r", {index.GLOBAL_RANK}),
        ("import os\nr = os.getenv('LOCAL_RANK')\nr", "r", {index.LOCAL_RANK}),
        ("import os\nenv = {k: os.environ[k] for k in ('RANK',)}\nenv['RANK']", "env['RANK']", {index.GLOBAL_RANK}),
        ("import os\nd = {'rank': int(os.environ['RANK'])}\nd['rank']", "d['rank']", {index.GLOBAL_RANK}),
        ("import torch.distributed as dist\nr = dist.get_rank()\nf'cuda:{r}'", "f'cuda:{r}'", {index.GLOBAL_DEVICE}),
        (
            "import torch.distributed as dist\n'cuda:%d' % dist.get_rank()",
            "'cuda:%d' % dist.get_rank()",
            {index.GLOBAL_DEVICE},
        ),
        (
            "import torch\nimport torch.distributed as d\ntorch.device('cuda', d.get_rank())",
            "torch.device('cuda', d.get_rank())",
            {index.GLOBAL_DEVICE},
        ),
        ("import torch\nr = torch.distributed.get_rank() % 8\nr", "r", set()),
        ("import torch\nw = torch.nn.parallel.DistributedDataParallel(m)\nw", "w", {index.WRAPPER}),
        ("w = DataParallel(m)\nu = w.module if hasattr(w, 'module') else w\nu", "u", set()),
        ("x = 1\nx = x + 1\nx", "x", set()),  # a cycle adds nothing
    ],
)
def test_where_a_value_comes_from_in_one_file(source: str, expr: str, kinds: set[str]) -> None:
    idx = index.Index(ast.parse(source))
    assert idx.kinds(_expr(idx, expr)) == kinds


def test_scopes_values_and_sites() -> None:
    idx = index.Index(
        ast.parse(
            "x = 1\n"
            "class T:\n    def __init__(self):\n        self.r = 2\n"
            "    def f(self):\n        self.r\n        self.save()\n"
            "    def save(self):\n        pass\n"
            "def g():\n    x = 3\n    for i in range(2):\n        x\n    return x\n"
            "g()\nx\n"
        )
    )
    (g,) = idx.functions["g"]
    (save,) = idx.functions["save"]
    reads = [n for n in ast.walk(idx.tree) if isinstance(n, ast.Name) and n.id == "x" and isinstance(n.ctx, ast.Load)]
    inner, outer = (next(n for n in reads if n.lineno == line) for line in (13, 16))
    assert idx.function_of(inner) is g and idx.function_of(outer) is None
    assert [ast.unparse(v) for v in idx.values_of("x", inner)[1]] == ["3"]
    assert [ast.unparse(v) for v in idx.values_of("x", outer)[1]] == ["1"]
    self_r = _expr(idx, "self.r")
    assert [ast.unparse(v) for v in idx.values_of("self.r", self_r)[1]] == ["2"]
    assert idx.in_loop_or_function(inner) and not idx.in_loop_or_function(outer)
    assert [ast.unparse(s) for s in idx.sites_of(g)] == ["g()"]
    assert [ast.unparse(s) for s in idx.sites_of(save)] == ["self.save()"]
    assert idx.statement_of(inner) is idx.parent[inner]
    assert g.returns is None and [ast.unparse(r) for r in idx.returns[g]] == ["return x"]


@pytest.mark.parametrize(
    "source,checked",
    [
        ("if torch.cuda.is_available():\n    m.cuda()", True),
        ("if args.device == 'gpu':\n    m.cuda()", True),
        ("m = m.cuda() if use_cuda else m", True),
        ("if epoch > 3:\n    m.cuda()", False),
        ("if m.cuda():\n    pass", False),  # the test itself is no branch
    ],
)
def test_what_is_under_a_cuda_check(source: str, checked: bool) -> None:
    idx = index.Index(ast.parse(source))
    (call,) = [c for c in idx.calls if index.last_name(c.func) == "cuda"]
    assert idx.under_cuda_check(call) is checked


def test_the_small_helpers() -> None:
    call = ast.parse("f(a, b, *rest, key=k, **more)", mode="eval").body
    assert isinstance(call, ast.Call)
    assert index.dotted(ast.parse("self.model.net", mode="eval").body) == "self.model.net"
    assert index.dotted(ast.parse("f().x", mode="eval").body) is None
    assert index.last_name(ast.parse("ctx.is_main()", mode="eval").body) == "is_main"
    assert index.const_str(ast.Constant("s")) == "s" and index.const_str(ast.Constant(1)) is None
    assert index.is_const(ast.Constant(True), True) and not index.is_const(ast.Constant(1), True)
    assert ast.unparse(index.arg(call, "key") or ast.Pass()) == "k"
    assert ast.unparse(index.arg(call, "second", 1) or ast.Pass()) == "b"
    assert index.arg(call, "third", 2) is None  # at or after *rest: not known
    assert index.has_star_kwargs(call)
