"""`ddpctl status / logs / list / delete` against the API server double (real client, real HTTP)."""

from __future__ import annotations

import json
import threading

import kubernetes  # noqa: F401 - a core dependency: missing, it fails here rather than skips
import pytest
import yaml

from tests.support.api import NAME, NS, objects_left, one_error
from tests.support.kube_api_double.scripted import BOUND, Scenario


def submit(cli, c, *flags):
    r = cli("submit", *c.args, "-n", NS, *flags)
    assert r.code == 0, r.err
    return r


# --------------------------------------------------------------------------- status


def test_status_shows_ranks_phases_restarts_and_reasons(cli, make_cluster):
    c = make_cluster(("pytorchjob",))
    submit(cli, c, "--nodes", "3")
    d = c.double
    d.start_pods("PyTorchJob", NAME, NS)
    d.restart_container(f"{NAME}-worker-0", NS, exit_code=137, reason="OOMKilled")
    msg = "0/3 nodes are available: 3 Insufficient memory."
    d.mark_unschedulable(f"{NAME}-worker-1", NS, message=msg)
    r = cli("status", NAME, *c.args, "-n", NS)
    assert r.code == 0, r.err
    assert "Target:      pytorchjob (pytorchjob.kubeflow.org/ddp-train)" in r.out
    rows = {line.split()[0]: line for line in r.out.splitlines() if line[:1].isdigit()}
    assert rows["0"].split()[1:3] == [f"{NAME}-master-0", "Running"]
    assert "1 (last: OOMKilled (exit code 137))" in rows["1"]
    assert f"Unschedulable: {msg}" in rows["2"]
    doc = json.loads(cli("status", NAME, *c.args, "-n", NS, "-o", "json").out)
    assert doc["target"] == "pytorchjob" and doc["nodes"] == 3 and doc["state"] == "Running"
    assert doc["replicas"]["worker"] == {"pending": 1, "running": 1, "succeeded": 0, "failed": 0}
    assert [p["node"] for p in doc["pods"]] == [0, 1, 2] and doc["pods"][1]["restarts"] == 1
    assert yaml.safe_load(cli("status", NAME, *c.args, "-n", NS, "-o", "yaml").out) == doc


def test_status_of_a_failed_job_and_wait_on_it(cli, make_cluster):
    c = make_cluster()
    submit(cli, c)
    d = c.double
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    d.start_container(p0, NS)
    d.start_container(p1, NS)
    d.append_log(p0, "  File \"train.py\", line 3", "ValueError: bad batch", namespace=NS)
    d.terminate_container(p0, NS, exit_code=1)
    d.finish("Job", NAME, NS, succeeded=False)
    r = cli("status", NAME, *c.args, "-n", NS)
    assert f"State:       Failed (BackoffLimitExceeded: Job {NAME} has failed.)" in r.out
    assert "Error (exit code 1)" in r.out
    r = cli("status", NAME, *c.args, "-n", NS, "--wait")
    one_error(r, 1, f"node 0 (pod {p0}): Error (exit code 1)")
    assert "    | ValueError: bad batch" in r.err


def test_status_of_a_job_failed_by_its_usage_error_rule_says_so(cli, make_cluster):
    """The pod failure policy fails the Job at the trainer's usage error (exit 2): status shows the
    Job controller's reason and what the exit code means."""
    c = make_cluster()
    submit(cli, c)
    d = c.double
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    for pod in (p0, p1):
        d.start_container(pod, NS)
        d.terminate_container(pod, NS, exit_code=2)
    message = f"Container trainer for pod {NS}/{p0} failed with exit code 2 matching FailJob rule at index 0"
    d.finish("Job", NAME, NS, succeeded=False, reason="PodFailurePolicy", message=message)
    r = cli("status", NAME, *c.args, "-n", NS)
    assert f"State:       Failed (PodFailurePolicy: {message})" in r.out, r.out
    assert "Error (exit code 2: usage error)" in r.out, r.out


def test_status_name_and_namespace_from_ddp_yaml(cli, make_cluster, tmp_path):
    c = make_cluster()
    (tmp_path / "ddp.yaml").write_text("name: mine\nnamespace: team\n")
    assert cli("submit", *c.args).code == 0
    r = cli("status", *c.args)
    assert r.code == 0 and "Name:        mine" in r.out and "Namespace:   team" in r.out


def test_status_of_a_missing_job_and_a_missing_namespace(cli, make_cluster):
    c = make_cluster()
    one_error(cli("status", "nope", *c.args, "-n", NS), 1, 'no job "nope" in namespace "team"', "ddpctl list -n team")
    one_error(cli("status", "nope", *c.args, "-n", "ghost"), 1, 'namespace "ghost" does not exist')
    # NAME defaults as for every other command (ddp.yaml's, else ddp-train), not "missing NAME"
    one_error(cli("status", *c.args, "-n", NS), 1, 'no job "ddp-train" in namespace "team"')


def test_status_shows_rank_0s_progress_and_the_time_left(cli, make_cluster):
    """Rank 0's newest progress line, read from the tail of node 0's log: epoch, step, percent of
    the whole run, samples/s and the ETA, in text and in -o json; nothing while no line came."""
    c = make_cluster()
    submit(cli, c)
    d = c.double
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    for p in (p0, p1):
        d.start_container(p, NS)
    assert "Progress:" not in cli("status", NAME, *c.args, "-n", NS).out
    assert json.loads(cli("status", NAME, *c.args, "-n", NS, "-o", "json").out)["progress"] is None
    d.append_log(p0, "[rank 0] world size 4 (ddp, gloo, cpu)", namespace=NS)
    d.append_log(p0, "[rank 0] epoch 1/3 step 100/313 loss 0.9000 400.0 samples/s eta 9m00s", namespace=NS)
    d.append_log(p0, "[rank 0] epoch 3/3 step 254/313 loss 0.1234 424.6 samples/s eta 2m05s", namespace=NS)
    d.append_log(p1, "[rank 2] epoch 3/3 step 300/313 loss 0.1 1.0 samples/s eta 1s", namespace=NS)  # not rank 0
    r = cli("status", NAME, *c.args, "-n", NS)
    line = next(x for x in r.out.splitlines() if x.startswith("Progress:"))
    assert line.startswith("Progress:    epoch 3/3 step 254/313 (94%), loss 0.1234, 424.6 samples/s, ETA 2m0"), line
    assert line.endswith("s ago)") and "(rank 0, " in line
    doc = json.loads(cli("status", NAME, *c.args, "-n", NS, "-o", "json").out)
    assert doc["backend"] == "cluster"
    progress = doc["progress"]
    assert (progress["epoch"], progress["epochs"], progress["step"], progress["steps"]) == (3, 3, 254, 313)
    assert progress["percent"] == 93.7 and progress["samplesPerSecond"] == 424.6
    assert 0 < progress["etaSeconds"] <= 125


REPORT = [
    "[rank 0] ddpctl-trainer: preflight: 4 ranks on 2 nodes (gloo, cpu); GEMM 512 float32, all-reduce 4 MiB; one "
    "window of 0.2 s; named below 0.6 x the median",
    "[rank 0] ddpctl-trainer: preflight: node  rank  local  pod    k8s node  GFLOP/s  cpu",
    "[rank 0] ddpctl-trainer: preflight: 0     0     0      p-0    w1        56.4     85%",
    "[rank 0] ddpctl-trainer: preflight: 1     2     0      p-1    w2        17.3     30%  SLOW compute",
    "[rank 0] ddpctl-trainer: preflight finding: slow node: node 1 (pod p-1, k8s node w2): compute 17.3 GFLOP/s, "
    "0.31 x the median 56.4 GFLOP/s (tolerance 0.6); avoid it: --avoid-node w2",
    "[rank 0] ddpctl-trainer: preflight verdict: failed: 1 finding (slow node: node 1) in 1.4 s; exit 201 "
    "(--preflight fail)",
]


def test_status_shows_rank_0s_preflight_report_and_what_201_means(cli, make_cluster):
    """A job with --preflight fail whose node 1 was slow: every pod exits 201; status reads the
    report from the head of node 0's log (the verdict as `Preflight:`, the table and the finding
    under it) and gives 201 its meaning; -o json has the verdict and the findings."""
    c = make_cluster()
    submit(cli, c, "--preflight", "fail")
    d = c.double
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    for p in (p0, p1):
        d.start_container(p, NS)
    d.append_log(p0, "[rank 0] world size 4 (ddp, gloo, cpu)", *REPORT, namespace=NS)
    d.append_log(p1, "[rank 2] ddpctl-trainer: preflight: not rank 0", namespace=NS)
    for p in (p0, p1):
        d.terminate_container(p, NS, exit_code=201)
    r = cli("status", NAME, *c.args, "-n", NS)
    lines = r.out.splitlines()
    at = lines.index("Preflight:   failed: 1 finding (slow node: node 1) in 1.4 s; exit 201 (--preflight fail)")
    assert lines[at + 1].split() == ["4", "ranks", "on", "2", "nodes", "(gloo,", "cpu);", "GEMM", "512", "float32,"] + [
        "all-reduce", "4", "MiB;", "one", "window", "of", "0.2", "s;", "named", "below", "0.6", "x", "the", "median"
    ]  # fmt: skip
    assert lines[at + 2] == "             node  rank  local  pod    k8s node  GFLOP/s  cpu"
    assert lines[at + 5].startswith("             finding: slow node: node 1 (pod p-1, k8s node w2)")
    assert lines[at + 5].endswith("avoid it: --avoid-node w2") and "not rank 0" not in r.out
    assert r.out.count("Error (exit code 201: failed its preflight checks)") == 2, r.out
    doc = json.loads(cli("status", NAME, *c.args, "-n", NS, "-o", "json").out)
    assert doc["preflight"]["verdict"].startswith("failed: 1 finding (slow node: node 1)")
    assert [f[:24] for f in doc["preflight"]["findings"]] == ["slow node: node 1 (pod p"]


def test_status_of_a_job_without_the_preflight_reads_no_report(cli, make_cluster):
    c = make_cluster()
    submit(cli, c)
    d = c.double
    p0, _ = d.pod_names_for("Job", NAME, NS)
    d.start_container(p0, NS)
    d.append_log(p0, *REPORT, namespace=NS)  # printed by the user's own code, say: not ddpctl's to show
    r = cli("status", NAME, *c.args, "-n", NS)
    assert "Preflight:" not in r.out and "preflight" not in json.loads(
        cli("status", NAME, *c.args, "-n", NS, "-o", "json").out
    )


NAMED = (
    "[rank 0] ddpctl-trainer: straggler: node 1 (pod {pod}, k8s node w2): own work 61.2 ms a step (rank 2), 0.48 x "
    "the median speed (29.5 ms; tolerance 0.6) for 3 windows of 10 steps, since step 41{avoid}"
)
RECOVERED = (
    "[rank 0] ddpctl-trainer: straggler recovered: node 1 (pod {pod}, k8s node w2): back at 0.95 x the median speed "
    "at step 90"
)


def _progress(first: int, count: int) -> list[str]:
    return [f"[rank 0] epoch 1/1 step {s}/9000 loss 2.3012 12.5 samples/s eta 1m05s" for s in range(first, count)]


@pytest.mark.parametrize("recovered", [False, True])
def test_status_shows_rank_0s_stragglers_from_the_tail_of_node_0s_log(cli, make_cluster, recovered: bool):
    """The default (warn): rank 0 names node 1 mid-run, hundreds of progress lines later than
    PROGRESS_TAIL reaches; status reads the tail of node 0's log for its straggler lines and shows the
    node named now (or, once it recovered, says so); -o json has them. Another rank's lines are not
    rank 0's."""
    c = make_cluster()
    submit(cli, c)
    d = c.double
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    for p in (p0, p1):
        d.start_container(p, NS)
    named = NAMED.format(pod=p1, avoid="; avoid it: --avoid-node w2")
    later = [RECOVERED.format(pod=p1)] if recovered else []
    d.append_log(p0, *_progress(1, 40), named, *_progress(40, 600), *later, *_progress(600, 700), namespace=NS)
    d.append_log(p1, "[rank 2] ddpctl-trainer: straggler: node 0 (pod x): not rank 0's", namespace=NS)
    r = cli("status", NAME, *c.args, "-n", NS)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    body = named.split("straggler: ", 1)[1]
    if recovered:
        at = lines.index("Stragglers:  none now")
        assert lines[at + 1] == "             recovered: " + RECOVERED.format(pod=p1).split("recovered: ", 1)[1]
    else:
        assert f"Stragglers:  {body}" in lines
    assert "not rank 0's" not in r.out
    doc = json.loads(cli("status", NAME, *c.args, "-n", NS, "-o", "json").out)
    current = [] if recovered else [{"node": 1, "text": body, "avoid": "w2"}]
    assert doc["stragglers"]["current"] == current
    assert doc["stragglers"]["lines"] == [line.removeprefix("[rank 0] ") for line in [named, *later]]
    tails = {q.param("tailLines") for q in d.requests_to("GET") if q.path.endswith(f"/pods/{p0}/log")}
    assert "20000" in tails


def test_status_of_a_job_with_stragglers_off_reads_none(cli, make_cluster):
    c = make_cluster()
    submit(cli, c, "--stragglers", "off")
    job = c.double.get("Job", NAME, NS)
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DDP_TRAINER_STRAGGLERS"] == "off"
    p0, _ = c.double.pod_names_for("Job", NAME, NS)
    c.double.start_container(p0, NS)
    c.double.append_log(p0, NAMED.format(pod="x", avoid=""), namespace=NS)  # the user's own code, say
    r = cli("status", NAME, *c.args, "-n", NS)
    assert "Stragglers:" not in r.out and "stragglers" not in json.loads(
        cli("status", NAME, *c.args, "-n", NS, "-o", "json").out
    )
    tails = {q.param("tailLines") for q in c.double.requests_to("GET") if q.path.endswith(f"/pods/{p0}/log")}
    assert "20000" not in tails


@pytest.mark.parametrize(
    ("avoid", "advice"),
    [
        ("; avoid it: --avoid-node w2", "resubmit away from it: ddpctl submit ... --avoid-node w2"),
        ("", "the other pods ran on k8s node w2 too, so --avoid-node w2 would move the whole job"),
    ],
)
def test_a_job_stopped_for_a_straggler_names_the_node_and_the_resubmit_command(
    cli, make_cluster, avoid: str, advice: str
):
    """--stragglers fail: every pod exits 202 and the Job's FailJob rule fails it at once; the
    failure explanation names the node from rank 0's line, with what to do about it."""
    c = make_cluster()
    submit(cli, c, "--stragglers", "fail")
    job = c.double.get("Job", NAME, NS)
    first = job["spec"]["podFailurePolicy"]["rules"][0]
    assert (first["action"], first["onExitCodes"]["values"]) == ("FailJob", [2, 202])
    d = c.double
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    for p in (p0, p1):
        d.start_container(p, NS)
    named = NAMED.format(pod=p1, avoid=avoid)
    stop = "ddpctl-trainer: error: [rank {r}] straggler: node 1 (pod x) below 0.6 x the median speed since step 41"
    d.append_log(p0, *_progress(1, 50), named, stop.format(r=0), namespace=NS)
    d.append_log(p1, stop.format(r=2), namespace=NS)
    for p in (p0, p1):
        d.terminate_container(p, NS, exit_code=202)
    message = f"Container trainer for pod {NS}/{p0} failed with exit code 202 matching FailJob rule at index 0"
    d.finish("Job", NAME, NS, succeeded=False, reason="PodFailurePolicy", message=message)
    r = cli("status", NAME, *c.args, "-n", NS)
    assert r.out.count("Error (exit code 202: stopped for a straggler)") == 2, r.out
    r = cli("status", NAME, *c.args, "-n", NS, "--wait")
    text = named.split("straggler: ", 1)[1].removesuffix(avoid)
    one_error(r, 1, f'job "{NAME}" stopped for a straggler (exit 202): {text}; {advice}', "--rank 0")


# --------------------------------------------------------------------------- logs


def _run_two_ranks(d, kind="Job"):
    """The job's trainer pods started, each with two log lines (a coordinator's pod, owned by the
    trainers' Job under recovery: pod, is no rank)."""
    pods = [
        p["metadata"]["name"]
        for p in d.pods_for(kind, NAME, NS)
        if p["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "coordinator"
    ]
    for i, p in enumerate(pods):
        d.start_container(p, NS)
        d.append_log(p, f"rank {i} line 1", f"rank {i} line 2", namespace=NS)
    return pods


def test_logs_of_every_rank_prefixed_in_rank_order(cli, make_cluster):
    c = make_cluster(("jobset",))
    submit(cli, c)
    _run_two_ranks(c.double, "JobSet")
    r = cli("logs", NAME, *c.args, "-n", NS)
    assert r.code == 0, r.err
    assert r.out.splitlines() == [
        "[node 0] rank 0 line 1",
        "[node 0] rank 0 line 2",
        "[node 1] rank 1 line 1",
        "[node 1] rank 1 line 2",
    ]
    assert cli("logs", NAME, *c.args, "-n", NS, "--rank", "1", "--tail", "1").out == "rank 1 line 2\n"
    assert (
        cli("logs", NAME, *c.args, "-n", NS, "--rank", "1", "--prefix").out.splitlines()[0] == "[node 1] rank 1 line 1"
    )
    one_error(
        cli("logs", NAME, *c.args, "-n", NS, "--rank", "2"),
        2,
        "--rank: node rank 2 is out of range",
        "2 nodes",
        "0-1",
    )


def test_node_prefix_is_the_pod_index_beside_the_trainers_global_ranks(cli, make_cluster):
    c = make_cluster()
    submit(cli, c, "--gpus", "4")
    d = c.double
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    for p in (p0, p1):
        d.start_container(p, NS)
    d.append_log(p1, "[rank 5] epoch 1 loss 0.3", namespace=NS)  # pod 1 runs global ranks 4-7
    r = cli("logs", NAME, *c.args, "-n", NS, "--rank", "1", "--prefix")
    assert r.out == "[node 1] [rank 5] epoch 1 loss 0.3\n" and "c10d" not in r.err
    status = cli("status", NAME, *c.args, "-n", NS)
    assert [line.split()[:2] for line in status.out.splitlines() if line.startswith("NODE")] == [["NODE", "POD"]]
    for command in ("logs", "submit"):
        help_text = " ".join(cli(command, "--help").out.replace("│", " ").split())  # rich wraps it in a box
        assert "node rank" in help_text and "pod index" in help_text, command


def test_rank_of_an_elastic_c10d_job_is_said_to_be_the_pod_index(cli, make_cluster):
    c = make_cluster(("pytorchjob",))
    for target in ("job", "pytorchjob"):
        name = f"el-{target}"
        r = cli("submit", *c.args, "-n", NS, "--name", name, "--target", target, "--nodes", "1:3")
        assert r.code == 0, r.err
        kind = {"job": "Job", "pytorchjob": "PyTorchJob"}[target]
        for p in c.double.pod_names_for(kind, name, NS):
            c.double.start_container(p, NS)
        r = cli("logs", name, *c.args, "-n", NS, "--rank", "0")
        assert r.code == 0, r.err
        assert f"ddpctl: {name} uses c10d rendezvous: --rank 0 picks pod index 0" in r.err, target


def test_logs_previous_instance_and_waiting_containers(cli, make_cluster):
    c = make_cluster()
    submit(cli, c, "--restart-policy", "OnFailure")
    d = c.double
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    d.start_container(p0, NS)
    d.append_log(p0, "before the crash", namespace=NS)
    d.restart_container(p0, NS, exit_code=137, reason="OOMKilled")
    d.set_container_waiting(p1, NS, reason="ImagePullBackOff")
    r = cli("logs", NAME, *c.args, "-n", NS, "--previous", "--rank", "0")
    assert r.out == "before the crash\n"
    r = cli("logs", NAME, *c.args, "-n", NS)
    assert r.code == 0 and f"node 1 (pod {p1}): no logs" in r.err and "ImagePullBackOff" not in r.out


def test_logs_of_a_pod_deleted_after_the_list_is_a_note_not_a_failure(cli, make_cluster):
    """A controller may delete a finished job's pod between our list and its log request (the
    training operator's cleanPodPolicy does, for a worker still exiting): the others still show."""
    c = make_cluster()
    submit(cli, c)
    d = c.double
    p0, p1 = d.pod_names_for("Job", NAME, NS)
    for pod in (p0, p1):
        d.start_container(pod, NS)
        d.append_log(pod, f"line of {pod}", namespace=NS)
    c.double.fail_next("GET", rf"/pods/{p1}/log$", status=404, message=f'pods "{p1}" not found')
    r = cli("logs", NAME, *c.args, "-n", NS)
    assert r.code == 0, r.err
    assert f"[node 0] line of {p0}" in r.out and p1 not in r.out
    assert f"ddpctl: node 1 (pod {p1}): no logs: the pod was deleted" in r.err


def test_logs_follow_all_ranks_across_a_pod_restart_until_the_job_ends(cli, make_cluster):
    c = make_cluster()
    submit(cli, c, "--restart-policy", "OnFailure")
    d = c.double
    p0, p1 = _run_two_ranks(d)

    def steps():
        d.wait_follows(p0)
        d.wait_follows(p1)
        d.append_log(p0, "rank 0 line 3", namespace=NS)
        d.restart_container(p0, NS, exit_code=1)
        d.wait_follows(p0, 2)
        d.append_log(p0, "rank 0 after restart", namespace=NS)
        for p in (p0, p1):
            d.terminate_container(p, NS, exit_code=0)
        d.finish("Job", NAME, NS)

    with Scenario(steps):
        r = cli("logs", NAME, *c.args, "-n", NS, "-f")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert [x for x in lines if x.startswith("[node 0]")] == [
        "[node 0] rank 0 line 1",
        "[node 0] rank 0 line 2",
        "[node 0] rank 0 line 3",
        "[node 0] rank 0 after restart",
    ]
    assert [x for x in lines if x.startswith("[node 1]")] == ["[node 1] rank 1 line 1", "[node 1] rank 1 line 2"]


def test_logs_follow_with_timestamps_picks_up_a_dropped_stream(cli, make_cluster):
    c = make_cluster()
    submit(cli, c)
    d = c.double
    p0, p1 = _run_two_ranks(d)

    def steps():
        try:
            d.wait_follows(p0)
            for n in (1, 2):  # twice: the second resume starts from the newer line
                d.drop_log_streams(p0, NS)
                d.append_log(p0, f"rank 0 after drop {n}", namespace=NS)
                d.wait_follows(p0, 1 + n)
        finally:
            for p in (p0, p1):
                d.terminate_container(p, NS, exit_code=0)
            d.finish("Job", NAME, NS)

    with Scenario(steps):
        r = cli("logs", NAME, *c.args, "-n", NS, "-f", "--rank", "0", "--timestamps")
    assert r.code == 0, r.err
    stamps, texts = zip(*(line.split(" ", 1) for line in r.out.splitlines()))
    assert texts == ("rank 0 line 1", "rank 0 line 2", "rank 0 after drop 1", "rank 0 after drop 2")
    assert all(s.endswith("Z") and s[:4].isdigit() for s in stamps) and list(stamps) == sorted(stamps)


def test_logs_follow_one_rank_and_a_replaced_pod(cli, make_cluster):
    c = make_cluster()
    submit(cli, c)
    d = c.double
    p0, p1 = _run_two_ranks(d)
    replaced = threading.Event()

    def steps():
        d.wait_follows(p1)
        d.terminate_container(p1, NS, exit_code=1)
        d.delete_pod(p1, NS)  # the Job controller replaces a failed pod (same index, new name)
        job = d.get("Job", NAME, NS)
        d.store.put(
            d.rt("Pod"),
            {
                **d.get("Pod", p0, NS),
                "metadata": {
                    "name": f"{NAME}-1-again",
                    "namespace": NS,
                    "labels": {
                        **d.get("Pod", p0, NS)["metadata"]["labels"],
                        "batch.kubernetes.io/job-completion-index": "1",
                    },
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": NAME,
                            "uid": job["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                },
                "status": {"phase": "Pending"},
            },
        )
        d.start_container(f"{NAME}-1-again", NS)
        d.append_log(f"{NAME}-1-again", "second pod of rank 1", namespace=NS)
        replaced.set()
        d.wait_follows(f"{NAME}-1-again")
        for p in (p0, f"{NAME}-1-again"):
            d.terminate_container(p, NS, exit_code=0)
        d.finish("Job", NAME, NS)

    with Scenario(steps):
        r = cli("logs", NAME, *c.args, "-n", NS, "-f", "--rank", "1")
    assert replaced.wait(BOUND)
    assert r.code == 0, r.err
    assert r.out.splitlines() == ["rank 1 line 1", "rank 1 line 2", "second pod of rank 1"]


# --------------------------------------------------------------------------- list


def test_list_finds_all_four_kinds_by_label(cli, make_cluster):
    c = make_cluster(("pytorchjob", "jobset", "trainjob"), runtime=True)
    for name, target, ns in (
        ("a-job", "job", NS),
        ("b-pt", "pytorchjob", NS),
        ("c-js", "jobset", "default"),
        ("d-tj", "trainjob", NS),
    ):
        assert cli("submit", *c.args, "-n", ns, "--name", name, "--target", target).code == 0
    # something ddpctl did not make is not listed
    c.double.store.put(
        c.double.rt("Job"),
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "other", "namespace": NS},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "x"}]}}},
        },
    )
    r = cli("list", *c.args, "-n", NS)
    assert r.code == 0, r.err
    rows = [line.split() for line in r.out.splitlines()]
    assert rows[0] == ["NAME", "TARGET", "NODES", "STATE", "AGE"]
    assert [(row[0], row[1], row[2]) for row in rows[1:]] == [
        ("a-job", "job", "2"),
        ("b-pt", "pytorchjob", "2"),
        ("d-tj", "trainjob", "2"),
    ]
    r = cli("list", *c.args, "-A")
    assert [line.split()[:3] for line in r.out.splitlines()][1:] == [
        ["default", "c-js", "jobset"],
        ["team", "a-job", "job"],
        ["team", "b-pt", "pytorchjob"],
        ["team", "d-tj", "trainjob"],
    ]
    doc = json.loads(cli("list", *c.args, "-A", "-o", "json").out)
    assert doc["kind"] == "List" and [i["kind"] for i in doc["items"]] == ["JobSet", "Job", "PyTorchJob", "TrainJob"]
    assert yaml.safe_load(cli("list", *c.args, "-A", "-o", "yaml").out)["items"] == doc["items"]
    assert cli("list", *c.args, "-n", NS, "-o", "name").out.splitlines() == [
        "job.batch/a-job",
        "pytorchjob.kubeflow.org/b-pt",
        "trainjob.trainer.kubeflow.org/d-tj",
    ]


def test_list_on_a_cluster_without_crds_and_an_empty_namespace(cli, make_cluster):
    c = make_cluster()
    r = cli("list", *c.args)
    assert r.code == 0 and r.out == 'No ddpctl jobs found in namespace "default".\n'
    submit(cli, c)
    assert "ddp-train" in cli("list", *c.args, "--namespace", NS).out


# --------------------------------------------------------------------------- delete


@pytest.mark.parametrize(
    "engines, runtime, target",
    [
        ((), False, "job"),
        (("pytorchjob",), False, "pytorchjob"),
        (("jobset",), False, "jobset"),
        (("trainjob",), True, "trainjob"),
    ],
)
def test_delete_removes_every_object_with_the_engines_propagation(cli, make_cluster, engines, runtime, target):
    """Foreground, except for a TrainJob, whose controller re-creates the JobSet of a TrainJob that the
    foreground finalizer holds (seen on the real Trainer): there the pods go in the background."""
    c = make_cluster(engines, runtime=runtime)
    submit(cli, c, "--target", target)
    assert c.double.objects("Pod", NS)
    r = cli("delete", NAME, *c.args, "-n", NS)
    assert r.code == 0, r.err
    assert objects_left(c.double) == [] and c.double.objects("Pod", NS) == []
    deletes = c.double.requests_to("DELETE")
    workload = "Background" if target == "trainjob" else "Foreground"
    policies = [req.json["propagationPolicy"] for req in deletes]
    assert policies[0] == workload and set(policies[1:]) <= {"Foreground"}, policies  # the Service after
    kind_ref = {
        "job": "job.batch",
        "pytorchjob": "pytorchjob.kubeflow.org",
        "jobset": "jobset.jobset.x-k8s.io",
        "trainjob": "trainjob.trainer.kubeflow.org",
    }[target]
    assert f"{kind_ref}/{NAME} deleted" in r.out.splitlines()


def test_delete_of_a_missing_job(cli, make_cluster):
    c = make_cluster()
    one_error(cli("delete", "ghost", *c.args, "-n", NS), 1, 'no job "ghost" in namespace "team"')
    r = cli("delete", "ghost", *c.args, "-n", NS, "--ignore-not-found")
    assert r.code == 0 and r.out == ""


# --------------------------------------------------------------------------- node groups


def test_status_logs_and_delete_of_a_job_with_node_groups(cli, make_cluster):
    """The `job` target makes one Job per node group: status ranks every group's pods (offset +
    completion index), counts the job's nodes, and delete removes every Job."""
    c = make_cluster()
    submit(cli, c, "--layout", "2+1", "--gpus", "0")
    d = c.double
    assert sorted(o["metadata"]["name"] for o in d.objects("Job", NS)) == [f"{NAME}-g0", f"{NAME}-g1"]
    d.start_pods("Job", f"{NAME}-g0", NS)
    d.start_pods("Job", f"{NAME}-g1", NS)
    doc = json.loads(cli("status", NAME, *c.args, "-n", NS, "-o", "json").out)
    assert doc["nodes"] == 2 and doc["state"] == "Running"
    pods = [(p["node"], p["pod"].rsplit("-", 1)[0]) for p in doc["pods"]]  # pod names end in a random suffix
    assert pods == [(0, f"{NAME}-g0-0"), (1, f"{NAME}-g1-0")]
    rows = [line.split() for line in cli("list", *c.args, "-n", NS).out.splitlines()[1:]]
    assert [r[:3] for r in rows] == [[NAME, "job", "2"]], "one row per job, not per node group"
    r = cli("delete", NAME, *c.args, "-n", NS)
    assert r.code == 0, r.err
    assert objects_left(c.double) == [] and c.double.objects("Pod", NS) == []


def test_status_and_list_of_a_pod_recovery_job_count_a_pod_replaced_alone(cli, make_cluster):
    """recovery: pod: node 1's pod failed and the Job made another for its index; status shows the
    node's new pod, a Recoveries line (the failed pod, its node, its code, the step rank 0 went on
    from) and list a RECOVERIES column; the coordinator's pod is no node of the job."""
    c = make_cluster()
    submit(cli, c, "--recovery", "pod", "--gpus", "0")
    d = c.double
    p0, p1 = _run_two_ranks(d)
    d.terminate_container(p1, NS, exit_code=137)
    again = {**d.get("Pod", p1, NS), "status": {"phase": "Pending"}}
    again["metadata"] = {
        **again["metadata"],
        "name": f"{NAME}-1-again",
        "uid": "again",
        "creationTimestamp": "2099-01-01T00:00:00Z",
    }
    d.store.put(d.rt("Pod"), again)
    d.start_container(f"{NAME}-1-again", NS)
    d.append_log(
        p0,
        "[rank 0] ddpctl-trainer: recovery: the group formed again (generation 1), going on at step 4 after 9.5s",
        namespace=NS,
    )
    r = cli("status", NAME, *c.args, "-n", NS)
    assert r.code == 0, r.err
    (line,) = [x for x in r.out.splitlines() if x.startswith("Recoveries:")]
    assert f"node 1 (pod {p1}" in line and "exited with code 137: back at step 4 after 9.5 s, no step lost" in line
    assert f"{NAME}-1-again" in r.out and "Running" in r.out
    rows = [x.split() for x in cli("list", *c.args, "-n", NS).out.splitlines()]
    assert rows[0][4] == "RECOVERIES" and (rows[1][0], rows[1][4]) == (NAME, "1"), rows
