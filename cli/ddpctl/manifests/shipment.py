"""The workspace a planned spec ships: its folder packed, and how it travels (`ddpctl.workspace`).

The one place that reads the user's folder for render, submit and run --docker: rendering stays
a pure function of the plan and this `Shipment`. `render` never uploads, so a workspace too large
for a Secret is a usage error there; `submit` sends it to the store (`Plan.workspace_store`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.plan import Plan
from ddpctl.spec.schema import DEFAULT_IMAGE

if TYPE_CHECKING:
    from ddpctl.workspace.ship import Shipment

TRAINER_REPO = DEFAULT_IMAGE.split(":", 1)[0]  # ddpctl-trainer


@contextmanager
def shipment_of(plan: Plan, *, cwd: Path | None = None, to_store: bool) -> Iterator[Shipment | None]:
    """The plan's workspace packed in a temporary folder (removed after), or None when it ships
    none. `to_store`: a workspace too large for a Secret may go to the plan's store (submit);
    else it is a usage error saying how to ship it (render, run --docker)."""
    spec = plan.spec
    if not plan.ships_workspace:
        yield None
        return
    from ddpctl.workspace.ship import prepare  # the packer and pathspec: only for a job that ships its folder

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
    """Why the pods would fail with "No such file", as far as is known without a container engine:
    the job's code is in the user's folder, no workspace ships it, and the image is ddpctl's own
    trainer image (which holds none of it) or a project image `ddpctl build` tagged for an older
    version of the folder (its `ws-` tag). None when it is carried, is not in the folder, or the
    image is the user's own: `submit` looks into that one (`code_in_image`)."""
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
        if not is_trainer_image(spec.image):
            return None
        return (
            f"{rel} is in {cwd}, but the image {spec.image} is ddpctl's trainer image, which holds none of this "
            f'folder\'s code, and no workspace ships it: the pods would fail with "No such file"; {fixes}'
        )
    from ddpctl.workspace.pack import version_of

    current = version_of(cwd)
    if not current or current.startswith(carried):
        return None  # the current version cannot be named (the folder cannot be read): nothing to compare
    return (
        f"the image {spec.image} carries an older version of this folder's code (workspace {carried}, now "
        f"{current[:12]}): the pods would run the old {rel}; {fixes}"
    )


def is_trainer_image(image: str) -> bool:
    """Whether `image` is ddpctl's trainer image (the spec's default repository, any tag but a
    project's `ws-` one): known to hold the trainer and none of a user's code."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[0] == TRAINER_REPO


def code_in_image(plan: Plan) -> tuple[str, str] | None:
    """(flag, path as given) of the job's code that only the image can answer for: no workspace
    ships it and the image is the user's own (not the trainer image, not a `ws-` project image):
    `submit` looks for WORKDIR + the path (an absolute path as given) in the local image, whether
    or not the file is also in the current folder. `--script`, else the first `.py` a `--command`
    names; None for `-m` (a module may be installed anywhere on the image's path)."""
    from ddpctl.workspace.tags import workspace_of_tag

    spec = plan.spec
    if plan.ships_workspace or workspace_of_tag(spec.image) is not None or is_trainer_image(spec.image):
        return None
    if spec.script:
        return "--script", spec.script
    if spec.module or plan.uses_trainer:
        return None
    named = next((arg for arg in spec.command if arg.endswith(".py") and not arg.startswith("-")), None)
    return ("--command", named) if named else None
