"""ddpctl.cluster.errors: every answer of the API server that is an error, as one line naming the
object and the fix, for every cluster command, with the real client over real HTTP
(tests/support/kube_api_double); never a traceback. Reaching the server (kubeconfig, timeouts,
retries) is test_config.py's."""

from __future__ import annotations

import kubernetes  # noqa: F401 - a core dependency: missing, it fails here rather than skips
import pytest

from ddpctl.cluster import errors as E
from ddpctl.cluster.kinds import JOB, NAMESPACE, POD, PYTORCHJOB, RUNTIME, SERVICE, WORKLOAD
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


@pytest.mark.parametrize(
    ("op", "subject", "rbac"),
    [
        (E.Op("get", JOB, "x", "team"), 'job.batch "x" in namespace "team"', ("get", "jobs.batch")),
        (E.Op("list", POD, None, "team"), 'pods in namespace "team"', ("list", "pods")),
        (E.Op("apply", SERVICE, "x", "team"), 'service "x" in namespace "team"', ("patch", "services")),
        (E.Op("logs", POD, "p", "team"), 'pod "p" in namespace "team"', ("get", "pods/log")),
        (E.Op("get", NAMESPACE, "team", "team"), 'namespace "team"', ("get", "namespaces")),  # cluster-scoped
        (E.Op("list", JOB, None, None), "jobs.batch", ("list", "jobs.batch")),  # all namespaces
        (E.Op("reach"), "the API", ("reach", "?")),
    ],
)
def test_what_a_request_was_for(op: E.Op, subject: str, rbac: tuple[str, str]) -> None:
    assert op.subject == subject
    assert (op.rbac_verb, op.rbac_resource) == rbac


WHERE = "context c at http://h"
OP = E.Op("apply", JOB, "x", "team")


@pytest.mark.parametrize(
    ("code", "body", "op", "message"),
    [
        (401, {"reason": "Unauthorized"}, OP,
         'the API server (context c at http://h) rejected the credentials (401 Unauthorized) when asked to apply '
         'job.batch "x" in namespace "team"; log in again or refresh the token in your kubeconfig, or pick another '
         "--context"),
        (403, {"message": 'jobs.batch "x" is forbidden: User "u" cannot patch'}, OP,
         'cannot apply job.batch "x" in namespace "team": 403 Forbidden: jobs.batch "x" is forbidden: User "u" cannot '
         'patch; ask a cluster admin for RBAC permission to patch "jobs.batch" in namespace "team", or use a namespace '
         "you may write to with -n"),
        (403, {}, E.Op("get", RUNTIME, "torch-distributed", "team"),
         'cannot get clustertrainingruntime.trainer.kubeflow.org "torch-distributed": 403 Forbidden: no permission; '
         'ask a cluster admin for RBAC permission to get "clustertrainingruntimes.trainer.kubeflow.org", or use a '
         "namespace you may write to with -n"),
        (404, {"message": "the server could not find the requested resource"}, E.Op("list", WORKLOAD, None, "team"),
         "the cluster does not serve workloads.kueue.x-k8s.io (context c at http://h); check the cluster version and "
         "installed CRDs"),
        (409, {"reason": "AlreadyExists"}, OP,
         'job.batch "x" in namespace "team" already exists; delete it (`ddpctl delete x -n team`) or resubmit with '
         "--replace"),
        (400, {"message": "container trainer is waiting to start"}, E.Op("logs", POD, "p", "team"),
         'the API server refused to logs pod "p" in namespace "team": container trainer is waiting to start'),
        (410, {"message": "too old resource version: 5 (10)"}, E.Op("watch", POD, None, "team"),
         'watch pods in namespace "team": too old resource version: 5 (10); run the command again'),
        (429, {"reason": "TooManyRequests"}, OP,
         'the API server failed to apply job.batch "x" in namespace "team": 429 TooManyRequests; retry, or check the '
         "cluster's health"),
        (500, {"reason": "InternalError", "message": "etcd\nfailed"}, OP,
         'the API server failed to apply job.batch "x" in namespace "team": 500 InternalError: etcd; failed; retry, or '
         "check the cluster's health"),
        (418, {"reason": "Teapot", "message": "short and stout"}, OP,
         'apply job.batch "x" in namespace "team" failed: 418 Teapot: short and stout'),
        (502, b"<html>bad gateway</html>", OP,
         'the API server failed to apply job.batch "x" in namespace "team": 502 error: <html>bad gateway</html>; '
         "retry, or check the cluster's health"),
    ],
)  # fmt: skip
def test_from_status(code: int, body: object, op: E.Op, message: str) -> None:
    error = E.from_status(code, body, op, WHERE)
    assert (error.code, error.message) == (code, message)
    assert "\n" not in error.message


def test_an_invalid_object_names_at_most_five_fields() -> None:
    causes = [{"field": f"spec.f{i}", "message": f"bad {i}"} for i in range(7)] + [{"message": "no field"}]
    error = E.from_status(422, {"reason": "Invalid", "details": {"causes": causes}}, OP, WHERE)
    assert error.message == (
        'the API server rejected job.batch "x" in namespace "team" as invalid: spec.f0: bad 0; spec.f1: bad 1; '
        "spec.f2: bad 2; spec.f3: bad 3; spec.f4: bad 4; and 3 more; fix the spec (`ddpctl render` shows what is "
        "sent)"
    )
    bare = E.from_status(422, {"message": "Job.batch is invalid"}, OP, WHERE)
    assert "as invalid: Job.batch is invalid; fix the spec" in bare.message


def test_an_api_error_keeps_what_callers_branch_on_when_copied() -> None:
    import copy

    error = E.from_status(404, {"message": "the server could not find the requested resource"}, OP, WHERE)
    for again in (copy.copy(error), copy.deepcopy(error)):
        assert (again.code, again.not_served, again.message, again.object_missing) == (404, True, error.message, False)


class Wrapped(Exception):
    """How urllib3 nests the cause of a failed request: `reason` holds the next exception."""

    def __init__(self, reason: BaseException) -> None:
        super().__init__("wrapper")
        self.reason = reason


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (Wrapped(ConnectionRefusedError(111, "Connection refused")), "connection refused"),
        (Wrapped(Wrapped(TimeoutError("Read timed out. (read timeout=5)"))), "timed out"),
        (OSError("[Errno -2] Name or service not known"), "the host name does not resolve"),
        (OSError("Failed to resolve 'kube.example'"), "the host name does not resolve"),
        (OSError("[SSL: CERTIFICATE_VERIFY_FAILED]\ncertificate verify failed"),
         "TLS error: [SSL: CERTIFICATE_VERIFY_FAILED]; certificate verify failed"),
        (OSError("something\nelse"), "something; else"),
        (OSError(""), "OSError"),
    ],
)  # fmt: skip
def test_short_transport_reason(exc: BaseException, reason: str) -> None:
    assert E.short_transport_reason(exc) == reason


def test_a_transport_failure_is_unreachable_and_says_what_it_was_doing() -> None:
    from ddpctl.errors import Unreachable

    error = E.from_transport(ConnectionRefusedError("refused"), E.Op("list", JOB, None, "team"), WHERE, attempts=3)
    assert isinstance(error, Unreachable)
    assert error.message == (
        "cannot reach the Kubernetes API server (context c at http://h) after 3 attempts: connection refused (while "
        'trying to list jobs.batch in namespace "team"); check that the cluster is running and that --context / '
        "--kubeconfig / KUBECONFIG point to it"
    )


def test_a_kubeconfig_error_is_a_usage_error_on_one_line() -> None:
    from ddpctl.errors import UsageError

    error = E.config_error("KUBECONFIG", "invalid\nyaml " + "x" * 400)
    assert isinstance(error, UsageError) and "\n" not in error.message
    assert error.message.startswith("KUBECONFIG: invalid; yaml xxx")
    assert error.message.endswith("; fix the kubeconfig or pass --kubeconfig / --context")
    assert len(error.message) < 400
