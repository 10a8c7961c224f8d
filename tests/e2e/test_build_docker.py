"""`ddpctl build`: the content-hash tag, .dockerignore, builder detection, and a real build of the
repo's Dockerfile on the locally made CPU base (scripts/make-base-image.sh; no registry needed).

Tests marked `docker` skip on a machine without a Docker engine and FAIL under CI=true, where
.ci/run installs and starts one (scripts/install-docker.sh) and makes the base image.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddpctl.image.build import content_hash, context_files, parse_dockerignore, repo_of
from tests.support import REPO, skip_unless
from tests.support.docker import BASE_IMAGE, docker_works, image_present


def require_docker_and_base() -> None:
    skip_unless(docker_works(), "a running Docker engine (bash scripts/install-docker.sh)")
    skip_unless(image_present(BASE_IMAGE), f"the CPU base image {BASE_IMAGE} (bash scripts/make-base-image.sh)")


def _ddpctl(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ddpctl", *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout
    )


def _copy_context(dest: Path) -> Path:
    shutil.copy(REPO / "Dockerfile", dest / "Dockerfile")
    shutil.copy(REPO / ".dockerignore", dest / ".dockerignore")
    shutil.copytree(REPO / "trainer", dest / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "README.md").write_text("docs\n")
    return dest


def _containers() -> set[str]:
    return set(subprocess.run(["docker", "ps", "-aq"], capture_output=True, text=True).stdout.split())


# --------------------------------------------------------------------------------------------
# The tag: a hash of what goes into the image (no engine needed)
# --------------------------------------------------------------------------------------------


def test_dockerignore_keeps_only_the_dockerfile_and_the_trainer() -> None:
    rules = parse_dockerignore((REPO / ".dockerignore").read_text())
    files = context_files(REPO, rules)
    assert "Dockerfile" in files and "trainer/ddpctl_trainer/main.py" in files
    assert all(f == "Dockerfile" or f.startswith("trainer/ddpctl_trainer/") for f in files), files
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)


@pytest.mark.parametrize(
    ("patterns", "path", "ignored"),
    [
        ("*\n!trainer/ddpctl_trainer/\n", "trainer/ddpctl_trainer/a/b.py", False),
        ("*\n!trainer/ddpctl_trainer/\n", "cli/ddpctl/app.py", True),
        ("trainer/ddpctl_trainer/**/__pycache__\n", "trainer/ddpctl_trainer/__pycache__/x.pyc", True),
        ("trainer/ddpctl_trainer/**/__pycache__\n", "trainer/ddpctl_trainer/a/__pycache__/x.pyc", True),
        ("*.md\n!README.md\n", "README.md", False),
        ("*.md\n!README.md\n", "CHANGES.md", True),
        ("docs\n", "docs/kind.md", True),
        ("# a comment\n\n", "docs/kind.md", False),
    ],
)
def test_dockerignore_semantics_follow_docker(patterns: str, path: str, ignored: bool) -> None:
    from ddpctl.image.build import is_ignored

    assert is_ignored(path, parse_dockerignore(patterns)) is ignored


def test_content_hash_changes_with_the_code_not_with_ignored_files(tmp_path: Path) -> None:
    ctx = _copy_context(tmp_path)
    first, count = content_hash(ctx, ctx / "Dockerfile", {})
    assert count == len(list((REPO / "trainer").rglob("*.py"))) + 1  # the package and its subpackages
    assert content_hash(ctx, ctx / "Dockerfile", {}) == (first, count)  # deterministic
    (ctx / "README.md").write_text("changed, but ignored\n")
    assert content_hash(ctx, ctx / "Dockerfile", {})[0] == first
    with open(ctx / "trainer" / "ddpctl_trainer" / "main.py", "a") as fh:
        fh.write("# edit\n")
    second = content_hash(ctx, ctx / "Dockerfile", {})[0]
    assert second != first
    assert content_hash(ctx, ctx / "Dockerfile", {"BASE_IMAGE": "x:1"})[0] != second  # another base, another tag


@pytest.mark.docker
def test_print_tag_is_the_repo_and_a_short_hash(tmp_path: Path) -> None:
    ctx = _copy_context(tmp_path)
    env = {"PATH": os.environ["PATH"]}
    skip_unless(
        any(shutil.which(b) for b in ("docker", "podman", "buildah")),
        "a container builder on PATH (--print-tag still chooses one)",
    )
    one = _ddpctl("build", "--print-tag", "--builder", "auto", cwd=ctx, env=env)
    assert one.returncode == 0, one.stderr
    assert re.fullmatch(r"ddpctl-trainer:[0-9a-f]{12}\n", one.stdout)
    assert _ddpctl("build", "--print-tag", cwd=ctx, env=env).stdout == one.stdout
    other = _ddpctl("build", "--print-tag", "--repo", "registry.example.com/team/trainer", cwd=ctx, env=env)
    assert other.stdout.startswith("registry.example.com/team/trainer:")


def test_repo_of_drops_tag_and_digest() -> None:
    assert repo_of("ddpctl-trainer:latest") == "ddpctl-trainer"
    assert repo_of("registry:5000/team/trainer:1.0") == "registry:5000/team/trainer"
    assert repo_of("registry:5000/team/trainer@sha256:abc") == "registry:5000/team/trainer"


# --------------------------------------------------------------------------------------------
# Bad input: one line each, nothing built
# --------------------------------------------------------------------------------------------


def test_a_missing_builder_is_a_one_line_error(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _copy_context(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    result = cli("build")
    assert result.code == 1 and result.err.count("\n") == 1
    assert "no container builder found" in result.err and "install-docker.sh" in result.err
    result = cli("build", "--builder", "podman")
    assert result.code == 1 and result.err.count("\n") == 1 and "podman is not installed" in result.err


def test_unknown_builder_and_missing_dockerfile_are_usage_errors(cli) -> None:
    assert "is not one of docker, podman, buildah" in cli("build", "--builder", "kaniko").err
    result = cli("build")  # the cli fixture runs in an empty directory: no Dockerfile, no project either
    assert result.code == 2 and "nothing to build in" in result.err and "no Dockerfile" in result.err


def test_load_kind_without_kind_fails_before_building(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _copy_context(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text("#!/bin/sh\necho docker-was-called >> \"$(dirname \"$0\")/calls\"\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    result = cli("build", "--load-kind", "dev")
    assert result.code == 1 and "kind is not installed" in result.err
    assert not (bin_dir / "calls").exists()  # no build was started


# --------------------------------------------------------------------------------------------
# Real builds (Docker engine + the local CPU base image)
# --------------------------------------------------------------------------------------------


PROBE = (  # the user, a writable home, the trainer, and torch/torchvision as pinned for the venv too
    "id -u && touch /workspace/w && python3 -m ddpctl_trainer --help | head -1 && python3 -c "
    "\"import torch, torchvision; print('torch', torch.__version__.split('+')[0], torchvision.__version__)\""
)
# What a pod's start imports, in a read-only root as the pod's: the modules it loaded from source
# without bytecode, each of which every start compiles again (it cost ~1.7 CPU-s per process)
BYTECODE_PROBE = (
    "import importlib.util, os, sys, torch, torch.distributed.run, ddpctl_trainer.main\n"
    "src = [f for m in list(sys.modules.values()) if (f := getattr(m, '__file__', None) or '').endswith('.py')]\n"
    "src = [f for f in src if os.path.isabs(f)]  # torch.ops and torch.classes name a bare _ops.py\n"
    "print(len(src), [f for f in src if not os.path.exists(importlib.util.cache_from_source(f))])"
)


@pytest.mark.docker
@pytest.mark.slow
def test_build_of_the_real_dockerfile_on_the_cpu_base() -> None:
    require_docker_and_base()
    result = _ddpctl("build", "--base-image", BASE_IMAGE, "--repo", "ddpctl-trainer-test")
    assert result.returncode == 0, result.stderr[-3000:]
    tag = result.stdout.strip()
    assert re.fullmatch(r"ddpctl-trainer-test:[0-9a-f]{12}", tag)
    assert (
        tag
        == _ddpctl("build", "--print-tag", "--base-image", BASE_IMAGE, "--repo", "ddpctl-trainer-test").stdout.strip()
    )
    info = json.loads(
        subprocess.run(["docker", "image", "inspect", tag], capture_output=True, text=True, check=True).stdout
    )[0]
    config = info["Config"]
    assert config["User"] == "1000:1000"  # numeric non-root: runAsNonRoot can verify it
    assert config["Cmd"] == ["python3", "-m", "ddpctl_trainer.launch", "-m", "ddpctl_trainer"]
    assert not config.get("Entrypoint")
    assert config["WorkingDir"] == "/workspace"
    assert image_present("ddpctl-trainer-test:latest")
    probe = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            tag,
            "sh",
            "-c",
            PROBE,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines()[0] == "1000" and "usage: ddpctl-trainer" in probe.stdout
    pins = dict(
        line.split("=", 1) for line in (REPO / "scripts" / "torch-version.env").read_text().splitlines() if "=" in line
    )
    torch_line = probe.stdout.splitlines()[-1].split()
    assert torch_line[:2] == ["torch", pins["TORCH_VERSION"]], (
        "the image's torch is the venv's (scripts/torch-version.env)"
    )
    assert torch_line[2].split("+")[0] == pins["TORCHVISION_VERSION"]
    compiled = subprocess.run(["docker", "run", "--rm", "--read-only", tag, "python3", "-c", BYTECODE_PROBE],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    loaded, without = compiled.stdout.split(" ", 1)
    assert int(loaded) > 500 and without.strip() == "[]", compiled.stdout


@pytest.mark.docker
@pytest.mark.slow
def test_a_failed_build_is_one_line_with_the_log_tail_and_leaves_no_container(tmp_path: Path) -> None:
    require_docker_and_base()
    (tmp_path / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nRUN echo 'step output before the failure' && echo 'boom: compiler exploded' >&2 && exit "
        "3\n"
    )
    before = _containers()
    result = _ddpctl("build", "--quiet", cwd=tmp_path)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("ddpctl: error:")]
    # step 2 of 4: the engine counts each label ddpctl adds (the folder's code version, which folder) as a step
    assert len(errors) == 1 and "docker build of Dockerfile at step 2/4 (RUN echo" in errors[0], result.stderr
    assert "failed (exit code" in errors[0]
    assert "  | " in result.stderr and "boom: compiler exploded" in result.stderr  # the tail, even with --quiet
    assert _containers() - before == set()


@pytest.mark.docker
def test_a_base_image_that_does_not_exist_fails_in_one_line() -> None:
    skip_unless(docker_works(), "a running Docker engine (bash scripts/install-docker.sh)")
    before = _containers()
    result = _ddpctl("build", "--quiet", "--base-image", "ddpctl-no-such-base:0", "--repo", "ddpctl-trainer-test")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("ddpctl: error:")]
    assert len(errors) == 1 and "ddpctl-no-such-base" in errors[0], result.stderr
    assert _containers() - before == set()


# --------------------------------------------------------------------------------------------
# A user's project without a Dockerfile: its code on the trainer image
# --------------------------------------------------------------------------------------------


def _trainer_image() -> str:
    """The trainer image on the CPU base (what `ddpctl build` makes in ddpctl's own folder)."""
    result = _ddpctl("build", "--quiet", "--base-image", BASE_IMAGE, "--repo", "ddpctl-trainer-test")
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


@pytest.mark.docker
@pytest.mark.slow
def test_a_project_without_a_dockerfile_builds_its_code_on_the_trainer_image(tmp_path: Path) -> None:
    """A folder holding train.py, a helper module, requirements.txt and a .env: the image has the
    code at /workspace (the working directory, first on PYTHONPATH), the dependency layer, no .env,
    runs as uid 1000, is tagged after the folder (never ddpctl-trainer) with the code's hash, and
    no Dockerfile was written into the folder."""
    require_docker_and_base()
    trainer = _trainer_image()
    project = tmp_path / "My_Project"
    (project / "pkg").mkdir(parents=True)
    (project / "helper.py").write_text("CONSTANT = 'from the helper'\n")
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "train.py").write_text("import helper\nprint('pkg.train', helper.CONSTANT)\n")
    (project / "train.py").write_text("import helper\nprint('train.py', helper.CONSTANT)\n")
    (project / "requirements.txt").write_text("tqdm  # the base has it: no network needed\n")
    (project / ".env").write_text("API_KEY=do-not-ship\n")
    result = _ddpctl("build", "--quiet", "--no-latest", "--base-image", trainer, cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    tag = result.stdout.strip()
    repo, _, suffix = tag.partition(":")
    assert repo == "my_project" and re.fullmatch(r"ws-[0-9a-f]{12}-[0-9a-f]{8}", suffix), tag
    assert "left out: .env (likely secrets" in result.stderr
    assert sorted(p.name for p in project.iterdir()) == [".env", "helper.py", "pkg", "requirements.txt", "train.py"]
    run = subprocess.run(
        ["docker", "run", "--rm", tag, "sh", "-c",
         "id -u && pwd && python3 train.py && python3 -m pkg.train && ls -A /workspace && touch /workspace/w"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:4] == ["1000", "/workspace", "train.py from the helper", "pkg.train from the helper"], lines
    assert ".env" not in lines[4:] and "helper.py" in lines[4:]
    again = _ddpctl("build", "--print-tag", "--base-image", trainer, cwd=project)
    assert again.stdout.strip() == tag  # the same folder, the same tag
    (project / "helper.py").write_text("CONSTANT = 'edited'\n")
    edited = _ddpctl("build", "--print-tag", "--base-image", trainer, cwd=project).stdout.strip()
    assert edited != tag and edited.split(":")[1][:15] != suffix[:15]  # the code's hash is in the tag


def test_write_dockerfile_hands_the_build_to_the_user(cli, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "requirements.txt").write_text("einops\n")
    r = cli("build", "--write-dockerfile")
    assert r.code == 0, r.err
    dockerfile = (tmp_path / "Dockerfile").read_text()
    assert "FROM ${BASE_IMAGE}" in dockerfile and "COPY --chown=0:0 . /workspace/" in dockerfile
    assert "pip install" in dockerfile and "requirements.txt" in dockerfile
    assert ".env" in (tmp_path / ".dockerignore").read_text().splitlines()
    again = cli("build", "--write-dockerfile")
    assert again.code == 2 and "exists; ddpctl build already builds from it" in again.err
