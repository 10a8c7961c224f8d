"""ddpctl.spec.model: what a JobSpec accepts and refuses, key by key, table-driven. A spec is
refused when it is made (its keys' rules, its rules across keys) or when its engine plans it (what
the target cannot run): both count as refused, with the field named and a fix."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ddpctl.engines import plan_for
from ddpctl.errors import SpecError
from ddpctl.spec.fields import Rule, declared
from ddpctl.spec.model import JobSpec

# (spec dict, the field named, words of the problem): each breaks one top-level key's own rule.
REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"name": "Resnet"}, "name", "is not a valid DNS-1035 label"),
    ({"name": "1abc"}, "name", "is not a valid DNS-1035 label"),
    ({"name": "abc\n"}, "name", "is not a valid"),  # `$` would accept a trailing newline; fullmatch does not
    ({"name": "a" * 64}, "name", "the limit is 63"),
    ({"name": None}, "name", "must not be empty"),
    ({"namespace": "Prod"}, "namespace", "is not a valid DNS-1123 label"),
    ({"target": "slurm"}, "target", "'slurm' is not a valid value"),
    ({"image": "bad image"}, "image", "is not an image reference"),
    ({"image": "img\nkind: Pod"}, "image", "is not an image reference"),
    ({"image": "img:1\n"}, "image", "is not an image reference"),
    ({"imagePullPolicy": "Sometimes"}, "imagePullPolicy", "is not a valid value"),
    ({"imagePullSecrets": ["Not_A_Name"]}, "imagePullSecrets[0]", "is not a valid DNS-1123 label"),
    ({"module": "not a module"}, "module", "is not a Python module path"),
    ({"module": None, "script": "bad\nscript.py"}, "script", "contains control characters"),
    ({"module": None, "script": ""}, "script", "must not be empty"),
    ({"module": None, "command": ["", "x"]}, "command[0]", "must not be empty"),
    ({"args": ["a\x00"]}, "args[0]", "contains a NUL character"),
    ({"args": "--epochs 3"}, "args", "expected a list, got str"),
    ({"gpusPerNode": -1}, "gpusPerNode", "-1 must be an integer >= 0"),
    ({"gpusPerNode": True}, "gpusPerNode", "true must be an integer >= 0"),
    ({"procsPerNode": 0}, "procsPerNode", "0 must be an integer >= 1"),
    ({"backend": "mpi"}, "backend", "is not a valid value"),
    ({"shmSize": "-1Gi"}, "shmSize", "is not a Kubernetes quantity"),
    ({"env": {"1BAD": "x"}}, "env.1BAD", "is not a valid environment variable name"),
    ({"env": {"AWS_SECRET_ACCESS_KEY": "x"}}, "env.AWS_SECRET_ACCESS_KEY", "would put a secret in plain text"),
    ({"envFromSecrets": ["UPPER"]}, "envFromSecrets[0]", "is not a valid DNS-1123 label"),
    ({"secretEnv": {"1X": {"secret": "s", "key": "k"}}}, "secretEnv.1X", "is not a valid environment variable"),
    ({"volumes": {"Data": {"claimName": "pvc", "mountPath": "/data"}}}, "volumes.Data", "is not a valid DNS-1123"),
    ({"volumes": {"dshm": {"claimName": "pvc", "mountPath": "/x"}}}, "volumes.dshm", "reserved for /dev/shm"),
    ({"checkpoints": "/mnt/ckpt"}, "checkpoints", ""),  # a path is a volume's, not a URL
    ({"checkpoints": "ftp://bucket/run"}, "checkpoints", ""),
    ({"checkpoints": "s3://"}, "checkpoints", ""),
    ({"checkpoints": "s3://Bucket/run"}, "checkpoints", ""),
    ({"checkpoints": "s3://bucket/run?versionId=1"}, "checkpoints", ""),
    ({"nodeSelector": {"pool": "a b"}}, "nodeSelector.pool", "is not a valid label value"),
    ({"nodeSelector": {"pool": 3}}, "nodeSelector.pool", "keys and values must be strings"),
    ({"tolerations": [{"key": "gpu", "operator": "Maybe"}]}, "tolerations[0].operator", "is not Equal or Exists"),
    ({"tolerations": [{"key": "gpu", "color": "red"}]}, "tolerations[0]", "unknown key color"),
    (
        {"tolerations": [{"key": "gpu", "operator": "Exists", "tolerationSeconds": "soon"}]},
        "tolerations[0].tolerationSeconds",
        "must be an integer >= 0",
    ),
    ({"affinity": {"friendship": {}}}, "affinity.friendship", "is not an affinity kind"),
    (
        {"affinity": {"nodeAffinity": {"x": __import__("datetime").date(2024, 1, 1)}}},
        "affinity.nodeAffinity.x",
        "a date cannot go into a manifest",
    ),
    ({"priorityClassName": "High Priority"}, "priorityClassName", "is not a valid name"),
    ({"serviceAccountName": "A"}, "serviceAccountName", "is not a valid name"),
    ({"labels": {"team": "a b"}}, "labels.team", "is not a valid label value"),
    ({"labels": {"team": "a\n"}}, "labels.team", "is not a valid label value"),
    ({"labels": {"bad key!": "a"}}, "labels.bad key!", "is not a valid label key"),
    ({"annotations": {"": "a"}}, "annotations.", "a key must not be empty"),
    ({"queue": "has space"}, "queue", "is not a valid label value"),
    ({"queue": ""}, "queue", "must not be empty"),
    ({"workloadPriorityClass": ""}, "workloadPriorityClass", "must not be empty"),
    ({"restartPolicy": "Always"}, "restartPolicy", "is not a valid value"),
    ({"backoffLimit": -1}, "backoffLimit", "must be an integer >= 0"),
    ({"ttlSecondsAfterFinished": -1}, "ttlSecondsAfterFinished", "must be an integer >= 0"),
    ({"activeDeadlineSeconds": 0}, "activeDeadlineSeconds", "must be an integer >= 1"),
    ({"gracePeriod": 14}, "gracePeriod", "must be an integer >= 15"),
    ({"collectiveTimeout": 0}, "collectiveTimeout", "must be an integer >= 1"),
    ({"podSecurity": "root"}, "podSecurity", "is not a valid value"),
    ({"fabric": "ib"}, "fabric", "is not a valid value"),
    ({"fabric": "infiniband"}, "fabric", "carries NCCL's traffic, but this job runs gloo"),
    ({"fabric": "efa", "gpusPerNode": 1, "backend": "gloo"}, "fabric", "carries NCCL's traffic"),
    ({"fabric": "roce", "gpusPerNode": 1}, "fabric", "needs the IPC_LOCK capability"),
    ({"fabric": "efa", "gpusPerNode": 1, "podSecurity": "baseline"}, "fabric", "Pod Security baseline forbids"),
    ({"avoidNodes": ["Node_1"]}, "avoidNodes[0]", "is not a valid name"),
    ({"avoidNodes": "gpu-3"}, "avoidNodes", "expected a list, got str"),
    (
        {"avoidNodes": ["gpu-3"], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
        "avoidNodes",
        "cannot be added to affinity.nodeAffinity",
    ),
    ({"avoidNodes": ["gpu-3"], "affinity": {"nodeAffinity": "x"}}, "avoidNodes", "cannot be added"),
    ({"preflight": {"mode": "on"}}, "preflight.mode", "is not a valid value"),
    ({"preflight": {"tolerance": 0}}, "preflight.tolerance", "0 is not a number from 0.01 to 1"),
    ({"preflight": {"tolerance": "high"}}, "preflight.tolerance", "is not a number"),
    ({"preflight": {"minBusbw": -1}}, "preflight.minBusbw", "-1 is not a number from 0 to 1000000"),
    ({"preflight": {"minTflops": True}}, "preflight.minTflops", "is not a number"),
    ({"preflight": {"mode": "warn"}, "module": "mine.train"}, "preflight.mode", "inside the ddpctl trainer"),
    ({"preflight": {"mode": "fail"}, "module": None, "command": ["python", "t.py"]}, "preflight.mode", "does not run"),
    ({"preflight": "warn"}, "preflight", "expected a map, got str"),
    ({"stragglers": {"mode": "replace"}}, "stragglers.mode", "replace needs recovery: pod"),
    ({"stragglers": {"tolerance": 1.2}}, "stragglers.tolerance", "1.2 is not a number above 0 and below 1"),
    ({"stragglers": {"every": 0}}, "stragglers.every", "0 must be an integer >= 1"),
    ({"stragglers": {"windows": -1}}, "stragglers.windows", "-1 must be an integer >= 1"),
    ({"stragglers": "fail"}, "stragglers", "expected a map, got str"),
    ({"resources": {"cpuLimit": "lots"}}, "resources.cpuLimit", "is not a Kubernetes quantity"),
    ({"resources": {"fabricResource": "bad name"}}, "resources.fabricResource", "is not a resource name"),
    ({"resources": {"fabricDevices": 0}}, "resources.fabricDevices", "must be an integer >= 1"),
    ({"stallTimeout": -1}, "stallTimeout", "must be an integer >= 0"),
    ({"stallTimeout": "5m"}, "stallTimeout", "must be an integer >= 0"),
    # what the target cannot run: refused when planned
    ({"target": "trainjob", "priorityClassName": "high"}, "priorityClassName", ""),
    ({"target": "trainjob", "envFromSecrets": ["hf-token"]}, "envFromSecrets", ""),
    ({"name": "a" * 54, "target": "pytorchjob", "nodes": 64}, "name", ""),  # <name>-worker-62 is too long
    ({"name": "x" * 61, "nodes": 100}, "name", ""),  # <name>-99 is 64 characters
]


@pytest.mark.parametrize(("data", "field", "problem"), REFUSED, ids=[f"{r[1]}-{i}" for i, r in enumerate(REFUSED)])
def test_a_bad_key_is_refused_naming_the_field_and_fix(data: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(SpecError) as info:
        plan_for(JobSpec.from_dict(data))
    assert info.value.field == field, str(info.value)
    message = str(info.value)
    assert message.startswith(f"{field}: ") and "\n" not in message
    assert problem in info.value.problem, message
    assert info.value.fix, "every spec error says how to fix it"


@pytest.mark.parametrize("target", ["job", "jobset"])
def test_exit_code_restart_policy_is_refused_where_no_operator_reads_it(target: str) -> None:
    with pytest.raises(SpecError) as err:
        plan_for(JobSpec.from_dict({"target": target, "restartPolicy": "ExitCode"}))
    assert err.value.field == "restartPolicy" and "pytorchjob" in str(err.value)


def test_spec_is_frozen_all_the_way_down() -> None:
    spec = JobSpec.from_dict({"env": {"A": "1"}, "volumes": {"d": {"claimName": "c", "mountPath": "/d"}}})
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'nodes'"):
        spec.nodes = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'mode'"):
        spec.rendezvous.mode = "c10d"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.env["B"] = "2"  # type: ignore[index]
    with pytest.raises(TypeError):
        spec.volumes.pop("d")  # type: ignore[attr-defined]
    assert isinstance(spec.args, tuple)


def test_replace_checks_the_new_spec() -> None:
    spec = JobSpec()
    assert spec.replace(nodes=3).nodes == 3 and spec.nodes == 2
    with pytest.raises(SpecError, match=r"^backend: nccl needs GPUs"):
        spec.replace(backend="nccl")


def test_node_groups_set_the_totals_the_rest_of_ddpctl_reads() -> None:
    spec = JobSpec.from_dict(
        {"nodeGroups": [{"name": "a", "nodes": 2, "gpusPerNode": 4}, {"name": "b", "nodes": 1, "gpusPerNode": 2}]}
    )
    assert (spec.nodes, spec.gpus_per_node, spec.procs_per_node) == (3, 4, None)
    assert [g.name for g in spec.groups] == ["a", "b"]
    uniform = JobSpec.from_dict({"nodes": "1:4", "gpusPerNode": 2})
    assert [(g.name, g.nodes, g.nproc) for g in uniform.groups] == [("node", 4, 2)]


@pytest.mark.parametrize("cls", [JobSpec])
def test_every_key_declares_a_doc_and_a_rule(cls: type) -> None:
    for key in declared(cls):
        assert str(key.field.metadata["doc"]).strip(), key.key
        assert isinstance(key.rule, Rule), key.key
    undeclared = {f.name for f in dataclasses.fields(cls)} - {k.name for k in declared(cls)}
    assert undeclared == {"min_nodes", "max_nodes"}, "set from `nodes`, not keys of their own"


@pytest.mark.parametrize(
    ("data", "field", "secret"),
    [
        ({"checkpoints": "s3://AKIAEXAMPLE:s3cr3t-value@bucket/run"}, "checkpoints", "s3cr3t-value"),
        ({"checkpoints": "ftp://AKIAEXAMPLE:s3cr3t-value@host/run"}, "checkpoints", "s3cr3t-value"),
        ({"checkpoints": "https://b.s3.amazonaws.com/r?X-Amz-Signature=s3cr3t-value"}, "checkpoints", "s3cr3t-value"),
        ({"env": {"AWS_SECRET_ACCESS_KEY": "s3cr3t-value"}}, "env.AWS_SECRET_ACCESS_KEY", "s3cr3t-value"),
    ],
)
def test_a_secret_written_where_none_belongs_is_refused_without_being_repeated(
    data: dict[str, Any], field: str, secret: str
) -> None:
    """A key pasted into the checkpoints URL (userinfo, a presigned query) or an object store's
    secret in plain env is refused, and the error line does not print it back (it goes to
    terminals and CI logs): secrets belong in a Secret, referenced by secretEnv."""
    with pytest.raises(SpecError) as refused:
        JobSpec.from_dict(data)
    assert refused.value.field == field and secret not in str(refused.value)
