"""ddpctl.manifests.render: a spec's objects. Hostile input cannot change a manifest's structure (it
renders as the same literal string, or is refused with a one-line error naming the field), and the
objects hold what the plan derived: apply order, resources, tolerations, Pod Security, env and
secrets, volumes, one workload per node group."""

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


# ------------------------------------------------------------------------------ what the objects hold


def _pod_spec(data: dict) -> dict:
    """The pod template of the spec's Job (target job)."""
    return render(JobSpec.from_dict({"name": "w", **data}))[-1]["spec"]["template"]["spec"]


@pytest.mark.parametrize("target", TARGETS)
def test_services_come_before_the_workloads_that_need_their_dns(target: str) -> None:
    kinds = [o["kind"] for o in render(JobSpec.from_dict({"name": "w", "target": target}))]
    assert kinds[-1] in ("Job", "PyTorchJob", "JobSet", "TrainJob")
    assert kinds.index(kinds[-1]) == len(kinds) - 1 and all(
        k in ("Service", "ClusterTrainingRuntime") for k in kinds[:-1]
    )


@pytest.mark.parametrize(
    ("data", "resources"),
    [
        ({}, {}),
        ({"resources": {"cpu": "4", "memory": "8Gi"}},
         {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"memory": "8Gi"}}),
        ({"gpusPerNode": 2}, {"limits": {"nvidia.com/gpu": 2}}),
        ({"gpusPerNode": 1, "resources": {"gpuResource": "amd.com/gpu"}}, {"limits": {"amd.com/gpu": 1}}),
    ],
)  # fmt: skip
def test_resources(data: dict, resources: dict) -> None:
    assert _pod_spec(data)["containers"][0].get("resources", {}) == resources


@pytest.mark.parametrize(
    ("data", "tolerations"),
    [
        ({}, []),
        ({"gpusPerNode": 1}, [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        # a toleration of the GPU key the user gave is not doubled
        ({"gpusPerNode": 1, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "a100"}]},
         [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "a100"}]),
    ],
)  # fmt: skip
def test_a_gpu_job_tolerates_its_gpu_taint(data: dict, tolerations: list) -> None:
    assert _pod_spec(data).get("tolerations", []) == tolerations


@pytest.mark.parametrize(
    ("security", "pod", "container"),
    [
        ("restricted", {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
         {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
          "seccompProfile": {"type": "RuntimeDefault"}}),
        ("baseline", {"seccompProfile": {"type": "RuntimeDefault"}}, {"allowPrivilegeEscalation": False}),
    ],
)  # fmt: skip
def test_pod_security(security: str, pod: dict, container: dict) -> None:
    spec = _pod_spec({"podSecurity": security})
    assert spec["securityContext"] == pod and spec["containers"][0]["securityContext"] == container


def test_env_node_rank_and_secrets() -> None:
    env = _pod_spec({"env": {"MINE": "1"}, "secretEnv": {"TOKEN": {"secret": "s", "key": "k"}}})["containers"][0]["env"]
    assert env[0] == {
        "name": "PET_NODE_RANK",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
    }
    assert {"name": "MINE", "value": "1"} in env
    # a secret is referenced, never inlined
    assert env[-1] == {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}


def test_an_elastic_job_gets_no_node_rank_from_its_index() -> None:
    env = _pod_spec({"nodes": "1:3"})["containers"][0]["env"]
    assert all(e["name"] != "PET_NODE_RANK" for e in env)


def test_volumes_and_shared_memory() -> None:
    spec = _pod_spec(
        {"shmSize": "4Gi", "volumes": {"data": {"claimName": "d", "mountPath": "/data", "readOnly": True}}}
    )
    assert spec["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "d", "readOnly": True}},
    ]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "data", "mountPath": "/data", "readOnly": True},
    ]


def test_each_node_group_has_a_workload_of_its_own_shape() -> None:
    groups = [
        {"name": "big", "nodes": 1, "gpusPerNode": 4, "nodeSelector": {"gpu": "a100"}, "resources": {"memory": "64Gi"}},
        {"name": "small", "nodes": 2, "gpusPerNode": 1},
    ]
    spec = JobSpec.from_dict({"name": "w", "nodeSelector": {"zone": "a"}, "nodeGroups": groups})
    jobs = [o for o in render(spec) if o["kind"] == "Job"]
    assert [(j["metadata"]["name"], j["spec"]["completions"]) for j in jobs] == [("w-big", 1), ("w-small", 2)]
    assert [j["metadata"]["labels"]["ddpctl.io/node-group"] for j in jobs] == ["big", "small"]
    big, small = (j["spec"]["template"]["spec"] for j in jobs)
    assert big["nodeSelector"] == {"gpu": "a100", "zone": "a"} and small["nodeSelector"] == {"zone": "a"}
    assert big["containers"][0]["resources"]["limits"] == {"memory": "64Gi", "nvidia.com/gpu": 4}
    assert small["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    offsets = [
        {e["name"]: e.get("value") for e in s["containers"][0]["env"]}["PET_NODE_RANK_OFFSET"] for s in (big, small)
    ]
    assert offsets == ["0", "1"]


def test_a_spec_and_its_plan_render_the_same_text() -> None:
    from ddpctl.engines import plan_for

    spec = JobSpec.from_dict({"name": "w", "target": "jobset", "nodes": 3})
    assert render_text(spec) == render_text(plan_for(spec))
    assert list(yaml.safe_load_all(render_text(spec))) == render(spec)
