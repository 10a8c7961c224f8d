"""Hostile input cannot change a manifest's structure: it renders as the same literal string, or
is refused with a one-line error naming the field."""

from __future__ import annotations

import pytest
import yaml
from ddpctl.errors import SpecError
from ddpctl.manifests.output import to_yaml_documents
from ddpctl.manifests.render import render, render_text
from ddpctl.manifests.yamlsafe import quote
from ddpctl.spec.model import JobSpec
from ddpctl.spec.schema import TARGETS

from tests.support.hostile import HOSTILE


@pytest.mark.parametrize("text", HOSTILE)
def test_quote_round_trips(text: str) -> None:
    assert yaml.safe_load(quote(text)) == text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("text", HOSTILE)
def test_free_text_fields_stay_literal(target: str, text: str) -> None:
    spec = JobSpec.from_dict(
        {
            "target": target,
            "args": [text, "--after"],
            "env": {"HOSTILE": text},
            "annotations": {"example.com/note": text},
        }
    )
    objects = render(spec)
    baseline = render(
        JobSpec.from_dict(
            {
                "target": target,
                "args": ["x", "--after"],
                "env": {"HOSTILE": "x"},
                "annotations": {"example.com/note": "x"},
            }
        )
    )
    assert [o["kind"] for o in objects] == [o["kind"] for o in baseline], "no object may be added or removed"
    workload = objects[-1]
    assert workload["metadata"]["annotations"] == {"example.com/note": text}
    flat = repr(workload)
    assert repr(text) in flat
    containers = _containers(workload)
    for container in containers:
        if "args" in container:
            assert container["args"] == [text, "--after"]
        if "env" in container:
            assert {"name": "HOSTILE", "value": text} in container["env"]
    # The structure (every key path) is the same as with harmless input.
    assert _shape(workload) == _shape(baseline[-1])
    # And the YAML we print parses back to the same objects.
    assert list(yaml.safe_load_all(to_yaml_documents(objects))) == objects


@pytest.mark.parametrize(
    "field,value",
    [
        ("name", "job\nkind: Pod"),
        ("name", "job: x"),
        ("namespace", "ns\n- x"),
        ("image", "img\nkind: Pod"),
        ("image", "img: {x}"),
        ("labels", {"team": "a\nb"}),
        ("labels", {"a: b": "c"}),
        ("nodeSelector", {"k": "{{ x }}"}),
        ("queue", "q # x"),
        ("serviceAccountName", "sa\nkind: Secret"),
        ("volumes", {"data": {"claimName": "pvc\nx", "mountPath": "/data"}}),
        ("module", "os; import x"),
        ("env", {"BAD\nNAME": "x"}),
    ],
)
def test_structural_strings_are_refused(field: str, value: object) -> None:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({field: value})
    assert str(info.value).startswith(field) and "\n" not in str(info.value)


def test_templates_refuse_unfiltered_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A template printing a raw string (not through the `y` filter) is a render error."""
    from ddpctl.manifests import render as render_module

    env = render_module._environment()
    template = env.from_string("name: {{ v.name }}\n")
    with pytest.raises(TypeError, match="without the `y` filter"):
        template.render(v={"name": "x"})
    assert env.from_string("name: {{ v.name | y }}\n").render(v={"name": "x"}) == 'name: "x"\n'


def test_raw_template_text_quotes_every_user_string() -> None:
    text = render_text(JobSpec.from_dict({"env": {"E": "a: b"}}))
    assert '"a: b"' in text


def _containers(obj):
    if isinstance(obj, dict):
        if "containers" in obj:
            yield from obj["containers"]
        if "trainer" in obj and isinstance(obj["trainer"], dict):
            yield obj["trainer"]
        for value in obj.values():
            yield from _containers(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _containers(value)


def _shape(obj, path=""):
    if isinstance(obj, dict):
        return {k: _shape(v, f"{path}.{k}") for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shape(v) for v in obj]
    return type(obj).__name__


def test_template_bytecode_cache_needs_a_private_directory(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cached template code is only loaded from a directory nobody else can write."""
    import jinja2
    from ddpctl.manifests.render import _bytecode_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _bytecode_cache(jinja2) is not None
    private = tmp_path / "ddpctl" / "jinja"
    assert private.stat().st_mode & 0o077 == 0
    private.chmod(0o777)
    assert _bytecode_cache(jinja2) is None
