"""The docs cannot drift from the code, and README.md stays a short page for users.

docs/spec-reference.md (every ddp.yaml key) and the flag tables of docs/trainer.md are generated
from the code by tools/docs_reference.py (`make docs`): from the JobSpec's field docs and from the
trainer's argparse parser. The committed pages must equal what it generates, and a changed field
doc or a new trainer flag must make them stale, so that this test can fail. The environment
variables the trainer page names must be the ones the trainer reads. README.md must stay within
250 lines and start with the two commands that do all set-up (`make run`, `make test`), and every
relative link in README.md, CHANGELOG.md and docs/*.md must point at a file (and heading) that
exists.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import types
from pathlib import Path

import pytest

from ddpctl.spec import JobSpec
from ddpctl_trainer.config import build_parser, parse_args
from ddpctl_trainer.errors import UsageError
from tests.support import REPO
from tools import docs_reference

README = REPO / "README.md"
PAGES = [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


# ------------------------------------------------------------------------------------ generated pages


def test_committed_docs_are_the_generated_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code = docs_reference.main(["--check"])
    assert code == 0, f"{capsys.readouterr().err.strip()} (then review the diff)"


def test_each_generated_page_says_so_on_its_first_line() -> None:
    for path in docs_reference.generated():
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("<!--") and "GENERATED" in first.upper() and "make docs" in first, path


def test_a_changed_field_doc_makes_the_spec_reference_stale(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shm = next(f for f in dataclasses.fields(JobSpec) if f.name == "shm_size")
    before = docs_reference.spec_reference()
    monkeypatch.setattr(shm, "metadata", types.MappingProxyType({**shm.metadata, "doc": "A changed doc."}))
    after = docs_reference.spec_reference()
    assert after != before
    assert "| `shmSize` | string | `2Gi` | A changed doc. |" in after
    assert docs_reference.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        "docs/spec-reference.md is stale: the code it documents changed; "
        "run `make docs` (python tools/docs_reference.py --write) and commit it"
    )


def test_a_new_trainer_flag_makes_the_trainer_page_stale(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def with_a_new_flag() -> argparse.ArgumentParser:
        parser = build_parser()
        parser.add_argument_group("new").add_argument("--a-new-flag", default=None, help="a new flag")
        return parser

    monkeypatch.setattr(docs_reference, "build_parser", with_a_new_flag)
    assert "| `--a-new-flag` TEXT | `DDP_TRAINER_A_NEW_FLAG` | none | a new flag |" in docs_reference.trainer_flags()
    assert docs_reference.main(["--check"]) == 1
    assert capsys.readouterr().err.startswith("docs/trainer.md is stale")


def test_write_repairs_the_pages_and_leaves_the_hand_written_text(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    trainer_page = tmp_path / "docs" / "trainer.md"
    shutil.copy(REPO / "docs" / "trainer.md", trainer_page)
    assert docs_reference.main(["--check", "--root", str(tmp_path)]) == 1  # no spec reference yet
    assert docs_reference.main(["--write", "--root", str(tmp_path)]) == 0
    assert docs_reference.main(["--check", "--root", str(tmp_path)]) == 0

    text = trainer_page.read_text(encoding="utf-8")
    trainer_page.write_text(text.replace("# The trainer\n", "# The trainer, edited by hand\n"), encoding="utf-8")
    assert docs_reference.main(["--check", "--root", str(tmp_path)]) == 0  # prose is free
    trainer_page.write_text(text.replace("`DDP_TRAINER_EPOCHS`", "`DDP_TRAINER_EPOCH`"), encoding="utf-8")
    assert docs_reference.main(["--check", "--root", str(tmp_path)]) == 1  # the flag table is not
    assert docs_reference.main(["--write", "--root", str(tmp_path)]) == 0
    assert trainer_page.read_text(encoding="utf-8") == text


def test_a_nested_part_missing_from_the_reference_fails_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new part of the spec (a dataclass under a key) needs its place in ddp.yaml named: generation
    stops and says so, rather than leaving the part's keys out of the reference."""
    monkeypatch.setattr(docs_reference, "PARTS", tuple(p for p in docs_reference.PARTS if p[0].__name__ != "Volume"))
    with pytest.raises(ValueError, match=r"teach tools/docs_reference\.py PARTS where Volume sits"):
        docs_reference.spec_reference()


def test_every_spec_key_is_in_the_reference() -> None:
    text = docs_reference.spec_reference()
    for key in JobSpec().to_dict():
        assert f"| `{key}` |" in text, key


def test_the_documented_environment_variables_are_the_ones_the_trainer_reads() -> None:
    checked = 0
    for action in build_parser()._actions:  # argparse has no public iterator over actions
        typed = action.type in (int, float) or action.choices is not None
        if not action.option_strings or not (typed or isinstance(action, argparse.BooleanOptionalAction)):
            continue  # a free-text flag takes any value: nothing to refuse
        name = docs_reference.trainer_env(action)
        with pytest.raises(UsageError, match=re.escape(name)):
            parse_args([], env={name: "not-a-value"})
        checked += 1
    assert checked >= 20


# ------------------------------------------------------------------------------------ README and links


def fenced_commands(text: str) -> list[str]:
    """The command lines of the page's fenced blocks, in order, comments and prompts dropped."""
    out = []
    for block in FENCE.finditer(text):
        for line in block.group(0).splitlines()[1:-1]:
            command = line.split(" #", 1)[0].strip().removeprefix("$ ")
            if command and not command.startswith("#"):
                out.append(command)
    return out


def test_readme_is_short_and_starts_with_the_two_set_up_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250, "README.md is for users: move reference material to docs/"
    assert fenced_commands(text)[:2] == ["make run", "make test"]


def test_fenced_commands_reads_commands_not_comments() -> None:
    page = "x\n```sh\n# a comment\n$ make run   # set up\nmake test\n```\n"
    assert fenced_commands(page) == ["make run", "make test"]


def headings(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {docs_reference.anchor(line.lstrip("#").strip()) for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_at_a_file_and_heading(page: Path) -> None:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:
        file_part, _, fragment = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        assert path.exists(), f"{page.relative_to(REPO)}: the link {target} points at no file"
        if fragment and path.suffix == ".md":
            assert fragment in headings(path), f"{page.relative_to(REPO)}: {target} names no heading of {path.name}"


def test_the_pages_this_test_reads_exist() -> None:
    names = {p.name for p in PAGES}
    expected = {"README.md", "CHANGELOG.md", "spec-reference.md", "trainer.md", "kind.md", "architecture.md"}
    assert expected <= names
