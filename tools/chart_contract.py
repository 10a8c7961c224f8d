"""The Helm chart's contract, generated from ddpctl's Python: one source, no hand-written copy.

- charts/ddp-job/values.yaml (every key's default with its doc) and values.schema.json (every key's
  rules) come from the JobSpec's declared fields: the doc and rule each field carries
  (`metadata=doc(text, rule)`, ddpctl.spec.fields) and its type annotation (tools/chart/values.py).
  Rules that span keys are derived from the spec's constants and from the engines' own naming.
- charts/ddp-job/templates/_generated.tpl holds, as one JSON dict the chart reads with `fromJson`,
  what the chart's templates would otherwise restate: the spec's limits and defaults, every error
  message the chart can raise (field, problem and fix, as the Python that raises it words them),
  and per engine its names, wiring, failure rules and what it refuses.

Nothing in the second file is copied from the source: each entry is read off the code by running
it on probe specs. A text that depends on the spec (a message naming a value, a pod's hostname, an
env value) is derived as a template with `%(arg)` placeholders from two or more probes whose
arguments differ, and must reproduce the code's output for every probe; generation fails when no
single template fits (then the code changed shape, and a probe or the chart must follow).

    python tools/chart_contract.py --check   # exit 1 naming each stale file (a test runs it)
    python tools/chart_contract.py --write   # regenerate them (`make chart-contract`)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python tools/chart_contract.py`: import tools.* from this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddpctl.spec import TARGETS
from tools.chart import CHART_DIR, COMMAND, REPO
from tools.chart.derive import derive, fill
from tools.chart.engines import engine_table
from tools.chart.messages import field_messages
from tools.chart.pod import constants, pod_parts
from tools.chart.values import values_schema, values_schema_json, values_yaml

__all__ = ["derive", "fill", "generated", "generated_data", "generated_tpl", "main", "values_schema", "values_yaml"]


def generated_data() -> dict[str, Any]:
    return {
        "constants": constants(),
        "pod": pod_parts(),
        "messages": field_messages(),
        "engines": {target: engine_table(target) for target in TARGETS},
    }


def generated_tpl() -> str:
    """templates/_generated.tpl: the data as JSON in a named template (`include ... | fromJson`)."""
    data = json.dumps(generated_data(), indent=2, ensure_ascii=False)
    if "{{" in data or "}}" in data:
        raise ValueError("the generated data holds '{{' or '}}', which Go templates would read as an action")
    return (
        "{{/*\n"
        f"GENERATED from ddpctl's Python by {COMMAND}; do not edit.\n"
        "What _helpers.tpl would otherwise restate: the spec's limits and defaults, the messages of the\n"
        "rules the chart checks at render time, the pods' labels and env, and per engine its names,\n"
        "wiring, failure rules and what it refuses. `%(arg)` in a text is filled by ddp-job.format.\n"
        "*/}}\n"
        '{{- define "ddp-job.generated" -}}\n'
        f"{data}\n"
        "{{- end -}}\n"
    )


def generated(chart_dir: Path = CHART_DIR) -> dict[Path, str]:
    return {
        chart_dir / "values.yaml": values_yaml(),
        chart_dir / "values.schema.json": values_schema_json(),
        chart_dir / "templates" / "_generated.tpl": generated_tpl(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/chart_contract.py", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a committed file differs from the code's")
    mode.add_argument("--write", action="store_true", help="rewrite the files from the code")
    parser.add_argument("--chart-dir", type=Path, default=CHART_DIR, help="the chart whose files to check or write")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated(args.chart_dir).items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        else:
            stale.append(path)
    for path in stale:
        shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        print(f"{shown} is stale: the code it is generated from changed; run {COMMAND}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
