"""Which files of a folder ship: git's rules (held against git itself), Docker's, the spec's
excludes and includes, likely secrets, links, and what is never packed."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ddpctl.errors import SpecError
from ddpctl.workspace.select import SECRET_PATTERNS, select
from tests.support import skip_unless
from tests.unit.workspace.trees import Exec, Link, Tree, make_tree


@dataclass(frozen=True)
class Case:
    id: str
    tree: Tree
    files: list[str]
    secrets: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    include: list[str] = field(default_factory=list)


CASES = [
    Case(
        "nested .gitignore with negation: the deeper file wins, the last pattern in it",
        {
            ".gitignore": "*.log\nbuild/\n",
            "a.log": "x",
            "train.py": "x",
            "pkg/.gitignore": "!keep.log\n*.tmp\n",
            "pkg/keep.log": "x",
            "pkg/drop.tmp": "x",
            "pkg/other.log": "x",
            "pkg/deep/.gitignore": "*.py\n!main.py\n",
            "pkg/deep/main.py": "x",
            "pkg/deep/util.py": "x",
            "pkg/deep/keep.log": "x",
            "build/out.bin": "x",
        },
        files=[
            ".gitignore",
            "pkg/.gitignore",
            "pkg/deep/.gitignore",
            "pkg/deep/keep.log",
            "pkg/deep/main.py",
            "pkg/keep.log",
            "train.py",
        ],
        ignored=["a.log", "build/", "pkg/deep/util.py", "pkg/drop.tmp", "pkg/other.log"],
    ),
    Case(
        "an ignored folder is not entered: nothing below it can be re-included (git)",
        {".gitignore": "data/\n!data/keep.txt\n", "data/keep.txt": "x", "data/big.bin": "x", "a.py": "x"},
        files=[".gitignore", "a.py"],
        ignored=["data/"],
    ),
    Case(
        "anchored and folder-only patterns",
        {
            ".gitignore": "/out\ncache/\nsrc/*.gen\n",
            "out": "x",
            "sub/out": "x",
            "cache": "a file named cache",
            "sub/cache/x": "x",
            "src/a.gen": "x",
            "src/deep/b.gen": "x",
        },
        files=[".gitignore", "cache", "src/deep/b.gen", "sub/out"],
        ignored=["out", "src/a.gen", "sub/cache/"],
    ),
    Case(
        ".dockerignore: Docker's rules (from the root, `**` for any depth, `!` re-includes)",
        {
            ".dockerignore": "# comment\n*.md\n!README.md\n**/*.pyc\n/docs\nnotes/**\n!notes/keep.txt\n",
            "README.md": "x",
            "CHANGES.md": "x",
            "sub/guide.md": "x",
            "a.pyc": "x",
            "sub/b.pyc": "x",
            "docs/index.html": "x",
            "notes/a.txt": "x",
            "notes/keep.txt": "x",
            "main.py": "x",
        },
        files=[".dockerignore", "README.md", "main.py", "notes/keep.txt", "sub/guide.md"],
        ignored=["CHANGES.md", "a.pyc", "docs/", "notes/a.txt", "sub/b.pyc"],
    ),
    Case(
        "workspace.exclude: git's syntax from the root, over every .gitignore",
        {".gitignore": "!data/\n", "data/x.csv": "x", "runs/1/log": "x", "a.py": "x", "sub/a.py": "x"},
        files=[".gitignore", "a.py"],
        ignored=["data/", "runs/", "sub/a.py"],
        exclude=["data/", "runs", "/sub/*.py"],
    ),
    Case(
        "likely secrets are left out; their templates are not secrets",
        {
            ".env": "K=v",
            ".env.production": "K=v",
            ".env.example": "K=",
            "certs/server.pem": "x",
            "certs/server.crt": "x",
            ".ssh/id_ed25519": "x",
            "conf/.kube/config": "x",
            "home/.config/gcloud/credentials.db": "x",
            "home/.config/other/x": "x",
            "home/.docker/config.json": "x",
            "home/.docker/daemon.json": "x",
            "id_rsa.pub": "x",
            "train.py": "x",
        },
        files=[
            ".env.example",
            "certs/server.crt",
            "home/.config/other/x",
            "home/.docker/daemon.json",
            "train.py",
        ],
        secrets=[
            ".env",
            ".env.production",
            ".ssh/",
            "certs/server.pem",
            "conf/.kube/",
            "home/.config/gcloud/",
            "home/.docker/config.json",
            "id_rsa.pub",
        ],
    ),
    Case(
        "a secret that .gitignore already leaves out is ignored, not reported as a secret",
        {".gitignore": ".env\n", ".env": "K=v", "a.py": "x"},
        files=[".gitignore", "a.py"],
        ignored=[".env"],
    ),
    Case(
        "workspace.include ships what it names: a secret, a file in a secret folder, an ignored file",
        {
            ".gitignore": "data/\n*.bin\n",
            ".env.production": "K=v",
            ".env": "K=v",
            ".kube/config": "x",
            ".kube/cache/x": "x",
            "data/labels.csv": "x",
            "data/raw.bin": "x",
            "w.bin": "x",
            "a.py": "x",
        },
        files=[".env.production", ".gitignore", ".kube/config", "a.py", "data/labels.csv", "w.bin"],
        secrets=[".env", ".kube/"],
        ignored=["data/"],
        include=[".env.production", ".kube/config", "/data/labels.csv", "w.bin"],
    ),
    Case(
        "including a folder ships all of it",
        {".ssh/id_rsa": "x", ".ssh/known_hosts": "x", "a.py": "x"},
        files=[".ssh/id_rsa", ".ssh/known_hosts", "a.py"],
        include=[".ssh/"],
    ),
    Case(
        ".git is never packed, nor a submodule's .git file; .gitignore and .dockerignore are",
        {
            ".git/config": "x",
            ".git/HEAD": "x",
            "vendor/lib/.git": "gitdir: ../../.git/modules/lib",
            "vendor/lib/a.py": "x",
        },
        files=["vendor/lib/a.py"],
    ),
    Case(
        "links that stay inside ship as what they point to; empty folders do not ship",
        {
            "real/a.py": "x",
            "real/run.sh": Exec("#!/bin/sh\n"),
            "alias.py": Link("real/a.py"),
            "mirror": Link("real"),
            "empty/": None,
        },
        files=["alias.py", "mirror/a.py", "mirror/run.sh", "real/a.py", "real/run.sh"],
    ),
    Case(
        "a link to a likely secret is one too: its target's path is judged as well as its name",
        {".env": "K=v", "config.txt": Link(".env"), "deep/settings.ini": Link("../.env"), "a.py": "x"},
        files=["a.py"],
        secrets=[".env", "config.txt", "deep/settings.ini"],
    ),
    Case(
        "a link to a file in a secret folder, or to the folder, is left out",
        {".aws/credentials": "x", "creds": Link(".aws/credentials"), "cloud": Link(".aws"), "a.py": "x"},
        files=["a.py"],
        secrets=[".aws/", "cloud/", "creds"],
    ),
    Case(
        "workspace.include ships a link to a secret by the link's name",
        {".env": "K=v", "config.txt": Link(".env"), "a.py": "x"},
        files=["a.py", "config.txt"],
        secrets=[".env"],
        include=["config.txt"],
    ),
    Case(
        "what credential scanners know by name: direnv, PuTTY keys, tokens, Terraform, secrets.*",
        {
            ".envrc": "export K=v",
            "key.ppk": "x",
            ".huggingface/token": "hf_x",
            "home/.cache/huggingface/token": "hf_x",
            "home/.cache/huggingface/stored_tokens": "[main]\nhf_token = hf_x\n",
            "home/.config/wandb/settings": "x",
            "infra/terraform.tfstate": "{}",
            "infra/terraform.tfstate.backup": "{}",
            "infra/prod.tfvars": "k = 1",
            "infra/prod.auto.tfvars.json": '{"k": 1}',
            "infra/prod.tfvars.example": "k = 0",
            "conf/secrets.yaml": "k: v",
            "conf/secrets.example.yaml": "k: ''",
            "app/secrets.py": "import os",
            "a.py": "x",
        },
        files=["a.py", "app/secrets.py", "conf/secrets.example.yaml", "infra/prod.tfvars.example"],
        secrets=[
            ".envrc",
            ".huggingface/token",
            "conf/secrets.yaml",
            "home/.cache/huggingface/stored_tokens",
            "home/.cache/huggingface/token",
            "home/.config/wandb/",
            "infra/prod.auto.tfvars.json",
            "infra/prod.tfvars",
            "infra/terraform.tfstate",
            "infra/terraform.tfstate.backup",
            "key.ppk",
        ],
    ),
    Case(
        "an ignored link may point anywhere: it is never followed",
        {".gitignore": "outside\n", "outside": Link("/etc/hostname"), "a.py": "x"},
        files=[".gitignore", "a.py"],
        ignored=["outside"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_select(case: Case, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "ws", case.tree)
    selection = select(root, exclude=case.exclude, include=case.include)
    assert [f.path for f in selection.files] == case.files
    assert list(selection.secrets) == case.secrets
    assert list(selection.ignored) == case.ignored


def test_files_come_in_the_archives_order(tmp_path: Path) -> None:
    """Folder by folder, by code point: `a/` before `a-b`, `a/z` before `a-b` (not a plain sort
    of the path strings, where `-` comes before `/`)."""
    root = make_tree(tmp_path / "ws", {"a-b": "x", "a/z": "x", "B": "x", "é": "x", "a/b/c": "x"})
    assert [f.path for f in select(root).files] == ["B", "a/b/c", "a/z", "a-b", "é"]


def test_a_link_to_an_executable_keeps_reading_the_target(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "ws", {"bin/run.sh": Exec("#!/bin/sh\n"), "run": Link("bin/run.sh")})
    files = {f.path: f.source for f in select(root).files}
    assert files["run"] == str((root / "bin" / "run.sh").resolve())


@pytest.mark.parametrize(
    ("tree", "named", "says"),
    [
        ({"data": Link("/etc")}, "data", "is a symbolic link to /etc, outside the workspace"),
        ({"sub/x.py": Link("../../elsewhere.py")}, "sub/x.py", "outside the workspace"),
        ({"gone.py": Link("missing.py")}, "gone.py", "is a symbolic link to nothing"),
        ({"a/up": Link("..")}, "a/up", "a folder above it (a loop)"),
    ],
    ids=["absolute", "relative-escape", "broken", "loop"],
)
def test_bad_links_are_one_line_usage_errors_naming_them(tree: Tree, named: str, says: str, tmp_path: Path) -> None:
    (tmp_path / "elsewhere.py").write_text("x")
    root = make_tree(tmp_path / "ws", tree)
    with pytest.raises(SpecError) as raised:
        select(root)
    error = raised.value
    assert error.exit_code == 2
    assert error.field == "workspace"
    assert "\n" not in str(error)
    assert str(error).startswith(f"workspace: {named} ")
    assert says in str(error)
    assert "workspace.exclude" in str(error)  # the fix


def test_a_link_leaving_the_tree_through_a_linked_root_is_still_outside(tmp_path: Path) -> None:
    """The workspace given as a link: inside means inside the folder it resolves to."""
    real = make_tree(tmp_path / "real", {"a.py": "x", "ok.py": Link("a.py")})
    (tmp_path / "ws").symlink_to(real)
    assert [f.path for f in select(tmp_path / "ws").files] == ["a.py", "ok.py"]
    (real / "bad").symlink_to(tmp_path)
    with pytest.raises(SpecError, match="bad is a symbolic link"):
        select(tmp_path / "ws")


def test_fifos_and_sockets_are_left_out_as_not_files(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "ws", {"a.py": "x"})
    os.mkfifo(root / "pipe")
    selection = select(root)
    assert [f.path for f in selection.files] == ["a.py"]
    assert selection.special == ("pipe",)


@pytest.mark.parametrize(
    ("kwargs", "field_name", "says"),
    [
        ({"exclude": ["!keep"]}, "workspace.exclude", "re-includes"),
        ({"include": ["[z-a].py"]}, "workspace.include", "not valid"),
        ({"exclude": ["\\"]}, "workspace.exclude", "not valid"),
    ],
)
def test_bad_patterns_name_their_field(
    kwargs: dict[str, list[str]], field_name: str, says: str, tmp_path: Path
) -> None:
    root = make_tree(tmp_path / "ws", {"a.py": "x"})
    with pytest.raises(SpecError) as raised:
        select(root, **kwargs)
    assert raised.value.field == field_name
    assert says in str(raised.value)


@pytest.mark.parametrize("given", ["missing", "file.py"])
def test_the_workspace_must_be_a_folder(given: str, tmp_path: Path) -> None:
    (tmp_path / "file.py").write_text("x")
    with pytest.raises(SpecError, match=r"^workspace: "):
        select(tmp_path / given)


def test_every_secret_pattern_catches_an_example(tmp_path: Path) -> None:
    """Each pattern of the list leaves something out (a pattern that matches nothing protects
    nothing), and ordinary code passes."""
    examples = {
        ".env": ".env",
        ".env.*": ".env.local",
        "*.pem": "tls.pem",
        "*.key": "tls.key",
        "*.p12": "a.p12",
        "*.pfx": "a.pfx",
        "*.jks": "a.jks",
        "*.keystore": "a.keystore",
        "id_rsa*": "id_rsa",
        "id_dsa*": "id_dsa",
        "id_ecdsa*": "id_ecdsa",
        "id_ed25519*": "id_ed25519",
        ".ssh/": ".ssh/config",
        ".gnupg/": ".gnupg/pubring.kbx",
        ".aws/": ".aws/credentials",
        ".azure/": ".azure/accessTokens.json",
        "**/.config/gcloud/": ".config/gcloud/adc.json",
        ".kube/": "x/.kube/config",
        "kubeconfig*": "kubeconfig-staging",
        "*.kubeconfig": "prod.kubeconfig",
        "**/.docker/config.json": ".docker/config.json",
        ".netrc": ".netrc",
        "_netrc": "_netrc",
        ".git-credentials": ".git-credentials",
        ".pypirc": ".pypirc",
        ".npmrc": ".npmrc",
        ".vault-token": ".vault-token",
        ".htpasswd": ".htpasswd",
        "credentials.json": "credentials.json",
        "client_secret*.json": "client_secret_123.json",
        ".envrc": ".envrc",
        "*.ppk": "deploy.ppk",
        "application_default_credentials.json": "application_default_credentials.json",
        "**/.huggingface/token": ".huggingface/token",
        "**/huggingface/token": ".cache/huggingface/token",
        "**/huggingface/stored_tokens": ".cache/huggingface/stored_tokens",
        "**/.config/wandb/": ".config/wandb/settings",
        ".databrickscfg": ".databrickscfg",
        ".oci/": ".oci/config",
        ".s3cfg": ".s3cfg",
        ".boto": ".boto",
        ".pgpass": ".pgpass",
        "*.tfstate": "terraform.tfstate",
        "*.tfstate.*": "terraform.tfstate.backup",
        "*.tfvars": "prod.tfvars",
        "*.tfvars.json": "prod.auto.tfvars.json",
        ".terraformrc": ".terraformrc",
        "secrets.*": "secrets.toml",
    }
    positive = [p for p in SECRET_PATTERNS if not p.startswith("!")]
    assert sorted(examples) == sorted(positive)
    for i, (pattern, example) in enumerate(examples.items()):
        root = make_tree(tmp_path / f"ws{i}", {example: "secret", "train.py": "x", "keys.py": "x", "env.py": "x"})
        selection = select(root)
        assert [f.path for f in selection.files] == ["env.py", "keys.py", "train.py"], pattern
        assert len(selection.secrets) == 1 and example.startswith(selection.secrets[0].rstrip("/")), pattern


# ------------------------------------------------------------------------------------ against git

GIT_TREE: Tree = {
    ".gitignore": (
        "*.log\n!important.log\n/build/\ndocs/*.html\n**/tmp/\nfoo?.txt\n[ab].cfg\n\\#hash\ntrailing.txt   \n"
    ),
    "important.log": "x",
    "x.log": "x",
    "build/a.o": "x",
    "src/build/keep.c": "x",
    "docs/index.html": "x",
    "docs/sub/deep.html": "x",
    "a/b/tmp/t": "x",
    "foo1.txt": "x",
    "foo12.txt": "x",
    "a.cfg": "x",
    "c.cfg": "x",
    "#hash": "x",
    "trailing.txt": "x",
    "src/.gitignore": "*.c\n!keep.c\n/local.txt\nnested/**/gen.py\n",
    "src/main.c": "x",
    "src/local.txt": "x",
    "src/deeper/local.txt": "x",
    "src/nested/x/y/gen.py": "x",
    "src/nested/gen.py": "x",
    "src/ok.py": "x",
    "src/deeper/.gitignore": "!*.c\n",
    "src/deeper/c.c": "x",
    "sp ace/file name.py": "x",
    "ünï/cödé.py": "x",
}


def test_gitignore_rules_match_git(tmp_path: Path) -> None:
    """The files selected are the files `git add -A` would add (no secrets, no .dockerignore in
    this tree), for patterns that exercise git's rules: negation, anchors, folder-only, `**`, `?`,
    classes, escapes, trailing spaces, nested files overriding their parents."""
    skip_unless(shutil.which("git") is not None, "git on PATH")
    root = make_tree(tmp_path / "ws", GIT_TREE)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    listed = subprocess.run(
        ["git", "-c", "core.quotePath=false", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    by_git = sorted(p for p in listed.split("\0") if p)
    assert sorted(f.path for f in select(root).files) == by_git


_FOLDERS = ["", "a/", "a/b/", "b/", "build/", "a/build/"]
_FILES = [f + n for f in _FOLDERS for n in ("c.py", "d.log", "x.txt")]
_LINES = ["*.log", "!d.log", "build/", "/a", "a/", "b/*.py", "**/c.py", "!c.py", "x.txt", "!b/", "*", "!*.py",
          "a/**/x.txt", "#c", "", "!/build", "b", "*.py", "!x.txt", "/*/c.py", "!*/", "build"]  # fmt: skip
_SUB_LINES = ["!*.log", "!x.txt", "!c.py", "x.txt", "*.py", "!b/", "b/", "*", "/c.py", "!d.log", "!build/"]


def test_gitignore_rules_match_git_on_random_rules(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Random .gitignore files at the root and in a subfolder, over one tree whose names they
    all touch, so that rules interact: what git would add is what is selected, every time."""
    skip_unless(shutil.which("git") is not None, "git on PATH")
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    rules = st.lists(st.sampled_from(_LINES), max_size=6).map("\n".join)
    sub_rules = st.lists(st.sampled_from(_SUB_LINES), min_size=1, max_size=4).map("\n".join)

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(rules, sub_rules)
    def check(root_rules: str, a_rules: str) -> None:
        root = make_tree(tmp_path_factory.mktemp("git"), {path: path for path in _FILES})
        (root / ".gitignore").write_text(root_rules + "\n")
        (root / "a" / ".gitignore").write_text(a_rules + "\n")
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        expected = sorted(p for p in listed.split("\0") if p)
        assert sorted(f.path for f in select(root).files) == expected, (root_rules, a_rules)

    check()
