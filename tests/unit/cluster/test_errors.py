"""ddpctl.cluster.errors: every answer of the API server that is an error, as one line naming the
object and the fix, for every cluster command, with the real client over real HTTP
(tests/support/kube_api_double); never a traceback. Reaching the server (kubeconfig, timeouts,
retries) is test_config.py's."""

from __future__ import annotations

import kubernetes  # noqa: F401 - a core dependency: missing, it fails here rather than skips
import pytest
from ddpctl.cluster import errors as E
from ddpctl.cluster.kinds import JOB, PYTORCHJOB

from tests.support.api import NAME, NS, one_error
from tests.unit.cluster.conftest import COMMANDS


def test_unauthorized(cli, command, make_cluster, tmp_path):
    c = make_cluster()
    path = c.double.write_kubeconfig(tmp_path / "badtoken", token="expired")
    one_error(cli(*command, "--kubeconfig", str(path)), 1, "401 Unauthorized", "log in again")


@pytest.mark.parametrize(
    "name, verb, resource, group",
    [
        ("status", "list", "jobs", "batch"),
        ("logs", "get", "pods", ""),
        ("list", "list", "jobs", "batch"),
        ("delete", "delete", "jobs", "batch"),
        ("submit", "patch", "services", ""),
    ],
)
def test_forbidden_names_verb_and_resource(cli, make_cluster, name, verb, resource, group):
    c = make_cluster()
    assert cli("submit", *c.args, "-n", NS, "--target", "job").code == 0
    pods = c.double.pod_names_for("Job", NAME, NS)
    for p in pods:
        c.double.start_container(p, NS)
    c.double.forbid(verb, resource if name != "logs" else "pods/log", group, NS)
    args = COMMANDS[name] + (["--replace"] if name == "submit" else [])
    err = one_error(
        cli(*args, *c.args, "-n", NS),
        1,
        "403 Forbidden",
        f'cannot {verb} resource "{resource}{"/log" if name == "logs" else ""}"',
        "RBAC permission",
    )
    assert f'in namespace "{NS}"' in err


def test_namespace_that_does_not_exist(cli, make_cluster):
    c = make_cluster()
    for args, code in (
        (COMMANDS["submit"], 1),
        (COMMANDS["status"], 1),
        (COMMANDS["logs"], 1),
        (COMMANDS["delete"], 1),
    ):
        one_error(cli(*args, *c.args, "-n", "ghost"), code, 'namespace "ghost" does not exist', "-n")
    r = cli("list", *c.args, "-n", "ghost")  # like kubectl get: an empty list
    assert r.code == 0 and "No ddpctl jobs found" in r.out


def test_crd_not_installed_names_the_target_that_would_work(cli, make_cluster):
    c = make_cluster(("jobset",))
    one_error(
        cli("submit", *c.args, "--target", "trainjob"),
        1,
        "trainjobs.trainer.kubeflow.org/v1alpha1",
        "Kubeflow Trainer v2 is not installed",
        "--target jobset",
    )


def test_invalid_object_lists_the_servers_field_paths(cli, make_cluster):
    bad = lambda o: (
        [
            "spec.completions: Invalid value: 0: must be greater than or equal to 1",
            "metadata.labels: Invalid value: \"x\": bad",
        ]
        if o["kind"] == "Job"
        else []
    )
    c = make_cluster(validator=bad)
    one_error(
        cli(*COMMANDS["submit"], *c.args),
        1,
        'job.batch "ddp-train" in namespace "default" as invalid',
        "spec.completions: Invalid value: 0",
        "metadata.labels: Invalid value",
    )


def test_already_exists_says_delete_or_replace(cli, make_cluster):
    c = make_cluster()
    assert cli(*COMMANDS["submit"], *c.args).code == 0
    one_error(cli(*COMMANDS["submit"], *c.args), 1, "already exists", "ddpctl delete ddp-train -n default", "--replace")


def test_server_errors_during_list_and_watch_are_one_line(cli, make_cluster):
    c = make_cluster()
    assert cli("submit", *c.args, "-n", NS).code == 0
    c.double.fail_next("GET", r"/pods$", status=503, count=10, message="etcdserver: leader changed")
    one_error(
        cli("status", NAME, *c.args, "-n", NS),
        1,
        "the API server failed to list pods",
        "503",
        "etcdserver: leader changed",
        "retry",
    )


# --------------------------------------------------------------------------- translation units


def test_status_translation_table():
    op = E.Op("apply", PYTORCHJOB, "x", "team")
    where = "context c at http://h"
    not_served = E.from_status(
        404, '{"message": "the server could not find the requested resource", "details": {}}', op, where
    )
    assert not_served.not_served and "pytorchjobs.kubeflow.org/v1" in not_served.message
    ns = E.from_status(
        404, {"message": 'namespaces "team" not found', "details": {"name": "team", "kind": "namespaces"}}, op, where
    )
    assert ns.namespace_missing and not ns.object_missing
    gone = E.from_status(
        404,
        {"message": 'jobs.batch "x" not found', "details": {"name": "x", "group": "batch", "kind": "jobs"}},
        E.Op("get", JOB, "x", "team"),
        where,
    )
    assert gone.object_missing and gone.message.startswith('job.batch "x" in namespace "team" not found')
    conflict = E.from_status(
        409, {"reason": "Conflict", "message": "Apply failed with 2 conflicts:\n- .spec.a\n- .spec.b"}, op, where
    )
    assert "\n" not in conflict.message and ".spec.a; - .spec.b" in conflict.message
    html = E.from_status(502, b"<html>bad gateway</html>", op, where)
    assert "502" in html.message and "\n" not in html.message
