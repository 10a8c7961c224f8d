"""Put values into YAML text so that no value can change the document's structure.

Every value a template prints goes through `to_yaml`: strings become double-quoted scalars with
every character outside printable ASCII escaped, maps and lists become flow collections built the
same way. A newline, `: `, `#`, `{{`, an anchor or a quote in a user's string therefore stays
inside that one scalar. `YamlText` marks text made here; the template environment refuses to print
any plain `str`, so a value that skipped the filter is a render error, never an injection.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup


class YamlText(Markup):
    """A YAML fragment produced by `to_yaml`: the only kind of string templates may print.

    It is a `Markup` so that Jinja's autoescape treats macro output built from such fragments as
    already safe, while any plain `str` still reaches `finalize` and is refused.
    """


_SIMPLE_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


_PLAIN_SAFE = re.compile(r'[ !#-\[\]-~]*')  # printable ASCII except '"' and '\\'


def quote(text: str) -> str:
    """A YAML double-quoted scalar that parses back to exactly `text`."""
    if _PLAIN_SAFE.fullmatch(text):
        return f'"{text}"'
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[ch])
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _flow(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot put {value!r} into a manifest")
        return repr(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{quote(str(k))}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    raise TypeError(f"cannot put a {type(value).__name__} into a manifest")


def to_yaml(value: Any) -> YamlText:
    """Jinja filter `y`: any JSON-like value as one YAML flow node."""
    return YamlText(_flow(value))


def finalize(value: Any) -> Any:
    """Jinja `finalize` hook: only filtered text, numbers and booleans may reach the output."""
    if isinstance(value, Markup):  # filtered values, and macros built only from them
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return value
    raise TypeError(f"template printed {value!r} without the `y` filter")


# ---------------------------------------------------------------------------------------------
# Portable YAML files (ddp.yaml, Helm values): read back identically by PyYAML and by Go's YAML
# parser (Helm), whose rules differ: `1e3`, `0o17`, `y` and `n` are numbers or booleans to Go but
# plain strings to PyYAML, and a raw U+0085 is a line break to one and not the other. So every
# string that is not plainly a word or a path is written double-quoted, with escapes.

_PORTABLE_PLAIN = re.compile(r"[A-Za-z_/][-A-Za-z0-9_./@]*")
_YAML_WORDS = frozenset({"y", "yes", "n", "no", "true", "false", "on", "off", "null", "nan", "inf"})


def _portable_dumper() -> type:
    import yaml

    class PortableDumper(yaml.SafeDumper):
        """Block-style YAML; ambiguous strings double-quoted."""

    def represent_str(dumper: yaml.SafeDumper, data: str) -> Any:
        plain = bool(_PORTABLE_PLAIN.fullmatch(data)) and data.lower() not in _YAML_WORDS
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=None if plain else '"')

    PortableDumper.add_representer(str, represent_str)
    return PortableDumper


def dump_portable(data: Any) -> str:
    """YAML that PyYAML and Helm's Go parser both read back as `data`."""
    import yaml

    return yaml.dump(
        data, Dumper=_portable_dumper(), sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096
    )
