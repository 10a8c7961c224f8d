"""``python -m tests.support.slow_worker PROCS_FILE MODULE [ARGS]``: run ``python -m MODULE ARGS``,
but the moment ``torch.distributed.init_process_group`` returns, move this process and its parent
(the node's torchrun agent) into the cgroup whose ``cgroup.procs`` is PROCS_FILE, and back to its
parent group when the default process group is destroyed (so the job ends at full speed too).

The test-only hook of a slow node (tests/support/cpu_quota.py): torchrun starts it as the node's
worker entry point in place of MODULE, so the node imports torch and joins the rendezvous at full
speed and is throttled from the first collective on, before any preflight check runs.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path
from typing import Any


def main() -> None:
    procs_file, module, *args = sys.argv[1:]
    import torch.distributed as dist

    real_init, real_destroy = dist.init_process_group, dist.destroy_process_group
    parent_procs = Path(procs_file).parent.parent / "cgroup.procs"

    def move(to: Path) -> None:
        for pid in (os.getpid(), os.getppid()):
            with open(to, "w") as f:
                f.write(str(pid))

    def init_then_throttle(*a: Any, **kw: Any) -> None:
        real_init(*a, **kw)
        move(Path(procs_file))

    def unthrottle_then_destroy(group: Any = None) -> None:
        if group is None:
            move(parent_procs)
        real_destroy(group)

    # the code under test looks these up on the module at each call
    dist.init_process_group = init_then_throttle  # type: ignore[assignment]
    dist.destroy_process_group = unthrottle_then_destroy
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
