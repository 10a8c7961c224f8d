"""Generators of the files that restate the code: the chart's contract, the docs' references.
They import ddpctl; ddpctl never imports them (an import-linter contract)."""
