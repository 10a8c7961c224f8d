"""Key material in the content of what a workspace would ship: every kind is caught in an ordinary
file, by file, line and kind (never the key itself); binaries, files over the size cap and files
named in workspace.include are not scanned; ordinary code and data raise no false alarm.

The keys are made here from a seeded random source, so that no key-shaped string sits in the
repository for a scanner to flag."""

from __future__ import annotations

import base64
import io
import random
import string
from pathlib import Path

import pytest

from ddpctl.errors import SpecError, UsageError
from ddpctl.workspace.pack import _CHUNK, pack_workspace
from ddpctl.workspace.scan import BINARY_PROBE, SCAN_LIMIT, SERVICE_ACCOUNT, scan
from ddpctl.workspace.ship import prepare
from tests.unit.workspace.trees import Link, Tree, make_tree

_RNG = random.Random(7)
ALNUM = string.ascii_letters + string.digits


def _random(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _pem(label: str = "PRIVATE KEY", escaped: bool = False) -> str:
    body = base64.b64encode(_RNG.randbytes(600)).decode()
    lines = [f"-----BEGIN {label}-----", *(body[i : i + 64] for i in range(0, len(body), 64)), f"-----END {label}-----"]
    return ("\\n" if escaped else "\n").join(lines) + ("\\n" if escaped else "\n")


AWS_ID = "AKIA" + _random(16, string.ascii_uppercase + "234567")
AWS_SECRET = _random(40, ALNUM + "/+")
GITHUB = "ghp_" + _random(36)
GITHUB_FINE = "github_pat_" + _random(22) + "_" + _random(59)
GITLAB = "glpat-" + _random(20)
SLACK = "xoxb-" + _random(12, string.digits) + "-" + _random(13, string.digits) + "-" + _random(24)
HUGGING_FACE = "hf_" + _random(34, string.ascii_letters)
OPENAI = "sk-proj-" + _random(40) + "T3BlbkFJ" + _random(40)
STRIPE = "sk_live_" + _random(24)
ANTHROPIC = "sk-ant-api03-" + _random(93, ALNUM + "_-") + "AA"
GOOGLE = "AIza" + _random(35)
PUTTY = (
    "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: me\nPublic-Lines: 2\n"
    f"{_random(64)}\nPrivate-Lines: 1\n{_random(44)}\n"
)
SERVICE_JSON = (
    '{\n  "type": "service_account",\n  "project_id": "p",\n  "private_key_id": "'
    + _random(40, "0123456789abcdef")
    + '",\n  "private_key": "'
    + _pem(escaped=True)
    + '",\n  "client_email": "sa@p.iam.gserviceaccount.com"\n}\n'
)

# (file, content, the line the key is on, its kind in words, the key: never in the message)
CAUGHT = [
    ("deploy_notes.txt", "Deploy steps\n\n1. log in\n" + _pem(), 4, "a private key block", "BEGIN PRIVATE"),
    ("notes/ssh.md", "# our box\n\n" + _pem("OPENSSH PRIVATE KEY"), 3, "a private key block", "OPENSSH"),
    ("old.txt", "x\n" + _pem("RSA PRIVATE KEY"), 2, "a private key block", "RSA PRIVATE"),
    (
        "pgp.asc.txt",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n" + _random(64, ALNUM + "+/") + "\n",
        1,
        "a private key block",
        "PGP",
    ),
    ("keys/server.txt", PUTTY, 1, "a PuTTY private key", "Private-Lines"),
    (
        "config.json",
        f'{{\n  "region": "eu-west-1",\n  "access_key_id": "{AWS_ID}",\n  "secret_access_key": "{AWS_SECRET}"\n}}\n',
        3,
        "an AWS access key pair",
        AWS_SECRET,
    ),
    ("settings.py", f'SECRET = "{AWS_SECRET}"\nKEY_ID = "{AWS_ID}"\n', 2, "an AWS access key pair", AWS_ID),
    ("gcp-prod.json", SERVICE_JSON, 5, SERVICE_ACCOUNT, "BEGIN PRIVATE"),
    ("ci.yaml", f"steps:\n  - run: git clone https://x:{GITHUB}@github.com/me/r\n", 2, "a GitHub token", GITHUB),
    ("scripts/push.sh", f"#!/bin/sh\nexport GH_TOKEN={GITHUB_FINE}\n", 2, "a GitHub token", GITHUB_FINE),
    ("README.md", f"token: `{GITLAB}`\n", 1, "a GitLab token", GITLAB),
    ("notify.py", f'import os\nWEBHOOK_TOKEN = "{SLACK}"\n', 2, "a Slack token", SLACK),
    (
        "train.py",
        f'import huggingface_hub\nhuggingface_hub.login("{HUGGING_FACE}")\n',
        2,
        "a Hugging Face token",
        HUGGING_FACE,
    ),
    ("llm.py", f'client = OpenAI(api_key="{OPENAI}")\n', 1, "an OpenAI API key", OPENAI),
    ("billing.ini", f"[stripe]\nkey = {STRIPE}\n", 2, "a Stripe live key", STRIPE),
    ("maps.js", f"const KEY = '{GOOGLE}';\n", 1, "a Google API key", GOOGLE),
    ("agent.toml", f'[llm]\napi_key = "{ANTHROPIC}"\n', 2, "an Anthropic API key", ANTHROPIC),
    (
        "k8s/values.yaml",
        "tls:\r\n  key: |\r\n    " + _pem("EC PRIVATE KEY").replace("\n", "\r\n    "),
        3,
        "a private key block",
        "EC PRIVATE",
    ),
]


def _pack(root: Path, include: tuple[str, ...] = ()) -> str:
    """What was packed (the summary), or raise."""
    return pack_workspace(root, io.BytesIO(), include=include).summary()


@pytest.mark.parametrize(("name", "text", "line", "kind", "key"), CAUGHT, ids=[c[0] for c in CAUGHT])
def test_key_material_in_an_ordinary_file_fails_naming_file_line_and_kind(
    tmp_path: Path, name: str, text: str, line: int, kind: str, key: str
) -> None:
    root = make_tree(tmp_path / "ws", {"main.py": "print('hi')\n", name: text})
    with pytest.raises(SpecError) as caught:
        _pack(root)
    message = str(caught.value)
    assert isinstance(caught.value, UsageError) and caught.value.exit_code == 2
    assert f"{name}:{line} holds {kind}" in message
    assert "secretEnv" in message and "workspace.include" in message and "\n" not in message
    if len(key) >= 20:  # the key itself is never printed
        assert key not in message
    found = scan(text.encode())
    assert found is not None and (found.line, found.kind) == (line, kind)


def test_every_file_with_a_key_is_named_once_packed(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "ws", {"a.txt": _pem(), "b.py": f"T = '{GITHUB}'\n", "c.md": f"{GITLAB}\n"})
    with pytest.raises(SpecError, match=r"a\.txt:1 holds a private key block \(and 2 more: b\.py, c\.md\)"):
        _pack(root)


def test_a_link_to_a_file_with_a_key_is_caught_by_its_name(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "ws", {"real/notes.txt": _pem(), "config.txt": Link("real/notes.txt")})
    with pytest.raises(SpecError, match=r"config\.txt:1 holds .* \(and 1 more: real/notes\.txt\)"):
        _pack(root)


# (case, tree, include): each packs, the key-shaped file shipped
SHIPPED: list[tuple[str, Tree, tuple[str, ...]]] = [
    ("a false alarm named in workspace.include", {"fixtures/test_key.txt": _pem()}, ("fixtures/test_key.txt",)),
    ("a folder named in workspace.include", {"fixtures/k.txt": _pem(), "fixtures/t.py": GITHUB}, ("fixtures/",)),
    ("a binary file (a NUL byte in the first 8 KiB)", {"model.bin": b"\0" * 16 + _pem().encode()}, ()),
    ("a file over the size cap", {"data.csv": "a,b\n" * (SCAN_LIMIT // 4) + _pem()}, ()),
]


@pytest.mark.parametrize(("case", "tree", "include"), SHIPPED, ids=[c[0] for c in SHIPPED])
def test_not_scanned_ships(tmp_path: Path, case: str, tree: Tree, include: tuple[str, ...]) -> None:
    root = make_tree(tmp_path / "ws", {"main.py": "x = 1\n", **tree})
    assert _pack(root, include).startswith(f"workspace: {len(tree) + 1} files")


def test_the_size_cap_and_binary_probe() -> None:
    key = _pem().encode()
    assert scan(b"x" * (SCAN_LIMIT - len(key)) + key) is not None  # at the cap: scanned
    assert scan(b"x" * (SCAN_LIMIT - len(key) + 1) + key) is None  # over it: not
    assert scan(b"x" * BINARY_PROBE + b"\0" + key) is not None  # a NUL past the probe: text
    assert SCAN_LIMIT <= _CHUNK  # a file that is scanned is read in one piece by pack


# ordinary code and data: no false alarm
CLEAN: list[tuple[str, str]] = [
    (
        "a variable named private_key",
        "def sign(private_key, data):\n    private_key = load(private_key)\n    return private_key.sign(data)\n",
    ),
    (
        "code that looks for a PEM header",
        'HEADER = "-----BEGIN PRIVATE KEY-----"\nif text.startswith(HEADER):\n    raise ValueError("a key")\n',
    ),
    ("base64 test data", f'BLOB = "{base64.b64encode(_RNG.randbytes(3000)).decode()}"\n'),
    ("a hex digest", "SHA = " + repr(_random(64, "0123456789abcdef")) + "\n"),
    ("Hugging Face calls", "from huggingface_hub import hf_hub_download\npath = hf_hub_download(repo_id='x')\n"),
    ("words with sk- and xox", "task-runner, mask-rcnn, disk-usage, the xox game\n"),
    ("placeholders", "GH_TOKEN=ghp_" + "x" * 36 + "\nHF_TOKEN=hf_" + "X" * 34 + "\nsk_live_" + "0" * 24 + "\n"),
    (
        "AWS's documented example pair",
        "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
    ),
    ("an AWS id without a secret near it", f"# the CI user is {AWS_ID}\n" + "x = 1\n" * 100),
    ("an env var reference", 'token = os.environ["GITHUB_TOKEN"]\nkey = os.environ["AWS_SECRET_ACCESS_KEY"]\n'),
    ("a public key", "-----BEGIN PUBLIC KEY-----\n" + base64.b64encode(_RNG.randbytes(300)).decode() + "\n"),
    (
        "a service account without its key",
        '{"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com"}\n',
    ),
]


@pytest.mark.parametrize(("case", "text"), CLEAN, ids=[c[0] for c in CLEAN])
def test_ordinary_code_and_data_is_not_flagged(tmp_path: Path, case: str, text: str) -> None:
    assert scan(text.encode()) is None
    root = make_tree(tmp_path / "ws", {"mod.py": text})
    assert _pack(root).startswith("workspace: 1 file,")


def test_the_hash_alone_does_not_scan(tmp_path: Path) -> None:
    """`scan_keys=False`: the folder's hash for a check of an image, where nothing ships."""
    root = make_tree(tmp_path / "ws", {"notes.txt": _pem()})
    assert pack_workspace(root, io.BytesIO(), scan_keys=False).files == 1


def test_nothing_is_made_before_the_scan(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "ws", {"train.py": "x = 1\n", "deploy_notes.txt": _pem()})
    with pytest.raises(SpecError, match=r"deploy_notes\.txt:1"), prepare(root, job="j", namespace="n", labels={}):
        pytest.fail("a Secret was made")


def test_the_checks_that_only_name_a_folders_version_do_not_refuse_a_key_in_it(tmp_path: Path) -> None:
    """The hash of a project image's tag or label (`ddpctl render`/`submit` without --workspace, the
    label of a build from the folder's own Dockerfile): nothing of the folder ships from there."""
    from ddpctl.workspace.pack import version_of

    root = make_tree(tmp_path / "ws", {"train.py": "x = 1\n", "deploy_notes.txt": _pem()})
    assert len(version_of(root)) == 64
