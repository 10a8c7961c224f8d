""".dockerignore read as Docker reads it (moby's patternmatcher), which is not as git does."""

from __future__ import annotations

import pytest

from ddpctl.workspace.dockerignore import DockerIgnore


@pytest.mark.parametrize(
    ("patterns", "path", "excluded"),
    [
        # from the context's root, not at any depth (git would match both)
        (["*.pyc"], "a.pyc", True),
        (["*.pyc"], "sub/a.pyc", False),
        (["**/*.pyc"], "sub/deep/a.pyc", True),
        (["**/*.pyc"], "a.pyc", True),
        # `*` and `?` stop at `/`
        (["*/temp*"], "somedir/temporary.txt", True),
        (["*/temp*"], "somedir/sub/temporary.txt", False),
        (["*/*/temp*"], "somedir/subdir/temporary.txt", True),
        (["temp?"], "temp1", True),
        (["temp?"], "temp12", False),
        (["temp?"], "temp/", False),
        # a folder's pattern covers what is below it
        (["docs"], "docs/a/b.html", True),
        (["/docs/"], "docs/a.html", True),
        (["docs/**"], "docs/a.html", True),
        (["docs/**"], "docs", False),
        (["a/**/b"], "a/b", True),
        (["a/**/b"], "a/x/y/b", True),
        # the last matching pattern wins; `!` re-includes
        (["*.md", "!README.md"], "README.md", False),
        (["*.md", "!README.md"], "CHANGES.md", True),
        (["!README.md", "*.md"], "README.md", True),
        (["docs", "!docs/keep.txt"], "docs/keep.txt", False),
        (["docs", "!docs/keep.txt"], "docs/other.txt", True),
        # cleaned like Go's filepath.Clean; regex characters are literal
        (["./build/../out"], "out/x", True),
        (["a.b"], "axb", False),
        (["a+(b)"], "a+(b)", True),
        (["\\*star"], "*star", True),
        (["\\*star"], "xstar", False),
        (["[ab].txt"], "b.txt", True),
        (["[^ab].txt"], "b.txt", False),
        ([], "anything", False),
    ],
)
def test_docker_rules(patterns: list[str], path: str, excluded: bool) -> None:
    assert DockerIgnore(patterns).excluded(path.rstrip("/")) is excluded


def test_reading_the_file() -> None:
    """`#` starts a comment only at the line's start; lines are stripped; a BOM is dropped."""
    ignore = DockerIgnore.from_text("\ufeff# comment\n  *.log  \n\n!keep.log\nnot#comment\n")
    assert [p.text for p in ignore.patterns] == ["*.log", "keep.log", "not#comment"]
    assert ignore.excluded("a.log") and not ignore.excluded("keep.log") and ignore.excluded("not#comment")


@pytest.mark.parametrize(
    ("patterns", "folder", "walk"),
    [
        (["docs", "!docs/keep.txt"], "docs", True),
        (["docs", "!README.md"], "docs", False),
        (["docs", "!*.md"], "docs", True),
        (["docs", "!**/keep"], "docs", True),
        (["a", "!a/b/c"], "a/b", True),
        (["a", "!a/b/c"], "a/x", False),
        (["docs"], "docs", False),
    ],
)
def test_an_excluded_folder_is_walked_only_when_an_exception_may_reach_into_it(
    patterns: list[str], folder: str, walk: bool
) -> None:
    assert DockerIgnore(patterns).may_reinclude_below(folder) is walk


def test_a_lone_bang_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a pattern"):
        DockerIgnore(["!"])
