"""What a project image's tag says: `ddpctl build` of a project tags it `ws-<12 hex of the
workspace's sha256>-<8 hex of the rest: base, dependencies, Dockerfile>`, so whether an image
carries a folder's current code is known from its name, without Docker or a registry."""

from __future__ import annotations

import re

WORKSPACE_TAG = re.compile(r"^ws-(?P<workspace>[0-9a-f]{12})-[0-9a-f]{8}$")


def workspace_tag(sha256: str, rest: str) -> str:
    return f"ws-{sha256[:12]}-{rest[:8]}"


def workspace_of_tag(image: str) -> str | None:
    """The 12 hex of the workspace a project image carries (read from its tag), None for any other image."""
    tag = image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    match = WORKSPACE_TAG.match(tag)
    return match.group("workspace") if match else None
