"""`ddpctl submit` end to end: the REAL kubernetes client over HTTP against the API server double
(tests/support/kube_api_double, a faithful test double of kube-apiserver, not a cluster).

Scenario steps run inside the double's create request (`after_create`) or in a thread gated on what
the CLI has opened (`wait_follows`); no sleeps, no timing assertions.
"""

from __future__ import annotations

import json
import threading

import kubernetes  # noqa: F401 - a core dependency: missing, it fails here rather than skips
import pytest
import yaml

from tests.support.api import NAME, NS, objects_left, one_error
from tests.support.kube_api_double.scripted import BOUND, Scenario

# --------------------------------------------------------------------------- --target auto


@pytest.mark.parametrize(
    "engines, runtime, expected",
    [
        ((), False, "job"),
        (("jobset",), False, "jobset"),
        (("pytorchjob",), False, "pytorchjob"),
        (("pytorchjob", "jobset"), False, "pytorchjob"),
        (("trainjob",), False, "job"),  # the CRD without the torch-distributed runtime is not enough
        (("trainjob", "jobset"), False, "jobset"),
        (("trainjob",), True, "trainjob"),
        (("trainjob", "pytorchjob", "jobset"), True, "trainjob"),
        (("trainjob", "pytorchjob", "jobset"), False, "pytorchjob"),
    ],
)
def test_target_auto_picks_the_best_engine_the_cluster_serves(cli, make_cluster, engines, runtime, expected):
    c = make_cluster(engines, runtime=runtime)
    r = cli("submit", *c.args, "-n", NS, "--nodes", "2")
    assert r.code == 0, r.err
    assert f"ddpctl: target {expected}: " in r.err
    kind = {"job": "Job", "jobset": "JobSet", "pytorchjob": "PyTorchJob", "trainjob": "TrainJob"}[expected]
    assert c.double.get(kind, NAME, NS)["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ddpctl"
    assert len(c.double.pods_for(kind, NAME, NS)) == 2
    ref = {
        "job": "job.batch",
        "jobset": "jobset.jobset.x-k8s.io",
        "pytorchjob": "pytorchjob.kubeflow.org",
        "trainjob": "trainjob.trainer.kubeflow.org",
    }[expected]
    assert f"{ref}/{NAME} created" in r.out.splitlines()


def test_auto_skips_an_engine_that_cannot_run_the_spec(cli, make_cluster):
    c = make_cluster(("trainjob", "jobset"), runtime=True)
    r = cli("submit", *c.args, "-n", NS, "--nodes", "1:3")  # elastic: TrainJob has no elastic policy
    assert r.code == 0, r.err
    assert "ddpctl: target jobset: " in r.err and "trainjob cannot run this spec" in r.err
    assert c.double.get("JobSet", NAME, NS) is not None


@pytest.mark.parametrize(
    "engines, runtime, target, works",
    [
        (("jobset",), False, "pytorchjob", "jobset"),
        ((), False, "jobset", "job"),
        (("trainjob", "pytorchjob"), False, "trainjob", "pytorchjob"),
    ],
)
def test_explicit_target_that_is_not_installed_names_the_target_that_would_work(
    cli, make_cluster, engines, runtime, target, works
):
    c = make_cluster(engines, runtime=runtime)
    err = one_error(
        cli("submit", *c.args, "-n", NS, "--target", target), 1, f"--target {target}:", f"use --target {works}"
    )
    if target == "trainjob":
        assert "torch-distributed ClusterTrainingRuntime does not exist" in err
    else:
        assert "is not installed" in err
    assert objects_left(c.double) == []


def test_target_from_ddp_yaml_is_honoured_and_auto_overrides_it(cli, make_cluster, tmp_path):
    c = make_cluster(("pytorchjob", "jobset"))
    (tmp_path / "ddp.yaml").write_text("name: from-file\ntarget: jobset\nnamespace: team\n")
    r = cli("submit", *c.args)
    assert r.code == 0 and "ddpctl: target" not in r.err
    assert c.double.get("JobSet", "from-file", NS) is not None
    r = cli("submit", *c.args, "--target", "auto", "--name", "auto-one")
    assert r.code == 0 and "ddpctl: target pytorchjob: " in r.err


# --------------------------------------------------------------------------- apply


def test_submit_uses_server_side_apply_with_field_manager_ddpctl(cli, make_cluster):
    c = make_cluster()
    r = cli("submit", *c.args, "-n", NS, "--nodes", "3", "--target", "job")
    assert r.code == 0, r.err
    assert r.out.splitlines() == [f"service/{NAME} created", f"job.batch/{NAME} created"]
    patches = c.double.requests_to("PATCH")
    assert [p.path for p in patches] == [
        f"/api/v1/namespaces/{NS}/services/{NAME}",
        f"/apis/batch/v1/namespaces/{NS}/jobs/{NAME}",
    ]
    for p in patches:
        assert p.content_type == "application/apply-patch+yaml"
        assert p.param("fieldManager") == "ddpctl" and p.param("force") is None and p.status == 201
    job = c.double.get("Job", NAME, NS)
    assert ("ddpctl", "Apply") in [(m["manager"], m["operation"]) for m in job["metadata"]["managedFields"]]
    assert job["spec"]["completions"] == 3 and len(c.double.pods_for("Job", NAME, NS)) == 3
    assert "ddpctl: warning: no `checkpoints` volume" in r.err  # the trainer without a volume: said once
    assert r.err.count("starts from scratch") == 1
    kept = cli("submit", *c.args, "-n", NS, "--target", "job", "-v", "checkpoints=ckpt:/ckpt", "--name", "kept")
    assert kept.code == 0 and "warning" not in kept.err, kept.err


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--target", "pytorchjob", "--nodes", "3", "--gpus", "4"],
        ["--target", "jobset", "--nodes", "1:4", "-e", "A=1"],
        ["--target", "trainjob", "-o", "json"],
    ],
)
def test_dry_run_client_equals_render_and_needs_no_cluster(cli, flags):
    out_flag = [] if "-o" in flags else ["-o", "yaml"]
    rendered = cli("render", *flags)
    submitted = cli("submit", "--dry-run=client", *out_flag, *flags)
    assert rendered.code == 0 and submitted.code == 0, submitted.err
    assert submitted.out == rendered.out
    assert "sys.modules" not in submitted.err


def test_dry_run_client_without_output_lists_the_objects(cli):
    r = cli("submit", "--dry-run", "client", "--target", "job")
    assert r.code == 0 and r.out.splitlines() == [
        f"service/{NAME} created (dry run)",
        f"job.batch/{NAME} created (dry run)",
    ]


def test_dry_run_server_validates_on_the_server_and_stores_nothing(cli, make_cluster):
    c = make_cluster(("pytorchjob",))
    rv = c.double.store.rv
    r = cli("submit", *c.args, "-n", NS, "--dry-run=server")
    assert r.code == 0, r.err
    assert r.out.splitlines() == [f"pytorchjob.kubeflow.org/{NAME} created (server dry run)"]
    assert c.double.store.rv == rv and objects_left(c.double) == []
    assert all(p.param("dryRun") == "All" for p in c.double.requests_to("PATCH"))
    r = cli("submit", *c.args, "-n", NS, "--dry-run=server", "-o", "yaml")
    [obj] = list(yaml.safe_load_all(r.out))
    assert obj["kind"] == "PyTorchJob" and obj["metadata"]["uid"] and obj["metadata"]["namespace"] == NS
    assert objects_left(c.double) == []


def test_dry_run_server_reports_invalid_objects_with_field_paths(cli, make_cluster):
    bad = lambda o: ["spec.template.spec.containers[0].image: Required value"] if o["kind"] == "Job" else []
    c = make_cluster(validator=bad)
    one_error(
        cli("submit", *c.args, "-n", NS, "--dry-run=server"),
        1,
        'job.batch "ddp-train" in namespace "team" as invalid',
        "spec.template.spec.containers[0].image: Required value",
    )


def test_existing_job_is_an_error_that_says_what_to_do_and_replace_recreates_it(cli, make_cluster):
    c = make_cluster()
    assert cli("submit", *c.args, "-n", NS).code == 0
    uid = c.double.get("Job", NAME, NS)["metadata"]["uid"]
    one_error(
        cli("submit", *c.args, "-n", NS),
        1,
        f'job "{NAME}" already exists in namespace "{NS}"',
        f"ddpctl delete {NAME} -n {NS}",
        "--replace",
    )
    r = cli("submit", *c.args, "-n", NS, "--replace", "--nodes", "3")
    assert r.code == 0, r.err
    assert f"job.batch/{NAME} deleted (--replace)" in r.err
    job = c.double.get("Job", NAME, NS)
    assert job["metadata"]["uid"] != uid and job["spec"]["completions"] == 3
    deletes = c.double.requests_to("DELETE")
    assert deletes and all(d.json["propagationPolicy"] == "Foreground" for d in deletes)
    assert len(c.double.objects("Pod", NS)) == 3  # the old pods went with the old Job


def test_replace_across_targets_removes_the_old_engines_objects(cli, make_cluster):
    c = make_cluster(("pytorchjob",))
    assert cli("submit", *c.args, "-n", NS, "--target", "job").code == 0
    r = cli("submit", *c.args, "-n", NS, "--replace")  # auto: pytorchjob now
    assert r.code == 0, r.err
    assert c.double.get("Job", NAME, NS) is None and c.double.get("Service", NAME, NS) is None
    assert c.double.get("PyTorchJob", NAME, NS) is not None


def test_an_object_of_the_same_name_not_made_by_ddpctl_is_never_taken_over(cli, make_cluster):
    c = make_cluster()
    c.double.store.put(
        c.double.rt("Service"),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"ports": [{"port": 80}]},
        },
    )
    for extra in ([], ["--replace"]):
        one_error(
            cli("submit", *c.args, "-n", NS, *extra),
            1,
            f"service/{NAME} already exists",
            "not created by ddpctl",
            "--name",
        )
    assert c.double.get("Job", NAME, NS) is None


# --------------------------------------------------------------------------- rollback


@pytest.mark.parametrize(
    "status, needle",
    [
        (500, "the API server failed to apply job.batch"),
        (403, "cannot apply job.batch"),
    ],
)
def test_failure_on_the_second_object_removes_the_first(cli, make_cluster, status, needle):
    c = make_cluster()
    c.double.fail_next("PATCH", "/jobs/", status=status)
    err = one_error(
        cli("submit", *c.args, "-n", NS, "--target", "job"), 1, needle, f"rolled back: deleted service/{NAME}"
    )
    assert f'"{NAME}" in namespace "{NS}"' in err
    assert objects_left(c.double) == []
    [delete] = c.double.requests_to("DELETE")
    assert delete.path.endswith(f"/services/{NAME}") and delete.json["propagationPolicy"] == "Foreground"


def test_invalid_second_object_is_422_with_field_paths_and_nothing_is_left(cli, make_cluster):
    bad = lambda o: (
        ["spec.template.spec.containers[0].imagee: field not declared in schema"] if o["kind"] == "Job" else []
    )
    c = make_cluster(validator=bad)
    one_error(
        cli("submit", *c.args, "-n", NS, "--target", "job"),
        1,
        "as invalid",
        "spec.template.spec.containers[0].imagee: field not declared in schema",
        "rolled back",
    )
    assert objects_left(c.double) == []


def test_forbidden_names_the_verb_and_resource(cli, make_cluster):
    c = make_cluster()
    c.double.forbid("patch", "jobs", "batch", NS)
    one_error(
        cli("submit", *c.args, "-n", NS, "--target", "job"),
        1,
        'cannot patch resource "jobs" in API group "batch" in the namespace "team"',
        'permission to patch "jobs.batch"',
    )
    assert objects_left(c.double) == []


def test_interrupt_during_apply_rolls_back(cli, make_cluster, monkeypatch):
    from ddpctl.cluster import apply as A

    c = make_cluster()
    real = A.apply_one
    calls = []

    def interrupted(cluster, obj, **kw):
        calls.append(obj["kind"])
        if obj["kind"] == "Job":
            raise KeyboardInterrupt
        return real(cluster, obj, **kw)

    monkeypatch.setattr(A, "apply_one", interrupted)
    r = cli("submit", *c.args, "-n", NS, "--target", "job")
    assert r.code == 130 and calls == ["Service", "Job"]
    assert "rolled back: deleted service/ddp-train" in r.err
    assert objects_left(c.double) == []


# --------------------------------------------------------------------------- namespace & context


def test_namespace_defaults_to_the_contexts_and_n_overrides_it(cli, make_cluster):
    c = make_cluster(context_namespace=NS)
    assert cli("submit", *c.args).code == 0
    assert c.double.get("Job", NAME, NS)["metadata"]["namespace"] == NS
    assert cli("submit", *c.args, "-n", "default").code == 0
    assert c.double.get("Job", NAME, "default") is not None
    assert cli("submit", *c.args, "--namespace", "default", "--name", "other").code == 0
    assert c.double.get("Job", "other", "default") is not None


def test_context_flag_and_kubeconfig_env_with_several_files(cli, make_cluster, monkeypatch, tmp_path):
    a = make_cluster(("pytorchjob",))
    b = make_cluster(("jobset",))
    fa = a.double.write_kubeconfig(tmp_path / "a.yaml", context="ctx-a", namespace="default")
    fb = b.double.write_kubeconfig(tmp_path / "b.yaml", context="ctx-b", namespace=NS)
    monkeypatch.setenv("KUBECONFIG", f"{fa}:{fb}")
    r = cli("submit")  # current-context comes from the first file
    assert r.code == 0 and "target pytorchjob" in r.err and a.double.get("PyTorchJob", NAME, "default")
    r = cli("submit", "--context", "ctx-b")
    assert r.code == 0 and "target jobset" in r.err and b.double.get("JobSet", NAME, NS)  # ctx-b's namespace
    one_error(cli("submit", "--context", "nope"), 2, "--context nope: no such context", "ctx-a, ctx-b")


def test_missing_namespace(cli, make_cluster):
    c = make_cluster()
    one_error(
        cli("submit", *c.args, "-n", "nope"),
        1,
        'namespace "nope" does not exist',
        "kubectl create namespace nope",
        "-n",
    )


# --------------------------------------------------------------------------- --build


def test_build_builds_and_pushes_first_and_submits_that_image(cli, make_cluster, monkeypatch):
    built = []

    def build_image(spec, push, echo=None):
        built.append((spec.name, push))
        return "registry.example.com/team/trainer@sha256:" + "a" * 64

    monkeypatch.setattr("ddpctl.image.project.build_image", build_image)
    c = make_cluster()
    r = cli("submit", *c.args, "-n", NS, "--build")
    assert r.code == 0, r.err
    assert built == [(NAME, True)]
    image = c.double.get("Job", NAME, NS)["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.com/team/trainer@sha256:" + "a" * 64


def test_build_in_a_project_without_a_dockerfile_builds_its_code_on_the_trainer_image(
    cli, make_cluster, monkeypatch, tmp_path
):
    """`submit --build` in a folder holding only train.py: the folder's code goes on the trainer
    image (a generated Dockerfile), in a repository named after the folder, and that image is
    submitted. (The builder is replaced here; tests/e2e/test_build_docker.py builds for real.)"""
    built = []

    def build_and_publish(plan, push_tags=False, quiet=False, echo=None, **_):
        built.append((plan.tag, plan.dockerfile.read_text(), sorted(p.name for p in plan.context.iterdir())))
        return plan.tag

    monkeypatch.setattr("ddpctl.image.build.build_and_publish", build_and_publish)
    (tmp_path / "train.py").write_text("print('hi')\n")
    c = make_cluster()
    r = cli("submit", *c.args, "-n", NS, "--build", "--script", "train.py")
    assert r.code == 0, r.err
    [(tag, dockerfile, context)] = built
    assert tag.startswith(f"{tmp_path.name.lower()}:ws-") and "ddpctl-trainer" not in tag.split(":")[0]
    assert "FROM ${BASE_IMAGE}" in dockerfile and "ARG BASE_IMAGE=ddpctl-trainer:latest" in dockerfile
    assert "ADD workspace.tar.gz /workspace/" in dockerfile and context == ["Dockerfile", "workspace.tar.gz"]
    image = c.double.get("Job", NAME, NS)["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == tag


def test_build_in_an_empty_folder_is_a_usage_error_before_any_object(cli, make_cluster):
    c = make_cluster()  # the cli fixture runs in an empty directory: nothing to build
    one_error(cli("submit", *c.args, "--build"), 2, "nothing to build in", "no Dockerfile")
    assert objects_left(c.double, "default") == []


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--dry-run=client", "--wait"], "--wait cannot be combined with --dry-run=client"),
        (["--dry-run=server", "--replace"], "--replace cannot be combined"),
        (["--rank", "1"], "--rank: only with --follow"),
        (["--wait", "--timeout", "soon"], "--timeout: 'soon' is not a duration"),
        (["--dry-run=maybe"], "--dry-run"),
    ],
)
def test_flag_errors_are_usage_errors(cli, flags, needle):
    one_error(cli("submit", *flags), 2, needle)


@pytest.mark.parametrize(
    "text, seconds",
    [
        (None, None),
        ("", None),
        ("0", None),
        ("90", 90.0),
        ("90s", 90.0),
        ("0.5s", 0.5),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        ("2m500ms", 120.5),
        ("1h1m1s1ms", 3661.001),
    ],
)
def test_timeout_durations(text, seconds):
    from ddpctl.cluster.flags import parse_duration

    got = parse_duration(text)
    assert got is None if seconds is None else got == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["soon", "5x", "ms", "1.5.5s", "5 m", "m5", "1sm", "-1s"])
def test_timeout_durations_that_are_not(text):
    from ddpctl.cluster.flags import parse_duration
    from ddpctl.errors import UsageError

    with pytest.raises(UsageError, match="is not a duration"):
        parse_duration(text)


def test_timeout_in_milliseconds_is_accepted_by_submit(cli):
    r = cli("submit", "--dry-run=client", "--timeout", "500ms", "--target", "job")
    assert r.code == 0, r.err


# --------------------------------------------------------------------------- --wait


def _pods(d, kind="Job"):
    return d.pod_names_for(kind, NAME, NS)


def _followed_pods(d, created: threading.Event) -> list[str]:
    """Both pods, once they exist and ddpctl follows each one's log."""
    assert created.wait(BOUND)
    pods = _pods(d)
    for pod in pods:
        d.wait_follows(pod)
    return pods


def _start_pods_saying_hello(d) -> threading.Event:
    """When the Job is created, start its pods and log one line from each; the event says when."""
    created = threading.Event()

    def start(d, obj):
        for i, p in enumerate(_pods(d)):
            d.start_container(p, NS)
            d.append_log(p, f"hello from node {i}", namespace=NS)
        created.set()

    d.after_create("Job", start)
    return created


def test_wait_success_exits_0_with_a_status_line(cli, make_cluster):
    c = make_cluster()

    def run_ok(d, obj):
        for p in _pods(d):
            d.start_container(p, NS)
            d.terminate_container(p, NS, exit_code=0)
        d.finish("Job", NAME, NS, succeeded=True)

    c.double.after_create("Job", run_ok)
    r = cli("submit", *c.args, "-n", NS, "--wait")
    assert r.code == 0, r.err
    assert f"{NAME} Succeeded (2 nodes) - node: 0 pending, 0 running, 2 succeeded, 0 failed" in r.err
    assert f'job.batch/{NAME} in namespace "{NS}" succeeded' in r.err


def test_wait_shows_live_transitions(cli, make_cluster, monkeypatch):
    from ddpctl.console import StatusLine

    c = make_cluster(("pytorchjob",))
    d = c.double
    shown: list[str] = []
    seen = threading.Condition()
    real_show = StatusLine.show

    def show(self, text):  # the scenario moves on once the CLI has shown a state
        real_show(self, text)
        with seen:
            shown.append(text)
            seen.notify_all()

    def wait_shown(part):
        with seen:
            assert seen.wait_for(lambda: any(part in t for t in shown), BOUND), shown

    monkeypatch.setattr(StatusLine, "show", show)

    def steps():
        wait_shown("master: 1 pending, 0 running, 0 succeeded, 0 failed; worker: 2 pending")
        for p in _pods(d, "PyTorchJob"):
            d.start_container(p, NS)
        wait_shown("master: 0 pending, 1 running, 0 succeeded, 0 failed; worker: 0 pending, 2 running")
        for p in _pods(d, "PyTorchJob"):
            d.terminate_container(p, NS, exit_code=0)
        d.finish("PyTorchJob", NAME, NS, succeeded=True)

    with Scenario(steps):
        r = cli("submit", *c.args, "-n", NS, "--wait", "--nodes", "3", "--timeout", "2m")
    assert r.code == 0, r.err
    assert "master: 1 pending, 0 running, 0 succeeded, 0 failed; worker: 2 pending" in r.err
    assert "master: 0 pending, 1 running, 0 succeeded, 0 failed; worker: 0 pending, 2 running" in r.err
    assert (
        "Succeeded (3 nodes) - master: 0 pending, 0 running, 1 succeeded, 0 failed; worker: 0 pending, 0 running, 2 "
        "succeeded" in r.err
    )


@pytest.mark.parametrize(
    "code, reason, shown",
    [
        (137, "OOMKilled", "OOMKilled (exit code 137)"),
        (3, None, "Error (exit code 3)"),
    ],
)
def test_wait_failure_prints_why_and_exits_1(cli, make_cluster, code, reason, shown):
    c = make_cluster()

    def fail_rank_1(d, obj):
        p0, p1 = _pods(d)
        d.start_container(p0, NS)
        d.start_container(p1, NS)
        d.append_log(p1, "epoch 0 step 10 loss 2.31", "RuntimeError: CUDA out of memory", namespace=NS)
        d.terminate_container(p1, NS, exit_code=code, reason=reason)
        d.finish("Job", NAME, NS, succeeded=False)

    c.double.after_create("Job", fail_rank_1)
    r = cli("submit", *c.args, "-n", NS, "--wait")
    p1 = _pods(c.double)[1]
    one_error(r, 1, f'job "{NAME}" failed: node 1 (pod {p1}): {shown}', f"ddpctl logs {NAME} -n {NS} --rank 1")
    assert f"job.batch/{NAME} failed: BackoffLimitExceeded" in r.err
    assert "    | RuntimeError: CUDA out of memory" in r.err and "last 2 log lines of node 1" in r.err


def test_wait_failure_of_a_stalled_job_is_the_watchdogs_summary(cli, make_cluster):
    """The trainer's watchdog stopped the job (torchrun exits 1 on every node): the error is its summary."""
    c = make_cluster()
    summary = [
        "[rank 0] ddpctl-trainer: stalled: no rank made progress for 300 s (--stall-timeout 300); stopping the job",
        "[rank 0] ddpctl-trainer: stalled: rank 2 (node 1, local rank 0, host p-1) stopped 301 s ago "
        "in data of step 9:",
        "[rank 0] ddpctl-trainer: stalled:     at /app/data.py:12 in __getitem__: return read(path)",
        "[rank 0] ddpctl-trainer: stalled: ranks 0, 1, 3 (nodes 0, 1) wait for it in backward+all-reduce of step 9",
        "[rank 0] ddpctl-trainer: stalled: every rank's Python stacks are in its log (faulthandler)",
    ]

    def stall(d, obj):
        p0, p1 = _pods(d)
        d.start_container(p0, NS)
        d.start_container(p1, NS)
        d.append_log(p0, *summary, namespace=NS)
        d.append_log(p1, "Thread 0x00007f (most recent call first):", namespace=NS)
        d.terminate_container(p0, NS, exit_code=1)
        d.terminate_container(p1, NS, exit_code=1)
        d.finish("Job", NAME, NS, succeeded=False)

    c.double.after_create("Job", stall)
    r = cli("submit", *c.args, "-n", NS, "--wait")
    one_error(
        r,
        1,
        f'job "{NAME}" failed: node 0 reported a stall: rank 2 (node 1, local rank 0, host p-1) stopped 301 s ago '
        "in data of step 9 at /app/data.py:12 in __getitem__; ranks 0, 1, 3 (nodes 0, 1) wait for it",
        f"ddpctl logs {NAME} -n {NS} --rank 0",
    )


def test_wait_timeout_exits_3_and_says_why_it_stalls_image_pull(cli, make_cluster):
    c = make_cluster()
    c.double.after_create("Job", lambda d, obj: d.set_container_waiting(_pods(d)[0], NS, reason="ImagePullBackOff"))
    r = cli("submit", *c.args, "-n", NS, "--wait", "--timeout", "0.3s", "--image", "registry.invalid/nope:1")
    err = one_error(r, 3, "timed out after 0.3s", "node 0 ImagePullBackOff", f"ddpctl delete {NAME} -n {NS}")
    assert 'registry.invalid/nope:1' in err
    assert f"ddpctl: node 0 (pod {_pods(c.double)[0]}) is waiting: ImagePullBackOff: Back-off pulling image" in r.err


@pytest.mark.parametrize(
    "reason, message, final",
    [
        (
            "ErrImagePull",
            'failed to pull "registry.invalid/nope:1": dial tcp: lookup registry.invalid: no such host',
            True,
        ),
        ("ImagePullBackOff", 'Back-off pulling image "x": ErrImagePull: manifest unknown: tag 1 not found', True),
        ("ErrImagePull", "failed to authorize: 401 Unauthorized", True),
        ("InvalidImageName", 'Failed to apply default image tag "UPPER/x": invalid reference format', True),
        ("ErrImagePull", "failed to do request: i/o timeout", False),
        ("ErrImagePull", "received unexpected HTTP status: 503 Service Unavailable", False),
    ],
)
def test_an_image_that_cannot_be_pulled_ends_the_wait_at_once(cli, make_cluster, reason, message, final):
    """Not found, unauthorized, an unknown registry host: `--wait` ends with exit 1 naming the pods,
    their node and the registry's answer, instead of waiting out --timeout; a pull that can still
    pass (a timeout, a 5xx) keeps the wait going until --timeout (exit 3)."""
    c = make_cluster()
    c.double.after_create(
        "Job", lambda d, obj: d.set_container_waiting(_pods(d)[0], NS, reason=reason, message=message)
    )
    r = cli("submit", *c.args, "-n", NS, "--wait", "--timeout", "5s" if final else "0.5s")
    if not final:
        one_error(r, 3, "timed out after 0.5s")
        return
    err = one_error(r, 1, f"node 0 (pod {_pods(c.double)[0]}) cannot pull the image", message[:60])
    assert f"ddpctl delete {NAME} -n {NS}" in err and "timed out" not in err


def test_wait_timeout_before_the_pod_watch_synced_still_says_why(cli, make_cluster, monkeypatch):
    """A loaded machine: the pod watch has not delivered its first list when --timeout passes."""
    from ddpctl.cluster import watch as W

    real_run = W.Watcher.run

    def slow_pod_watch(self):
        if self.tag == "pod":
            self.stopped.wait(BOUND)  # never syncs before the CLI gives up (bounded: a hang would fail)
            return
        real_run(self)

    monkeypatch.setattr(W.Watcher, "run", slow_pod_watch)
    c = make_cluster()
    c.double.after_create("Job", lambda d, obj: d.set_container_waiting(_pods(d)[0], NS, reason="ImagePullBackOff"))
    r = cli("submit", *c.args, "-n", NS, "--wait", "--timeout", "0.3s")
    err = one_error(r, 3, "timed out after 0.3s", "node 0 ImagePullBackOff")
    assert "no pods yet" not in err
    assert f"ddpctl: node 0 (pod {_pods(c.double)[0]}) is waiting: ImagePullBackOff" in r.err


def test_wait_unschedulable_shows_the_schedulers_event_message(cli, make_cluster):
    c = make_cluster()
    msg = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    c.double.after_create("Job", lambda d, obj: [d.mark_unschedulable(p, NS, message=msg) for p in _pods(d)])
    r = cli("submit", *c.args, "-n", NS, "--wait", "--timeout", "0.3s")
    one_error(r, 3, f"node 0 Unschedulable: {msg}")
    assert f"is waiting: Unschedulable: {msg}" in r.err


# --------------------------------------------------------------------------- --follow


def test_follow_streams_every_rank_prefixed_across_a_container_restart(cli, make_cluster):
    c = make_cluster()
    d = c.double
    created = _start_pods_saying_hello(d)

    def steps():
        p0, p1 = _followed_pods(d, created)
        d.append_log(p1, "step 1 loss 2.0", namespace=NS)
        d.restart_container(p1, NS, exit_code=137, reason="OOMKilled")
        d.wait_follows(p1, 2)  # ddpctl re-attached to the new container instance
        d.append_log(p1, "resumed from checkpoint", namespace=NS)
        d.append_log(p0, "rank 0 done", namespace=NS)
        for p in (p0, p1):
            d.terminate_container(p, NS, exit_code=0)
        d.finish("Job", NAME, NS, succeeded=True)

    with Scenario(steps):
        r = cli("submit", *c.args, "-n", NS, "--follow", "--restart-policy", "OnFailure")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    rank1 = [line for line in lines if line.startswith("[node 1] ")]
    assert rank1 == ["[node 1] hello from node 1", "[node 1] step 1 loss 2.0", "[node 1] resumed from checkpoint"]
    assert [line for line in lines if line.startswith("[node 0] ")] == [
        "[node 0] hello from node 0",
        "[node 0] rank 0 done",
    ]


def test_follow_picks_up_a_dropped_log_stream_without_losing_or_repeating_lines(cli, make_cluster):
    c = make_cluster()
    d = c.double
    created = _start_pods_saying_hello(d)

    def steps():
        p0, p1 = _followed_pods(d, created)
        try:
            d.append_log(p1, "step 1", "step 2", namespace=NS)
            d.drop_log_streams(p1, NS)  # the connection closes; the container keeps running
            d.append_log(p1, "step 3 (while no stream was open)", namespace=NS)
            d.wait_follows(p1, 2)  # ddpctl followed the same instance again
            d.append_log(p1, "step 4", namespace=NS)
        finally:  # the job ends either way, so a CLI that never follows again fails instead of hanging
            for p in (p0, p1):
                d.terminate_container(p, NS, exit_code=0)
            d.finish("Job", NAME, NS, succeeded=True)

    with Scenario(steps):
        r = cli("submit", *c.args, "-n", NS, "--follow")
    assert r.code == 0, r.err
    assert [x for x in r.out.splitlines() if x.startswith("[node 1] ")] == [
        "[node 1] hello from node 1",
        "[node 1] step 1",
        "[node 1] step 2",
        "[node 1] step 3 (while no stream was open)",
        "[node 1] step 4",
    ]
    resumed = [q for q in d.requests_to("GET") if q.path.endswith(f"/pods/{_pods(d)[1]}/log") and q.param("sinceTime")]
    assert len(resumed) == 1 and resumed[0].param("follow") == "true"


@pytest.mark.parametrize("succeeded", [True, False])
def test_follow_reports_logs_it_may_not_read(cli, make_cluster, succeeded):
    c = make_cluster()
    c.double.forbid("get", "pods/log", "", NS)

    def run(d, obj):
        for p in _pods(d):
            d.start_container(p, NS)
            d.terminate_container(p, NS, exit_code=0 if succeeded else 1)
        d.finish("Job", NAME, NS, succeeded=succeeded)

    c.double.after_create("Job", run)
    r = cli("submit", *c.args, "-n", NS, "--follow")
    if succeeded:
        one_error(r, 1, "403 Forbidden", 'cannot get resource "pods/log"')
        assert f'job.batch/{NAME} in namespace "{NS}" succeeded' in r.err
    else:
        one_error(r, 1, f'job "{NAME}" failed')
        assert "ddpctl: could not follow the logs: " in r.err and 'cannot get resource "pods/log"' in r.err


def test_follow_one_rank_without_prefix(cli, make_cluster):
    c = make_cluster(("pytorchjob",))

    def run(d, obj):
        for p in _pods(d, "PyTorchJob"):
            d.start_container(p, NS)
            d.append_log(p, f"I am {p}", namespace=NS)
            d.terminate_container(p, NS, exit_code=0)
        d.finish("PyTorchJob", NAME, NS, succeeded=True)

    c.double.after_create("PyTorchJob", run)
    r = cli("submit", *c.args, "-n", NS, "--follow", "--rank", "2", "--nodes", "3")
    assert r.code == 0, r.err
    assert r.out.splitlines()[-1] == f"I am {NAME}-worker-1"  # worker i is node rank i + 1
    assert "I am ddp-train-master-0" not in r.out


@pytest.mark.parametrize("nodes, rank, shown", [("2", "5", "0-1"), ("3", "3", "0-2"), ("1:3", "3", "0-2")])
def test_follow_rank_out_of_range_is_refused_before_anything_is_created(cli, make_cluster, nodes, rank, shown):
    c = make_cluster(("pytorchjob",))
    one_error(
        cli("submit", *c.args, "-n", NS, "--follow", "--rank", rank, "--nodes", nodes),
        2,
        f"--rank: node rank {rank} is out of range",
        shown,
    )
    assert objects_left(c.double) == []
    assert c.double.requests_to("PATCH") == [] and c.double.requests_to("POST") == []


# --------------------------------------------------------------------------- kubectl-style UX


def test_shell_completion_is_available(cli):
    r = cli("--help")
    assert "--install-completion" in r.out and "--show-completion" in r.out


def test_submit_help_shows_cluster_flags(cli):
    r = cli("submit", "--help")
    for flag in (
        "--kubeconfig",
        "--context",
        "--namespace",
        "--dry-run",
        "--output",
        "--replace",
        "--wait",
        "--follow",
        "--rank",
        "--timeout",
        "--build",
        "--target",
    ):
        assert flag in r.out


def test_output_json_without_dry_run_prints_the_created_objects(cli, make_cluster):
    c = make_cluster()
    r = cli("submit", *c.args, "-n", NS, "-o", "json")
    assert r.code == 0
    doc = json.loads(r.out)
    assert doc["kind"] == "List" and [o["kind"] for o in doc["items"]] == ["Service", "Job"]
    assert all(o["metadata"]["uid"] for o in doc["items"])


def test_wait_on_node_groups_fails_when_a_later_groups_job_fails(cli, make_cluster):
    """`--layout 2+1` on the job target is a Job per group: the wait watches them all, so a
    failure in the second group ends it (rank 0's Job would only fail at a collective timeout)."""
    c = make_cluster()

    def fail_second_group(d, obj):
        if obj["metadata"]["name"] != f"{NAME}-g1":
            return
        (g0,) = d.pod_names_for("Job", f"{NAME}-g0", NS)
        (g1,) = d.pod_names_for("Job", f"{NAME}-g1", NS)
        d.start_container(g0, NS)
        d.start_container(g1, NS)
        d.terminate_container(g1, NS, exit_code=1)
        d.finish("Job", f"{NAME}-g1", NS, succeeded=False)

    c.double.after_create("Job", fail_second_group)
    r = cli("submit", *c.args, "-n", NS, "--layout", "2+1", "--gpus", "0", "--wait", "--timeout", "2m")
    (g1,) = c.double.pod_names_for("Job", f"{NAME}-g1", NS)
    one_error(r, 1, f'job "{NAME}" failed: node 1 (pod {g1}): Error (exit code 1)')
    assert f"job.batch/{NAME}-g1 failed: BackoffLimitExceeded" in r.err


def test_wait_on_node_groups_succeeds_when_every_groups_job_did(cli, make_cluster):
    c = make_cluster()

    def run_ok(d, obj):
        if obj["metadata"]["name"] != f"{NAME}-g1":
            return
        for job in (f"{NAME}-g0", f"{NAME}-g1"):
            for p in d.pod_names_for("Job", job, NS):
                d.start_container(p, NS)
                d.terminate_container(p, NS, exit_code=0)
            d.finish("Job", job, NS, succeeded=True)

    c.double.after_create("Job", run_ok)
    r = cli("submit", *c.args, "-n", NS, "--layout", "2+1", "--gpus", "0", "--wait", "--timeout", "2m")
    assert r.code == 0, r.err
    assert f"{NAME} Succeeded (2 nodes) - node: 0 pending, 0 running, 2 succeeded, 0 failed" in r.err


def test_status_of_a_stalled_job_names_the_node_and_the_watchdogs_summary(cli, make_cluster):
    """Plain `ddpctl status` (no --wait) of a job the watchdog stopped shows its summary, in text and JSON."""
    c = make_cluster()
    summary = [
        "[rank 0] ddpctl-trainer: stalled: no rank made progress for 60 s (--stall-timeout 60); stopping the job",
        "[rank 0] ddpctl-trainer: stalled: rank 3 (node 1, local rank 1, host p-1) stopped 61 s ago "
        "in forward of step 4:",
        "[rank 0] ddpctl-trainer: stalled:     at /app/model.py:88 in forward: x = self.block(x)",
        "[rank 0] ddpctl-trainer: stalled: ranks 0, 1, 2 (nodes 0, 1) wait for it in backward+all-reduce of step 4",
    ]

    def stall(d, obj):
        p0, p1 = _pods(d)
        d.start_container(p0, NS)
        d.start_container(p1, NS)
        d.append_log(p0, *summary, namespace=NS)
        d.terminate_container(p0, NS, exit_code=1)
        d.terminate_container(p1, NS, exit_code=1)
        d.finish("Job", NAME, NS, succeeded=False)

    c.double.after_create("Job", stall)
    assert cli("submit", *c.args, "-n", NS).code == 0
    expected = (
        "rank 3 (node 1, local rank 1, host p-1) stopped 61 s ago in forward of step 4 at /app/model.py:88 in forward; "
        "ranks 0, 1, 2 (nodes 0, 1) wait for it in backward+all-reduce of step 4"
    )
    text = cli("status", NAME, *c.args, "-n", NS)
    assert text.code == 0, text.err
    assert f"Stalled:     node 0 stalled: {expected}" in text.out
    as_json = cli("status", NAME, *c.args, "-n", NS, "-o", "json")
    assert json.loads(as_json.out)["stall"] == {"node": 0, "summary": expected}


# --------------------------------------------------------------------------- --workspace


def _project(folder):
    (folder / "train.py").write_text("import helper\nprint(helper.X)\n")
    (folder / "helper.py").write_text("X = 1\n")
    (folder / ".env").write_text("TOKEN=not-shipped\n")


def test_workspace_secret_is_made_first_owned_by_the_job_and_deleted_with_it(cli, make_cluster, tmp_path):
    """The Secret is applied before the job (no pod starts without it), then owned by the job's
    workload (the garbage collector deletes it with the job); `delete` removes an unowned one by label."""
    _project(tmp_path)
    c = make_cluster()
    r = cli("submit", *c.args, "-n", NS, "--script", "train.py", "--workspace", ".")
    assert r.code == 0, r.err
    assert "ddpctl: workspace: 2 files" in r.err and "left out: .env" in r.err
    applied = [q.path for q in c.double.requests_to("PATCH") if q.content_type.startswith("application/apply-patch")]
    assert "/secrets/" in applied[0] and any("/jobs/" in p for p in applied[1:]), applied
    [secret] = c.double.objects("Secret", NS)
    job = c.double.get("Job", NAME, NS)
    owners = secret["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [("Job", NAME, job["metadata"]["uid"])]
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "workspace-archive",
        "secret": {"secretName": secret["metadata"]["name"], "defaultMode": 292},
    } in volumes
    assert r.out.splitlines()[0].startswith("secret/ddp-train-workspace-")
    # an unowned Secret (an interrupted submit) goes by its labels
    secret["metadata"].pop("ownerReferences")
    assert cli("delete", NAME, *c.args, "-n", NS).code == 0
    assert c.double.objects("Secret", NS) == []


def test_workspace_secret_is_rolled_back_when_the_job_is_refused(cli, make_cluster, tmp_path):
    _project(tmp_path)
    c = make_cluster()
    c.double.fail_next("PATCH", "/jobs/", status=500)
    err = one_error(cli("submit", *c.args, "-n", NS, "--script", "train.py", "--workspace", "."), 1, "rolled back")
    assert "secret/ddp-train-workspace-" in err
    assert objects_left(c.double) == []


def test_a_workspace_too_large_without_a_store_is_exit_2_naming_size_limit_and_fix(cli, make_cluster, tmp_path):
    import os

    _project(tmp_path)
    (tmp_path / "weights.bin").write_bytes(os.urandom(1_200_000))
    c = make_cluster()
    err = one_error(cli("submit", *c.args, "-n", NS, "--script", "train.py", "--workspace", "."), 2, "workspace:")
    assert "more than the 1.0 MiB an object in the cluster holds" in err and "--workspace-store" in err
    assert objects_left(c.double) == []


def test_prepare_creates_nothing_and_start_applies_what_it_prepared(make_cluster, monkeypatch, tmp_path):
    """The two phases of submit: `prepare` reads the cluster (which engines it serves) and
    creates nothing; `start` applies exactly the objects the Submission holds."""
    from ddpctl.cluster.config import ClusterOptions
    from ddpctl.cluster.flags import SubmitOptions
    from ddpctl.cluster.submit import prepare, start
    from ddpctl.spec.sources import SpecInput

    monkeypatch.chdir(tmp_path)
    c = make_cluster()
    said: list[str] = []
    options = ClusterOptions(str(c.kubeconfig), None, None, None)
    with prepare(SpecInput({"name": NAME}), options=options, submit=SubmitOptions(), say=said.append) as sub:
        assert objects_left(c.double, "default") == [] and c.double.requests_to("PATCH") == []
        prepared = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in sub.objects)
        start(sub, said.append, said.append)
    made = sorted(o for o in objects_left(c.double, "default") if not o.startswith("Pod/"))  # the Job's pods
    assert made == prepared == [f"Job/{NAME}", f"Service/{NAME}"]
