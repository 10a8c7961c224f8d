"""`ddpctl render`: the job's manifests, to stdout or a kustomize directory. Pure: no cluster."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ddpctl.commands.options import host_script_warning, spec_options
from ddpctl.commands.prelint import lint_before_run, no_lint_option
from ddpctl.spec.sources import SpecInput

if TYPE_CHECKING:
    from ddpctl.plan import Plan

CLIENT_SIDE_APPLY_LIMIT = 256 * 1024  # kubectl's last-applied annotation: a Secret's data must fit in it


class OutputFormat(str, Enum):
    yaml = "yaml"
    json = "json"


def render_command(
    spec_input: SpecInput,
    output: OutputFormat = typer.Option(
        OutputFormat.yaml, "--output", "-o", help="yaml (multi-document) or json (a v1 List)."
    ),
    output_dir: Path | None = typer.Option(
        None, "--output-dir", help="Write one file per object and a kustomization.yaml here.", file_okay=False
    ),
    explain: bool = typer.Option(
        False, "--explain", help="Print the layout (nodes, processes, world size, how ranks find rank 0) instead."
    ),
    helm_values: bool = typer.Option(
        False, "--helm-values", help="Print the spec as values for charts/ddp-job instead."
    ),
    no_lint: bool = no_lint_option(),
) -> None:
    """Render the job's Kubernetes manifests (no cluster needed)."""
    from ddpctl.commands.after_dash import refuse_ddpctl_flags_for_the_trainer
    from ddpctl.engines import plan_for
    from ddpctl.errors import UsageError
    from ddpctl.manifests import render
    from ddpctl.manifests.output import to_json_list, to_yaml_documents, write_output_dir
    from ddpctl.manifests.shipment import code_not_carried, shipment_of

    spec = spec_input.spec()
    refuse_ddpctl_flags_for_the_trainer(spec)
    plan = plan_for(spec)  # what the target cannot run is refused for every output, values included

    def say(text: str) -> None:
        typer.echo(text, err=True)

    for warning in (host_script_warning(spec.script), code_not_carried(plan), _requirements_not_held(plan)):
        if warning:
            say(f"ddpctl: warning: {warning.removeprefix('warning: ')}")
    if plan.plain_command_warning and not explain:
        say(f"ddpctl: warning: {plan.plain_command_warning}")
    linted = lint_before_run(spec, say, stop=False, skip=no_lint)
    if helm_values:
        from ddpctl.manifests.helm_values import helm_values_yaml

        if plan.ships_workspace:
            raise UsageError(
                "workspace: the chart ships no code from a folder; build your code into the image (ddpctl build) and "
                "drop --workspace for --helm-values"
            )
        typer.echo(helm_values_yaml(spec), nl=False)
        return
    with shipment_of(plan, to_store=False) as shipment:
        if explain:
            from ddpctl.manifests.explain import explain as explain_text

            typer.echo(explain_text(plan, shipment, lint=linted), nl=False)
            return
        if shipment is not None:
            say(f"ddpctl: {shipment.pack.summary()}")
            if shipment.pack.compressed_size > CLIENT_SIDE_APPLY_LIMIT // 2:
                say(
                    "ddpctl: note: apply it with `kubectl apply --server-side`: client-side apply keeps the whole "
                    "workspace Secret in an annotation, capped at 256 KiB"
                )
        objects = render.render_plan(plan, shipment)
    if output_dir is not None:
        for path in write_output_dir(objects, output_dir):
            say(f"wrote {path}")
        return
    text = to_json_list(objects) if output is OutputFormat.json else to_yaml_documents(objects)
    typer.echo(text, nl=False)


def _requirements_not_held(plan: Plan) -> str | None:
    """With --workspace on ddpctl's trainer image: what the folder's requirements ask for that the
    image does not hold (known without an engine: the image's packages are ddpctl's own)."""
    from ddpctl.manifests.shipment import is_trainer_image

    if not plan.ships_workspace or not is_trainer_image(plan.spec.image):
        return None
    from ddpctl.image.requirements import trainer_image_lacks

    return trainer_image_lacks((Path.cwd() / str(plan.spec.workspace.dir)).resolve(), plan.spec.image)


def register(app: typer.Typer) -> None:
    app.command("render")(spec_options(render_command))  # wrapped here: only the command run pays for it
