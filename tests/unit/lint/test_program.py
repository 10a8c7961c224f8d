"""program.py: which local modules a script's imports reach, how a call finds its function across
files, and what a parameter, a return and an attribute carry."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.errors import UsageError
from ddpctl.lint import program
from ddpctl.lint.index import GLOBAL_RANK, LOCAL_RANK


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


# (case, files, the modules followed besides train.py)
FOLLOWED = [
    ("import a module", {"train.py": "import helpers\n", "helpers.py": ""}, ["helpers.py"]),
    (
        "from a package",
        {"train.py": "from pkg import mod\n", "pkg/__init__.py": "", "pkg/mod.py": ""},
        ["pkg/__init__.py", "pkg/mod.py"],
    ),
    (
        "a relative import",
        {
            "train.py": "import pkg.a\n",
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import f\n",
            "pkg/b.py": "def f(): pass\n",
        },
        ["pkg/__init__.py", "pkg/a.py", "pkg/b.py"],
    ),
    ("a star import", {"train.py": "from h import *\n", "h.py": ""}, ["h.py"]),
    ("not the standard library nor torch", {"train.py": "import os\nimport torch\nfrom torch import nn\n"}, []),
    ("not a sibling nothing imports", {"train.py": "", "other.py": ""}, []),
]


@pytest.mark.parametrize("files,followed", [c[1:] for c in FOLLOWED], ids=[c[0] for c in FOLLOWED])
def test_the_modules_a_script_reaches(tmp_path: Path, files: dict[str, str], followed: list[str]) -> None:
    _write(tmp_path, files)
    (prog,) = program.load([tmp_path / "train.py"], tmp_path)
    names = sorted(str(m.src.path.relative_to(tmp_path)) for m in prog.modules)
    assert names == sorted(["train.py", *followed])


def test_pythonpath_roots_come_before_the_workspace(tmp_path: Path) -> None:
    _write(tmp_path, {"jobs/train.py": "import lib\n", "src/lib.py": "X = 1\n", "lib.py": "X = 2\n"})
    roots = program.roots_for([tmp_path / "jobs/train.py"], tmp_path, [tmp_path / "src"])
    assert roots == [(tmp_path / "jobs").resolve(), (tmp_path / "src").resolve(), tmp_path.resolve()]
    (prog,) = program.load([tmp_path / "jobs/train.py"], tmp_path, [tmp_path / "src"])
    assert [m.src.display for m in prog.modules] == ["jobs/train.py", "src/lib.py"]


def test_a_missing_local_module_is_a_note_and_a_syntax_error_is_located(tmp_path: Path) -> None:
    _write(tmp_path, {"train.py": "from pkg import gone\nimport pkg.absent\n", "pkg/__init__.py": ""})
    (prog,) = program.load([tmp_path / "train.py"], tmp_path)
    assert prog.notes == ["train.py:2: local module pkg.absent not found: not followed"]
    _write(tmp_path, {"train.py": "import broken\n", "broken.py": "def f(:\n"})
    with pytest.raises(UsageError, match=r"^broken.py:1:7: syntax error"):
        program.load([tmp_path / "train.py"], tmp_path)


# (case, files, the expression in train.py's last line, its kinds)
FLOWS = [
    (
        "a parameter, from its caller in another file",
        {"h.py": "def place(r):\n    return r\n"},
        "import os, h\nh.place(int(os.environ['RANK']))\nr = 0",
        "h.py:r",
        {GLOBAL_RANK},
    ),
    (
        "a return, by position",
        {"h.py": "import os\ndef setup():\n    return int(os.environ['RANK']), 2\n"},
        "from h import setup\nrank, world = setup()\nprint(rank)",
        "rank",
        {GLOBAL_RANK},
    ),
    (
        "a namespace attribute set in a helper",
        {"h.py": "import os\ndef init(args):\n    args.gpu = int(os.environ['LOCAL_RANK'])\n"},
        "import h\ndef main(args):\n    h.init(args)\n    return args.gpu",
        "args.gpu",
        {LOCAL_RANK},
    ),
    (
        "a spawned function's index is no rank",
        {},
        "import torch.multiprocessing as mp\ndef work(i):\n    return i\nmp.spawn(work, nprocs=2)",
        "i",
        set(),
    ),
]


@pytest.mark.parametrize("helpers,body,expr,kinds", [f[1:] for f in FLOWS], ids=[f[0] for f in FLOWS])
def test_what_a_value_carries_across_the_program(
    tmp_path: Path, helpers: dict[str, str], body: str, expr: str, kinds: set[str]
) -> None:
    import ast

    _write(tmp_path, {**helpers, "train.py": body + "\n"})
    (prog,) = program.load([tmp_path / "train.py"], tmp_path)
    where, _, name = expr.rpartition(":")
    module = next(m for m in prog.modules if m.src.display == (where or "train.py"))
    node = next(
        n
        for n in ast.walk(module.src.tree)
        if isinstance(n, ast.Name | ast.Attribute) and ast.unparse(n) == name and isinstance(n.ctx, ast.Load)
    )
    assert set(module.idx.kinds(node)) == kinds


def test_argparse_defaults_and_reads(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "train.py": "import argparse\np = argparse.ArgumentParser()\n"
            "p.add_argument('--multiprocessing-distributed', action='store_true')\n"
            "p.add_argument('--local_rank', type=int, default=0)\nargs = p.parse_args()\n"
            "print(args.multiprocessing_distributed)\n"
        },
    )
    (prog,) = program.load([tmp_path / "train.py"], tmp_path)
    flag = prog.arguments["multiprocessing_distributed"]
    assert flag.default is not None and flag.default.value is False  # type: ignore[attr-defined]
    assert prog.reads_attr("multiprocessing_distributed") and not prog.reads_attr("local_rank")


def test_the_layout_says_what_is_assumed() -> None:
    assert program.Layout().multi_node and program.Layout().multi_process
    assert not program.Layout(1, 1).multi_node and not program.Layout(1, 1).multi_process
    assert program.Layout(3, 8).multi_node and program.Layout(3, 8).multi_process
