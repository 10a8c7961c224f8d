"""What `submit` reads from a user's own image in the local engine, against a fake engine
(fake_engine.py): whether the file torchrun will run is there (WORKDIR + --script, an absolute
path as given) whatever the current folder holds, which packages it lacks for a workspace's
requirements, and its torch. The real engine's answers are in test_contents.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.image.contents import WORKSPACE_LABEL
from tests.unit.image.fake_engine import FakeEngine

SUBMIT = ("submit", "--dry-run=client", "--no-lint", "--target", "job")


@pytest.mark.parametrize(
    ("args", "here", "path"),
    [
        (["--script", "train.py"], False, "/app/train.py"),  # not in this folder: looked for all the same
        (["--script", "train.py"], True, "/app/train.py"),
        (["--script", "/opt/code/train.py"], False, "/opt/code/train.py"),  # absolute: as given
        (["--command", "python /srv/run.py"], False, "/srv/run.py"),
    ],
)
def test_a_local_image_without_the_file_is_exit_2_whatever_this_folder_holds(
    cli, fake_engine: FakeEngine, tmp_path: Path, args: list[str], here: bool, path: str
) -> None:
    fake_engine.add("me/app:v1", {"/app/other.py": "x"}, workdir="/app")
    if here:
        (tmp_path / "train.py").write_text("print('step 1')\n")
    r = cli(*SUBMIT, "--image", "me/app:v1", *args)
    assert r.code == 2, r.err
    assert r.err.startswith(f"ddpctl: error: {args[0]}: the image me/app:v1 has no {path}"), r.err
    assert '"No such file"' in r.err and len(r.err.splitlines()) == 1


@pytest.mark.parametrize(
    "args", [["--script", "train.py"], ["--script", "/opt/code/train.py"], ["--command", "python /srv/run.py"]]
)
def test_a_local_image_with_the_file_goes(cli, fake_engine: FakeEngine, args: list[str]) -> None:
    files = {"/app/train.py": "x", "/opt/code/train.py": "x", "/srv/run.py": "x"}
    fake_engine.add("me/app:v1", files, workdir="/app")
    r = cli(*SUBMIT, "--image", "me/app:v1", *args)
    assert r.code == 0, r.err
    assert "created (dry run)" in r.out and "has no" not in r.err


def test_an_image_only_in_a_registry_is_said_not_checked_in_one_line(cli, fake_engine: FakeEngine) -> None:
    r = cli(*SUBMIT, "--image", "reg.example.com/me/app:v1", "--script", "/opt/code/train.py")
    assert r.code == 0, r.err
    assert (
        "ddpctl: note: the image reg.example.com/me/app:v1 is not in the local docker engine: whether it holds "
        "/opt/code/train.py was not checked"
    ) in r.err
    assert fake_engine.calls("create") == []


def test_the_trainer_image_and_project_images_are_not_looked_into(cli, fake_engine: FakeEngine) -> None:
    for image in ("ddpctl-trainer:latest", "app:ws-0123456789ab-0123abcd"):
        r = cli(*SUBMIT, "--image", image, "--script", "/opt/code/train.py")
        assert r.code == 0, r.err
    assert fake_engine.calls() == []


def test_submit_workspace_names_the_packages_a_local_image_lacks(cli, fake_engine: FakeEngine, tmp_path) -> None:
    files = {
        "/usr/local/lib/python3.12/site-packages/torch-2.6.0.dist-info/METADATA": "x",
        "/usr/local/lib/python3.12/site-packages/numpy-2.1.0.dist-info/METADATA": "x",
    }
    fake_engine.add("me/app:v1", files, workdir="/app", env=["PATH=/usr/local/bin:/usr/bin"])
    (tmp_path / "train.py").write_text("print('step 1')\n")
    (tmp_path / "requirements.txt").write_text("torch>=2.4\nnumpy\nwandb\ntransformers==4.44\n")
    r = cli(*SUBMIT, "--image", "me/app:v1", "--script", "train.py", "--workspace", ".")
    assert r.code == 0, r.err
    assert (
        "ddpctl: warning: the image me/app:v1 lacks what the workspace's requirements ask for: wandb, transformers "
        "(--workspace ships code, not packages)"
    ) in r.err, r.err


def test_the_older_version_is_the_built_folders(cli, fake_engine: FakeEngine, tmp_path: Path, monkeypatch) -> None:
    """The label names the folder `ddpctl build` hashed; submit in a subfolder compares it with
    that folder, not with the subfolder (which would always differ)."""
    from ddpctl.image.project import folder_identity
    from ddpctl.workspace.pack import version_of

    project = tmp_path / "project"  # not tmp_path: the fake engine's log is there
    (project / "sub").mkdir(parents=True)
    (project / "train.py").write_text("print('step 1')\n")
    labels = {WORKSPACE_LABEL: version_of(project), **folder_identity(project)}
    fake_engine.add(
        "me/app:v1",
        {"/app/train.py": "x", "/app/sub/train.py": "x", "/app/project/train.py": "x"},
        workdir="/app",
        labels=labels,
    )
    for where in (project, project / "sub"):
        monkeypatch.chdir(where)
        r = cli(*SUBMIT, "--image", "me/app:v1", "--script", "train.py")
        assert r.code == 0 and "older version" not in r.err, r.err
    monkeypatch.chdir(project)
    (project / "train.py").write_text("print('step 2')\n")
    r = cli(*SUBMIT, "--image", "me/app:v1", "--script", "train.py")
    assert r.code == 0 and "carries an older version of this folder's code" in r.err, r.err
    monkeypatch.chdir(tmp_path)  # above the folder built: not it, nothing to compare with, nothing said
    r = cli(*SUBMIT, "--image", "me/app:v1", "--script", "project/train.py")
    assert r.code == 0 and "older version" not in r.err, r.err
