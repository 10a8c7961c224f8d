"""The kube-apiserver test double, driven by the REAL `kubernetes` client over real HTTP.

Each test shows one behaviour that ddpctl's cluster commands rely on, as a cluster would show it.
No sleeps: streams are read as they arrive, with bounded socket timeouts.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from tests.support.kube_api_double import KubeApiDouble, validate_object
from tests.support.kube_api_double.resources import CUSTOM
from tests.support.kube_api_double.validation import default_crd_dir, load_crds, parse_error_string

ALL_ENGINES = ("pytorchjob", "jobset", "trainjob")
TIMEOUT = 10  # seconds; a bound on every blocking read, never a synchronisation device


@pytest.fixture
def kube():
    with KubeApiDouble(engines=ALL_ENGINES, namespaces=("default", "team"), seed=7) as d:
        yield d


@pytest.fixture
def api(kube, tmp_path):
    path = kube.write_kubeconfig(tmp_path / "kubeconfig", context="double", namespace="team")
    return config.new_client_from_config(config_file=str(path), context="double")


def body_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def job_manifest(name: str = "train", nodes: int = 2, image: str = "busybox:1.36", **spec_extra) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"app": "ddpctl"}},
        "spec": {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            **spec_extra,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": name,
                    "containers": [{"name": "trainer", "image": image}],
                }
            },
        },
    }


def pytorchjob_manifest(name: str = "pj", workers: int = 2) -> dict:
    tmpl = {"spec": {"containers": [{"name": "pytorch", "image": "img:1"}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": tmpl},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": tmpl},
            }
        },
    }


def apply(api, obj: dict, manager: str = "ddpctl", force: bool = False, namespace: str = "team", **kw):
    """Server-side apply of any kind through the dynamic client (discovery included)."""
    dyn = DynamicClient(api, cache_file=None)
    res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    ns = namespace if res.namespaced else None
    return res.server_side_apply(
        body=obj, name=obj["metadata"]["name"], namespace=ns, field_manager=manager, force_conflicts=force or None, **kw
    )


@pytest.fixture(autouse=True)
def _own_discovery_cache(tmp_path, monkeypatch):
    # DynamicClient caches discovery in a file named after the server URL; keep it per test
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


# --------------------------------------------------------------------------- connection & auth


def test_kubeconfig_loads_with_load_kube_config_and_reaches_the_double(kube, tmp_path):
    path = kube.write_kubeconfig(tmp_path / "kc", context="ctx-a", namespace="team")
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(path), context="ctx-a", client_configuration=cfg)
    assert cfg.host == kube.url and kube.url.startswith("http://127.0.0.1:")
    version = client.VersionApi(client.ApiClient(cfg)).get_code()
    assert (version.major, version.minor) == ("1", "33")
    _, active = config.list_kube_config_contexts(config_file=str(path))
    assert active["context"]["namespace"] == "team"
    assert kube.requests_to("GET", "^/version/?$")[0].headers["authorization"] == f"Bearer {kube.token}"


def test_wrong_or_missing_token_is_401(kube, tmp_path):
    for token in ("not-the-token", None):
        bad = config.new_client_from_config(
            config_file=str(kube.write_kubeconfig(tmp_path / f"kc-{token}", token=token))
        )
        with pytest.raises(ApiException) as e:
            client.CoreV1Api(bad).list_namespaced_pod("default")
        assert e.value.status == 401
        assert body_of(e.value) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }


def test_forbidden_is_403_with_kube_message(kube, api):
    kube.forbid("create", "jobs", "batch", "team")
    kube.forbid("get", "pods/log", "", "*")
    with pytest.raises(ApiException) as e:
        client.BatchV1Api(api).create_namespaced_job("team", job_manifest())
    assert e.value.status == 403
    b = body_of(e.value)
    assert b["reason"] == "Forbidden"
    assert b["message"] == (
        'jobs.batch is forbidden: User "ddpctl-test" cannot create resource "jobs" in API group '
        '"batch" in the namespace "team"'
    )
    assert b["details"] == {"group": "batch", "kind": "jobs"}
    # other verbs and namespaces are still allowed
    client.BatchV1Api(api).create_namespaced_job("default", job_manifest())
    pod = kube.pod_names_for("Job", "train", "default")[0]
    with pytest.raises(ApiException) as e:
        client.CoreV1Api(api).read_namespaced_pod_log(pod, "default")
    assert body_of(e.value)["message"] == (
        f'pods "{pod}" is forbidden: User "ddpctl-test" cannot get resource "pods/log" in API group "" in the '
        'namespace "default"'
    )


def test_authorize_hook_sees_request_attributes(tmp_path):
    seen = []

    def authorize(user, verb, group, resource, namespace, name):
        seen.append((user, verb, group, resource, namespace, name))
        return verb != "delete"

    with KubeApiDouble(authorize=authorize, user="alice") as d:
        api = config.new_client_from_config(config_file=str(d.write_kubeconfig(tmp_path / "kc")))
        core = client.CoreV1Api(api)
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
        with pytest.raises(ApiException) as e:
            core.delete_namespaced_config_map("cm", "default")
    assert e.value.status == 403 and 'User "alice" cannot delete resource "configmaps"' in body_of(e.value)["message"]
    assert ("alice", "create", "", "configmaps", "default", None) in seen


# --------------------------------------------------------------------------- discovery


def test_discovery_lists_installed_groups_only(tmp_path):
    with KubeApiDouble(engines=("jobset",)) as d:
        api = config.new_client_from_config(config_file=str(d.write_kubeconfig(tmp_path / "kc")))
        groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
        assert set(groups) == {"batch", "jobset.x-k8s.io"}
        assert groups["jobset.x-k8s.io"].preferred_version.group_version == "jobset.x-k8s.io/v1alpha2"
        assert client.CoreApi(api).get_api_versions().versions == ["v1"]
        res = {
            r.name: r for r in client.CustomObjectsApi(api).get_api_resources("jobset.x-k8s.io", "v1alpha2").resources
        }
        assert res["jobsets"].kind == "JobSet" and res["jobsets"].namespaced is True
        assert res["jobsets"].singular_name == "jobset" and "watch" in res["jobsets"].verbs
        assert "jobsets/status" in res
        core = {r.name: r for r in client.CoreV1Api(api).get_api_resources().resources}
        assert core["namespaces"].namespaced is False and "pods/log" in core and core["pods"].short_names == ["po"]
        # a CRD that is not installed: 404 on its group, as on a cluster without the engine
        with pytest.raises(ApiException) as e:
            client.CustomObjectsApi(api).list_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs")
        assert e.value.status == 404
        assert body_of(e.value) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "the server could not find the requested resource",
            "reason": "NotFound",
            "details": {},
            "code": 404,
        }
        dyn = DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))
        assert dyn.resources.get(api_version="jobset.x-k8s.io/v1alpha2", kind="JobSet").namespaced
        with pytest.raises(ResourceNotFoundError):
            dyn.resources.get(api_version="kubeflow.org/v1", kind="PyTorchJob")
        with pytest.raises(ResourceNotFoundError):
            dyn.resources.get(api_version="trainer.kubeflow.org/v1alpha1", kind="TrainJob")


def test_resource_table_matches_the_shared_crds():
    crds = load_crds(str(default_crd_dir()))
    assert crds, f"the vendored upstream CRDs are missing from {default_crd_dir()}"
    for rt in CUSTOM:
        entry = crds[(rt.api_version, rt.kind)]
        names, spec = entry["crd"]["spec"]["names"], entry["crd"]["spec"]
        assert (names["plural"], names["singular"]) == (rt.plural, rt.singular)
        assert (spec["scope"] == "Namespaced") == rt.namespaced
        assert ("status" in (entry["version"].get("subresources") or {})) == ("status" in rt.subresources)


# --------------------------------------------------------------------------- create / apply / update


def test_server_side_apply_creates_then_updates_and_tracks_managed_fields(kube, api):
    batch = client.BatchV1Api(api)
    job = job_manifest()
    created, code, _ = batch.patch_namespaced_job_with_http_info(
        "train", "team", job, field_manager="ddpctl", _content_type="application/apply-patch+yaml"
    )
    assert code == 201
    md = created.metadata
    assert md.uid and md.generation == 1 and md.creation_timestamp is not None
    # the Job controller then records startTime/active through /status: a new resourceVersion
    rv1 = int(batch.read_namespaced_job("train", "team").metadata.resource_version)
    assert rv1 > int(md.resource_version)
    [entry] = md.managed_fields
    assert (entry.manager, entry.operation, entry.api_version) == ("ddpctl", "Apply", "batch/v1")
    assert entry.fields_v1["f:spec"]["f:parallelism"] == {} and "f:app" in entry.fields_v1["f:metadata"]["f:labels"]
    # the apiserver generated the selector and stamped the template
    assert created.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": md.uid}

    same, code, _ = batch.patch_namespaced_job_with_http_info(
        "train", "team", job, field_manager="ddpctl", _content_type="application/apply-patch+yaml"
    )
    assert code == 200 and int(same.metadata.resource_version) == rv1  # idempotent

    job["spec"]["parallelism"] = 1
    job["metadata"]["labels"] = {"app": "ddpctl", "run": "2"}
    updated = batch.patch_namespaced_job(
        "train", "team", job, field_manager="ddpctl", _content_type="application/apply-patch+yaml"
    )
    assert int(updated.metadata.resource_version) > rv1
    assert updated.metadata.generation == 2 and updated.spec.parallelism == 1
    assert updated.metadata.labels["run"] == "2"
    assert [(m.manager, m.operation, m.subresource) for m in updated.metadata.managed_fields] == [
        ("ddpctl", "Apply", None),
        ("kube-controller-manager", "Update", "status"),
    ]
    # the client sent what ddpctl must send
    req = kube.requests_to("PATCH", "/apis/batch/v1/namespaces/team/jobs/train$")[-1]
    assert req.param("fieldManager") == "ddpctl"
    assert req.content_type == "application/apply-patch+yaml"
    # dropping a field from the applied config removes it (nobody else owns it)
    del job["metadata"]["labels"]["run"]
    again = batch.patch_namespaced_job(
        "train", "team", job, field_manager="ddpctl", _content_type="application/apply-patch+yaml"
    )
    assert "run" not in again.metadata.labels


def test_apply_without_field_manager_is_422(api):
    with pytest.raises(ApiException) as e:
        client.CoreV1Api(api).patch_namespaced_config_map(
            "cm",
            "team",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
            _content_type="application/apply-patch+yaml",
        )
    assert e.value.status == 422
    b = body_of(e.value)
    assert b["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )
    assert b["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "field": "fieldManager",
            "message": "Required value: is required for apply patch",
        }
    ]


def test_apply_conflict_without_force_is_409_and_force_takes_ownership(api):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"x": "1", "y": "1"}}
    apply(api, cm, manager="ops")
    # same value: shared ownership, no conflict
    apply(api, {**cm, "data": {"y": "1"}}, manager="ddpctl")
    with pytest.raises(ApiException) as e:
        apply(api, {**cm, "data": {"x": "2", "y": "1"}}, manager="ddpctl")
    assert e.value.status == 409
    b = body_of(e.value)
    assert b["reason"] == "Conflict"
    assert b["message"] == 'Apply failed with 1 conflict: conflict with "ops" using v1: .data.x'
    assert b["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "ops" using v1', "field": ".data.x"}
    ]
    forced = apply(api, {**cm, "data": {"x": "2", "y": "1"}}, manager="ddpctl", force=True)
    forced = forced.to_dict()
    assert forced["data"] == {"x": "2", "y": "1"}
    owners = {m["manager"]: m["fieldsV1"] for m in forced["metadata"]["managedFields"]}
    assert owners["ddpctl"]["f:data"] == {"f:x": {}, "f:y": {}}
    assert owners["ops"]["f:data"] == {"f:y": {}}


def test_create_twice_is_409_already_exists(api):
    core = client.CoreV1Api(api)
    core.create_namespaced_service(
        "team", {"metadata": {"name": "train"}, "spec": {"clusterIP": "None", "ports": [{"port": 29500}]}}
    )
    with pytest.raises(ApiException) as e:
        core.create_namespaced_service("team", {"metadata": {"name": "train"}, "spec": {"ports": [{"port": 1}]}})
    assert e.value.status == 409
    assert body_of(e.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'services "train" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "train", "kind": "services"},
        "code": 409,
    }
    with pytest.raises(ApiException) as e:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "kubeflow.org", "v1", "team", "pytorchjobs", pytorchjob_manifest()
        )
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "kubeflow.org", "v1", "team", "pytorchjobs", pytorchjob_manifest()
        )
    assert body_of(e.value)["details"] == {"name": "pj", "group": "kubeflow.org", "kind": "pytorchjobs"}
    assert body_of(e.value)["message"] == 'pytorchjobs.kubeflow.org "pj" already exists'


def test_invalid_core_object_is_422_with_field_paths(kube, api):
    bad = job_manifest("Bad_Name")
    bad["spec"]["template"]["spec"]["containers"][0]["imagee"] = "typo"
    with pytest.raises(ApiException) as e:
        apply(api, bad)
    assert e.value.status == 422
    b = body_of(e.value)
    assert b["reason"] == "Invalid" and b["details"]["kind"] == "Job" and b["details"]["group"] == "batch"
    fields = {c["field"] for c in b["details"]["causes"]}
    assert {"metadata.name", "spec.template.spec.containers[0].imagee"} <= fields
    assert b["message"].startswith('Job.batch "Bad_Name" is invalid: [')
    # nothing was stored
    assert kube.objects("Job") == []
    # a Service name must be a DNS-1035 label
    with pytest.raises(ApiException) as e:
        client.CoreV1Api(api).create_namespaced_service(
            "team", {"metadata": {"name": "0svc"}, "spec": {"ports": [{"port": 1}]}}
        )
    b = body_of(e.value)
    assert b["message"].startswith('Service "0svc" is invalid: metadata.name: Invalid value: "0svc": a DNS-1035 label')
    assert "group" not in b["details"]


def test_unknown_field_or_wrong_type_in_custom_resource_is_422(api):
    pj = pytorchjob_manifest()
    pj["spec"]["bogus"] = True
    pj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(ApiException) as e:
        client.CustomObjectsApi(api).create_namespaced_custom_object("kubeflow.org", "v1", "team", "pytorchjobs", pj)
    assert e.value.status == 422
    b = body_of(e.value)
    causes = {c["field"]: c for c in b["details"]["causes"]}
    assert causes["spec.bogus"]["message"] == "field not declared in schema"
    assert causes["spec.pytorchReplicaSpecs.Worker.replicas"]["reason"] == "FieldValueTypeInvalid"
    assert b["message"].startswith('PyTorchJob.kubeflow.org "pj" is invalid: ')
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "node",
                    "replicaz": 2,
                    "template": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}},
                }
            ]
        },
    }
    with pytest.raises(ApiException) as e:
        apply(api, js)
    assert [c["field"] for c in body_of(e.value)["details"]["causes"]] == ["spec.replicatedJobs[0].replicaz"]


def test_missing_namespace_is_404(api):
    with pytest.raises(ApiException) as e:
        apply(api, job_manifest(), namespace="nope")
    assert e.value.status == 404
    assert body_of(e.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'namespaces "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "namespaces"},
        "code": 404,
    }
    with pytest.raises(ApiException) as e:
        client.BatchV1Api(api).read_namespaced_job("absent", "team")
    assert body_of(e.value)["message"] == 'jobs.batch "absent" not found'


def test_replace_with_stale_resource_version_is_409_conflict(api):
    core = client.CoreV1Api(api)
    cm = core.create_namespaced_config_map("team", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    stale = cm.metadata.resource_version
    cm.data = {"a": "2"}
    fresh = core.replace_namespaced_config_map("cm", "team", cm)
    assert int(fresh.metadata.resource_version) > int(stale)
    cm.data = {"a": "3"}
    with pytest.raises(ApiException) as e:
        core.replace_namespaced_config_map("cm", "team", cm)
    assert e.value.status == 409
    assert body_of(e.value)["message"] == (
        'Operation cannot be fulfilled on configmaps "cm": the object has been '
        'modified; please apply your changes to the latest version and try again'
    )


def test_dry_run_validates_but_stores_nothing(kube, api):
    rv_before = kube.store.rv
    out = apply(api, job_manifest(), dry_run="All")
    assert out.metadata.name == "train" and out.metadata.uid
    made = client.CoreV1Api(api).create_namespaced_config_map("team", {"metadata": {"name": "cm"}}, dry_run="All")
    assert made.metadata.name == "cm"
    with pytest.raises(ApiException) as e:  # an invalid object still fails
        apply(api, job_manifest("UPPER"), dry_run="All")
    assert e.value.status == 422
    assert kube.store.rv == rv_before and kube.objects("Job") == [] and kube.objects("Pod") == []
    client.CoreV1Api(api).create_namespaced_config_map("team", {"metadata": {"name": "real"}})
    client.CoreV1Api(api).delete_namespaced_config_map("real", "team", dry_run="All")
    assert kube.get("ConfigMap", "real", "team") is not None


def test_status_subresource_is_separate_from_the_main_resource(kube, api):
    batch = client.BatchV1Api(api)
    apply(api, job_manifest())
    cond = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "boom"}
    patched = batch.patch_namespaced_job_status(
        "train", "team", {"status": {"conditions": [cond]}}, _content_type="application/merge-patch+json"
    )
    assert patched.status.conditions[0].reason == "BackoffLimitExceeded"
    # a status in a main-resource write is ignored
    job = job_manifest()
    job["status"] = {"succeeded": 5}
    after = apply(api, job)
    assert after.status.conditions[0].type == "Failed" and after.status.get("succeeded") is None
    # finish() uses each engine's own condition types
    apply(api, pytorchjob_manifest())
    pj = kube.finish("PyTorchJob", "pj", "team", succeeded=False, message="OOM")
    assert [c["type"] for c in pj["status"]["conditions"]] == ["Created", "Failed"]
    got = client.CustomObjectsApi(api).get_namespaced_custom_object_status(
        "kubeflow.org", "v1", "team", "pytorchjobs", "pj"
    )
    assert got["status"]["conditions"][-1]["message"] == "OOM"


# --------------------------------------------------------------------------- list & watch


def test_list_with_label_and_field_selectors(kube, api):
    core = client.CoreV1Api(api)
    apply(api, job_manifest("a", nodes=2))
    apply(api, pytorchjob_manifest("pj", workers=1))
    names = lambda **kw: sorted(p.metadata.name for p in core.list_namespaced_pod("team", **kw).items)
    a_pods = kube.pod_names_for("Job", "a", "team")
    assert len(a_pods) == 2
    assert names(label_selector="job-name=a") == sorted(a_pods)
    assert names(label_selector="batch.kubernetes.io/job-completion-index in (1)") == [
        p for p in a_pods if p.startswith("a-1-")
    ]
    assert names(label_selector="training.kubeflow.org/job-name=pj,training.kubeflow.org/replica-type!=master") == [
        "pj-worker-0"
    ]
    assert names(label_selector="training.kubeflow.org/job-role") == ["pj-master-0"]
    assert names(label_selector="!job-name") == ["pj-master-0", "pj-worker-0"]
    assert names(label_selector="training.kubeflow.org/replica-type notin (worker),training.kubeflow.org/job-name") == [
        "pj-master-0"
    ]
    assert names(field_selector="metadata.name=pj-worker-0") == ["pj-worker-0"]
    listed = core.list_namespaced_pod("team")
    assert int(listed.metadata.resource_version) == kube.store.rv
    assert core.list_pod_for_all_namespaces(label_selector="job-name=a").items[0].metadata.namespace == "team"
    with pytest.raises(ApiException) as e:
        core.list_namespaced_pod("team", label_selector="a in b")
    assert e.value.status == 400 and body_of(e.value)["reason"] == "BadRequest"
    with pytest.raises(ApiException) as e:
        core.list_namespaced_pod("team", field_selector="spec.bogus=1")
    assert body_of(e.value)["message"] == "field label not supported: spec.bogus"


def test_watch_stream_sees_added_modified_deleted_live(kube, api):
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("team", {"metadata": {"name": "w", "labels": {"app": "x"}}, "data": {"n": "0"}})
    seen = []
    w = watch.Watch()
    for ev in w.stream(core.list_namespaced_config_map, "team", label_selector="app=x", timeout_seconds=TIMEOUT):
        seen.append((ev["type"], ev["object"].metadata.name, (ev["object"].data or {}).get("n")))
        if ev["type"] == "ADDED":  # the synthetic ADDED proves the stream is live: now change things
            core.patch_namespaced_config_map("w", "team", {"data": {"n": "1"}})
            core.create_namespaced_config_map("team", {"metadata": {"name": "other"}})  # not selected
            core.delete_namespaced_config_map("w", "team")
        if ev["type"] == "DELETED":
            w.stop()
    assert seen == [("ADDED", "w", "0"), ("MODIFIED", "w", "1"), ("DELETED", "w", "1")]


def test_watch_from_resource_version_replays_changes_and_selector_transitions(kube, api):
    core = client.CoreV1Api(api)
    start = core.list_namespaced_pod("team").metadata.resource_version
    apply(api, job_manifest("t", nodes=1))
    [pod] = kube.pod_names_for("Job", "t", "team")
    kube.start_container(pod, "team")
    kube.terminate_container(pod, "team", exit_code=137, reason="OOMKilled")
    core.patch_namespaced_pod(pod, "team", {"metadata": {"labels": {"job-name": "renamed"}}})
    events = []
    w = watch.Watch()
    for ev in w.stream(
        core.list_namespaced_pod, "team", label_selector="job-name=t", resource_version=start, timeout_seconds=TIMEOUT
    ):
        events.append(ev)
        if ev["type"] == "DELETED":
            w.stop()
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    term = events[2]["object"].status.container_statuses[0].state.terminated
    assert (term.reason, term.exit_code) == ("OOMKilled", 137)
    assert events[2]["object"].status.phase == "Failed"
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(start)


def test_watch_times_out_and_too_old_resource_version_is_410(kube, api):
    core = client.CoreV1Api(api)
    old = core.list_namespaced_pod("team").metadata.resource_version
    core.create_namespaced_config_map("team", {"metadata": {"name": "x"}})
    kube.compact()
    resp = core.list_namespaced_config_map(
        "team", watch=True, resource_version=old, timeout_seconds=TIMEOUT, _preload_content=False
    )
    lines = [json.loads(x) for x in resp.data.decode().splitlines()]
    assert lines == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old} ({kube.store.rv})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]
    # timeoutSeconds ends a quiet watch (1 s here), after the initial state
    events = list(watch.Watch().stream(core.list_namespaced_config_map, "team", timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "x")]


# --------------------------------------------------------------------------- logs


def _read_lines(chunks, until: int) -> list[str]:
    """Read a follow stream's chunks (one generator per response) until ``until`` lines arrived."""
    buf = b""
    while buf.count(b"\n") < until:
        buf += next(chunks)
    return buf.decode().splitlines()


def test_logs_follow_streams_new_lines_and_ends_when_the_container_terminates(kube, api):
    core = client.CoreV1Api(api)
    apply(api, job_manifest(nodes=1))
    [pod] = kube.pod_names_for("Job", "train", "team")
    kube.start_container(pod, "team")
    kube.append_log(pod, "step 1", "step 2", namespace="team")
    resp = core.read_namespaced_pod_log(pod, "team", follow=True, _preload_content=False, _request_timeout=TIMEOUT)
    chunks = resp.stream(amt=None)
    assert _read_lines(chunks, 2) == ["step 1", "step 2"]
    kube.append_log(pod, "step 3", namespace="team")  # after the call: streamed
    assert _read_lines(chunks, 1) == ["step 3"]
    kube.append_log(pod, "done", namespace="team")
    kube.terminate_container(pod, "team", exit_code=0)
    assert b"".join(chunks).decode() == "done\n"  # the rest, then the stream ends
    # non-follow reads with tailLines / timestamps
    assert core.read_namespaced_pod_log(pod, "team", tail_lines=2) == "step 3\ndone\n"
    stamped = core.read_namespaced_pod_log(pod, "team", timestamps=True, tail_lines=1)
    assert stamped.endswith("Z done\n") and stamped[:4].isdigit()


def test_logs_since_time_in_whole_seconds_and_a_dropped_follow_stream(tmp_path):
    import datetime as dt

    from tests.support.kube_api_double.scripted import ScriptedDouble

    with ScriptedDouble(namespaces=("default", "team"), seed=7) as kube:
        path = kube.write_kubeconfig(tmp_path / "kubeconfig", context="double", namespace="team")
        api = config.new_client_from_config(config_file=str(path), context="double")
        core = client.CoreV1Api(api)
        apply(api, job_manifest(nodes=1))
        [pod] = kube.pod_names_for("Job", "train", "team")
        kube.start_container(pod, "team")
        t0 = dt.datetime(2030, 1, 1, 0, 0, 0, 500000, tzinfo=dt.UTC)
        second = dt.timedelta(seconds=1)
        with kube.store.cond:  # stamps of our choosing
            kube.logbook.current("team", pod, "trainer").lines.extend(
                [(t0 - second, "a"), (t0, "b"), (t0 + second / 5, "c"), (t0 + second, "d")]
            )

        def since(stamp: str, *extra: str) -> str:  # sinceTime is a PodLogOptions field the OpenAPI spec leaves out
            import urllib.request

            url = f"{kube.url}/api/v1/namespaces/team/pods/{pod}/log?sinceTime={stamp}" + "".join(
                "&" + e for e in extra
            )
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {kube.token}"})
            with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
                return r.read().decode()

        # the fraction is dropped on the way to the kubelet: the whole second 00:00:00 comes
        assert since("2030-01-01T00:00:00.7Z") == "b\nc\nd\n"
        assert since("2030-01-01T00:00:01Z", "timestamps=true") == "2030-01-01T00:00:01.500000000Z d\n"
        resp = core.read_namespaced_pod_log(pod, "team", follow=True, _preload_content=False, _request_timeout=TIMEOUT)
        chunks = resp.stream(amt=None)
        assert _read_lines(chunks, 4) == ["a", "b", "c", "d"]
        kube.drop_log_streams(pod, "team")
        assert b"".join(chunks) == b""  # the stream ends ...
        status = core.read_namespaced_pod(pod, "team").status.container_statuses[0]
        assert status.state.running is not None and status.restart_count == 0  # ... the container runs on
        kube.append_log(pod, "e", namespace="team")
        assert core.read_namespaced_pod_log(pod, "team", tail_lines=1) == "e\n"


def test_previous_logs_after_a_restart(kube, api):
    core = client.CoreV1Api(api)
    apply(api, pytorchjob_manifest(workers=1))
    kube.start_pods("PyTorchJob", "pj", "team")
    with pytest.raises(ApiException) as e:
        core.read_namespaced_pod_log("pj-worker-0", "team", previous=True)
    assert body_of(e.value)["message"] == 'previous terminated container "pytorch" in pod "pj-worker-0" not found'
    kube.append_log("pj-worker-0", "attempt 1", "CUDA out of memory", namespace="team")
    follower = core.read_namespaced_pod_log(
        "pj-worker-0", "team", follow=True, _preload_content=False, _request_timeout=TIMEOUT
    )
    chunks = follower.stream(amt=None)
    assert _read_lines(chunks, 2) == ["attempt 1", "CUDA out of memory"]
    kube.restart_container("pj-worker-0", "team", exit_code=137, reason="OOMKilled")
    assert b"".join(chunks) == b""  # the old instance ended: its follow stream closes
    kube.append_log("pj-worker-0", "attempt 2", namespace="team")
    assert core.read_namespaced_pod_log("pj-worker-0", "team", previous=True) == "attempt 1\nCUDA out of memory\n"
    assert core.read_namespaced_pod_log("pj-worker-0", "team") == "attempt 2\n"
    status = core.read_namespaced_pod("pj-worker-0", "team").status.container_statuses[0]
    assert status.restart_count == 1 and status.last_state.terminated.reason == "OOMKilled"


def test_log_errors_for_waiting_and_multi_container_pods(kube, api):
    core = client.CoreV1Api(api)
    job = job_manifest(nodes=1, image="registry.invalid/nope:1")
    job["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    apply(api, job)
    [pod] = kube.pod_names_for("Job", "train", "team")
    with pytest.raises(ApiException) as e:
        core.read_namespaced_pod_log(pod, "team")
    assert body_of(e.value)["message"] == (
        f"a container name must be specified for pod {pod}, choose one of: [trainer sidecar]"
    )
    kube.set_container_waiting(pod, "team", container="trainer", reason="ImagePullBackOff")
    with pytest.raises(ApiException) as e:
        core.read_namespaced_pod_log(pod, "team", container="trainer")
    assert e.value.status == 400
    assert body_of(e.value)["message"] == (
        f'container "trainer" in pod "{pod}" is waiting to start: trying and failing to pull image'
    )
    waiting = core.read_namespaced_pod(pod, "team").status.container_statuses[0].state.waiting
    assert waiting.reason == "ImagePullBackOff" and "registry.invalid/nope:1" in waiting.message


# --------------------------------------------------------------------------- delete & GC


def test_foreground_delete_removes_owned_pods(kube, api):
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    apply(api, job_manifest(nodes=2))
    assert len(core.list_namespaced_pod("team", label_selector="job-name=train").items) == 2
    start = core.list_namespaced_pod("team").metadata.resource_version
    out = batch.delete_namespaced_job("train", "team", propagation_policy="Foreground")
    assert out["metadata"]["finalizers"] == ["foregroundDeletion"] and out["metadata"]["deletionTimestamp"]
    assert core.list_namespaced_pod("team").items == []
    with pytest.raises(ApiException) as e:
        batch.read_namespaced_job("train", "team")
    assert e.value.status == 404
    deleted = list(watch.Watch().stream(core.list_namespaced_pod, "team", resource_version=start, timeout_seconds=1))
    assert [ev["type"] for ev in deleted] == ["DELETED", "DELETED"]


def test_job_delete_without_policy_orphans_pods_like_the_real_api(kube, api):
    apply(api, job_manifest(nodes=1))
    client.BatchV1Api(api).delete_namespaced_job("train", "team")
    [pod] = client.CoreV1Api(api).list_namespaced_pod("team").items
    assert pod.metadata.owner_references is None


def test_background_delete_cascades_through_jobset_and_trainjob_children(kube, api):
    kube.store.put(
        kube.rt("ClusterTrainingRuntime"),
        yaml.safe_load((default_crd_dir().parent / "torch_distributed_runtime.yaml").read_text())
        if (default_crd_dir().parent / "torch_distributed_runtime.yaml").exists()
        else {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torch-distributed"},
            "spec": {},
        },
    )
    tj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"image": "me/train:1", "numNodes": 3, "numProcPerNode": 2},
        },
    }
    apply(api, tj)
    pods = kube.pods_for("TrainJob", "tj", "team")
    assert len(pods) == 3 and len(kube.objects("JobSet", "team")) == 1 and len(kube.objects("Job", "team")) == 1
    co = client.CustomObjectsApi(api)
    co.delete_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "team", "trainjobs", "tj", propagation_policy="Background"
    )
    assert kube.objects("Pod", "team") == [] and kube.objects("JobSet", "team") == []
    assert kube.objects("Job", "team") == [] and kube.objects("Service", "team") == []


# --------------------------------------------------------------------------- engines' pods


def test_engine_controllers_name_and_label_pods_like_upstream(kube, api):
    apply(api, job_manifest("idx", nodes=2))
    p0, p1 = kube.pods_for("Job", "idx", "team")
    assert p0["metadata"]["name"][:-5] == "idx-0-" and len(p1["metadata"]["name"]) == len("idx-1-") + 5
    lab = p1["metadata"]["labels"]
    assert lab["job-name"] == "idx" and lab["batch.kubernetes.io/job-completion-index"] == "1"
    assert (
        lab["controller-uid"]
        == lab["batch.kubernetes.io/controller-uid"]
        == kube.get("Job", "idx", "team")["metadata"]["uid"]
    )
    assert p1["spec"]["hostname"] == "idx-1" and p1["spec"]["subdomain"] == "idx"
    assert p0["metadata"]["ownerReferences"][0]["kind"] == "Job"

    apply(api, pytorchjob_manifest("pj", workers=2))
    assert kube.pod_names_for("PyTorchJob", "pj", "team") == ["pj-master-0", "pj-worker-0", "pj-worker-1"]
    w1 = kube.get("Pod", "pj-worker-1", "team")
    assert w1["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"
    env = {e["name"]: e.get("value") for e in w1["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "pj-master-0" and env["RANK"] == "2" and env["WORLD_SIZE"] == "3"

    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "node",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 2,
                            "completions": 2,
                            "template": {
                                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
                            },
                        }
                    },
                }
            ]
        },
    }
    apply(api, js)
    names = kube.pod_names_for("JobSet", "js", "team")
    assert [n[:-6] for n in names] == ["js-node-0-0", "js-node-0-1", "js-node-1-0", "js-node-1-1"]
    pod = kube.get("Pod", names[3], "team")
    assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "js"
    assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    assert pod["spec"]["hostname"] == "js-node-1-1" and pod["spec"]["subdomain"] == "js"

    apply(
        api,
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "tj"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"image": "me:1", "numNodes": 2}},
        },
    )
    tj_pods = kube.pods_for("TrainJob", "tj", "team")
    assert [p["metadata"]["name"][:-6] for p in tj_pods] == ["tj-node-0-0", "tj-node-0-1"]
    assert all(p["metadata"]["labels"]["trainer.kubeflow.org/trainjob-name"] == "tj" for p in tj_pods)
    assert tj_pods[0]["spec"]["containers"][0]["image"] == "me:1"
    assert (
        client.CoreV1Api(api)
        .list_namespaced_pod("team", label_selector="trainer.kubeflow.org/trainjob-name=tj")
        .items[1]
        .metadata.name
        == tj_pods[1]["metadata"]["name"]
    )


def test_auto_pods_off_and_manual_controller_run(tmp_path):
    with KubeApiDouble(auto_pods=False, seed=1) as d:
        api = config.new_client_from_config(config_file=str(d.write_kubeconfig(tmp_path / "kc")))
        client.BatchV1Api(api).create_namespaced_job("default", job_manifest(nodes=3))
        assert d.pods_for("Job", "train") == []
        assert len(d.create_pods("Job", "train")) == 3


def test_unschedulable_pod_has_condition_and_scheduler_event(kube, api):
    apply(api, job_manifest(nodes=1))
    [pod] = kube.pod_names_for("Job", "train", "team")
    msg = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    kube.mark_unschedulable(pod, "team", message=msg)
    core = client.CoreV1Api(api)
    st = core.read_namespaced_pod(pod, "team").status
    cond = next(c for c in st.conditions if c.type == "PodScheduled")
    assert (st.phase, cond.status, cond.reason, cond.message) == ("Pending", "False", "Unschedulable", msg)
    [ev] = core.list_namespaced_event("team", field_selector=f"involvedObject.name={pod},reason=FailedScheduling").items
    assert (ev.type, ev.message, ev.involved_object.kind, ev.source.component) == (
        "Warning",
        msg,
        "Pod",
        "default-scheduler",
    )


# --------------------------------------------------------------------------- faults, request log, validator


def test_fault_injection_fails_only_the_matching_request(kube, api):
    kube.fail_next("PATCH", r"/services/", status=500, message="etcdserver: request timed out")
    apply(api, job_manifest())
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "train"},
        "spec": {"clusterIP": "None", "ports": [{"port": 29500}]},
    }
    with pytest.raises(ApiException) as e:
        apply(api, svc)
    assert e.value.status == 500 and body_of(e.value)["message"] == "etcdserver: request timed out"
    assert kube.get("Service", "train", "team") is None
    assert apply(api, svc).spec.clusterIP == "None"  # only the next one failed
    patches = kube.requests_to("PATCH")
    assert [r.status for r in patches] == [201, 500, 201]
    assert all(r.param("fieldManager") == "ddpctl" for r in patches)
    assert patches[1].json["kind"] == "Service"


def test_validator_seam_prefers_the_shared_validator_and_accepts_its_strings(tmp_path):
    d = KubeApiDouble()
    from tests.support.kube_api_double.validation import resolve_default_validator

    _, name = resolve_default_validator()
    if Path(__file__).with_name("k8s_schemas.py").exists():
        assert name == "tests.support.k8s_schemas.validate_object" and d.validator_name == name
    assert (
        parse_error_string(
            "[k8s 1.33.0] spec.template.spec.containers.0: Additional properties are not "
            "allowed ('imagee' was unexpected)"
        ).field
        == "spec.template.spec.containers[0].imagee"
    )
    assert parse_error_string("spec.x: Required value").reason == "FieldValueRequired"
    # the built-in validator agrees on a valid manifest and finds the same bad field
    assert validate_object(job_manifest()) == []
    bad = job_manifest()
    bad["spec"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    assert validate_object(bad) == ["spec.template.spec.containers[0].imagee: field not declared in schema"]

    calls = []
    with KubeApiDouble(validator=lambda o: calls.append(o["kind"]) or ["spec.foo: Invalid value: 1: nope"]) as d2:
        api = config.new_client_from_config(config_file=str(d2.write_kubeconfig(tmp_path / "kc")))
        with pytest.raises(ApiException) as e:
            client.CoreV1Api(api).create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    assert calls == ["ConfigMap"]
    assert body_of(e.value)["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "spec.foo", "message": "Invalid value: 1: nope"}
    ]


def test_stop_ends_open_streams(tmp_path):
    d = KubeApiDouble().start()
    api = config.new_client_from_config(config_file=str(d.write_kubeconfig(tmp_path / "kc")))
    resp = client.CoreV1Api(api).list_namespaced_pod(
        "default", watch=True, _preload_content=False, _request_timeout=TIMEOUT
    )
    done = threading.Event()
    threading.Thread(target=lambda: (resp.data, done.set()), daemon=True).start()
    d.stop()
    assert done.wait(TIMEOUT)


def test_a_missing_crd_schema_fails_the_test_that_made_the_double_not_a_request(tmp_path):
    # Checked in the caller's thread: in the server thread it could only become an HTTP 500.
    with pytest.raises(RuntimeError, match=r"no CRD schema for jobset\.x-k8s\.io in .*no-crds"):
        KubeApiDouble(engines=("jobset",), crd_dir=tmp_path / "no-crds")
    KubeApiDouble(crd_dir=tmp_path / "no-crds")  # no custom engine installed: nothing to load


def test_a_failure_inside_the_double_is_answered_500_and_fails_the_test_at_stop(tmp_path):
    def broken_validator(obj: dict) -> list[str]:
        raise ValueError("validator bug")

    d = KubeApiDouble(validator=broken_validator).start()
    api = config.new_client_from_config(config_file=str(d.write_kubeconfig(tmp_path / "kc")))
    with pytest.raises(ApiException) as e:
        client.CoreV1Api(api).create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    assert e.value.status == 500
    with pytest.raises(
        AssertionError, match=r"(?s)failed while serving.*POST /api/v1/namespaces/default/configmaps.*validator bug"
    ):
        d.stop()
