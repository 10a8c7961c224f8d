"""The parts of tools/chart_contract.py: values files from the declared fields (values), texts as
templates over probe arguments (derive), the probe specs (probes), and the tables of
templates/_generated.tpl read off the code: the rules' messages (messages), each engine's
(engines), what every pod gets (pod)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "charts" / "ddp-job"
COMMAND = "`make chart-contract` (python tools/chart_contract.py --write)"
