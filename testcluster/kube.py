"""The running cluster as the installers see it: its binaries, the admin kubeconfig, kubectl."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testcluster.procs import fail, log


@dataclass
class Cluster:
    bin: Path
    kubeconfig: Path
    times: dict[str, float] = field(default_factory=dict)  # seconds each step took, for the log

    def exe(self, name: str) -> str:
        return str(self.bin / name)

    def run(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.exe("kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, check=False,
        )  # fmt: skip

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        r = self.run(*args, input=input)
        if check and r.returncode:
            fail(f"kubectl {' '.join(args[:3])}: {r.stderr.strip()}")
        return r.stdout

    def apply(self, docs: list[dict[str, Any]], what: str) -> None:
        """Server-side apply of `docs`; `what` names them when the API server refuses."""
        import yaml  # here, not above: `down` and `status` import this package without the venv

        body = "\n---\n".join(yaml.safe_dump(d) for d in docs)
        r = self.run("apply", "--server-side", "--force-conflicts", "--field-manager=ddpctl-cluster", "-f", "-",
                     input=body)  # fmt: skip
        if r.returncode:
            fail(f"applying {what}: {r.stderr.strip()}")

    def timed(self, name: str, fn: Callable[[], None]) -> None:
        t0 = time.monotonic()
        fn()
        self.times[name] = time.monotonic() - t0
        log(f"{name}: ready in {self.times[name]:.1f} s")
