"""Texts as templates over their arguments, read off code by running it on probes: a text that
depends on a spec (a message naming a value, a pod's hostname) becomes a template with `%(arg)`
placeholders that must reproduce the code's output for every probe."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Args = dict[str, Any]
PLACEHOLDER = re.compile(r"%\((\w+)\)")  # the chart's `ddp-job.format` fills the same placeholders
MAX_AMBIGUOUS = 12  # occurrences of argument values in one text that may each be literal or not


def fill(template: Any, args: Mapping[str, Any]) -> Any:
    """A template (a text or JSON holding `%(arg)` placeholders) with its arguments filled in."""
    if isinstance(template, str):
        return PLACEHOLDER.sub(lambda m: str(args[m.group(1)]), template)
    if isinstance(template, Mapping):
        return {k: fill(v, args) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, args) for v in template]
    return template


def derive(produce: Callable[[Args], Any], probes: Sequence[Args]) -> Any:
    """The template of `produce`'s output (a text, or JSON of texts) over its arguments, from its
    output on each probe. Arguments whose value is the same in every probe stay literal; those
    named `_...` are for `produce` alone."""
    outputs = [json.loads(json.dumps(produce(p))) for p in probes]
    return _derive(outputs, probes, "")


def _derive(outputs: list[Any], probes: Sequence[Args], where: str) -> Any:
    first = outputs[0]
    if isinstance(first, str) and all(isinstance(o, str) for o in outputs):
        return _derive_text(outputs, probes, where)
    if isinstance(first, dict) and all(isinstance(o, dict) and list(o) == list(first) for o in outputs):
        return {k: _derive([o[k] for o in outputs], probes, f"{where}.{k}") for k in first}
    if isinstance(first, list) and all(isinstance(o, list) and len(o) == len(first) for o in outputs):
        return [_derive([o[i] for o in outputs], probes, f"{where}[{i}]") for i in range(len(first))]
    if any(o != first for o in outputs):
        raise ValueError(f"{where or 'output'} changes shape between probes: {outputs!r}")
    return first


def _derive_text(texts: list[str], probes: Sequence[Args], where: str) -> str:
    text = texts[0]
    if "%" in text:
        raise ValueError(f"{where}: {text!r} holds '%', which the chart's templates read as a placeholder")
    varying = [
        n for n in probes[0] if not n.startswith("_") and str(probes[0][n]) and len({str(p[n]) for p in probes}) > 1
    ]
    spans: list[tuple[int, int, str]] = []  # where each argument's value shows in the first text
    taken: set[int] = set()
    for name in sorted(varying, key=lambda n: -len(str(probes[0][n]))):
        value = re.escape(str(probes[0][name]))
        for m in re.finditer(rf"(?<![A-Za-z0-9]){value}(?![A-Za-z0-9])", text):
            if taken.isdisjoint(range(m.start(), m.end())):
                spans.append((m.start(), m.end(), name))
                taken.update(range(m.start(), m.end()))
    spans.sort()
    if len(spans) > MAX_AMBIGUOUS:
        raise ValueError(f"{where}: {len(spans)} argument values in {text!r}: give the probes rarer values")
    fits = []
    for chosen in itertools.product((False, True), repeat=len(spans)):
        template, end = "", 0
        for (start, stop, name), placeholder in zip(spans, chosen):
            if placeholder:
                template += text[end:start] + f"%({name})"
                end = stop
        template += text[end:]
        if all(fill(template, p) == t for p, t in zip(probes, texts)):
            fits.append(template)
    if len(fits) != 1:
        raise ValueError(f"{where}: {len(fits)} templates fit {texts!r} over {list(probes)!r}: change a probe")
    return fits[0]
