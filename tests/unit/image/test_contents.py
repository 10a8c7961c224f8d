"""ddpctl.image.contents against the real Docker engine: what `submit` says of a user's own image
before anything is created. The images are `FROM scratch` (a file or two, a WORKDIR, a label), so
they build in a second from nothing and no container of them could ever start."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpctl.errors import UsageError
from ddpctl.image.contents import WORKSPACE_LABEL, Wanted, cache_file, check_code_in_image, has_path, inspect
from tests.support import skip_unless
from tests.support.docker import docker_works

REPO = "ddpctl-contents-test"
CURRENT, OLDER = "c" * 64, "0" * 64
IMAGES = {
    # tag: (Dockerfile lines after FROM scratch, files in the context)
    "app": (["WORKDIR /app", "COPY . ."], ["train.py", "src/train.py"]),
    "elsewhere": (["WORKDIR /srv", "COPY . /app/"], ["train.py"]),
    "root": (["COPY train.py /train.py"], ["train.py"]),  # no WORKDIR: the command runs in /
    "current": (["WORKDIR /app", "COPY . .", f"LABEL {WORKSPACE_LABEL}={CURRENT}"], ["train.py"]),
    "older": (["WORKDIR /app", "COPY . .", f"LABEL {WORKSPACE_LABEL}={OLDER}"], ["train.py"]),
}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    skip_unless(docker_works(), "a running Docker engine (bash scripts/install-docker.sh)")
    made = {}
    for tag, (lines, names) in IMAGES.items():
        ctx = tmp_path_factory.mktemp(tag)
        for name in names:
            (ctx / name).parent.mkdir(parents=True, exist_ok=True)
            (ctx / name).write_text("print('step 1')\n")
        (ctx / "Dockerfile").write_text("\n".join(["FROM scratch", *lines]) + "\n")
        image = f"{REPO}:{tag}"
        subprocess.run(["docker", "build", "-q", "-t", image, str(ctx)], check=True, capture_output=True)
        made[tag] = image
    yield made
    subprocess.run(["docker", "image", "rm", "--force", *made.values()], capture_output=True, check=False)


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def check(image: str, relative: str = "train.py") -> list[str]:
    return check_code_in_image(image, Wanted("--script", relative), folder_hash=lambda labels: CURRENT, engine="docker")


@pytest.mark.parametrize(
    ("tag", "relative", "notes"),
    [
        ("app", "train.py", []),
        ("app", "./src/train.py", []),
        ("root", "train.py", []),
        ("current", "train.py", []),  # built from this folder's current code
        ("older", "train.py", ["warning: the image ddpctl-contents-test:older carries an older version"]),
    ],
)
def test_a_local_image_that_holds_the_script_goes(images: dict[str, str], tag: str, relative: str, notes: list[str]):
    said = check(images[tag], relative)
    assert [n[: len(notes[0])] for n in said] == notes if notes else said == []
    if notes:  # a warning, not a refusal: the file is there, only older
        assert f"workspace {OLDER[:12]}, now {CURRENT[:12]}" in said[0] and "ddpctl build" in said[0]


@pytest.mark.parametrize(
    ("tag", "relative", "workdir", "path"),
    [
        ("elsewhere", "train.py", "/srv", "/srv/train.py"),  # copied to /app, but the WORKDIR is /srv
        ("app", "missing.py", "/app", "/app/missing.py"),
        ("root", "src/train.py", "/", "/src/train.py"),
    ],
)
def test_a_local_image_without_the_script_is_exit_2_naming_image_workdir_and_path(
    images: dict[str, str], tag: str, relative: str, workdir: str, path: str
) -> None:
    with pytest.raises(UsageError) as caught:
        check(images[tag], relative)
    message = str(caught.value)
    assert message.startswith(f"--script: the image {images[tag]} has no {path} (its WORKDIR {workdir} + {relative})")
    assert '"No such file"' in message and f"COPY . {workdir}/" in message and "--workspace ." in message
    assert "\n" not in message


def test_an_image_not_in_the_local_engine_is_said_not_checked_and_goes() -> None:
    skip_unless(docker_works(), "a running Docker engine (bash scripts/install-docker.sh)")
    said = check("registry.example.com/me/app:v1")
    assert said == [
        "note: the image registry.example.com/me/app:v1 is not in the local docker engine: whether it holds "
        "train.py in its WORKDIR was not checked"
    ]


def test_without_docker_or_podman_it_is_said_not_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither engine is on it
    said = check_code_in_image("me/app:v1", Wanted("--script", "train.py"), folder_hash=lambda labels: CURRENT)
    assert said == ["note: no docker or podman here: whether the image me/app:v1 holds train.py was not checked"]


def test_the_answer_is_cached_by_image_id(images: dict[str, str]) -> None:
    """The second look reads the cache, keyed by the image's ID: an answer planted there is what comes
    back (so no container was made for it), and another image's ID is another key."""
    found = inspect("docker", images["app"])
    assert found is not None and found.id.startswith("sha256:") and found.workdir == "/app"
    assert has_path(found, "/app/train.py") is True
    cached = json.loads(cache_file().read_text())
    assert cached == {f"{found.id}\0/app/train.py": True}
    cache_file().write_text(json.dumps({f"{found.id}\0/app/train.py": False}))
    assert has_path(found, "/app/train.py") is False
    other = inspect("docker", images["current"])
    assert other is not None and other.id != found.id and has_path(other, "/app/train.py") is True


# ------------------------------------------------------------------------------ through the CLI


def project(folder: Path) -> None:
    (folder / "train.py").write_text("print('step 1')\n")


@pytest.mark.parametrize("dry_run", [["--dry-run=client"], []])
def test_submit_refuses_a_local_image_without_the_script_before_any_cluster_contact(
    cli, images: dict[str, str], tmp_path: Path, dry_run: list[str]
) -> None:
    """No kubeconfig here: the refusal comes first, in the dry run as in the real one."""
    project(tmp_path)
    r = cli("submit", "--script", "train.py", "--image", images["elsewhere"], "--no-lint", "--target", "job", *dry_run)
    assert r.code == 2, r.err
    assert r.err.startswith(f"ddpctl: error: --script: the image {images['elsewhere']} has no /srv/train.py"), r.err
    assert len(r.err.splitlines()) == 1 and "Traceback" not in r.err


def test_submit_takes_a_users_own_image_that_holds_the_script(cli, images: dict[str, str], tmp_path: Path) -> None:
    """Not a `ws-` tag, not built here: the image holds /app/train.py, so it goes (the old refusal,
    "not built from this folder", is gone); render says nothing of it and asks no engine."""
    project(tmp_path)
    r = cli("submit", "--script", "train.py", "--image", images["app"], "--no-lint", "--dry-run=client")
    assert r.code == 0, r.err
    assert "created (dry run)" in r.out and "not built from this folder" not in r.err and "image" not in r.err
    rendered = cli("render", "--script", "train.py", "--image", images["elsewhere"], "--no-lint")
    assert rendered.code == 0 and rendered.err == "", rendered.err


def test_submit_says_a_registry_only_image_was_not_checked_and_goes(cli, images: dict[str, str], tmp_path) -> None:
    project(tmp_path)
    image = "registry.example.com/me/app:v1"
    r = cli("submit", "--script", "train.py", "--image", image, "--no-lint", "--dry-run=client")
    assert r.code == 0, r.err
    assert f"ddpctl: note: the image {image} is not in the local docker engine" in r.err, r.err
