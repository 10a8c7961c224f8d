"""A slow node for `ddpctl check --local` and `run --local`: with this folder on PYTHONPATH, the
workers of node `DDPTEST_SLOW_NODE` (torchrun's GROUP_RANK; under pod recovery DDP_NODE_RANK) move
themselves and their parent (the node's torchrun agent) into the cgroup whose `cgroup.procs` is
`DDPTEST_SLOW_PROCS` the moment ``torch.distributed.init_process_group`` returns, and back to its
parent group when the default process group is destroyed: the node starts and ends at full speed,
and is throttled for everything between (tests/support/cpu_quota.py makes the group;
tests/support/slow_worker.py is the same hook for workers started by hand).

With `DDPTEST_SLOW_AT` set, the node also slows itself, after its own optimizer step of that
number (an optimizer hook, so the step is exact, not read late from another rank's log): to
`DDPTEST_SLOW_CPUS` of a CPU, or to `DDPTEST_SLOW_SHARE` of the CPU it was measured to use from
its step `DDPTEST_SLOW_MEASURE_FROM` on; it writes what it did to `DDPTEST_SLOW_REPORT` (JSON), and
does nothing when that file exists already (a node started again is not slowed twice).

A test hook, not product code: Python imports `sitecustomize` at start-up from the first folder
of sys.path that has one, so only processes started with this folder on PYTHONPATH run it, and
every other process of the job (ddpctl itself, the agents, the other nodes' workers) finds no
variable of its own and does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

NODE_ENV = "DDPTEST_SLOW_NODE"
PROCS_ENV = "DDPTEST_SLOW_PROCS"


def _move(to: Path) -> None:
    for pid in (os.getpid(), os.getppid()):
        with open(to, "w") as f:
            f.write(str(pid))


_counting = False


def _slow_at_own_step(group: Path) -> None:
    """Count this worker's optimizer steps; at `DDPTEST_SLOW_AT` set the group's quota (see above)."""
    import importlib.util
    import json
    import time

    from torch.optim.optimizer import register_optimizer_step_post_hook

    global _counting
    report = Path(os.environ["DDPTEST_SLOW_REPORT"])
    if report.exists() or _counting:  # slowed once already, or counting (a group formed again)
        return
    _counting = True
    at, start = int(os.environ["DDPTEST_SLOW_AT"]), int(os.environ.get("DDPTEST_SLOW_MEASURE_FROM") or 0)
    spec = importlib.util.spec_from_file_location("cpu_quota", Path(__file__).parents[1] / "cpu_quota.py")
    assert spec is not None and spec.loader is not None
    quota = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quota)
    seen = {"steps": 0, "cpu": 0.0, "wall": 0.0}

    def after_step(*_: Any) -> None:
        seen["steps"] += 1
        if seen["steps"] == start:
            seen["cpu"], seen["wall"] = time.process_time(), time.monotonic()
        if seen["steps"] != at:
            return
        used = (time.process_time() - seen["cpu"]) / (time.monotonic() - seen["wall"]) if start else None
        share = os.environ.get("DDPTEST_SLOW_SHARE")
        cpus = float(share) * used if share and used else float(os.environ["DDPTEST_SLOW_CPUS"])
        quota.write_limit(group, cpus)
        report.write_text(json.dumps({"step": at, "used": used, "cpus": cpus}))
        handle.remove()

    handle = register_optimizer_step_post_hook(after_step)


def _throttle(dist: ModuleType, procs: Path) -> None:
    real_init, real_destroy = dist.init_process_group, dist.destroy_process_group

    def init_then_throttle(*args: Any, **kwargs: Any) -> Any:
        out = real_init(*args, **kwargs)
        _move(procs)
        if os.environ.get("DDPTEST_SLOW_AT"):
            _slow_at_own_step(procs.parent)
        return out

    def unthrottle_then_destroy(group: Any = None) -> Any:
        if group is None:
            _move(procs.parent.parent / "cgroup.procs")
        return real_destroy(group)

    dist.init_process_group = init_then_throttle  # type: ignore[attr-defined]  # the code under test looks it up on the module
    dist.destroy_process_group = unthrottle_then_destroy  # type: ignore[attr-defined]


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patches torch.distributed once it has been imported (it imports torch: seconds; not earlier)."""

    def __init__(self, procs: Path) -> None:
        self.procs = procs

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "torch.distributed":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        real_exec = loader.exec_module  # type: ignore[union-attr]

        def exec_then_patch(module: ModuleType) -> None:
            real_exec(module)
            _throttle(module, self.procs)

        loader.exec_module = exec_then_patch  # type: ignore[method-assign, union-attr]
        return spec


# the node's rank: ddpctl's under pod recovery (each node's torchrun runs it alone: GROUP_RANK 0), else torchrun's
_NODE = os.environ.get("DDP_NODE_RANK") or os.environ.get("GROUP_RANK")
if os.environ.get(NODE_ENV) is not None and os.environ.get(NODE_ENV) == _NODE:
    sys.meta_path.insert(0, _AfterImport(Path(os.environ[PROCS_ENV])))
