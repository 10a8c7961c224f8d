"""`ddpctl check` in a cluster, against the API server double (real client, real HTTP): the
preflight as a job of its own (`<name>-check`, the trainer with --preflight-only, the job's layout
and placement), followed like `submit --follow`, and deleted when it ends, whatever the verdict."""

from __future__ import annotations

import pytest

from tests.support.api import NAME, NS, objects_left, one_error

CHECK = f"{NAME}-check"
REPORT = [
    "[rank 0] ddpctl-trainer: preflight: node  rank  local  pod  k8s node  GFLOP/s  cpu",
    "[rank 0] ddpctl-trainer: preflight finding: slow node: node 1 (pod p-1, k8s node w2): compute 7.1 GFLOP/s, "
    "0.08 x the median 88.4 GFLOP/s (tolerance 0.6); avoid it: --avoid-node w2",
    "[rank 0] ddpctl-trainer: preflight verdict: failed: 1 finding (slow node: node 1) in 5.1 s; exit 201 "
    "(--preflight fail)",
]


def _run_check(d, code: int, seen: list[dict]) -> None:  # type: ignore[no-untyped-def]
    """When the check's Job is created: its pods run the checks, node 0's says REPORT, all exit `code`."""

    def run(d, obj):  # type: ignore[no-untyped-def]
        seen.append(obj)
        pods = d.pod_names_for("Job", CHECK, NS)
        for p in pods:
            d.start_container(p, NS)
        d.append_log(pods[0], *(REPORT if code else REPORT[:1]), namespace=NS)
        if code:  # torchrun's failure report fills the last lines: the finding is read from the log's head
            d.append_log(pods[0], *(f"  exitcode  : 201 (pid: {i})" for i in range(30)), namespace=NS)
        for p in pods:
            d.terminate_container(p, NS, exit_code=code)
        d.finish("Job", CHECK, NS, succeeded=code == 0)

    d.after_create("Job", run)


@pytest.mark.parametrize("code", [0, 201])
def test_check_runs_the_preflight_as_its_own_job_follows_it_and_deletes_it(cli, make_cluster, code: int) -> None:
    c = make_cluster()
    seen: list[dict] = []
    _run_check(c.double, code, seen)
    r = cli("check", *c.args, "-n", NS, "--nodes", "2", "--gpus", "0", "--node-selector", "pool=cpu")
    (job,) = seen
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert job["metadata"]["name"] == CHECK and pod["nodeSelector"] == {"pool": "cpu"}  # the job's placement
    assert container["args"] == ["--preflight-only", "--preflight-window", "0.25", "--preflight-repeats", "3"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["DDP_TRAINER_PREFLIGHT"] == "fail" and env["DDP_NODE_NAME"] == {
        "fieldRef": {"fieldPath": "spec.nodeName"}
    }
    assert job["spec"]["backoffLimit"] == 0  # a check reports: it is never retried
    assert "[node 0] [rank 0] ddpctl-trainer: preflight: node  rank  local  pod  k8s node  GFLOP/s  cpu" in r.out
    if code:  # the finding and its fix in the one error line; the job that could show more is gone
        one_error(
            r,
            1,
            f'job "{CHECK}" failed its preflight checks (exit 201): slow node: node 1 (pod p-1, k8s node w2)',
            "avoid it: --avoid-node w2 (its report is above; the check's job is deleted: --keep leaves it)",
        )
    else:
        assert r.code == 0, r.err
    assert f"job.batch/{CHECK} deleted" in r.err and f"service/{CHECK} deleted" in r.err, r.err
    assert "checkpoints" not in r.err  # the checks alone write none: no warning about losing them
    assert [o for o in objects_left(c.double) if not o.startswith("Pod/")] == []


def test_check_keep_leaves_the_job_and_local_flags_are_refused_in_a_cluster(cli, make_cluster) -> None:
    c = make_cluster()
    _run_check(c.double, 0, [])
    r = cli("check", *c.args, "-n", NS, "--keep")
    assert r.code == 0, r.err
    assert f"Job/{CHECK}" in objects_left(c.double)
    one_error(cli("check", *c.args, "-n", NS, "--run-dir", "x"), 2, "--run-dir is for a check run here")
    one_error(cli("check", "--local", "--keep"), 2, "--keep is for a check in the cluster")
    one_error(cli("check", *c.args, "-n", NS, "--", "--epochs", "3"), 2, "takes no trainer arguments")
