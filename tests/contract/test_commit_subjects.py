"""Commit subjects name what they change: a prefix from the fixed list in docs/architecture.md
("Commit subjects"), then a colon, within 72 characters. Checked on the commits made since the
list was written (the ones before it used other words); a clone without git history skips here,
never under CI=true."""

from __future__ import annotations

import re
import shutil
import subprocess

from tests.support import REPO, skip_unless

SINCE = "f4e099f"  # the last commit before the list: its successors follow it
ARCHITECTURE = REPO / "docs" / "architecture.md"
SUBJECT = re.compile(r"^(?P<prefixes>[a-z-]+(?:, [a-z-]+)*): \S")


def prefixes() -> set[str]:
    """The prefixes of the architecture page's "Commit subjects" table: its backticked words."""
    text = ARCHITECTURE.read_text(encoding="utf-8").split("## Commit subjects", 1)[1]
    table = [line for line in text.splitlines() if line.startswith("| `")]
    return {word for line in table for word in re.findall(r"`([a-z-]+)`", line.split("|")[1])}


def subjects() -> list[str]:
    skip_unless(shutil.which("git") is not None and (REPO / ".git").exists(), "the git history of a clone")
    known = subprocess.run(["git", "cat-file", "-e", f"{SINCE}^{{commit}}"], cwd=REPO, capture_output=True)
    skip_unless(known.returncode == 0, f"commit {SINCE} in this clone's history (a shallow clone lacks it)")
    log = subprocess.run(
        ["git", "log", "--no-merges", "--format=%s", f"{SINCE}..HEAD"], cwd=REPO, capture_output=True, text=True
    )
    assert log.returncode == 0, log.stderr
    return log.stdout.splitlines()


def test_the_list_names_every_package_and_folder() -> None:
    listed = prefixes()
    packages = {p.name for p in (REPO / "cli" / "ddpctl").iterdir() if (p / "__init__.py").exists()}
    assert packages <= listed, sorted(packages - listed)
    assert {"trainer", "test-cluster", "tests", "docs", "build", "chart"} <= listed


def test_every_subject_starts_with_a_listed_prefix_and_fits_72_characters() -> None:
    listed = prefixes()
    bad = []
    for subject in subjects():
        match = SUBJECT.match(subject)
        unknown = set(match.group("prefixes").split(", ")) - listed if match else {"(none)"}
        if len(subject) > 72 or unknown:
            bad.append(f"{subject!r}: {len(subject)} characters, unknown prefixes {sorted(unknown)}")
    assert not bad, "\n".join(bad)
