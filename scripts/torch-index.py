"""Print the package index `make` installs torch from: PyTorch's CPU index on a machine without a
GPU when it answers within a few seconds, else nothing (PyPI's default build), saying why on stderr.

Usage: python scripts/torch-index.py INDEX_URL. A probe that cannot finish in PROBE_S seconds falls
back to PyPI, so a machine (or CI) that cannot reach the index loses at most that long.
"""

from __future__ import annotations

import shutil
import sys
import urllib.request

PROBE_S = 3.0


def main(index: str) -> int:
    if shutil.which("nvidia-smi"):
        return 0  # a GPU: PyPI's default (CUDA) build is the one wanted
    try:
        with urllib.request.urlopen(f"{index.rstrip('/')}/torch/", timeout=PROBE_S) as answer:  # noqa: S310 - an https URL from the Makefile
            reachable = answer.status == 200
    except (OSError, ValueError):
        reachable = False
    if reachable:
        print(f"note: no GPU here: installing the CPU torch (~1 GB) from {index}", file=sys.stderr)
        print(index)
    else:
        print(
            f"note: no GPU here, but {index} could not be reached (within {PROBE_S:g} s): installing PyPI's torch "
            "(the CUDA build, ~5 GB); to skip this probe: make TORCH_INDEX_URL=",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
