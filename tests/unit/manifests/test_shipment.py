"""`--workspace DIR`: the folder's code in a Secret made before the job, mounted, checked and
unpacked in every pod of every engine before its command runs; and the warning when the code the
job names is in the folder but nothing carries it."""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from ddpctl.engines import plan_for
from ddpctl.manifests.render import render_plan
from ddpctl.manifests.shipment import code_in_image, code_not_carried, shipment_of
from ddpctl.spec import JobSpec
from ddpctl.spec.schema import TARGETS
from ddpctl_trainer import protocol
from tests.support.api import one_error
from tests.support.k8s_schemas import require_crds, validate_object


def project(folder: Path) -> Path:
    (folder / "pkg").mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text("import helper\nprint(helper.X)\n")
    (folder / "helper.py").write_text("X = 1\n")
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / ".env").write_text("TOKEN=not-shipped\n")
    return folder


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod template's containers in a rendered object (whatever its engine nests them in)."""
    found: list[dict[str, Any]] = []

    def walk(o: Any) -> None:
        if isinstance(o, dict):
            if "containers" in o and isinstance(o["containers"], list):
                found.extend(c for c in o["containers"] if "command" in c or "volumeMounts" in c)
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(obj)
    return found


# every engine with its uniform layout, and those that take node groups (trainjob does not) with `1+1`
CASES = [(t, False) for t in TARGETS] + [(t, True) for t in TARGETS if t != "trainjob"]


@pytest.mark.parametrize(("target", "groups"), CASES)
def test_every_engine_and_node_group_gets_the_workspace(tmp_path: Path, target: str, groups: bool) -> None:
    require_crds()
    data: dict[str, Any] = {"target": target, "script": "train.py", "workspace": {"dir": "."}}
    if groups:
        data["nodeGroups"] = [{"name": "a", "nodes": 1, "gpusPerNode": 0}, {"name": "b", "nodes": 1, "gpusPerNode": 0}]
    else:
        data["nodes"] = 2
    plan = plan_for(JobSpec.from_dict(data))
    with shipment_of(plan, cwd=project(tmp_path), to_store=False) as shipment:
        assert shipment is not None and shipment.secret is not None
        objects = render_plan(plan, shipment)
    secret = objects[0]
    assert secret["kind"] == "Secret" and secret["immutable"] is True, "made first: no pod starts without it"
    assert secret["metadata"]["labels"]["app.kubernetes.io/instance"] == plan.spec.name
    for obj in objects:
        validate_object(obj)
    workloads = [o for o in objects if o["kind"] not in ("Secret", "Service")]
    pods = [c for obj in workloads for c in containers(obj)]
    assert pods, "every engine's pod template carries the workspace"
    for container in pods:
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {protocol.WORKSPACE_DIR, protocol.WORKSPACE_MOUNT} <= mounts
    # trainjob: env and command are the trainer's (spec.trainer), the runtime patch has the mounts
    runs = [o["spec"]["trainer"] for o in workloads if o["kind"] == "TrainJob"] or [c for c in pods if "command" in c]
    for run in runs:
        env = {e["name"]: e.get("value") for e in run.get("env") or []}
        assert env[protocol.WORKSPACE_SHA256_ENV] == shipment.pack.sha256
        assert env[protocol.WORKSPACE_ARCHIVE_ENV] == f"{protocol.WORKSPACE_MOUNT}/{protocol.WORKSPACE_ARCHIVE_KEY}"
        assert run["command"][:2] == ["python3", f"{protocol.WORKSPACE_MOUNT}/workspace.py"]
    archive = base64.b64decode(secret["data"][protocol.WORKSPACE_ARCHIVE_KEY])
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        names = tar.getnames()
    assert "train.py" in names and "helper.py" in names and ".env" not in names
    assert set(secret["data"]) == {protocol.WORKSPACE_ARCHIVE_KEY, *protocol.WORKSPACE_UNPACKER_FILES}


def test_the_built_in_trainer_unpacks_in_its_launcher_with_exit_2_rules(tmp_path: Path) -> None:
    """The trainer's launcher unpacks by itself (no wrapper); a user's torchrun gets the unpacker, and
    the Job's failure rules fail it at once on exit 2 (a workspace that cannot be unpacked)."""
    spec = JobSpec.from_dict({"workspace": {"dir": "."}})
    plan = plan_for(spec)
    with shipment_of(plan, cwd=project(tmp_path), to_store=False) as shipment:
        job = next(o for o in render_plan(plan, shipment) if o["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][:3] == ["python3", "-m", "ddpctl_trainer.launch"]
    user = plan_for(JobSpec.from_dict({"script": "train.py", "workspace": {"dir": "."}}))
    with shipment_of(user, cwd=tmp_path, to_store=False) as shipment:
        job = next(o for o in render_plan(user, shipment) if o["kind"] == "Job")
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJob" and rules[0]["onExitCodes"]["values"] == [protocol.EXIT_USAGE]
    plain = next(o for o in render_plan(plan_for(JobSpec.from_dict({"script": "train.py"}))) if o["kind"] == "Job")
    assert all(r["action"] != "FailJob" for r in plain["spec"]["podFailurePolicy"]["rules"])


def test_render_prints_the_secret_first_and_says_what_was_packed(cli, tmp_path: Path) -> None:
    project(tmp_path)
    r = cli("render", "--script", "train.py", "--workspace", ".")
    assert r.code == 0, r.err
    assert r.out.index("kind: Secret") < r.out.index("kind: Service") < r.out.index("kind: Job")
    assert "ddpctl: workspace: 3 files" in r.err and "left out: .env (likely secrets" in r.err
    explained = " ".join(cli("render", "--script", "train.py", "--workspace", ".", "--explain").out.split())
    assert "workspace: 3 files" in explained and "goes to Secret ddp-train-workspace-" in explained


def test_a_workspace_too_large_for_a_secret_is_exit_2_in_render_naming_submit_with_a_store(cli, tmp_path: Path) -> None:
    project(tmp_path)
    (tmp_path / "weights.bin").write_bytes(__import__("os").urandom(1_200_000))  # incompressible
    err = one_error(cli("render", "--script", "train.py", "--workspace", "."), 2, "workspace: the workspace is")
    assert "more than the 1.0 MiB an object in the cluster holds" in err
    assert "render never uploads" in err and "--workspace-store s3://" in err
    assert cli("render", "--script", "train.py", "--workspace", ".", "--helm-values").code == 2


@pytest.mark.parametrize(
    "spec, carried, in_image",
    [
        ({"script": "train.py"}, False, None),  # in the folder, in no workspace, and the trainer image lacks it
        ({"script": "train.py", "workspace": {"dir": "."}}, True, None),
        ({"script": "/opt/code/train.py"}, True, None),  # a path in the image: not ours to judge
        ({"module": "pkg"}, False, None),  # pkg/__init__.py is here
        ({"module": "elsewhere.train"}, True, None),  # not in the folder: in the image, presumably
        ({"command": ["torchrun", "train.py"]}, False, None),
        ({}, True, None),  # the built-in trainer: in the image
        ({"image": "reg.example.com/ddpctl-trainer:v2", "script": "train.py"}, False, None),  # the trainer, elsewhere
        # the user's own image: never refused without looking; submit looks into it
        ({"image": "reg.example.com/me/app:v1", "script": "train.py"}, True, ("--script", "train.py")),
        (
            {"image": "me/app:v1", "command": ["torchrun", "--nproc-per-node", "2", "train.py"]},
            True,
            ("--command", "train.py"),
        ),
        ({"image": "me/app:v1", "module": "pkg"}, True, None),  # a module may be installed anywhere
        ({"image": "me/app:v1", "script": "train.py", "workspace": {"dir": "."}}, True, None),  # shipped
        # looked for whether or not the file is here: WORKDIR + the path, an absolute one as given
        ({"image": "me/app:v1", "script": "other.py"}, True, ("--script", "other.py")),
        ({"image": "me/app:v1", "script": "/opt/code/train.py"}, True, ("--script", "/opt/code/train.py")),
        (
            {"image": "me/app:v1", "command": ["python", "/srv/run.py", "--cfg", "c.py"]},
            True,
            ("--command", "/srv/run.py"),
        ),
        ({"image": "me/app:v1", "command": ["python", "-c", "print(1)"]}, True, None),
        ({"image": "me/app:ws-0123456789ab-0123abcd", "script": "/abs.py"}, True, None),  # a project image
    ],
)
def test_code_in_the_folder_that_nothing_carries_is_said(
    tmp_path: Path, spec: dict[str, Any], carried: bool, in_image: tuple[str, str] | None
) -> None:
    plan = plan_for(JobSpec.from_dict(spec))
    problem = code_not_carried(plan, project(tmp_path))
    assert (problem is None) == carried, problem
    if problem:
        assert '"No such file"' in problem and "--workspace ." in problem and "ddpctl build" in problem
    assert code_in_image(plan) == in_image


def test_a_project_image_carries_the_folder_until_its_code_changes(tmp_path: Path) -> None:
    from ddpctl.workspace.pack import version_of

    project(tmp_path)
    image = f"my-project:ws-{version_of(tmp_path)[:12]}-0123abcd"
    plan = plan_for(JobSpec.from_dict({"script": "train.py", "image": image}))
    assert code_not_carried(plan, tmp_path) is None
    (tmp_path / "helper.py").write_text("X = 2\n")
    problem = code_not_carried(plan, tmp_path)
    assert problem is not None and "carries an older version of this folder's code" in problem


def test_render_warns_and_submit_refuses_code_nothing_carries(cli, make_cluster, tmp_path: Path) -> None:
    project(tmp_path)
    r = cli("render", "--script", "train.py")
    assert r.code == 0 and 'ddpctl: warning: train.py is in' in r.err and '"No such file"' in r.err
    c = make_cluster()
    one_error(cli("submit", *c.args, "--script", "train.py"), 2, "train.py is in", "--workspace .")
