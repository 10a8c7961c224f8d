"""The user's own code, shipped to the pods without rebuilding the image.

The folder ddpctl runs in (or `--workspace DIR`) is the user's code. `select` chooses its files as
git and Docker do (`.gitignore`, `.dockerignore`, the spec's excludes) and leaves likely secrets out
unless named; `pack` makes a deterministic .tar.gz of them, named by the sha256 of the uncompressed
tar. A small one travels as an immutable Secret in the job's namespace (`inline`); a larger one goes
to an object store, content-addressed (`upload`). In each pod, `ddpctl_trainer.workspace` fetches
it, checks the sha256 and unpacks it into an emptyDir before torchrun starts.

Standard library, pathspec (git's rules) and, for an object store only, obstore: no torch, no
kubernetes client, no spec (the caller passes what the spec says).
"""

from __future__ import annotations

from .pack import Pack, pack, pack_workspace, size_text, version_of
from .select import SECRET_PATTERNS, File, Selection, select

__all__ = [
    "SECRET_PATTERNS",
    "File",
    "Pack",
    "Selection",
    "pack",
    "pack_workspace",
    "select",
    "size_text",
    "version_of",
]
