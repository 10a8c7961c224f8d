"""Key material in the content of the files a workspace would ship: private keys, cloud access-key
pairs, a service account's key and the well-known token formats.

Only high-confidence formats are looked for: a fixed prefix and a fixed shape (`ghp_` and 36
letters and digits), or a structure (a PEM block with its base64 body; an AWS key id with a
40-character secret near it), never entropy alone, so ordinary code, test data and base64 do not
raise a false alarm. The rules were written here; the references for which formats are
high-confidence, and their shapes, are Yelp's detect-secrets (its keyword-free plugins:
PrivateKeyDetector, AWSKeyDetector, GitHubTokenDetector, SlackDetector, StripeDetector, ...) and
gitleaks' default rules (private-key, aws-access-token, gcp-api-key, github-pat,
gitlab-pat, slack-*-token, huggingface-access-token, openai-api-key, stripe-access-token, ...).

Two passes, for speed (packing must stay within 1.5x `tar czf`): `_ANCHORS`, one expression whose
alternatives each start with one character rare in code (a lookbehind checks the characters
before it), finds whether a file may hold any of them at all; most files do not, and are done. A
file that may is searched with `_RULES`, one alternation of named groups, one a kind, whose
matches are then checked (not a placeholder; an AWS id with its secret near it).

Skipped: files over `SCAN_LIMIT` bytes (data and models, not where keys are pasted), binary files
(a NUL byte in the first `BINARY_PROBE` bytes) and files named in `workspace.include` (the user
vouched for them). What is found is named by file, line and kind; the key itself is never shown.
"""

from __future__ import annotations

import re

from ddpctl.records import record

SCAN_LIMIT = 1 << 20  # files larger than this (1 MiB) are not scanned
BINARY_PROBE = 8 << 10  # a NUL byte in a file's first 8 KiB: binary, not scanned
_NEAR = 320  # how far from an AWS key id its secret may be (bytes, either side)

# Whether a file may hold key material: each alternative starts with a character that is rare in
# code, so the search skips over most bytes without trying a match (`re` looks for the first
# characters of the alternatives first).
_ANCHORS = re.compile(
    rb"-(?:----BEGIN |ant-)"  # a PEM / OpenSSH / PGP block; an Anthropic key (sk-ant-)
    rb"|PuTTY-User-Key-File-"
    rb"|K(?<=AK)IA|S(?<=AS)IA"  # AWS access key ids, found at their second letter
    rb"|z(?<=AIz)a"  # Google API keys
    rb"|g(?:h[pousr]_|ithub_pat_|lpat-)"  # GitHub, GitLab
    rb"|xox[baprs]-"  # Slack
    rb"|hf_"  # Hugging Face
    rb"|T3BlbkFJ"  # OpenAI keys hold it (base64 of "OpenAI")
    rb"|v(?<=_liv)e_"  # Stripe live keys (sk_live_, rk_live_)
)

# kind (the group's name) -> (in words, expression)
_KINDS: dict[str, tuple[str, bytes]] = {
    # the header, blank space or header lines (Proc-Type, Version, ...; `\n` escaped in JSON),
    # then base64: the body of a key, not a program that names the header
    "private_key": (
        "a private key block",
        rb"-----BEGIN [A-Z0-9 ]{0,32}PRIVATE KEY(?: BLOCK)?-----(?:\\[rn]|\s)+"
        rb"(?:[A-Za-z][A-Za-z-]*: [^\r\n\\]*(?:\\[rn]|\s)+)*[A-Za-z0-9+/=]{40}",
    ),
    "putty": ("a PuTTY private key", rb"(?m:^PuTTY-User-Key-File-[0-9]+: *[a-z0-9-]+\r?$)"),
    "aws": ("an AWS access key pair", rb"\b(?:AKIA|ASIA)[A-Z2-7]{16}\b"),
    "google": ("a Google API key", rb"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
    "github": (
        "a GitHub token",
        rb"\b(?:gh[pousr]_[A-Za-z0-9]{36}(?![A-Za-z0-9])|github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}(?![A-Za-z0-9]))",
    ),
    "gitlab": ("a GitLab token", rb"\bglpat-[A-Za-z0-9_-]{20,}"),
    "slack": ("a Slack token", rb"\bxox[baprs]-[0-9]{8,}-[A-Za-z0-9-]{10,}"),
    "huggingface": ("a Hugging Face token", rb"\bhf_[A-Za-z]{34}(?![A-Za-z0-9_])"),
    "openai": ("an OpenAI API key", rb"\bsk-(?:[a-z]+-)?[A-Za-z0-9_-]{16,}T3BlbkFJ[A-Za-z0-9_-]{16,}"),
    "anthropic": ("an Anthropic API key", rb"\bsk-ant-[a-z]+[0-9]{2}-[A-Za-z0-9_-]{80,}"),
    "stripe": ("a Stripe live key", rb"\b[rs]k_live_[A-Za-z0-9]{24,}(?![A-Za-z0-9])"),
}
_RULES = re.compile(b"|".join(b"(?P<%s>%s)" % (kind.encode(), rule) for kind, (_, rule) in _KINDS.items()))
# the 40-character secret of an AWS key pair (base64 letters, nothing of the kind either side)
_AWS_SECRET = re.compile(rb"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
# a service account's key file (Google Cloud's JSON): its private key is then said to be one
_SERVICE_ACCOUNT = re.compile(rb'"type"\s*:\s*"service_account"')
_PRIVATE_KEY_FIELD = re.compile(rb'"private_key"\s*:\s*"-----BEGIN')
_BODY = re.compile(rb"[A-Za-z0-9/+]{8,}")
SERVICE_ACCOUNT = "a service-account key (JSON with a private_key)"


@record
class Finding:
    """Key material found: the line it starts on (1-based) and its kind, in words."""

    line: int
    kind: str


def _random(token: bytes) -> bool:
    """Not a placeholder: no `EXAMPLE` (AWS's documented pair), and its longest run of letters
    and digits (the random part, past the prefix) has at least two of lower case, upper case and
    digits among 8 different characters (`ghp_xxxx...` and `hf_XXXX...` are not keys)."""
    if b"EXAMPLE" in token:
        return False
    token = max(_BODY.findall(token), key=len, default=b"")
    if len(set(token)) < 8:
        return False
    classes = (
        any(97 <= c <= 122 for c in token),
        any(65 <= c <= 90 for c in token),
        any(48 <= c <= 57 for c in token),
    )
    return sum(classes) >= 2


def _aws_pair(data: bytes, start: int, end: int) -> bool:
    """Whether an AWS key id (at start:end) has its secret near it, before or after."""
    window = data[max(0, start - _NEAR) : end + _NEAR]
    return any(_random(m.group()) for m in _AWS_SECRET.finditer(window))


def scan(data: bytes) -> Finding | None:
    """The first key material in a file's bytes, or None: none, or the file is binary or too large
    to be scanned (see the module)."""
    if len(data) > SCAN_LIMIT or _ANCHORS.search(data) is None or data.find(b"\0", 0, BINARY_PROBE) >= 0:
        return None
    for match in _RULES.finditer(data):
        kind = match.lastgroup or ""
        token = match.group()
        if kind == "aws":
            if "EXAMPLE" in token.decode("ascii") or not _aws_pair(data, match.start(), match.end()):
                continue
        elif kind not in ("private_key", "putty") and not _random(token):
            continue
        words = _KINDS[kind][0]
        if kind == "private_key" and _SERVICE_ACCOUNT.search(data) and _PRIVATE_KEY_FIELD.search(data):
            words = SERVICE_ACCOUNT
        return Finding(data.count(b"\n", 0, match.start()) + 1, words)
    return None


__all__ = ["BINARY_PROBE", "SCAN_LIMIT", "SERVICE_ACCOUNT", "Finding", "scan"]
