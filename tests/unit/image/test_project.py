"""ddpctl.image.project, without a container engine: which build a folder gets (its own
Dockerfile, or its code on the trainer image), the label that says which code an image built
from a folder's own Dockerfile carries, and the dependencies a generated Dockerfile installs.
Real builds are in tests/e2e/test_build_docker.py and the real-node tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.image.contents import WORKSPACE_LABEL
from ddpctl.image.project import dependencies, dockerfile_text, folder_identity, plan_image
from ddpctl.workspace.pack import version_of
from tests.support import REPO


def _plan(folder: Path, path: str) -> tuple[dict[str, str], list[str], bool]:
    """(labels, argv, whether the code went on the trainer image) of `ddpctl build` in `folder`."""
    import os

    old = os.environ["PATH"]
    os.environ["PATH"] = path
    try:
        with plan_image(builder=None, dockerfile=None, context=folder, repo="me/app", spec_repo="", build_args={},
                        base_image=None, latest=False) as (plan, packed):  # fmt: skip
            return dict(plan.labels), plan.argv(), packed is not None
    finally:
        os.environ["PATH"] = old


@pytest.fixture
def docker_on_path(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "docker").chmod(0o755)
    return str(bin_dir)


def own_project(folder: Path) -> Path:
    folder.mkdir()
    (folder / "Dockerfile").write_text("FROM pytorch/pytorch:2.5.1\nWORKDIR /app\nCOPY . .\n")
    (folder / "train.py").write_text("print('step 1')\n")
    (folder / ".env").write_text("TOKEN=x\n")
    return folder


def test_an_image_built_from_a_folders_own_dockerfile_carries_its_code_hash(tmp_path: Path, docker_on_path) -> None:
    folder = own_project(tmp_path / "app")
    labels, argv, on_trainer = _plan(folder, docker_on_path)
    assert not on_trainer
    assert labels == {WORKSPACE_LABEL: version_of(folder), **folder_identity(folder)}  # the code, and whose
    assert f"{WORKSPACE_LABEL}={version_of(folder)}" in argv and argv[argv.index("--label") + 1] in (
        f"{k}={v}" for k, v in labels.items()
    )
    before = version_of(folder)
    (folder / ".env").write_text("TOKEN=y\n")  # a likely secret: not code, not in the hash
    assert version_of(folder) == before
    (folder / "train.py").write_text("print('step 2')\n")
    assert version_of(folder) != before
    assert _plan(folder, docker_on_path)[0] == {WORKSPACE_LABEL: version_of(folder), **folder_identity(folder)}


def test_the_label_is_part_of_the_tag(tmp_path: Path) -> None:
    """One tag never names two images with different labels."""
    from ddpctl.image.build import content_hash

    folder = own_project(tmp_path / "app")
    hashes = {content_hash(folder, folder / "Dockerfile", {}, {WORKSPACE_LABEL: v})[0] for v in ("a", "b")}
    assert len(hashes) == 2
    assert content_hash(folder, folder / "Dockerfile", {}, {})[0] not in hashes


def test_ddpctls_own_dockerfile_builds_the_trainer_without_a_label(docker_on_path) -> None:
    labels, argv, on_trainer = _plan(REPO, docker_on_path)
    assert labels == {} and "--label" not in argv and not on_trainer


def test_a_folder_without_a_dockerfile_goes_on_the_trainer_image_with_the_label(tmp_path: Path) -> None:
    text = dockerfile_text("ddpctl-trainer:latest", ("tqdm",), "ab" * 32)
    assert f'LABEL {WORKSPACE_LABEL}="{"ab" * 32}"' in text and "WORKDIR /workspace" in text
    assert "pip install" in text and "pip install" not in dockerfile_text("b", (), "ab" * 32)


@pytest.mark.parametrize(
    ("requirements", "pyproject", "found"),
    [
        ("", None, ()),
        ("tqdm==4.66  # progress\n# a comment\n\nnumpy\n", None, ("tqdm==4.66", "numpy")),
        ("tqdm\n", '[project]\nname = "x"\ndependencies = ["tqdm", "rich>=13"]\n', ("tqdm", "rich>=13")),
        (None, '[project]\nname = "x"\n', ()),
    ],
)
def test_the_dependencies_of_a_project(
    tmp_path: Path, requirements: str | None, pyproject: str | None, found: tuple[str, ...]
) -> None:
    if requirements is not None:
        (tmp_path / "requirements.txt").write_text(requirements)
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    assert dependencies(tmp_path) == found


def test_a_link_out_of_the_folder_or_to_nothing_never_fails_the_build_for_the_label(
    tmp_path: Path, docker_on_path
) -> None:
    """The folder's own Dockerfile decides what its image holds; the label only names the version,
    and such links are left out of it (the build itself sends what .dockerignore lets through)."""
    folder = own_project(tmp_path / "app")
    before = version_of(folder)
    (folder / "data").symlink_to(tmp_path)  # a dataset folder linked in from elsewhere
    (folder / "stale.txt").symlink_to(folder / "gone.txt")
    labels, _argv, on_trainer = _plan(folder, docker_on_path)
    assert not on_trainer and labels == {WORKSPACE_LABEL: before, **folder_identity(folder)}


def test_a_project_image_tag_is_compared_whatever_links_the_folder_holds(tmp_path: Path) -> None:
    from ddpctl.engines import plan_for
    from ddpctl.manifests.shipment import code_not_carried
    from ddpctl.spec import JobSpec
    from ddpctl.workspace.pack import version_of

    folder = own_project(tmp_path / "app")
    image = f"app:ws-{version_of(folder)[:12]}-0123abcd"
    (folder / "stale.txt").symlink_to(folder / "gone.txt")
    plan = plan_for(JobSpec.from_dict({"script": "train.py", "image": image}))
    assert code_not_carried(plan, folder) is None


def test_a_build_without_a_dockerfile_names_a_fix_that_exists(tmp_path: Path) -> None:
    """The packed build refuses a link out of the folder (it would not be in the image), naming
    .dockerignore: `ddpctl build` has no `build.exclude`."""
    from ddpctl.errors import SpecError
    from ddpctl.image.project import workspace_context

    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "train.py").write_text("print('step 1')\n")
    (folder / "data").symlink_to(tmp_path)
    with pytest.raises(SpecError) as raised, workspace_context(folder, None, {}):
        pass
    assert "leave it out with .dockerignore" in str(raised.value) and "build.exclude" not in str(raised.value)
