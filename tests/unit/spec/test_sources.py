"""ddpctl.spec.sources: a spec's layers (defaults < ddp.yaml < DDPCTL_* env < flags) and how they
merge; which DDPCTL_* variables exist follows from the declared keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpctl.errors import SpecError, UsageError
from ddpctl.spec.fields import declared
from ddpctl.spec.model import JobSpec
from ddpctl.spec.sources import ENV_PATHS, layer_from_env, layer_from_file, load_spec, merge, merged_layers, set_path


def test_every_scalar_key_has_a_ddpctl_variable() -> None:
    scalars = {k.key for k in declared(JobSpec) if k.rule.shape == "scalar"}
    assert scalars <= set(ENV_PATHS.values())
    assert ENV_PATHS["DDPCTL_GPUS_PER_NODE"] == "gpusPerNode"
    assert ENV_PATHS["DDPCTL_RENDEZVOUS_PORT"] == "rendezvous.port"
    assert ENV_PATHS["DDPCTL_RESOURCES_GPU_RESOURCE"] == "resources.gpuResource"
    assert "DDPCTL_ENV" not in ENV_PATHS, "maps and lists come from files and flags"


@pytest.mark.parametrize(
    ("environ", "layer"),
    [
        ({"DDPCTL_NODES": "1:4"}, {"nodes": "1:4"}),
        ({"DDPCTL_GPUS_PER_NODE": "8"}, {"gpusPerNode": 8}),
        (
            {"DDPCTL_RENDEZVOUS_PORT": "1234", "DDPCTL_RESOURCES_CPU": "4"},
            {"rendezvous": {"port": 1234}, "resources": {"cpu": "4"}},
        ),
        ({"DDPCTL_DEBUG": "1", "HOME": "/x"}, {}),
        (
            {"DDPCTL_PREFLIGHT_MODE": "warn", "DDPCTL_PREFLIGHT_TOLERANCE": "0.8", "DDPCTL_FABRIC": "efa"},
            {"preflight": {"mode": "warn", "tolerance": 0.8}, "fabric": "efa"},
        ),
        (
            {"DDPCTL_STRAGGLERS_MODE": "fail", "DDPCTL_STRAGGLERS_TOLERANCE": "0.5", "DDPCTL_STRAGGLERS_EVERY": "20"},
            {"stragglers": {"mode": "fail", "tolerance": 0.5, "every": 20}},
        ),
    ],
)
def test_layer_from_env_reads_whole_numbers_as_numbers(environ: dict[str, str], layer: dict[str, Any]) -> None:
    assert layer_from_env(environ) == layer


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"DDPCTL_NODSE": "2"}, "DDPCTL_NODSE: not a ddpctl setting; did you mean DDPCTL_NODES?"),
        ({"DDPCTL_BACKOFF_LIMIT": "x"}, "DDPCTL_BACKOFF_LIMIT: 'x' is not a whole number"),
        ({"DDPCTL_PREFLIGHT_TOLERANCE": "most"}, "DDPCTL_PREFLIGHT_TOLERANCE: 'most' is not a number"),
    ],
)
def test_a_bad_variable_is_a_usage_error(environ: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as info:
        layer_from_env(environ)
    assert str(info.value).startswith(message)


def test_maps_merge_entry_by_entry_and_the_rest_is_replaced() -> None:
    assert merge({"env": {"A": "1"}, "nodes": 2, "args": ["a"]}, {"env": {"B": "2"}, "nodes": 3, "args": ["b"]}) == {
        "env": {"A": "1", "B": "2"},
        "nodes": 3,
        "args": ["b"],
    }
    layer: dict[str, Any] = {}
    set_path(layer, "rendezvous.port", 1)
    assert layer == {"rendezvous": {"port": 1}}


@pytest.mark.parametrize(
    ("file", "flags", "chosen"),
    [
        ("module: a.b\n", {"script": "t.py"}, {"module": None, "script": "t.py", "command": None}),
        ("nodes: 3\n", {"nodeGroups": [{"name": "g0", "nodes": 1, "gpusPerNode": None, "procsPerNode": 4}]}, None),
        ("nodeGroups: [{name: a, nodes: 1, gpusPerNode: 0}]\n", {"nodes": 4}, {"nodes": 4}),
    ],
)
def test_one_choice_in_a_higher_layer_replaces_the_lower_layers(
    tmp_path: Path, file: str, flags: dict[str, Any], chosen: dict[str, Any] | None
) -> None:
    (tmp_path / "ddp.yaml").write_text(file)
    merged = merged_layers(flags, tmp_path / "ddp.yaml", environ={})
    if chosen is None:  # --layout: one GPU per process, the file's nodes gone
        assert "nodes" not in merged and merged["nodeGroups"][0]["gpusPerNode"] == 4
    else:
        assert merged == chosen


def test_a_file_error_names_the_file_and_an_env_or_flag_error_does_not(tmp_path: Path) -> None:
    (tmp_path / "ddp.yaml").write_text("backend: mpi\n")
    with pytest.raises(UsageError, match=r"ddp\.yaml: backend: 'mpi' is not a valid value"):
        load_spec({}, tmp_path / "ddp.yaml", environ={})
    with pytest.raises(SpecError, match=r"^backend: 'nccll' is not a valid value"):
        load_spec({"backend": "nccll"}, tmp_path / "ddp.yaml", environ={})


@pytest.mark.parametrize(("text", "words"), [("- a\n", "expected a map of settings"), ("a: [1\n", "line 2: expected")])
def test_a_file_that_is_not_a_map_of_settings_is_a_usage_error(tmp_path: Path, text: str, words: str) -> None:
    (tmp_path / "x.yaml").write_text(text)
    with pytest.raises(UsageError, match=words):
        layer_from_file(tmp_path / "x.yaml")
