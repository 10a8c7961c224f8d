"""ddpctl.image.requirements and the build context `ddpctl build` writes from them, without an
engine: includes resolved into the context, local paths installed after the code, the dependency
layer keyed by the requirements alone, and torch pins held against the base image's torch."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ddpctl.errors import UsageError
from ddpctl.image import requirements as rq
from ddpctl.image.project import (
    GENERATED_CONSTRAINTS,
    GENERATED_LOCAL,
    GENERATED_REQUIREMENTS,
    dockerfile_text,
    generated_files,
    project_requirements,
    workspace_context,
)
from tests.support import REPO


def project(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "train.py").write_text("print('step 1')\n")
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


# (files, the dependency layer's lines, constraints, local paths)
CASES = {
    "none": ({}, (), (), ()),
    "plain": ({"requirements.txt": "tqdm==4.66  # progress\n\nnumpy\n"}, ("tqdm==4.66", "numpy"), (), ()),
    "include": ({"requirements.txt": "-r base.txt\nrich\n", "base.txt": "numpy\n"}, ("numpy", "rich"), (), ()),
    "include, long form": (
        {"requirements.txt": "--requirement=base.txt\n", "base.txt": "numpy\n"},
        ("numpy",),
        (),
        (),
    ),
    "nested, relative to the including file": (
        {"requirements.txt": "-r reqs/base.txt\n", "reqs/base.txt": "-r more.txt\nnumpy\n", "reqs/more.txt": "rich\n"},
        ("rich", "numpy"),
        (),
        (),
    ),
    "constraints": (
        {"requirements.txt": "-c constraints.txt\nnumpy\n", "constraints.txt": "numpy<3\n"},
        ("numpy",),
        ("numpy<3",),
        (),
    ),
    "an include cycle is read once": (
        {"requirements.txt": "-r a.txt\n", "a.txt": "-r requirements.txt\nnumpy\n"},
        ("numpy",),
        (),
        (),
    ),
    "-e . after the code": ({"requirements.txt": "-e .\nnumpy\n"}, ("numpy",), (), ("-e /workspace",)),
    "./pkg with extras and markers": (
        {"requirements.txt": "./pkg[fast] ; python_version > '3'\n", "pkg/setup.py": ""},
        (),
        (),
        ("/workspace/pkg[fast] ; python_version > '3'",),
    ),
    "file: paths": (
        {"requirements.txt": "file:pkg\nmine @ file:./pkg\n", "pkg/setup.py": ""},
        (),
        (),
        ("file:///workspace/pkg", "mine @ file:///workspace/pkg"),
    ),
    "continuation and options": (
        {"requirements.txt": "--index-url https://pypi.example/simple\nnumpy \\\n  >=1.26\n"},
        ("--index-url https://pypi.example/simple", "numpy >=1.26"),
        (),
        (),
    ),
    "an editable VCS URL is a dependency": (
        {"requirements.txt": "-e git+https://example.com/a.git#egg=a\n"},
        ("-e git+https://example.com/a.git#egg=a",),
        (),
        (),
    ),
    "pyproject's dependencies": (
        {"pyproject.toml": '[project]\nname = "x"\ndependencies = ["rich>=13"]\n', "requirements.txt": "numpy\n"},
        ("numpy", "rich>=13"),
        (),
        (),
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_what_each_step_installs(tmp_path: Path, case: str) -> None:
    files, install, constraints, local = CASES[case]
    reqs = project_requirements(project(tmp_path / "p", files))
    assert (reqs.install, reqs.constraints, reqs.local) == (install, constraints, local)


# (files, what the one-line error names)
REFUSED = {
    "a missing include": ({"requirements.txt": "numpy\n-r base.txt\n"}, "requirements.txt:2: -r base.txt: no "),
    "a URL include": ({"requirements.txt": "-r https://example.com/r.txt\n"}, "requirements.txt:1: -r https://"),
    "an include outside the project": ({"requirements.txt": "-c ../c.txt\n"}, "outside the project folder"),
    "a missing local path": ({"requirements.txt": "-e ./gone\n"}, "requirements.txt:1: -e ./gone: no ./gone"),
    "a local path outside the project": ({"requirements.txt": "../other\n"}, "outside the project folder"),
    "a local path as a constraint": (
        {"requirements.txt": "-c c.txt\n", "c.txt": "-e .\n"},
        "c.txt:1: -e .: a local path cannot be a constraint",
    ),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_what_cannot_be_resolved_is_one_line(tmp_path: Path, case: str) -> None:
    files, names = REFUSED[case]
    (tmp_path / "c.txt").write_text("numpy\n")
    with pytest.raises(UsageError) as err:
        project_requirements(project(tmp_path / "p", files))
    assert names in str(err.value) and "\n" not in str(err.value)


def test_the_context_holds_the_flattened_files_and_installs_local_paths_after_the_code(tmp_path: Path) -> None:
    folder = project(
        tmp_path / "p",
        {
            "requirements.txt": "-r base.txt\n-c constraints.txt\n-e .\n",
            "base.txt": "numpy\n",
            "constraints.txt": "numpy<3\n",
            "pyproject.toml": '[project]\nname = "p"\nversion = "0"\n',
        },
    )
    with workspace_context(folder, "ddpctl-base:cpu", {}) as ws:
        text = ws.dockerfile.read_text()
        written = {p.name: p.read_text() for p in ws.context.iterdir() if p.suffix == ".txt"}
    assert written == {
        GENERATED_REQUIREMENTS: f"-c {GENERATED_CONSTRAINTS}\nnumpy\n",
        GENERATED_CONSTRAINTS: "numpy<3\n",
        GENERATED_LOCAL: f"-c {GENERATED_CONSTRAINTS}\n-e /workspace\n",
    }
    deps, code, local = (text.index(f"-r /tmp/ddpctl/{GENERATED_REQUIREMENTS}"), text.index("ADD "),
                         text.index(f"-r /tmp/ddpctl/{GENERATED_LOCAL}"))  # fmt: skip
    assert deps < code < local < text.index("chown 1000:1000")


def test_the_dependency_layer_is_keyed_by_the_requirements_not_the_local_lines(tmp_path: Path) -> None:
    def deps_layer(requirements: str) -> tuple[str, str]:
        """The dependency layer's steps and the one file they copy: what its cache key is made of."""
        reqs = project_requirements(project(tmp_path / "p", {"requirements.txt": requirements, "pkg/setup.py": ""}))
        return dockerfile_text("b", (), "ab" * 32, reqs=reqs).split("ADD ", 1)[0], generated_files(reqs)[
            GENERATED_REQUIREMENTS
        ]

    assert deps_layer("numpy\n-e .\n") == deps_layer("numpy\n./pkg\n")
    assert deps_layer("numpy\n") != deps_layer("rich\n")


def test_an_owned_dockerfile_installs_includes_from_the_copied_folder(tmp_path: Path) -> None:
    reqs = project_requirements(project(tmp_path / "p", {"requirements.txt": "-r base.txt\n", "base.txt": "x\n"}))
    text = dockerfile_text("b", reqs.install, "", owned=True, reqs=reqs)
    assert text.index("COPY --chown=0:0 .") < text.index("cd /workspace && (python3 -m pip install")


# (requirement, the base image, its torch as the engine's label names it, refused?)
PINS = {
    "a pin the image does not satisfy": ("torch==2.1.0", "ddpctl-trainer:latest", None, True),
    "a pin the image satisfies": ("torch>=2.4", "ddpctl-trainer:latest", None, False),
    "~= the image satisfies": ("torch~=2.14.0", "ddpctl-base:cpu", None, False),
    "< the image does not satisfy": ("torchvision<0.20", "registry.example/ddpctl-trainer:v2", None, True),
    "a +cpu suffix is ignored": (f"torch=={rq.TORCH_VERSION}+cpu", "ddpctl-trainer:latest", None, False),
    "a +cu121 suffix on >= is ignored": ("torch>=2.15+cu121", "ddpctl-trainer:latest", None, True),
    "an unpinned torch": ("torch", "ddpctl-trainer:latest", None, False),
    "a marker for another platform": ("torch==2.1.0; sys_platform == 'darwin'", "ddpctl-trainer:latest", None, False),
    "the official image's tag": ("torch==2.14.1", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", None, True),
    "a local image's label": ("torch==2.1.0", "me/base:1", "torch 2.3.0+cpu, torchvision 0.18.0", True),
    "a local image's label, satisfied": ("torch<2.4", "me/base:1", "torch 2.3.0+cpu, torchvision 0.18.0", False),
}


@pytest.mark.parametrize("case", PINS, ids=list(PINS))
def test_a_torch_pin_against_the_base_image(tmp_path: Path, case: str) -> None:
    line, base, label, refused = PINS[case]
    reqs = project_requirements(project(tmp_path / "p", {"requirements.txt": line + "\n"}))
    asked: list[str] = []

    def look_up(image: str) -> dict[str, str] | None:
        asked.append(image)
        return rq.parse_torch_label(label) if label else None

    if refused:
        with pytest.raises(UsageError) as err:
            rq.check_torch_pins(reqs, base, look_up=look_up)
        text = str(err.value)
        assert "requirements.txt:1" in text and "drop the pin" in text and "--base-image" in text
    else:
        assert rq.check_torch_pins(reqs, base, look_up=look_up) == []
    assert asked == ([base] if label else [])  # ddpctl's own images and the official tags: no engine asked


def test_an_unknown_base_torch_is_one_note_and_the_build_goes_on(tmp_path: Path) -> None:
    reqs = project_requirements(project(tmp_path / "p", {"requirements.txt": "torch==2.1.0\n"}))
    notes = rq.check_torch_pins(reqs, "me/base:1", look_up=lambda image: None)
    assert len(notes) == 1 and "not known" in notes[0] and "torch==2.1.0" in notes[0]


def test_the_torch_ddpctl_knows_is_the_one_its_images_are_made_with() -> None:
    pins = dict(
        line.split("=", 1) for line in (REPO / "scripts" / "torch-version.env").read_text().splitlines() if "=" in line
    )
    assert (pins["TORCH_VERSION"], pins["TORCHVISION_VERSION"]) == (rq.TORCH_VERSION, rq.TORCHVISION_VERSION)


@pytest.mark.parametrize(
    ("requirements", "named"),
    [
        ("", None),
        ("tqdm\nnumpy>=1.26\ntorch\n-e .\n", None),
        ("rich\nwandb==0.17\n", "rich, wandb"),
        ("torch==2.1.0\n", "torch==2.1.0 (it has"),
    ],
)
def test_what_the_trainer_image_lacks(tmp_path: Path, requirements: str, named: str | None) -> None:
    folder = project(tmp_path / "p", {"requirements.txt": requirements})
    warning = rq.trainer_image_lacks(folder, "ddpctl-trainer:latest")
    if named is None:
        assert warning is None
    else:
        assert warning is not None and named in warning and "ddpctl build" in warning


def test_render_with_a_workspace_warns_of_what_the_trainer_image_lacks(cli, tmp_path: Path) -> None:
    project(tmp_path, {"requirements.txt": "numpy\nrich>=13\n"})
    r = cli("render", "--script", "train.py", "--workspace", ".")
    assert r.code == 0, r.err
    assert "ddpctl: warning: the image ddpctl-trainer" in r.err and "lacks" in r.err and ": rich " in r.err
    assert "ddpctl build" in r.err
    (tmp_path / "requirements.txt").write_text("numpy\n")
    assert "lacks" not in cli("render", "--script", "train.py", "--workspace", ".").err


@pytest.mark.parametrize(
    ("image", "requirements", "said"),
    [
        ("ddpctl-trainer:latest", "rich\n", ["warning: the image ddpctl-trainer:latest lacks", ": rich "]),
        # in the local engine: every package it lacks by name, a version it does not allow with its own
        (
            "me/app:v1",
            "rich\ntqdm\nnumpy>=2\ntorch>=2.6\n",
            [
                "warning: the image me/app:v1 lacks",
                ": rich, numpy>=2 (it has 1.26.4), torch>=2.6 (it has 2.5.1+cu124) ",
            ],
        ),
        ("me/app:v1", "tqdm>=4\nPyYAML\ntorch\nlocal-pkg\n", []),  # all held, names compared as pip does
        # only in a registry: one note; a pytorch/pytorch tag's torch is known by its name
        (
            "reg.example.com/me/app:v1",
            "rich\n",
            [
                "note: the image reg.example.com/me/app:v1 is not in the local docker engine: whether it holds the "
                "workspace's requirements was not checked"
            ],
        ),
        (
            "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
            "torch>=2.6\n",
            ["warning: the image pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime does not", "(it has 2.5.1)", "note: "],
        ),
    ],
)
def test_what_submit_says_an_image_lacks_for_a_workspace(
    tmp_path: Path, fake_engine, image: str, requirements: str, said: list[str]
) -> None:
    fake_engine.add("me/app:v1", IMAGE_FILES, env=["PATH=/opt/conda/bin:/usr/local/sbin:/usr/bin"])
    folder = project(tmp_path / "p", {"requirements.txt": requirements})
    lines = rq.image_lacks(folder, image, image.startswith("ddpctl-trainer"))
    text = "\n".join(lines)
    assert all(part in text for part in said) and bool(lines) == bool(said), lines
    assert len(lines) <= 2 and all("\n" not in line for line in lines)


# an image's file system: conda's Python, a Debian one, and the packages' metadata folders' names
IMAGE_FILES = {
    "/opt/conda/lib/libz.so": "x",
    "/opt/conda/lib/python3.11/os.py": "x",
    "/opt/conda/lib/python3.11/site-packages/torch/__init__.py": "x",
    "/opt/conda/lib/python3.11/site-packages/torch/version.py": "__version__ = '2.5.1+cu124'\ncuda = '12.4'\n",
    "/opt/conda/lib/python3.11/site-packages/torch-2.5.1+cu124.dist-info/METADATA": "x",
    "/opt/conda/lib/python3.11/site-packages/tqdm-4.66.5.dist-info/METADATA": "x",
    "/opt/conda/lib/python3.11/site-packages/numpy-1.26.4.dist-info/METADATA": "x",
    "/opt/conda/lib/python3.11/site-packages/PyYAML-6.0.1-py3.11.egg-info/PKG-INFO": "x",
    "/opt/conda/lib/python3.11/site-packages/local_pkg.egg-link": "/src",
    "/opt/conda/lib/zz-after/x": "x",
    "/usr/lib/python3/dist-packages/six-1.16.0.egg-info": "x",
}


def test_an_images_packages_are_read_once_per_image_id(tmp_path: Path, fake_engine) -> None:
    from ddpctl.image.contents import inspect, installed

    fake_engine.add("me/app:v1", IMAGE_FILES, env=["PATH=/opt/conda/bin:/usr/bin"])
    found = inspect("docker", "me/app:v1")
    assert found is not None
    held = installed(found)
    assert held == {
        "local-pkg": "", "numpy": "1.26.4", "pyyaml": "6.0.1", "six": "1.16.0", "torch": "2.5.1+cu124",
        "tqdm": "4.66.5",
    }  # fmt: skip
    creates = len(fake_engine.calls("create"))
    assert installed(found) == held and len(fake_engine.calls("create")) == creates == 1


def test_a_listing_cut_short_is_not_cached(tmp_path: Path, fake_engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of a site folder that failed (the engine's error, the time limit) says nothing of the
    image for good: the next look asks the engine again."""
    from ddpctl.image import contents

    real_walk = contents._Container.walk

    def cut_short(self: contents._Container, path: str, keep: Any) -> bool:
        real_walk(self, path, keep)
        return not path.endswith("site-packages")

    monkeypatch.setattr(contents._Container, "walk", cut_short)
    fake_engine.add("me/app:v1", IMAGE_FILES, env=["PATH=/opt/conda/bin:/usr/bin"])
    found = contents.inspect("docker", "me/app:v1")
    assert found is not None
    assert contents.installed(found) == {"six": "1.16.0"}  # what could be read: the dist-packages
    contents.installed(found)
    assert len(fake_engine.calls("create")) == 2


@pytest.mark.parametrize(
    ("image", "pin", "refused"),
    [
        ("me/base:1", "torch==2.1.0", "torch==2.1.0, but the base image me/base:1 has torch 2.5.1+cu124"),
        ("me/base:1", "torch>=2.5", None),  # the local suffix is ignored
        ("me/base:1", "torchvision<0.20", "torchvision<0.20, but the base image me/base:1 has torchvision 0.20.1"),
        ("me/labelled:1", "torch==2.1.0", "has torch 2.14.1"),  # our label first: nothing copied out
    ],
)
def test_a_local_base_images_torch_is_read_from_its_files(
    tmp_path: Path, fake_engine, image: str, pin: str, refused: str | None
) -> None:
    site = "/usr/local/lib/python3.11/site-packages"
    fake_engine.add(
        "me/base:1",
        {
            f"{site}/torch/version.py": "from typing import Optional\n__version__ = '2.5.1+cu124'\ngit_version = 'x'\n",
            f"{site}/torchvision/version.py": "__version__ = '0.20.1'\n",
        },
        env=["PATH=/usr/local/bin:/usr/bin"],
    )
    fake_engine.add("me/labelled:1", {}, labels={rq.TORCH_LABEL: "torch 2.14.1, torchvision 0.29.1"})
    reqs = rq.read_requirements(project(tmp_path / "p", {"requirements.txt": pin + "\n"}))
    if refused is None:
        assert rq.check_torch_pins(reqs, image) == []
    else:
        with pytest.raises(UsageError, match=re.escape(refused)):
            rq.check_torch_pins(reqs, image)
    if image == "me/labelled:1":
        assert fake_engine.calls("create") == []


def test_a_local_image_without_torch_is_a_note_and_its_answer_is_cached(tmp_path: Path, fake_engine) -> None:
    fake_engine.add("me/slim:1", {"/usr/local/lib/python3.11/os.py": "x"})
    reqs = rq.read_requirements(project(tmp_path / "p", {"requirements.txt": "torch==2.1.0\n"}))
    for _ in range(2):
        notes = rq.check_torch_pins(reqs, "me/slim:1")
        assert len(notes) == 1 and "torch of the base image me/slim:1 is not known" in notes[0]
    assert len(fake_engine.calls("create")) == 1
