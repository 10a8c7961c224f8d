"""The workspace a planned spec ships: its folder packed, and how it travels (`ddpctl.workspace`).

The one place that reads the user's folder for render, submit and run --docker: rendering stays
a pure function of the plan and this `Shipment`. `render` never uploads, so a workspace too large
for a Secret is a usage error there; `submit` sends it to the store (`Plan.workspace_store`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ddpctl.plan import Plan
from ddpctl.workspace.ship import Shipment, prepare


@contextmanager
def shipment_of(plan: Plan, *, cwd: Path | None = None, to_store: bool) -> Iterator[Shipment | None]:
    """The plan's workspace packed in a temporary folder (removed after), or None when it ships
    none. `to_store`: a workspace too large for a Secret may go to the plan's store (submit);
    else it is a usage error saying how to ship it (render, run --docker)."""
    spec = plan.spec
    if not plan.ships_workspace:
        yield None
        return
    ws = spec.workspace
    root = (cwd or Path.cwd()) / str(ws.dir)
    fix = (
        ""
        if to_store
        else "render never uploads: submit it with a store (ddpctl submit --workspace-store s3://BUCKET/PREFIX), or "
        "leave large files out with workspace.exclude, .gitignore or .dockerignore"
    )
    with prepare(
        root,
        job=spec.name,
        namespace=spec.namespace,
        labels=plan.top_labels,
        exclude=ws.exclude,
        include=ws.include,
        store=plan.workspace_store if to_store else None,
        too_large_fix=fix,
    ) as shipment:
        yield shipment


def code_file(plan: Plan, cwd: Path) -> Path | None:
    """The file of the job's own code when it is in the user's folder `cwd`: `--script`'s, `-m`'s
    module (pkg/train.py, pkg/train/__init__.py), or a .py the command names; None for code that
    is only in the image (the built-in trainer, a path that is not here)."""
    spec = plan.spec
    candidates: list[Path] = []
    if spec.script and not spec.script.startswith("/"):
        candidates.append(cwd / spec.script)
    elif spec.module and not plan.uses_trainer:
        base = cwd.joinpath(*spec.module.split("."))
        candidates += [base.with_suffix(".py"), base / "__init__.py", base / "__main__.py"]
    else:
        candidates += [cwd / arg for arg in spec.command if arg.endswith(".py") and not arg.startswith("/")]
    return next((c for c in candidates if c.is_file()), None)


def code_not_carried(plan: Plan, cwd: Path | None = None) -> str | None:
    """Why the pods would fail with "No such file": the job's code is in the user's folder, and
    neither the workspace ships it nor the image was built from this folder's current content
    (its `ws-` tag names another workspace, or it is not a project image). None when it is
    carried, or is not in the folder."""
    from ddpctl.workspace.tags import workspace_of_tag

    cwd = (cwd or Path.cwd()).resolve()
    found = code_file(plan, cwd)
    if found is None:
        return None
    spec = plan.spec
    rel = found.relative_to(cwd)
    if plan.ships_workspace:
        root = (cwd / str(spec.workspace.dir)).resolve()
        if found.resolve().is_relative_to(root):
            return None
        return f"{rel} is in {cwd} but not in the workspace {spec.workspace.dir}; ship the folder that holds it"
    carried = workspace_of_tag(spec.image)
    fixes = (
        "ship the folder with --workspace . (no rebuild), or build it in with `ddpctl build` here and pass its tag "
        "with --image"
    )
    if carried is None:
        return (
            f"{rel} is in {cwd}, but the image {spec.image} was not built from this folder and no workspace ships "
            f'it: the pods would fail with "No such file"; {fixes}'
        )
    current = _workspace_hash(cwd)
    if current.startswith(carried):
        return None
    return (
        f"the image {spec.image} carries an older version of this folder's code (workspace {carried}, now "
        f"{current[:12]}): the pods would run the old {rel}; {fixes}"
    )


def _workspace_hash(folder: Path) -> str:
    """The sha256 this folder packs to now (what `ddpctl build` puts in a project image's tag)."""
    import os

    from ddpctl.workspace import pack_workspace

    with open(os.devnull, "wb") as sink:
        return pack_workspace(folder, sink).sha256
