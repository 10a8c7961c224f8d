"""What a lint run finds, and how each finding reads: `file:line:col RULE message; fix`."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpctl.lint.rules import Severity
from ddpctl.records import record


@record
class Finding:
    """One finding at a 1-based line and column. `node` (ours) is what `--fix` rewrites."""

    path: str
    line: int
    col: int
    rule: str
    severity: Severity
    message: str
    fix: str
    source: str = "ddpctl"  # or "torchfix"
    fixable: bool = False
    node: ast.AST | None = field(default=None, compare=False, repr=False)

    def text(self) -> str:
        return f"{self.path}:{self.line}:{self.col} {self.rule} {self.message}; {self.fix}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.col,
            "rule": self.rule,
            "severity": self.severity.value,
            "message": self.message,
            "fix": self.fix,
            "source": self.source,
            "fixable": self.fixable,
        }

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.path, self.line, self.col, self.rule)


@dataclass
class LintResult:
    """The findings of one run over `files`. `linted` is False when there was nothing to lint (a job
    that runs the built-in trainer, or a module not found in the folder): `notes` say why."""

    files: list[Path] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    torchfix: str | None = None  # TorchFix's version when it ran (or was available to run)

    @property
    def linted(self) -> bool:
        return bool(self.files)

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.severity is severity)

    @property
    def has_errors(self) -> bool:
        return any(f.severity is Severity.error for f in self.findings)

    @property
    def exit_code(self) -> int:
        """0 when no finding is an error (warnings and info are printed only), else 1."""
        return 1 if self.has_errors else 0

    def summary(self) -> str:
        """`2 errors, 1 warning in 1 file`, or `no findings in 3 files`."""
        parts = []
        for severity, word in ((Severity.error, "error"), (Severity.warning, "warning"), (Severity.info, "info")):
            n = self.count(severity)
            if n:
                parts.append(f"{n} {word}" + ("s" if n != 1 and word != "info" else ""))
        files = f"{len(self.files)} file" + ("" if len(self.files) == 1 else "s")
        return f"{', '.join(parts)} in {files}" if parts else f"no findings in {files}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": [str(p) for p in self.files],
            "findings": [f.to_dict() for f in self.findings],
            "summary": {s.value: self.count(s) for s in Severity},
            "torchfix": self.torchfix,
            "notes": list(self.notes),
        }
