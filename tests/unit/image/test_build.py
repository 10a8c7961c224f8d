"""ddpctl.image.build, the parts that need no container engine: .dockerignore as Docker reads it,
the files the engine receives and the content hash the tag is made of, which builder is used, the
build's argv, the repository and build arguments, and the one line a failed build ends with. Real
builds are in tests/e2e/test_build_docker.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.errors import RuntimeFailure, UsageError
from ddpctl.image.build import (
    HASH_LEN,
    BuildPlan,
    _failed_step,
    _last_error_line,
    content_hash,
    context_files,
    detect_builder,
    engine_answers,
    is_ignored,
    parse_build_args,
    parse_dockerignore,
    plan_build,
    repo_of,
)


def files(root: Path, *paths: str) -> Path:
    for rel in paths:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    return root


@pytest.mark.parametrize(
    ("patterns", "path", "ignored"),
    [
        ("**/*.pyc", "a/b/c.pyc", True),
        ("**/*.pyc", "c.pyc", True),
        ("*.pyc", "a/c.pyc", False),  # `*` stays within one directory
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "c.txt", True),
        ("[!ab].txt", "a.txt", False),
        ("\\*.txt", "*.txt", True),  # an escaped wildcard is literal
        ("\\*.txt", "x.txt", False),
        ("/build", "build/out.o", True),  # a leading slash is the context's root
        ("./docs/", "docs/a.md", True),
        ("docs\n!docs/keep.md", "docs/keep.md", False),
        ("docs\n!docs/keep.md\ndocs", "docs/keep.md", True),  # the last rule that matches decides
        ("  ! README.md  \n*.md", "README.md", True),
    ],
)
def test_dockerignore_patterns(patterns: str, path: str, ignored: bool) -> None:
    assert is_ignored(path, parse_dockerignore(patterns)) is ignored


def test_an_exception_can_reinclude_below_an_ignored_directory() -> None:
    rules = parse_dockerignore("*\n!trainer/models/\n")
    exception = rules[1]
    assert exception.may_reinclude_under("trainer") and exception.may_reinclude_under("trainer/models")
    assert not exception.may_reinclude_under("cli") and not rules[0].may_reinclude_under("trainer")


def test_context_files_are_what_the_engine_receives(tmp_path: Path) -> None:
    files(tmp_path, "Dockerfile", "trainer/a.py", "trainer/models/m.py", ".git/HEAD", "notes.md", "deep/x/y.txt")
    (tmp_path / "link.py").symlink_to(tmp_path / "trainer" / "a.py")
    rules = parse_dockerignore(".git\n*.md\ndeep\n!deep/x/y.txt\n")
    assert context_files(tmp_path, rules) == ["Dockerfile", "deep/x/y.txt", "trainer/a.py", "trainer/models/m.py"]


def _hash(ctx: Path, args: dict[str, str] | None = None) -> str:
    return content_hash(ctx, ctx / "Dockerfile", args or {})[0]


def test_the_content_hash_follows_what_goes_into_the_image(tmp_path: Path) -> None:
    ctx = files(tmp_path, "Dockerfile", "trainer/a.py", ".dockerignore")
    (ctx / ".dockerignore").write_text("scratch\n")
    first, count = content_hash(ctx, ctx / "Dockerfile", {})
    assert count == 3 and len(first) == 64
    assert _hash(ctx, {"A": "1", "B": "2"}) == _hash(ctx, {"B": "2", "A": "1"})  # args by key, not order
    assert _hash(ctx, {"A": "1"}) != first
    files(ctx, "scratch/big.bin")
    assert _hash(ctx) == first  # ignored
    (ctx / "trainer" / "a.py").chmod(0o755)
    executable = _hash(ctx)
    assert executable != first  # the exec bit goes into the image
    (ctx / "trainer" / "a.py").chmod(0o644)
    assert _hash(ctx) == first
    (ctx / "trainer" / "a.py").rename(ctx / "trainer" / "b.py")
    (ctx / "trainer" / "b.py").write_text("trainer/a.py")  # the same bytes under another name
    assert _hash(ctx) != first
    (ctx / "Dockerfile").write_text("FROM other\n")
    assert _hash(ctx) not in (first, executable)


# ------------------------------------------------------------------------------ builders


@pytest.fixture
def bin_dir(tmp_path: Path):
    """A PATH directory holding the builders asked for, as executables that do nothing."""
    directory = tmp_path / "bin"
    directory.mkdir()

    def make(*names: str) -> str:
        for name in names:
            tool = directory / name
            tool.write_text("#!/bin/sh\nexit 0\n")
            tool.chmod(0o755)
        return str(directory)

    return make


@pytest.mark.parametrize(
    ("installed", "choice", "chosen"),
    [
        (("docker", "podman"), None, "docker"),
        (("podman", "buildah"), "auto", "podman"),
        (("buildah",), None, "buildah"),
        (("docker", "podman"), "podman", "podman"),
    ],
)
def test_the_builder_chosen(bin_dir, installed: tuple[str, ...], choice: str | None, chosen: str) -> None:
    assert detect_builder(choice, bin_dir(*installed)) == chosen


def test_a_builder_that_is_not_there(bin_dir, tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match=r"^--builder podman: podman is not installed \(not on PATH\)"):
        detect_builder("podman", bin_dir("docker"))
    with pytest.raises(RuntimeFailure, match=r"^no container builder found: install docker, podman or buildah"):
        detect_builder(None, str(tmp_path / "empty-bin"))
    with pytest.raises(UsageError, match=r"^--builder: 'kaniko' is not one of docker, podman, buildah"):
        detect_builder("kaniko", bin_dir("docker"))


def test_buildah_needs_no_daemon_to_answer() -> None:
    assert engine_answers("buildah") is None


def test_an_engine_that_cannot_run_says_why() -> None:
    problem = engine_answers("/no/such/engine-for-ddpctl-tests")
    assert problem is not None and problem.startswith("/no/such/engine-for-ddpctl-tests info failed: ")


@pytest.mark.parametrize(
    ("builder", "head", "tail"),
    [
        ("docker", ["docker", "build"], ["--force-rm"]),
        ("podman", ["podman", "build"], ["--force-rm"]),
        ("buildah", ["buildah", "bud"], ["--layers"]),
    ],
)
def test_the_build_argv(builder: str, head: list[str], tail: list[str]) -> None:
    plan = BuildPlan(builder, Path("/ctx"), Path("/ctx/Dockerfile"), "reg/team/t", "ab" * 32, 3,
                     {"Z": "1", "A": "x y"}, ("reg/team/t:latest",))  # fmt: skip
    assert plan.tag == f"reg/team/t:{'ab' * (HASH_LEN // 2)}"
    assert plan.tags == (plan.tag, "reg/team/t:latest")
    assert plan.argv() == [
        *head,
        "-f",
        "/ctx/Dockerfile",
        "-t",
        plan.tag,
        "-t",
        "reg/team/t:latest",
        "--build-arg",
        "A=x y",
        "--build-arg",
        "Z=1",
        *tail,
        "/ctx",
    ]


@pytest.mark.parametrize(
    ("image", "repo"),
    [
        ("trainer", "trainer"),
        ("localhost:5000/trainer", "localhost:5000/trainer"),  # a registry's port is no tag
        ("localhost:5000/trainer:2", "localhost:5000/trainer"),
        ("reg/team/trainer@sha256:abc", "reg/team/trainer"),
        ("reg/team/trainer:1.0@sha256:abc", "reg/team/trainer"),
    ],
)
def test_repo_of(image: str, repo: str) -> None:
    assert repo_of(image) == repo


def test_build_args() -> None:
    assert parse_build_args(["A=1", "PIP_PACKAGES=tqdm==4.66", "EMPTY="]) == {
        "A": "1",
        "PIP_PACKAGES": "tqdm==4.66",
        "EMPTY": "",
    }
    for bad in ("A", "1A=x", "A-B=x", "=x"):
        with pytest.raises(UsageError, match=r"^--build-arg: .* is not KEY=VALUE"):
            parse_build_args([bad])


# ------------------------------------------------------------------------------ plan_build


def _plan(ctx: Path, path: str, **kw: object) -> BuildPlan:
    options: dict[str, object] = {
        "builder": None,
        "dockerfile": None,
        "context": ctx,
        "repo": "ddpctl-trainer",
        "build_args": {},
        "base_image": None,
        "latest": False,
        "path": path,
    }
    options.update(kw)
    return plan_build(**options)  # type: ignore[arg-type]


def test_plan_build_hashes_the_context_into_the_tag(tmp_path: Path, bin_dir) -> None:
    ctx = files(tmp_path / "ctx", "Dockerfile", "trainer/a.py")
    plan = _plan(ctx, bin_dir("podman"), latest=True, base_image="base:cpu", build_args={"X": "1"})
    digest, count = content_hash(ctx, ctx / "Dockerfile", {"X": "1", "BASE_IMAGE": "base:cpu"})
    assert (plan.builder, plan.digest, plan.files) == ("podman", digest, count)
    assert plan.tags == (f"ddpctl-trainer:{digest[:HASH_LEN]}", "ddpctl-trainer:latest")
    assert dict(plan.build_args) == {"X": "1", "BASE_IMAGE": "base:cpu"}


def test_the_context_is_the_dockerfiles_folder_unless_given(tmp_path: Path, bin_dir) -> None:
    ctx = files(tmp_path / "ctx", "build/Dockerfile", "build/a.py", "b.py")
    plan = _plan(None, bin_dir("docker"), dockerfile=ctx / "build" / "Dockerfile")  # type: ignore[arg-type]
    assert (plan.context, plan.files) == ((ctx / "build").resolve(), 2)
    plan = _plan(ctx, bin_dir("docker"), dockerfile=ctx / "build" / "Dockerfile")
    assert (plan.context, plan.dockerfile, plan.files) == (ctx.resolve(), (ctx / "build" / "Dockerfile").resolve(), 3)


def test_the_current_directory_is_the_default_context(tmp_path: Path, bin_dir, monkeypatch) -> None:
    ctx = files(tmp_path / "ctx", "Dockerfile")
    monkeypatch.chdir(ctx)
    assert _plan(None, bin_dir("docker")).context == ctx.resolve()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"builder": "kaniko"}, "--builder: 'kaniko' is not one of docker, podman, buildah"),
        ({"context": "missing"}, "--context: "),
        ({"dockerfile": "none"}, "no Dockerfile at "),
        ({"repo": "Team/Trainer"}, "--repo: 'Team/Trainer' is not an image repository"),
        ({"repo": "reg/t:1.0"}, "--repo: 'reg/t:1.0' is not an image repository"),
        ({"base_image": "a b"}, "--base-image: 'a b' is not an image reference"),
        ({"base_image": ""}, "--base-image: '' is not an image reference"),
    ],
)
def test_what_plan_build_refuses(tmp_path: Path, bin_dir, kw: dict[str, object], message: str) -> None:
    ctx = files(tmp_path / "ctx", "Dockerfile")
    if kw.get("context") == "missing":
        kw = {"context": tmp_path / "missing"}
    if kw.get("dockerfile") == "none":
        kw = {"dockerfile": ctx / "Containerfile"}
    with pytest.raises(UsageError) as refused:
        _plan(ctx, bin_dir("docker"), **kw)
    assert str(refused.value).startswith(message)


# ------------------------------------------------------------------------------ a failed build in one line


@pytest.mark.parametrize(
    ("lines", "step"),
    [
        (["Step 1/13 : FROM ${BASE_IMAGE}", " ---> abc", "Step 2/13 : RUN pip install $PIP_PACKAGES", "boom"],
         " at step 2/13 (RUN pip install tqdm)"),
        (["STEP 3/5: COPY trainer/ /opt/", "Error: no such file"], " at step 3/5 (COPY trainer/ /opt/)"),
        (["#5 [2/7] RUN make   all", "#5 ERROR: exit code 2"], " at (RUN make all)"),
        (["Step 1/2 : ARG ${UNKNOWN}"], " at step 1/2 (ARG ${UNKNOWN})"),  # an arg not given stays as written
        (["no steps here"], ""),
    ],
)  # fmt: skip
def test_the_failed_step(lines: list[str], step: str) -> None:
    assert _failed_step(lines, {"BASE_IMAGE": "base:cpu", "PIP_PACKAGES": "tqdm"}) == step


@pytest.mark.parametrize(
    ("lines", "last"),
    [
        (["Step 2/2 : RUN false", "The command '/bin/sh -c false' returned a non-zero code: 1", " ---> Running in x",
          "Removing intermediate container x", ""], "The command '/bin/sh -c false' returned a non-zero code: 1"),
        (["  spaced   out  "], "spaced out"),
        ([], "no output"),
        (["x" * 400], "x" * 300),
    ],
)  # fmt: skip
def test_the_last_error_line(lines: list[str], last: str) -> None:
    assert _last_error_line(lines) == last
