"""`ddpctl lint`: the DDP recipe checked on the user's own script, read (never imported or run).

Rules are data (rules.py), checked over one syntax tree per file (index.py, checks.py); TorchFix,
PyTorch's own linter, adds its findings (torchfix.py); `--fix` rewrites the mechanical ones
(fix.py). The commands call `lint_job` before running a job.
"""

from __future__ import annotations

from ddpctl.lint.api import lint_files, lint_job, lint_paths, lint_workspace
from ddpctl.lint.findings import Finding, LintResult
from ddpctl.lint.rules import BY_ID, RULES, Rule, Severity

__all__ = [
    "BY_ID",
    "RULES",
    "Finding",
    "LintResult",
    "Rule",
    "Severity",
    "lint_files",
    "lint_job",
    "lint_paths",
    "lint_workspace",
]
