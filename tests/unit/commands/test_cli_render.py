"""`ddpctl render` / `init` as a user runs them: formats, directories, precedence, errors, start-up."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import skip_unless


def test_render_prints_parseable_yaml(cli) -> None:
    result = cli("render", "--nodes", "3", "--gpus", "2")
    assert result.code == 0, result.err
    docs = list(yaml.safe_load_all(result.out))
    assert [d["kind"] for d in docs] == ["Service", "Job"]
    assert docs[1]["spec"]["completions"] == 3


def test_render_json_is_a_list(cli) -> None:
    result = cli("render", "-t", "pytorchjob", "-o", "json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["kind"] == "List" and [i["kind"] for i in data["items"]] == ["PyTorchJob"]


def test_render_is_byte_identical_across_processes(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "ddpctl",
        "render",
        "--nodes",
        "4",
        "--gpus",
        "8",
        "-l",
        "b=2",
        "-l",
        "a=1",
        "-e",
        "Z=1",
        "-e",
        "A=2",
    ]
    outputs = {
        subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in (1, 2)
    }
    assert len(outputs) == 1


@pytest.mark.parametrize("target", ["job", "pytorchjob", "jobset", "trainjob"])
def test_output_dir_matches_kubectl_kustomize(cli, tmp_path: Path, target: str) -> None:
    out = tmp_path / "manifests"
    result = cli("render", "-t", target, "--output-dir", str(out))
    assert result.code == 0, result.err
    expected = list(yaml.safe_load_all(cli("render", "-t", target).out))
    files = sorted(p.name for p in out.iterdir())
    assert "kustomization.yaml" in files and len(files) == len(expected) + 1
    skip_unless(shutil.which("kubectl") is not None, "kubectl is needed for `kubectl kustomize`")
    built = subprocess.run(["kubectl", "kustomize", str(out)], capture_output=True, text=True, check=True).stdout
    key = lambda o: (o["kind"], o["metadata"]["name"])  # kustomize orders by kind
    assert sorted(yaml.safe_load_all(built), key=key) == sorted(expected, key=key)


@pytest.mark.parametrize(
    "target, deprecation_note", [("job", False), ("jobset", False), ("pytorchjob", True), ("trainjob", False)]
)
def test_explain_says_what_kueue_will_do(cli, target: str, deprecation_note: bool) -> None:
    out = cli("render", "--explain", "-t", target, "--queue", "team", "--workload-priority-class", "high").out
    kind = {"job": "Job", "jobset": "JobSet", "pytorchjob": "PyTorchJob", "trainjob": "TrainJob"}[target]
    flat = " ".join(out.split())
    assert f"Kueue LocalQueue team (label on the {kind}); Kueue's webhook creates the {kind} suspended" in flat
    assert "WorkloadPriorityClass high" in flat
    assert ("Kueue deprecates its PyTorchJob integration" in flat) is deprecation_note
    assert "queue:" not in cli("render", "--explain", "-t", target).out


def test_explain_states_the_layout(cli) -> None:
    result = cli("render", "--explain", "--nodes", "4", "--gpus", "8", "--name", "big")
    assert result.code == 0
    assert "world size:         32 = 4 nodes x 8 processes" in result.out
    assert "MASTER_ADDR=big-0.big" in result.out and "backend nccl" in result.out


@pytest.mark.parametrize(
    ("flags", "warned"),
    [
        ([], True),
        (["--volume", "checkpoints=ckpt-pvc:/checkpoints"], False),
        (["--script", "train.py"], False),
    ],
)
def test_explain_states_preemption_and_warns_without_a_checkpoints_volume(cli, flags: list[str], warned: bool) -> None:
    result = cli("render", "--explain", "--grace-period", "300", *flags)
    assert result.code == 0, result.err
    assert "on SIGTERM:         300 s to stop (terminationGracePeriodSeconds); torchrun waits 290 s" in result.out
    assert ("warning:            no `checkpoints` volume" in result.out) is warned, result.out


def test_init_writes_a_spec_that_round_trips(cli, tmp_path: Path) -> None:
    assert cli("init", "--nodes", "3", "--gpus", "1", "--name", "from-init").code == 0
    text = (tmp_path / "ddp.yaml").read_text()
    assert text.count("# ") >= 30, "every key is commented"
    from_file = cli("render")
    from_flags = cli("render", "--nodes", "3", "--gpus", "1", "--name", "from-init", "--config", os.devnull)
    assert from_file.code == 0 and from_file.out == from_flags.out
    again = cli("init")
    assert again.code == 2 and "already exists" in again.err


@pytest.mark.parametrize(
    "file_nodes,env_nodes,flag_nodes,expected",
    [
        (None, None, None, 2),
        (5, None, None, 5),
        (5, "6", None, 6),
        (5, "6", "7", 7),
        (None, None, "7", 7),
        (None, "6", None, 6),
    ],
)
def test_precedence_file_env_flags(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_nodes, env_nodes, flag_nodes, expected
) -> None:
    if file_nodes is not None:
        (tmp_path / "ddp.yaml").write_text(f"nodes: {file_nodes}\nenv:\n  FROM_FILE: '1'\n")
    if env_nodes is not None:
        monkeypatch.setenv("DDPCTL_NODES", env_nodes)
    args = ["render", "-o", "json", "-e", "FROM_FLAG=1"] + (["--nodes", flag_nodes] if flag_nodes else [])
    result = cli(*args)
    assert result.code == 0, result.err
    job = json.loads(result.out)["items"][1]
    assert job["spec"]["completions"] == expected
    env = {e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "FROM_FLAG" in env and ("FROM_FILE" in env) == (file_nodes is not None), "maps merge across layers"


@pytest.mark.parametrize(
    "args,env,files,needle",
    [
        (["render", "--nodes", "0"], {}, {}, "nodes: 0 must be an integer >= 1"),
        (["render", "--gpus", "many"], {}, {}, "--gpus"),
        (["render", "--bogus"], {}, {}, "--bogus"),
        (["render", "-t", "slurm"], {}, {}, "target: 'slurm' is not a valid value; choose one of"),
        (["render", "--name", "Bad_Name"], {}, {}, "name: 'Bad_Name' is not a valid DNS-1035 label"),
        (["render", "-e", "NOEQUALS"], {}, {}, "--env: 'NOEQUALS' is not KEY=VALUE"),
        (["render", "-v", "data=pvc"], {}, {}, "--volume: 'data=pvc' is not NAME=CLAIM:/mount/path[:ro]"),
        (["render", "--config", "missing.yaml"], {}, {}, "--config: missing.yaml does not exist"),
        (["render"], {"DDPCTL_NODES": "x"}, {}, "nodes: 'x' is not a node count"),
        (["render"], {"DDPCTL_GPUS_PER_NODE": "x"}, {}, "DDPCTL_GPUS_PER_NODE: 'x' is not a whole number"),
        (["render"], {"DDPCTL_NODSE": "2"}, {}, "DDPCTL_NODSE: not a ddpctl setting"),
        (["render"], {}, {"ddp.yaml": "nodes: [1\n"}, "ddp.yaml: line"),
        (["render"], {}, {"ddp.yaml": "- a\n- b\n"}, "expected a map of settings"),
        (["render"], {}, {"ddp.yaml": "nodez: 2\n"}, "ddp.yaml: nodez: is not a known key; did you mean nodes?"),
        (["render"], {}, {"ddp.yaml": "rendezvous: 3\n"}, "rendezvous: expected a map"),
        (["render", "--stragglers", "replace"], {}, {}, "stragglers.mode: replace needs recovery: pod"),
        (["render", "--stragglers", "always"], {}, {}, "stragglers.mode: 'always' is not a valid value"),
        (["render", "--stragglers-tolerance", "1"], {}, {}, "stragglers.tolerance: 1.0 is not a number above 0"),
        (["render", "--stragglers-tolerance", "most"], {}, {}, "--stragglers-tolerance"),
        (["render"], {"DDPCTL_STRAGGLERS_EVERY": "0"}, {}, "stragglers.every: 0 must be an integer >= 1"),
        (["render"], {}, {"ddp.yaml": "stragglers: {windows: 0}\n"}, "stragglers.windows: 0 must be an integer >= 1"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args, env, files, needle
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = cli(*args)
    assert result.code == 2
    assert result.out == ""
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddpctl: error: "), result.err
    assert needle in lines[0]
    assert "Traceback" not in result.err


def _loaded(argv: list[str], cwd: Path, names: tuple[str, ...]) -> list[str]:
    """Run `ddpctl ARGV` in a fresh interpreter; which modules named in `names` (or under them) it loaded."""
    probe = (
        "import sys\n"
        "from ddpctl.app import main\n"
        f"code = main({argv!r})\n"
        f"loaded = sorted(m for m in sys.modules if m in {names!r} or m.split('.')[0] in {names!r})\n"
        "sys.stderr.write('LOADED=' + ','.join(loaded) + '\\n')\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("LOADED="))
    return [m for m in line.removeprefix("LOADED=").split(",") if m]


@pytest.mark.parametrize(
    "argv", [["--help"], ["render"], ["render", "--explain"], ["init", "--path", "x.yaml"], ["render", "--help"]]
)
def test_cli_never_imports_torch_or_kubernetes(tmp_path: Path, argv: list[str]) -> None:
    assert _loaded(argv, tmp_path, ("torch", "kubernetes", "torchvision")) == []


@pytest.mark.parametrize(("argv", "packs"), [(["render"], False), (["render", "--workspace", "."], True)])
def test_render_loads_the_packer_only_for_a_job_that_ships_its_folder(
    tmp_path: Path, argv: list[str], packs: bool
) -> None:
    """The packer and pathspec (git's rules) cost `render` 27 ms of a 164 ms start: loaded on use."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    loaded = set(_loaded(argv, tmp_path, ("pathspec", "ddpctl.workspace.pack")))
    assert ({"pathspec", "ddpctl.workspace.pack"} <= loaded) if packs else not loaded, loaded


def test_console_script_runs(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("ddpctl")
    proc = subprocess.run([str(exe), "render", "--explain"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and "world size" in proc.stdout


@pytest.mark.parametrize(
    "file_text,env,flags,expected",
    [
        ("module: mypkg.train\n", {}, ["--script", "train.py"], "torchrun train.py"),
        ("script: train.py\n", {}, ["-m", "mypkg.train"], "torchrun -m mypkg.train"),
        ("module: mypkg.train\n", {"DDPCTL_SCRIPT": "env.py"}, [], "torchrun env.py"),
        ("script: a.py\n", {"DDPCTL_MODULE": "envpkg.train"}, ["--command", "python run.py"], "python run.py"),
    ],
)
def test_the_highest_layer_picks_the_entrypoint(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_text, env, flags, expected
) -> None:
    """module, script and command are one choice: a higher layer replaces a lower layer's."""
    (tmp_path / "ddp.yaml").write_text(file_text)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = cli("render", "--explain", *flags)
    assert result.code == 0, result.err
    assert f"command:            {expected}\n" in result.out


def test_init_pins_only_what_was_chosen(cli, tmp_path: Path) -> None:
    """After `init`, submit still picks the engine and the context's namespace, and nothing the user
    did not choose is pinned: two init-ed projects do not share rendezvous port 29500, and adding
    `script:` needs no `module: null`. A map given in part (rendezvous.port) is written in part."""
    from ddpctl.spec.sources import merged_layers

    assert cli("init").code == 0
    assert merged_layers({}, tmp_path / "ddp.yaml") == {}
    text = (tmp_path / "ddp.yaml").read_text()
    assert "# rendezvous:\n#   mode: auto\n#   port: 29500" in text and "# module: ddpctl_trainer" in text
    assert cli("init", "--force", "-t", "jobset", "-n", "team", "--port", "29600").code == 0
    chosen = merged_layers({}, tmp_path / "ddp.yaml")
    assert chosen == {"target": "jobset", "namespace": "team", "rendezvous": {"port": 29600}}
    with (tmp_path / "ddp.yaml").open("a") as fh:
        fh.write("script: train.py\n")
    r = cli("render", "--explain")
    assert r.code == 0 and "command:            torchrun train.py" in r.out, r.err


@pytest.mark.parametrize(
    ("args", "built"),
    [
        (["render", "-t", "job"], ["render"]),
        (["--version"], None),
        ([], None),
        (["no-such-command"], None),
    ],
)
def test_only_the_command_being_run_is_built(args: list[str], built: list[str] | None) -> None:
    """Typer builds every registered command's options at start-up: `ddpctl render` builds one."""
    import click
    import typer.main

    from ddpctl.app import build_app
    from ddpctl.commands import COMMANDS

    group = typer.main.get_command(build_app(args))
    assert isinstance(group, click.Group)
    assert list(group.commands) == (built if built is not None else list(COMMANDS))


@pytest.mark.parametrize(
    "flags",
    [["--gpus", "4", "--gpus", "3"], ["--nodes", "2", "--nodes", "3"], ["--target", "job", "--target", "jobset"]],
)
def test_a_scalar_flag_given_twice_is_a_usage_error(cli, flags: list[str]) -> None:
    result = cli("render", *flags)
    assert result.code == 2
    assert result.err.strip().count("\n") == 0 and f"{flags[0]} was given 2 times" in result.err


def test_explain_prints_a_table_of_nodes_for_a_layout(cli) -> None:
    result = cli("render", "--explain", "--layout", "4+3", "--name", "big")
    assert result.code == 0, result.err
    assert "world size:         7 = 1 x 4 + 1 x 3 processes" in result.out
    rows = [line.split() for line in result.out.splitlines() if line.startswith("    node ")]
    assert rows == [
        ["node", "0", "g0", "big-g0-0", "4", "ranks", "0-3"],
        ["node", "1", "g1", "big-g1-0", "3", "ranks", "4-6"],
    ]


@pytest.mark.parametrize(
    ("flags", "adder"),
    [
        ([], "added by python3 -m ddpctl_trainer.launch)"),  # the built-in trainer's pods
        (["--script", "train.py"], "added by a python3 -c launcher)"),  # a script's pods
    ],
)
def test_explain_names_what_adds_the_groups_node_rank(cli, flags: list[str], adder: str) -> None:
    result = cli("render", "--explain", "--layout", "4+3", *flags)
    assert result.code == 0, result.err
    line = next(line for line in result.out.splitlines() if line.startswith("  node rank from:"))
    assert line.endswith(adder), line


def test_explain_lines_start_their_values_in_one_column(cli) -> None:
    """pytorchjob with node groups: one command line per replica type, each in the value column."""
    result = cli("render", "--explain", "--target", "pytorchjob", "--layout", "2+1")
    assert result.code == 0, result.err
    labelled = [line for line in result.out.splitlines() if re.match(r"^  [a-z][^:]*:\s", line)]
    assert any(line.startswith("  command (") for line in labelled), result.out
    assert {len(re.match(r"^  [^:]*:\s+", line).group(0)) for line in labelled} == {22}, result.out  # type: ignore[union-attr]


def test_layout_replaces_the_files_uniform_layout(cli, tmp_path: Path) -> None:
    (tmp_path / "ddp.yaml").write_text("nodes: 4\nprocsPerNode: 2\ngpusPerNode: 0\n")
    result = cli("render", "--explain", "--layout", "2+1", "--gpus", "0")
    assert result.code == 0, result.err
    assert "world size:         3 = 1 x 2 + 1 x 1 processes" in result.out and "CPU only" in result.out
    gpus = cli("render", "--explain", "--layout", "2+1")  # the file's gpusPerNode 0 was for its own layout
    assert gpus.code == 0 and "GPUs: one per process" in gpus.out and "backend nccl" in gpus.out


RACK = "cloud.ddpctl.io/topology-rack"
BLOCK = "cloud.ddpctl.io/topology-block"


def _pod_templates(objects: list[dict]) -> list[dict]:
    """Every pod template's metadata, wherever the engine keeps it (TrainJob: its runtime patch)."""
    out = []
    for obj in objects:
        spec = obj.get("spec", {})
        if obj["kind"] == "Job":
            out.append(spec["template"]["metadata"])
        elif obj["kind"] == "JobSet":
            out += [r["template"]["spec"]["template"]["metadata"] for r in spec["replicatedJobs"]]
        elif obj["kind"] == "PyTorchJob":
            out += [r["template"]["metadata"] for r in spec["pytorchReplicaSpecs"].values()]
        elif obj["kind"] == "TrainJob":
            patch = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
            out += [r["template"]["spec"]["template"]["metadata"] for r in patch["replicatedJobs"]]
    return out


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob", "trainjob"])
@pytest.mark.parametrize(
    "flags, annotations",
    [
        (["--topology", f"required:{RACK}"], {"kueue.x-k8s.io/podset-required-topology": RACK}),
        (["--topology", f"preferred:{BLOCK}"], {"kueue.x-k8s.io/podset-preferred-topology": BLOCK}),
        (["--topology", "unconstrained"], {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}),
    ],
)
def test_topology_goes_on_every_pod_template_never_the_object(cli, target: str, flags, annotations) -> None:
    r = cli("render", "-t", target, "--nodes", "3", "--annotation", "example.com/x=y", *flags)
    assert r.code == 0, r.err
    objects = list(yaml.safe_load_all(r.out))
    templates = _pod_templates(objects)
    assert templates
    grouped = target == "pytorchjob" and "unconstrained" not in flags
    for md in templates:
        want = {"example.com/x": "y", **annotations}
        if grouped:  # Master + Worker: one placement unit
            want["kueue.x-k8s.io/podset-group-name"] = "ddp-train"
        assert md["annotations"] == want
    for obj in objects:
        assert not any(k.startswith("kueue.x-k8s.io/podset") for k in obj["metadata"].get("annotations", {}))


def test_a_topology_slice_flag_adds_to_the_mode_and_a_file_mode_is_replaced(cli, tmp_path) -> None:
    spec = tmp_path / "ddp.yaml"
    spec.write_text(yaml.safe_dump({"nodes": 4, "topology": {"preferred": BLOCK}}))
    r = cli("render", "-f", str(spec), "-t", "jobset", "--topology", f"required:{RACK}", "--topology-slice", "h:2")
    assert r.code == 0, r.err
    (md,) = _pod_templates(list(yaml.safe_load_all(r.out)))
    assert md["annotations"] == {
        "kueue.x-k8s.io/podset-required-topology": RACK,
        "kueue.x-k8s.io/podset-slice-required-topology": "h",
        "kueue.x-k8s.io/podset-slice-size": "2",
    }


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--topology", "rack"], "--topology: 'rack' is not required:LEVEL, preferred:LEVEL or unconstrained"),
        (["--topology", "required:"], "--topology: 'required:' is not required:LEVEL"),
        (["--topology-slice", "rack"], "--topology-slice: 'rack' is not LEVEL:SIZE"),
        (
            ["--nodes", "4", "--topology-slice", f"{RACK}:3"],
            "topology.sliceSize: 3 does not divide the group's 4 nodes",
        ),
        (["--topology", "required:Not A Label"], "topology.required: key 'Not A Label' is not a valid label key"),
        (
            ["-t", "pytorchjob", "--nodes", "4", "--topology-slice", f"{RACK}:2"],
            "topology.sliceLevel: a PyTorchJob's Master (1 pod) and Worker are two Kueue PodSets",
        ),
    ],
)
def test_bad_topology_is_one_line_naming_the_flag_or_key(cli, flags, message) -> None:
    r = cli("render", *flags)
    assert r.code == 2 and r.out == ""
    assert len(r.err.strip().splitlines()) == 1 and message in r.err, r.err


def test_explain_says_the_topology_per_group_and_that_it_needs_a_queue(cli, tmp_path) -> None:
    spec = tmp_path / "groups.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "topology": {"required": RACK},
                "nodeGroups": [
                    {"name": "a", "nodes": 1, "gpusPerNode": 4, "topology": {"unconstrained": True}},
                    {"name": "b", "nodes": 2, "gpusPerNode": 4},
                ],
            }
        )
    )
    flat = " ".join(cli("render", "--explain", "-f", str(spec), "-t", "jobset").out.split())
    assert f"topology: group a: unconstrained: any nodes with room; group b: required: all pods in one {RACK}" in flat
    assert "(each group is its own Kueue PodSet, placed on its own)" in flat
    assert "without --queue Kueue does not place the job" in flat
    queued = " ".join(
        cli("render", "--explain", "-t", "pytorchjob", "--queue", "q", "--topology", f"preferred:{BLOCK}").out.split()
    )
    assert f"preferred: as few {BLOCK} domains as fit" in queued
    assert "Master and Worker are placed as one (podset-group-name ddp-train)" in queued
    assert "without --queue" not in queued
    assert "topology:" not in cli("render", "--explain").out


def test_explain_says_where_checkpoints_go_and_whose_credentials(cli) -> None:
    """An object store URL, with the Secret keys that sign its requests, or the pods' workload
    identity when none is given; the manifest references the Secret and never holds a value."""
    url = "s3://team-bucket/runs/resnet"
    secret = ["--secret-env", "AWS_ACCESS_KEY_ID=s3:id", "--secret-env", "AWS_SECRET_ACCESS_KEY=s3:key"]
    explained = cli("render", "--explain", "--checkpoints", url, *secret)
    assert explained.code == 0, explained.err
    text = " ".join(explained.out.split())
    assert f"checkpoints: {url} (object store" in text
    assert "credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY" in text and "no `checkpoints` volume" not in text
    identity = cli("render", "--explain", "--checkpoints", url)
    assert "no Secret: the pods' workload identity" in " ".join(identity.out.split())
    rendered = cli("render", "--checkpoints", url, *secret, "--output", "json")
    (job,) = [o for o in json.loads(rendered.out)["items"] if o["kind"] == "Job"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["--checkpoint-dir", url]
    refs = {e["name"]: e.get("valueFrom") for e in container["env"] if e["name"].startswith("AWS_")}
    assert refs == {
        "AWS_ACCESS_KEY_ID": {"secretKeyRef": {"name": "s3", "key": "id"}},
        "AWS_SECRET_ACCESS_KEY": {"secretKeyRef": {"name": "s3", "key": "key"}},
    }
