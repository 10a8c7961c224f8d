"""facts.py: the facts `Project.of` gathers over a whole program (a process group, set_epoch, the
local rank read, CUDA used with no check for it, a checkpoint loaded back into a wrapper), and how
a finding is made and worded."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ddpctl.lint import facts, program
from ddpctl.lint.index import GLOBAL_RANK, LOCAL_RANK, Index, last_name
from ddpctl.lint.program import UNKNOWN_LAYOUT, Layout
from ddpctl.lint.rules import BY_ID, Severity


def _project(root: Path, files: dict[str, str], layout: Layout = UNKNOWN_LAYOUT) -> facts.Project:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (prog,) = program.load([root / "train.py"], root)
    return facts.Project.of(prog, layout)


IMPORTS = "import os, torch\nimport torch.distributed as dist\nm = torch.nn.Linear(2, 2)\n"

# (case, script after IMPORTS, does the program use CUDA with no check for it)
CUDA_ALWAYS = [
    ("nothing on CUDA", "dist.init_process_group('nccl')\n", False),
    ("model.cuda()", "m.cuda()\n", True),
    ("torch.cuda.set_device", "torch.cuda.set_device(0)\n", True),
    ("torch.accelerator.set_device_index", "torch.accelerator.set_device_index(0)\n", True),
    ("a plain set_device of something else", "class X:\n    def set_device(self, d): pass\nX().set_device(0)\n", False),
    (".to('cuda')", "m.to('cuda')\n", True),
    (".to('cpu')", "m.to('cpu')\n", False),
    (".to(f'cuda:{n}')", "n = 0\nm.to(f'cuda:{n}')\n", True),
    (".to(rank): an int is a GPU", "rank = dist.get_rank()\nm.to(rank)\n", True),
    ("'cuda:%d' % i into .to", "m.to('cuda:%d' % 1)\n", True),
    ("'cuda:{}'.format(i) into device=", "torch.zeros(2, device='cuda:{}'.format(1))\n", True),
    ("torch.device('cuda') through a name", "d = torch.device('cuda')\nm.to(d)\n", True),
    ("a CUDA string into map_location", "torch.load('a.pt', map_location='cuda:0')\n", True),
    ("torch.device('cuda') never used", "d = torch.device('cuda')\n", False),
    ("torch.device('cpu') into .to", "m.to(torch.device('cpu'))\n", False),
    ("a name also assigned the CPU", "d = 'cuda'\nif os.environ.get('CPU'):\n    d = 'cpu'\nm.to(d)\n", False),
    ("model.cuda() under a CUDA check", "if torch.cuda.is_available():\n    m.cuda()\n", False),
    ("model.cuda() under a backend check", "b = 'nccl'\nif b == 'nccl':\n    m.cuda()\n", False),
    ("x.cuda() if available else x", "m = m.cuda() if torch.cuda.is_available() else m\n", False),
    (
        "DDP given device_ids",
        "d = int(os.environ['LOCAL_RANK'])\nm = torch.nn.parallel.DistributedDataParallel(m, device_ids=[d])\n",
        True,
    ),
    ("DDP given device_ids=None", "m = torch.nn.parallel.DistributedDataParallel(m, device_ids=None)\n", False),
    (
        "DDP given `[dev] if on_cuda else None`, as --fix writes",
        "on_cuda = torch.cuda.is_available()\ndev = int(os.environ['LOCAL_RANK'])\n"
        "m = torch.nn.parallel.DistributedDataParallel(m, device_ids=[dev] if on_cuda else None)\n",
        False,
    ),
]


@pytest.mark.parametrize("body,always", [c[1:] for c in CUDA_ALWAYS], ids=[c[0] for c in CUDA_ALWAYS])
def test_cuda_used_with_no_check_for_it(tmp_path: Path, body: str, always: bool) -> None:
    assert _project(tmp_path, {"train.py": IMPORTS + body}).cuda_always is always


def test_the_facts_of_a_program_come_from_every_file_of_it(tmp_path: Path) -> None:
    project = _project(
        tmp_path,
        {
            "train.py": "import helpers\nhelpers.setup()\nfor e in range(3):\n    helpers.epoch(e)\n",
            "helpers.py": (
                "import os, torch\nimport torch.distributed as dist\nfrom torch.utils.data import DistributedSampler\n"
                "def setup():\n    dist.init_process_group('gloo')\n    return int(os.environ['LOCAL_RANK'])\n"
                "def epoch(e):\n    DistributedSampler([]).set_epoch(e)\n"
                "def resume(ddp):\n    ddp.load_state_dict(torch.load('a.pt'))\n"
                "w = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))\nresume(w)\n"
                "w.load_state_dict({})\n"
            ),
        },
        Layout(2, 8),
    )
    assert project.distributed and project.set_epoch and project.reads_local_rank and project.loads_into_wrapper
    assert not project.cuda_always and not project.local_device  # the local rank read, no device given it
    assert project.layout == Layout(2, 8)
    assert project.program is not None and len(project.program.modules) == 2


@pytest.mark.parametrize(
    "helper,local",
    [
        ("def setup():\n    torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n", True),
        ("def setup():\n    return torch.device('cuda', int(os.environ['LOCAL_RANK']))\n", False),  # not used
        ("def setup():\n    print(os.environ['LOCAL_RANK'])\n", False),
        ("def setup():\n    os.environ['CUDA_VISIBLE_DEVICES'] = str(os.environ['LOCAL_RANK'])\n", True),
        ("def setup():\n    os.environ['CUDA_VISIBLE_DEVICES'] = '0'\n", False),
    ],
)
def test_a_device_picked_from_the_local_rank_in_any_file(tmp_path: Path, helper: str, local: bool) -> None:
    files = {"train.py": "import helpers\nhelpers.setup()\n", "helpers.py": "import os, torch\n" + helper}
    assert _project(tmp_path, files).local_device is local


def test_a_bare_script_has_none_of_the_facts(tmp_path: Path) -> None:
    project = _project(tmp_path, {"train.py": "import torch\nm = torch.nn.Linear(2, 2)\nm.set_epoch(3)\n"})
    assert not (project.distributed or project.set_epoch or project.reads_local_rank or project.loads_into_wrapper)
    assert project.layout == UNKNOWN_LAYOUT


@pytest.mark.parametrize(
    "source,local",
    [
        ("import os\nr = os.environ['LOCAL_RANK']\n", True),
        ("import os\nr = os.getenv('SLURM_LOCALID')\n", True),
        ("import torch.distributed as d\nr = d.get_node_local_rank()\n", True),
        ("r = accelerator.local_process_index\nr = accelerator.local_process_index()\n", True),
        ("import os\nr = os.environ['RANK']\n", False),
    ],
)
def test_what_reads_the_local_rank(tmp_path: Path, source: str, local: bool) -> None:
    assert _project(tmp_path, {"train.py": source}).reads_local_rank is local


@pytest.mark.parametrize(
    "source,counted",
    [
        ("for e in range(3):\n    s.set_epoch(e)\n", True),
        ("def f(e):\n    s.set_epoch(e)\n", True),
        ("s.set_epoch(e)\n", False),  # once, outside any loop: no new order per epoch
        ("for e in range(3):\n    s.set_epoch(0)\n", False),  # a constant epoch
    ],
)
def test_what_counts_as_set_epoch(tmp_path: Path, source: str, counted: bool) -> None:
    assert _project(tmp_path, {"train.py": source}).set_epoch is counted


@pytest.mark.parametrize(
    "text,none",
    [
        ("None", True),
        ("[dev] if on_cuda else None", True),
        ("None if cpu else [dev]", True),
        ("[dev]", False),
        ("[dev] if a else [0]", False),
    ],
)
def test_device_ids_that_leave_the_cpu_path_without_a_gpu(text: str, none: bool) -> None:
    assert facts._none_somewhere(ast.parse(text, mode="eval").body) is none


def test_a_finding_is_located_and_worded_from_its_rule(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text("import torch\nx = 1;  torch.nn.DataParallel(m)\n")
    (prog,) = program.load([path], tmp_path)
    module = prog.modules[0]
    call = next(c for c in module.idx.calls if last_name(c.func) == "DataParallel")
    found = facts.finding(module.src, call, "DDP013", "a message")
    assert (found.path, found.line, found.col, found.rule) == ("train.py", 2, 9, "DDP013")
    assert found.severity is BY_ID["DDP013"].severity and found.fix == BY_ID["DDP013"].fix
    assert found.node is call and not found.fixable
    assert facts.finding(module.src, call, "DDP001", "m", "own fix", Severity.info).severity is Severity.info


def test_short_keeps_a_line_and_cuts_a_long_one() -> None:
    assert facts.short(ast.parse("f(\n  a,\n  b)").body[0]) == "f(a, b)"
    cut = facts.short(ast.parse("x = " + " + ".join(["a"] * 40)).body[0], 20)
    assert len(cut) == 20 and cut.endswith("...")


def test_origin_says_where_a_name_or_a_parameter_got_its_rank(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(
        "import torch.distributed as dist\nrank = dist.get_rank()\nrank\n"
        "def place(r):\n    return r\nplace(dist.get_rank())\n"
    )
    (prog,) = program.load([path], tmp_path)
    idx = prog.modules[0].idx
    read = next(n for n in ast.walk(idx.tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Name)).value
    assert facts.origin(idx, read, GLOBAL_RANK) == " (rank = dist.get_rank(), line 2)"
    param = next(n for n in ast.walk(idx.tree) if isinstance(n, ast.Return)).value
    assert param is not None
    assert facts.origin(idx, param, GLOBAL_RANK) == " (a parameter of place, given it at train.py:6)"
    assert facts.origin(idx, read, LOCAL_RANK) == ""


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
    idx = Index(ast.parse("import torch\n" + call + "\n"))
    node = idx.tree.body[1].value  # type: ignore[attr-defined]
    assert [(ast.unparse(e), where) for e, where in facts.device_sinks(idx, node)] == sinks
