"""`--fix`: the device, the local rank and the backend rewritten at their findings, nothing else.

Each case is one line of a script and what it becomes; the whole-file tests check that every other
line is kept byte for byte, that the result parses and lints clean of those rules, and that a
second run changes nothing."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from ddpctl.errors import RuntimeFailure
from ddpctl.lint import api
from ddpctl.lint.fix import FIXED_RULES, fix

FIXTURES = Path(__file__).parent / "fixtures"

PRELUDE = """\
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
rank = dist.get_rank()
m = nn.Linear(2, 2)
"""
DEVICE = """
# The device from LOCAL_RANK (torchrun sets it for each process on a node), or the CPU without CUDA.
LOCAL_DEVICE = (
    torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if torch.cuda.is_available() else torch.device("cpu")
)
"""

READ = "print(parser.parse_args().local_rank)"  # DDP002 is only for an argument whose value is read

# (case, line, the line(s) it becomes)
CASES = [
    (
        "nccl",
        'dist.init_process_group(backend="nccl")',
        'dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")',
    ),
    (
        "nccl, its quotes",
        "dist.init_process_group('nccl')",
        "dist.init_process_group('nccl' if torch.cuda.is_available() else 'gloo')",
    ),
    (
        "--local_rank with a default",
        'parser.add_argument("--local_rank", type=int, default=-1)\n' + READ,
        'parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", -1)))\n' + READ,
    ),
    (
        "--local-rank without one",
        "parser.add_argument('--local-rank', type=int)\n" + READ,
        "parser.add_argument('--local-rank', type=int, "
        "default=int(os.environ['LOCAL_RANK']) if 'LOCAL_RANK' in os.environ else None)\n" + READ,
    ),
    (
        "set_device",
        "torch.cuda.set_device(rank)",
        'if LOCAL_DEVICE.type == "cuda":\n    torch.cuda.set_device(LOCAL_DEVICE)',
    ),
    (
        "set_device on a shared line",
        "x = 1; torch.cuda.set_device(rank)",
        'x = 1; (torch.cuda.set_device(LOCAL_DEVICE) if LOCAL_DEVICE.type == "cuda" else None)',
    ),
    (".to", "m = m.to(rank)", "m = m.to(LOCAL_DEVICE)"),
    (".cuda", "m = m.cuda(rank, non_blocking=True)", "m = m.to(LOCAL_DEVICE, non_blocking=True)"),
    (
        "device_ids and output_device",
        "m = DDP(m, device_ids=[rank], output_device=rank)",
        'm = DDP(m, device_ids=[LOCAL_DEVICE] if LOCAL_DEVICE.type == "cuda" else None, '
        'output_device=LOCAL_DEVICE if LOCAL_DEVICE.type == "cuda" else None)',
    ),
    ("torch.device", 'd = torch.device("cuda", rank)', "d = LOCAL_DEVICE"),
    ("a device string", 'd = f"cuda:{rank}"', "d = str(LOCAL_DEVICE)"),
    ("device=", "t = torch.zeros(2, device=rank)", "t = torch.zeros(2, device=LOCAL_DEVICE)"),
]


def _fix(tmp_path: Path, text: str) -> tuple[str, list[str]]:
    path = tmp_path / "train.py"
    path.write_text(text)
    linted = api.lint_sources(api.read([path], tmp_path), [path])
    fixed = fix(linted.sources[0], linted.indexes[0], linted.result.findings)
    return fixed.text, [f.rule for f in fixed.skipped]


@pytest.mark.parametrize("line,becomes", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_fix(tmp_path: Path, line: str, becomes: str) -> None:
    text, skipped = _fix(tmp_path, PRELUDE + line + "\n")
    device = DEVICE if "LOCAL_DEVICE" in becomes else ""
    head, tail = PRELUDE.split("\nparser")
    assert text == head + device + "\nparser" + tail + becomes + "\n"
    assert skipped == []


def test_missing_imports_are_added_and_aliases_followed(tmp_path: Path) -> None:
    source = '"""Doc."""\nimport torch.distributed as dist\n\ndist.init_process_group(backend="nccl")\n'
    text, _ = _fix(tmp_path, source)
    assert text == (
        '"""Doc."""\nimport torch\nimport torch.distributed as dist\n\n'
        'dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")\n'
    )
    aliased = "import torch as th\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n"
    assert "th.cuda.is_available()" in _fix(tmp_path, aliased)[0]


def _changed_lines(before: str, after: str) -> set[int]:
    """Lines of `before` (1-based) that the fix replaced or deleted."""
    matcher = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    return {i + 1 for tag, i1, i2, _, _ in matcher.get_opcodes() if tag in ("replace", "delete") for i in range(i1, i2)}


@pytest.mark.parametrize("name", ["fixable_train.py", "article_style.py", "ddp001_bad.py", "ddp010_bad.py"])
def test_only_the_lines_of_fixable_findings_change(tmp_path: Path, name: str) -> None:
    before = (FIXTURES / name).read_text()
    linted = api.lint_sources(api.read([FIXTURES / name], FIXTURES), [FIXTURES / name])
    fixable = {f.line for f in linted.result.findings if f.rule in FIXED_RULES}
    path = tmp_path / "train.py"
    path.write_text(before)
    done, again = api.lint_sources(api.read([path], tmp_path), [path], cwd=tmp_path).fix()
    after = path.read_text()
    changed = _changed_lines(before, after)
    assert fixable and fixable <= changed and done[0].fixed
    # a fix can uncover another: a script that no longer needs CUDA then shows its hard-coded nccl
    assert all("init_process_group" in before.splitlines()[n - 1] for n in changed - fixable)
    assert not [f for f in again.result.findings if f.rule in FIXED_RULES]
    assert _fix(tmp_path, after)[0] == after  # a second run changes nothing


def test_fix_writes_the_file_and_lints_it_again(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text((FIXTURES / "article_style.py").read_text())
    path.chmod(0o640)
    linted = api.lint_sources(api.read([path], tmp_path), [path])
    done, after = linted.fix()
    assert [sorted(f.rule for f in d.fixed) for d in done] == [["DDP002"]]
    assert path.read_text() == done[0].text and (path.stat().st_mode & 0o777) == 0o640
    assert sorted(f.rule for f in after.result.findings) == ["DDP011", "TOR102"]  # not mechanical: left
    assert done[0].diff().startswith("--- a/train.py\n+++ b/train.py\n")


def test_a_file_changed_since_it_was_read_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n")
    linted = api.lint_sources(api.read([path], tmp_path), [path])
    path.write_text("import torch.distributed as dist\ndist.init_process_group('nccl')  # edited\n")
    done, _ = linted.fix()
    assert not done[0].changed and "edited" in path.read_text()
    assert any("not fixed" in note for note in linted.result.notes)


CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize(
    ("program", "files"),
    [
        # the global rank reaches set_device_index, .to and device_ids through a dict over os.environ
        ("ddp_example_global_rank", ["train.py"]),
        # the rank comes back from a helper package's setup(): the device use is fixed in the script, and
        # the helper's hard-coded nccl, which the fixed script no longer needs CUDA for, in the helper
        ("helper_package_rank", ["mylib/dist_utils.py", "train.py"]),
    ],
)
def test_the_whole_flow_is_fixed_one_diff_per_file_and_lints_clean(
    cli, tmp_path: Path, program: str, files: list[str]
) -> None:
    import shutil

    shutil.copytree(CORPUS / program, tmp_path / program)
    root = tmp_path / program
    before = {p: p.read_text() for p in root.rglob("*.py")}
    done = cli("lint", "--fix", str(root / "train.py"))
    assert "fixed" in done.err and "nothing was written" not in done.err, done.err
    changed = sorted(str(p.relative_to(root)) for p, text in before.items() if p.read_text() != text)
    assert changed == files
    assert done.out.count("--- a/") == len(files)  # one diff per changed file
    for p in root.rglob("*.py"):
        compile(p.read_text(), str(p), "exec")
    again = cli("lint", str(root / "train.py"))
    assert "DDP001" not in again.out, again.out
    assert "set_device_index(LOCAL_DEVICE.index)" in (root / "train.py").read_text() or program != (
        "ddp_example_global_rank"
    )


def test_a_flow_with_one_use_that_cannot_be_rewritten_is_not_written_at_all(cli, tmp_path: Path) -> None:
    """All or nothing: a device list of two ranks has no mechanical rewrite, so the `.to(rank)` of the
    same flow is left as it is too, and the note says why."""
    script = tmp_path / "train.py"
    text = (
        "import os\nimport torch\nimport torch.distributed as dist\nfrom torch import nn\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        'rank = int(os.environ["RANK"])\nmodel = nn.Linear(2, 2).to(rank)\n'
        "ddp = DDP(model, device_ids=[rank, rank + 1])\n"
    )
    script.write_text(text)
    done = cli("lint", "--fix", str(script))
    assert script.read_text() == text
    assert "nothing was written" in done.err, done.err


def test_the_device_fix_uncovers_the_nccl_the_script_no_longer_needs(cli, tmp_path: Path) -> None:
    """As written the fixture needs CUDA (its nccl is no finding); once its device comes from the
    local rank with a CPU fallback (`device_ids=[...] if ... else None`), its nccl is fixed in the
    same run, so it trains under `ddpctl run --local` (tests/e2e/test_lint_fix.py)."""
    script = tmp_path / "train.py"
    script.write_text((FIXTURES / "fixable_train.py").read_text())
    assert "DDP010" not in cli("lint", str(script)).out
    done = cli("lint", "--fix", str(script))
    assert "fixed 7 finding(s) in 1 file(s)" in done.err, done.err
    assert 'backend="nccl" if torch.cuda.is_available() else "gloo"' in script.read_text()


def _two_file_fix(tmp_path: Path) -> tuple[Path, dict[Path, str], api.Linted]:
    """The helper package program: --fix changes two files, mylib/dist_utils.py and train.py."""
    import shutil

    root = tmp_path / "helper_package_rank"
    shutil.copytree(CORPUS / "helper_package_rank", root)
    before = {p: p.read_text() for p in root.rglob("*.py")}
    linted = api.lint_sources(api.read([root / "train.py"], root), [root / "train.py"], False, cwd=root)
    return root, before, linted


def _left_behind(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))


def test_both_files_of_a_fix_are_written_when_nothing_fails(tmp_path: Path) -> None:
    root, before, linted = _two_file_fix(tmp_path)
    done, _ = linted.fix(use_torchfix=False)
    changed = sorted(str(p.relative_to(root)) for p, text in before.items() if p.read_text() != text)
    assert changed == ["mylib/dist_utils.py", "train.py"] and sum(d.changed for d in done) == 2
    assert _left_behind(root) == []


def test_a_failure_staging_the_second_file_writes_neither(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, before, linted = _two_file_fix(tmp_path)
    real = os.fsync
    calls: list[int] = []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    done, after = linted.fix(use_torchfix=False)
    assert {p: p.read_text() for p in before} == before
    assert _left_behind(root) == [] and not any(d.changed for d in done)
    assert any("No space left on device" in n and "nothing was written" in n for n in after.result.notes)


def test_a_failure_renaming_the_second_file_puts_the_first_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, before, linted = _two_file_fix(tmp_path)
    real = os.replace
    calls: list[str] = []

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append(str(dst))
        if len(calls) == 2:
            raise PermissionError(13, "Permission denied")
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    done, after = linted.fix(use_torchfix=False)
    assert len(calls) >= 2  # the first file was renamed over, then put back
    assert {p: p.read_text() for p in before} == before
    assert _left_behind(root) == [] and not any(d.changed for d in done)
    assert any("Permission denied" in n for n in after.result.notes)


def test_a_fixed_text_that_parses_but_does_not_compile_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ddpctl.lint.fix as fix_module

    root, before, linted = _two_file_fix(tmp_path)
    real = fix_module.apply
    monkeypatch.setattr(fix_module, "apply", lambda text, edits: real(text, edits) + "break\n")  # parses
    with pytest.raises(RuntimeFailure, match="would not compile"):
        linted.fix(use_torchfix=False)
    assert {p: p.read_text() for p in before} == before
    assert _left_behind(root) == []
