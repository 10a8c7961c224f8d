"""User code the trainer loads by name, `MODULE:NAME` (`--model`, `--callback`): imported one way,
every failure one usage line that names the flag."""

from __future__ import annotations

import importlib

from .errors import UsageError


def import_named(flag: str, spec: str, form: str) -> tuple[str, str, object]:
    """(module, name, the object or None) of `spec`, `module:name`; `form` says how to write one."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"{flag} {spec!r}: {form}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{flag} {spec!r}: cannot import {module_name!r} ({exc}); is it on PYTHONPATH?") from None
    return module_name, attr, getattr(module, attr, None)
