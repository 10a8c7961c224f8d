"""ddpctl.commands.options: the spec flags every spec command shares: how each flag's text becomes
the spec's camelCase layer, one line and exit 2 for a malformed value or a scalar given twice, and
help taken from the key's declaration."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.commands.options import SPEC_FLAGS, flags_to_layer, host_script_warning, parse_layout
from ddpctl.errors import UsageError
from ddpctl.spec import JobSpec
from ddpctl.spec.fields import declared_at

BY_NAME = {f.names[0]: f for f in SPEC_FLAGS}


def layer(**given: list[str]) -> dict[str, Any]:
    return flags_to_layer({BY_NAME[f"--{k.replace('_', '-')}"].param: v for k, v in given.items()}, None)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"nodes": ["3"]}, {"nodes": "3"}),
        ({"port": ["29600"]}, {"rendezvous": {"port": "29600"}}),
        ({"env": ["A=1", "B=x=y"]}, {"env": {"A": "1", "B": "x=y"}}),
        ({"volume": ["data=imagenet:/data:ro"]},
         {"volumes": {"data": {"claimName": "imagenet", "mountPath": "/data", "readOnly": True}}}),
        ({"secret_env": ["K=wandb:api-key"]}, {"secretEnv": {"K": {"secret": "wandb", "key": "api-key"}}}),
        ({"toleration": ["gpu=true:NoSchedule", "spot"]}, {"tolerations": [
            {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Exists"}]}),
        ({"command": ["torchrun --nproc-per-node 2 'my train.py'"]},
         {"command": ["torchrun", "--nproc-per-node", "2", "my train.py"]}),
        ({"workspace": ["."], "workspace_store": ["s3://b/ws"]}, {"workspace": {"dir": ".", "store": "s3://b/ws"}}),
        ({"topology": ["required:rack"]},
         {"topology": {"required": "rack", "preferred": None, "unconstrained": False}}),
    ],
)  # fmt: skip
def test_a_flag_becomes_its_keys_layer(given: dict[str, list[str]], expected: dict[str, Any]) -> None:
    assert layer(**given) == expected


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"gpus": ["4", "3"]}, "--gpus was given 2 times (--gpus 4 --gpus 3); give it once"),
        ({"env": ["NOEQUALS"]}, "--env: 'NOEQUALS' is not KEY=VALUE"),
        ({"volume": ["data=claim"]}, "--volume: 'data=claim' is not NAME=CLAIM:/mount/path[:ro]"),
        ({"secret_env": ["K=wandb"]}, "--secret-env: 'K=wandb' is not VAR=SECRET:KEY"),
        ({"toleration": [":NoSchedule"]}, "--toleration: ':NoSchedule' has no key"),
        ({"command": ["python 'unclosed"]}, "--command: cannot split"),
        ({"topology": ["sideways"]}, "--topology: 'sideways' is not required:LEVEL"),
    ],
)
def test_a_malformed_value_is_one_usage_error_naming_the_flag(given: dict[str, list[str]], message: str) -> None:
    with pytest.raises(UsageError) as refused:
        layer(**given)
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "groups"),
    [("4+3", [(1, 4), (1, 3)]), ("2x8+1x4", [(2, 8), (1, 4)]), (" 1 + 1 ", [(1, 1), (1, 1)])],
)
def test_layout_makes_one_group_per_term(text: str, groups: list[tuple[int, int]]) -> None:
    parsed = parse_layout("--layout", text)
    assert [(g["nodes"], g["procsPerNode"]) for g in parsed] == groups
    assert [g["name"] for g in parsed] == [f"g{i}" for i in range(len(groups))]


@pytest.mark.parametrize("text", ["", "4+", "0x2", "2x0", "four"])
def test_a_bad_layout_is_one_line(text: str) -> None:
    with pytest.raises(UsageError, match=r"^--layout: .* is not a layout; write processes per node joined by '\+'"):
        parse_layout("--layout", text)


def test_help_is_the_keys_first_sentence_and_says_how_to_spell_it() -> None:
    for flag in SPEC_FLAGS:
        if flag.kind in ("layout", "topology", "topologySlice"):
            continue  # their syntax is their own
        doc = str(declared_at(JobSpec, flag.path).field.metadata["doc"])
        assert flag.help.split(".")[0].lower() in doc.lower().replace("\n", " "), flag.names
    assert "KEY=VALUE, repeatable." in BY_NAME["--env"].help
    assert "Default: 3." in BY_NAME["--backoff-limit"].help
    assert len({f.param for f in SPEC_FLAGS}) == len(SPEC_FLAGS)


def test_a_host_path_script_is_warned_about(tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    assert "COPY it into the image" in (host_script_warning(str(script)) or "")
    assert host_script_warning("/workspace/train.py") is None and host_script_warning("train.py") is None


@pytest.mark.parametrize(
    ("path", "help"),
    [
        ("shmSize", "Size of the memory-backed /dev/shm emptyDir (DataLoader workers need more than 64M)."),
        ("resources.cpu", 'CPU request (a quantity such as "8" or "500m").'),
        ("procsPerNode", "Processes per node, by default one per GPU (2 on CPU)."),
        ("restartPolicy", "Pod restart policy: Never, OnFailure, or ExitCode (pytorchjob)."),
        (
            "stallTimeout",
            "Seconds without progress on any rank before the trainer stops a hung job and names the rank "
            "(exit code 200); 0: off.",
        ),
        ("command", "Or a full container command that replaces torchrun."),
        ("args", 'Arguments after the module/script/command, e.g. [--epochs, "10"] (strings).'),
    ],
)
def test_a_flags_help_is_the_docs_first_sentence_without_its_null_remark(path: str, help: str) -> None:
    from ddpctl.commands.options import summary
    from ddpctl.spec.fields import declared_at
    from ddpctl.spec.model import JobSpec

    assert summary(declared_at(JobSpec, path)) == help
