"""Scenario control for the API double: what the engines' controllers and the kubelet would do.

The real controllers run in tests/e2e/cluster (make cluster). This stays for what a real server and
kwok cannot be made to do on cue inside one request: pods whose logs arrive while a test follows
them, a watch that drops mid-stream, state changed between two requests of one command (the
`after_create` hooks of tests/unit/cluster/test_submit.py), and answers a real server never gives (500s, hangs,
slow or non-Kubernetes servers) in tests/unit/cluster/test_errors.py.

Everything here writes through the same :class:`Store` as HTTP requests, so watches,
lists and logs see the changes exactly as a client would on a cluster.
"""

from __future__ import annotations

import copy
import random

from .logs import LogBook
from .resources import Registry, ResourceType
from .store import Store, iso, now, rand_suffix

# label / annotation keys used by the engines (upstream names)
JOB_NAME = "batch.kubernetes.io/job-name"
JOB_UID = "batch.kubernetes.io/controller-uid"
JOB_INDEX = "batch.kubernetes.io/job-completion-index"
KF_JOB_NAME = "training.kubeflow.org/job-name"
KF_OPERATOR = "training.kubeflow.org/operator-name"
KF_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KF_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KF_JOB_ROLE = "training.kubeflow.org/job-role"
JS_NAME = "jobset.sigs.k8s.io/jobset-name"
JS_RJOB = "jobset.sigs.k8s.io/replicatedjob-name"
JS_RJOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JS_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JS_RESTART = "jobset.sigs.k8s.io/restart-attempt"
TJ_NAME = "trainer.kubeflow.org/trainjob-name"

#: the condition types each engine uses to say "finished"
FINISH_CONDITIONS = {
    "Job": ("Complete", "Failed"),
    "PyTorchJob": ("Succeeded", "Failed"),
    "JobSet": ("Completed", "Failed"),
    "TrainJob": ("Complete", "Failed"),
}

WAITING_MESSAGES = {
    "ContainerCreating": None,
    "ImagePullBackOff": 'Back-off pulling image "{image}"',
    "ErrImagePull": 'failed to pull and unpack image "{image}": not found',
}


def owner_ref(obj: dict) -> dict:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


class Scenario:
    """Mixin for :class:`KubeApiDouble`: engine controllers, kubelet and event helpers."""

    store: Store
    registry: Registry
    logbook: LogBook
    auto_pods: bool
    rng: random.Random

    # ------------------------------------------------------------------ lookups

    def rt(self, kind: str) -> ResourceType:
        """Resource type by kind, plural or singular (``"Job"``, ``"pytorchjobs"``, ``"jobset"``)."""
        return self.registry.by_kind(kind)

    def get(self, kind: str, name: str, namespace: str | None = "default") -> dict | None:
        """The stored object (a copy), or None."""
        return self.store.peek(self.rt(kind), namespace, name)

    def objects(self, kind: str, namespace: str | None = None) -> list[dict]:
        return self.store.list(self.rt(kind), namespace)[0]

    def add_namespace(self, name: str) -> dict:
        return self.store.put(self.rt("Namespace"), {"metadata": {"name": name}})

    def pods_for(self, kind: str, name: str, namespace: str = "default") -> list[dict]:
        """Pods owned (transitively, through child Jobs/JobSets) by the named object, in rank order."""
        with self.store.lock:
            root = self.store.peek(self.rt(kind), namespace, name)
            if root is None:
                return []
            out: list[dict] = []
            frontier = [root["metadata"]["uid"]]
            while frontier:
                uid = frontier.pop(0)
                for rt, o in self.store.dependents(uid):
                    if rt.kind == "Pod":
                        out.append(copy.deepcopy(o))
                    else:
                        frontier.append(o["metadata"]["uid"])
            return out

    def pod_names_for(self, kind: str, name: str, namespace: str = "default") -> list[str]:
        return [p["metadata"]["name"] for p in self.pods_for(kind, name, namespace)]

    # ------------------------------------------------------------------ controllers

    def on_created(self, rt: ResourceType, obj: dict) -> None:
        """Called by the server after a (non dry-run) create through the API."""
        if self.auto_pods and rt.kind in ("Job", "PyTorchJob", "JobSet", "TrainJob"):
            self.create_pods(rt.kind, obj["metadata"]["name"], obj["metadata"].get("namespace", "default"))

    def create_pods(self, kind: str, name: str, namespace: str = "default") -> list[str]:
        """Run the engine's controller once for the named object: create its children and pods."""
        rt = self.rt(kind)
        with self.store.lock:
            obj = self.store.get(rt, namespace, name)
            if rt.kind == "Job":
                self._job_pods(obj, extra_labels={})
                self._job_started(obj)
            elif rt.kind == "PyTorchJob":
                self._pytorchjob_pods(obj)
            elif rt.kind == "JobSet":
                self._jobset_children(obj, extra_labels={})
            elif rt.kind == "TrainJob":
                self._trainjob_children(obj)
            else:
                raise ValueError(f"no controller for {kind}")
        return self.pod_names_for(kind, name, namespace)

    def _new_pod(
        self,
        ns: str,
        name: str,
        template: dict,
        labels: dict,
        annotations: dict,
        owner: dict,
        hostname: str | None = None,
        subdomain: str | None = None,
    ) -> dict:
        tmeta = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        if hostname:
            spec["hostname"] = hostname
        if subdomain:
            spec["subdomain"] = subdomain
        spec.setdefault("restartPolicy", "Always")
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {**(tmeta.get("labels") or {}), **labels},
                "annotations": {**(tmeta.get("annotations") or {}), **annotations},
                "ownerReferences": [owner_ref(owner)],
            },
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": "BestEffort"},
        }
        if not pod["metadata"]["annotations"]:
            del pod["metadata"]["annotations"]
        return self.store.put(self.rt("Pod"), pod, manager="kube-controller-manager")

    @staticmethod
    def _add_env(spec: dict, env: list[dict], only: str | None = None) -> None:
        for c in spec.get("containers", []) or []:
            if only and c.get("name") != only:
                continue
            have = {e.get("name") for e in c.get("env", []) or []}
            c["env"] = (c.get("env") or []) + [e for e in env if e["name"] not in have]

    def _job_pods(self, job: dict, extra_labels: dict, name_prefix: str | None = None) -> list[dict]:
        spec = job.get("spec") or {}
        md = job["metadata"]
        indexed = spec.get("completionMode") == "Indexed"
        count = spec.get("completions") if indexed else spec.get("parallelism", 1)
        count = 1 if count is None else int(count)
        tmpl = spec.get("template") or {}
        pods = []
        for i in range(count):
            labels = {
                JOB_UID: md["uid"],
                JOB_NAME: md["name"],
                "controller-uid": md["uid"],
                "job-name": md["name"],
                **extra_labels,
            }
            annotations = {}
            t = copy.deepcopy(tmpl)
            if indexed:
                labels[JOB_INDEX] = str(i)
                annotations[JOB_INDEX] = str(i)
                self._add_env(
                    t.setdefault("spec", {}),
                    [
                        {
                            "name": "JOB_COMPLETION_INDEX",
                            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_INDEX}']"}},
                        }
                    ],
                )
            base = f"{md['name']}-{i}" if indexed else md["name"]
            pod_name = f"{base}-{rand_suffix(5, self.rng)}"
            pods.append(
                self._new_pod(
                    md["namespace"],
                    pod_name,
                    t,
                    labels,
                    annotations,
                    job,
                    hostname=base if indexed else None,
                    subdomain=(t.get("spec") or {}).get("subdomain"),
                )
            )
        return pods

    def _job_started(self, job: dict) -> None:
        def fn(o):
            st = o.setdefault("status", {})
            st.setdefault("startTime", iso())
            st["active"] = len(self.pods_for("Job", o["metadata"]["name"], o["metadata"]["namespace"]))
            st.setdefault("ready", 0)
            st.setdefault("terminating", 0)
            st.setdefault("uncountedTerminatedPods", {})

        self.store.mutate(
            self.rt("Job"), job["metadata"]["namespace"], job["metadata"]["name"], fn, manager="kube-controller-manager"
        )

    def _pytorchjob_pods(self, pj: dict) -> None:
        md = pj["metadata"]
        specs = (pj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
        nproc = (pj.get("spec") or {}).get("nprocPerNode", "auto")
        nodes = sum(int((specs.get(r) or {}).get("replicas", 1)) for r in ("Master", "Worker") if r in specs)
        try:
            per = int(nproc)
        except (TypeError, ValueError):
            per = 1
        rank = 0
        for rtype in ("Master", "Worker"):
            if rtype not in specs:
                continue
            rs = specs[rtype] or {}
            port = 23456
            for c in ((rs.get("template") or {}).get("spec") or {}).get("containers", []) or []:
                for p in c.get("ports", []) or []:
                    if p.get("name") == "pytorchjob-port":
                        port = p.get("containerPort", port)
            for i in range(int(rs.get("replicas", 1))):
                name = f"{md['name']}-{rtype.lower()}-{i}"
                labels = {
                    KF_JOB_NAME: md["name"],
                    KF_OPERATOR: "pytorchjob-controller",
                    KF_REPLICA_TYPE: rtype.lower(),
                    KF_REPLICA_INDEX: str(i),
                }
                if rtype == "Master":
                    labels[KF_JOB_ROLE] = "master"
                t = copy.deepcopy(rs.get("template") or {})
                env = [
                    {"name": "MASTER_PORT", "value": str(port)},
                    {"name": "PET_MASTER_PORT", "value": str(port)},
                    {"name": "MASTER_ADDR", "value": f"{md['name']}-master-0"},
                    {"name": "PET_MASTER_ADDR", "value": f"{md['name']}-master-0"},
                    {"name": "WORLD_SIZE", "value": str(nodes * per)},
                    {"name": "RANK", "value": str(rank)},
                    {"name": "PET_NODE_RANK", "value": str(rank)},
                    {"name": "PET_NNODES", "value": str(nodes)},
                    {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
                    {"name": "PYTHONUNBUFFERED", "value": "1"},
                ]
                self._add_env(t.setdefault("spec", {}), env)
                t["spec"].setdefault(
                    "restartPolicy",
                    rs.get("restartPolicy", "Never")
                    if rs.get("restartPolicy") in ("Always", "OnFailure", "Never")
                    else "Never",
                )
                self._new_pod(md["namespace"], name, t, labels, {}, pj)
                self.store.put(
                    self.rt("Service"),
                    {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "metadata": {
                            "name": name,
                            "namespace": md["namespace"],
                            "labels": dict(labels),
                            "ownerReferences": [owner_ref(pj)],
                        },
                        "spec": {
                            "clusterIP": "None",
                            "selector": dict(labels),
                            "ports": [{"name": "pytorchjob-port", "port": port}],
                        },
                    },
                    manager="training-operator",
                )
                rank += 1
        self.set_condition(
            "PyTorchJob",
            md["name"],
            "Created",
            namespace=md["namespace"],
            reason="PyTorchJobCreated",
            message=f"PyTorchJob {md['name']} is created.",
        )

    def _jobset_children(self, js: dict, extra_labels: dict) -> None:
        md = js["metadata"]
        spec = js.get("spec") or {}
        subdomain = (spec.get("network") or {}).get("subdomain") or md["name"]
        self.store.put(
            self.rt("Service"),
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": subdomain,
                    "namespace": md["namespace"],
                    "ownerReferences": [owner_ref(js)],
                    "labels": dict(extra_labels),
                },
                "spec": {"clusterIP": "None", "selector": {JS_NAME: md["name"]}, "publishNotReadyAddresses": True},
            },
            manager="jobset-controller",
        )
        for rj in spec.get("replicatedJobs", []) or []:
            replicas = int(rj.get("replicas", 1))
            for j in range(replicas):
                jt = copy.deepcopy(rj.get("template") or {})
                jspec = jt.setdefault("spec", {})
                jspec.setdefault("completionMode", "Indexed")
                jspec.setdefault("completions", jspec.get("parallelism", 1))
                jspec.setdefault("parallelism", jspec["completions"])
                labels = {
                    JS_NAME: md["name"],
                    JS_RJOB: rj["name"],
                    JS_RJOB_REPLICAS: str(replicas),
                    JS_JOB_INDEX: str(j),
                    JS_RESTART: "0",
                    **extra_labels,
                }
                jmeta = jt.get("metadata") or {}
                job = self.store.put(
                    self.rt("Job"),
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "metadata": {
                            "name": f"{md['name']}-{rj['name']}-{j}",
                            "namespace": md["namespace"],
                            "labels": {**(jmeta.get("labels") or {}), **labels},
                            "annotations": {
                                **(jmeta.get("annotations") or {}),
                                **{k: v for k, v in labels.items() if k.startswith("jobset.sigs.k8s.io/")},
                            },
                            "ownerReferences": [owner_ref(js)],
                        },
                        "spec": jspec,
                    },
                    manager="jobset-controller",
                )
                pod_tmpl = job["spec"].setdefault("template", {})
                pod_tmpl.setdefault("spec", {}).setdefault("subdomain", subdomain)
                pod_tmpl.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
                self._job_pods(job, extra_labels=labels)
                self._job_started(job)

    def _trainjob_children(self, tj: dict) -> None:
        md = tj["metadata"]
        spec = tj.get("spec") or {}
        trainer = spec.get("trainer") or {}
        ref = spec.get("runtimeRef") or {}
        runtime = None
        if ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime" and ref.get("name"):
            runtime = self.store.peek(self.rt("ClusterTrainingRuntime"), None, ref["name"])
        rspec = (runtime or {}).get("spec") or {}
        replicated = copy.deepcopy(
            ((rspec.get("template") or {}).get("spec") or {}).get("replicatedJobs")
            or [
                {
                    "name": "node",
                    "template": {
                        "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch"}]}}}
                    },
                }
            ]
        )
        nodes = int(trainer.get("numNodes") or (rspec.get("mlPolicy") or {}).get("numNodes") or 1)
        nproc = trainer.get("numProcPerNode", "auto")
        for rj in replicated:
            rj["replicas"] = 1
            jspec = rj.setdefault("template", {}).setdefault("spec", {})
            if rj["name"] == "node":
                jspec["completions"] = jspec["parallelism"] = nodes
                pspec = jspec.setdefault("template", {}).setdefault("spec", {})
                for c in pspec.get("containers", []) or []:
                    if c.get("name") != "node":
                        continue
                    for k in ("image", "command", "args"):
                        if trainer.get(k) is not None:
                            c[k] = copy.deepcopy(trainer[k])
                    if trainer.get("resourcesPerNode"):
                        c["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
                    c["env"] = (c.get("env") or []) + copy.deepcopy(trainer.get("env") or [])
                self._add_env(
                    pspec,
                    [
                        {"name": "PET_NNODES", "value": str(nodes)},
                        {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
                        {
                            "name": "PET_NODE_RANK",
                            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{JOB_INDEX}']"}},
                        },
                        {"name": "PET_MASTER_ADDR", "value": f"{md['name']}-node-0-0.{md['name']}"},
                        {"name": "PET_MASTER_PORT", "value": "29500"},
                    ],
                    only="node",
                )
            rj["template"].setdefault("metadata", {}).setdefault("labels", {})[TJ_NAME] = md["name"]
            pt = jspec.setdefault("template", {})
            pt.setdefault("metadata", {}).setdefault("labels", {})[TJ_NAME] = md["name"]
        js = self.store.put(
            self.rt("JobSet"),
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {
                    "name": md["name"],
                    "namespace": md["namespace"],
                    "labels": {TJ_NAME: md["name"]},
                    "ownerReferences": [owner_ref(tj)],
                },
                "spec": {
                    "replicatedJobs": replicated,
                    "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                },
            },
            manager="trainer",
        )
        self._jobset_children(js, extra_labels={TJ_NAME: md["name"]})

    # ------------------------------------------------------------------ kubelet

    def _pod(self, name: str, namespace: str) -> dict:
        return self.store.get(self.rt("Pod"), namespace, name)

    @staticmethod
    def _container_names(pod: dict) -> list[str]:
        return [c["name"] for c in (pod.get("spec") or {}).get("containers", []) or []]

    def _cname(self, pod: dict, container: str | None) -> str:
        names = self._container_names(pod)
        if container is None:
            return names[0]
        if container not in names:
            raise KeyError(f"pod {pod['metadata']['name']} has no container {container}")
        return container

    def _update_container(
        self,
        name: str,
        namespace: str,
        container: str | None,
        fn,
        phase: str | None = None,
        conditions: dict | None = None,
    ) -> dict:
        def mutate(pod):
            c = self._cname(pod, container)
            st = pod.setdefault("status", {})
            statuses = st.setdefault("containerStatuses", [])
            by = {s["name"]: s for s in statuses}
            for spec_c in pod["spec"]["containers"]:
                if spec_c["name"] not in by:
                    s = {
                        "name": spec_c["name"],
                        "image": spec_c.get("image", ""),
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "started": False,
                        "state": {"waiting": {"reason": "ContainerCreating"}},
                        "lastState": {},
                    }
                    statuses.append(s)
                    by[s["name"]] = s
            fn(pod, by[c])
            if phase:
                st["phase"] = phase
            else:
                st["phase"] = self._derive_phase(pod)
            st.setdefault("hostIP", "10.0.0.1")
            if st["phase"] != "Pending":
                st.setdefault("podIP", f"10.244.0.{self.rng.randint(2, 250)}")
                st.setdefault("startTime", iso())
            conds = {c["type"]: c for c in st.get("conditions", [])}
            ready = all(s.get("ready") for s in statuses)
            want = {
                "PodScheduled": "True",
                "Initialized": "True",
                "ContainersReady": "True" if ready else "False",
                "Ready": "True" if ready else "False",
            }
            want.update(conditions or {})
            for t, v in want.items():
                old = conds.get(t)
                if old is None or old["status"] != v:
                    conds[t] = {"type": t, "status": v, "lastProbeTime": None, "lastTransitionTime": iso()}
            st["conditions"] = list(conds.values())

        return self.store.mutate(self.rt("Pod"), namespace, name, mutate, manager="kubelet")

    @staticmethod
    def _derive_phase(pod: dict) -> str:
        statuses = pod["status"].get("containerStatuses", [])
        states = [s["state"] for s in statuses]
        if any("running" in s for s in states):
            return "Running"
        if states and all("terminated" in s for s in states):
            policy = pod["spec"].get("restartPolicy", "Always")
            codes = [s["terminated"].get("exitCode", 0) for s in states]
            if policy == "Always" or (policy == "OnFailure" and any(codes)):
                return "Running"
            return "Succeeded" if not any(codes) else "Failed"
        if any("terminated" in s for s in states):
            return "Running"
        return pod["status"].get("phase", "Pending")

    def start_container(self, pod: str, namespace: str = "default", container: str | None = None) -> dict:
        """Container running (and ready); the pod becomes Running."""

        def fn(p, s):
            s["state"] = {"running": {"startedAt": iso()}}
            s["ready"] = True
            s["started"] = True
            s["containerID"] = f"containerd://{self.rng.getrandbits(128):032x}"
            self.logbook.current(namespace, pod, s["name"])

        return self._update_container(pod, namespace, container, fn)

    def start_pods(self, kind: str, name: str, namespace: str = "default") -> list[str]:
        """Start every container of every pod the object owns."""
        names = []
        for p in self.pods_for(kind, name, namespace):
            for c in self._container_names(p):
                self.start_container(p["metadata"]["name"], namespace, c)
            names.append(p["metadata"]["name"])
        return names

    def terminate_container(
        self,
        pod: str,
        namespace: str = "default",
        container: str | None = None,
        exit_code: int = 0,
        reason: str | None = None,
        message: str | None = None,
    ) -> dict:
        """Container exits. ``reason`` defaults to Completed / Error (use ``OOMKilled`` with 137)."""
        reason = reason or ("Completed" if exit_code == 0 else "Error")

        def fn(p, s):
            started = (s["state"].get("running") or {}).get("startedAt", iso())
            term = {"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": iso()}
            if message:
                term["message"] = message
            if s.get("containerID"):
                term["containerID"] = s["containerID"]
            s["state"] = {"terminated": term}
            s["ready"] = False
            s["started"] = False
            inst = self.logbook.current(namespace, pod, s["name"])
            inst.terminated = True

        return self._update_container(pod, namespace, container, fn)

    def restart_container(
        self,
        pod: str,
        namespace: str = "default",
        container: str | None = None,
        exit_code: int = 1,
        reason: str = "Error",
    ) -> dict:
        """The container died and the kubelet restarted it: restartCount+1, lastState.terminated set,
        the old instance's logs become ``previous``, a new (empty) instance runs."""

        def fn(p, s):
            started = (s["state"].get("running") or {}).get("startedAt", iso())
            s["lastState"] = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": started,
                    "finishedAt": iso(),
                    "containerID": s.get("containerID", ""),
                }
            }
            s["restartCount"] = s.get("restartCount", 0) + 1
            s["containerID"] = f"containerd://{self.rng.getrandbits(128):032x}"
            s["state"] = {"running": {"startedAt": iso()}}
            s["ready"] = True
            s["started"] = True
            self.logbook.new_instance(namespace, pod, s["name"])

        return self._update_container(pod, namespace, container, fn)

    def set_container_waiting(
        self,
        pod: str,
        namespace: str = "default",
        container: str | None = None,
        reason: str = "ImagePullBackOff",
        message: str | None = None,
    ) -> dict:
        def fn(p, s):
            msg = message
            if msg is None and WAITING_MESSAGES.get(reason):
                msg = WAITING_MESSAGES[reason].format(image=s.get("image", ""))
            s["state"] = {"waiting": {"reason": reason, **({"message": msg} if msg else {})}}
            s["ready"] = False
            s["started"] = False

        out = self._update_container(pod, namespace, container, fn, phase="Pending")
        if reason in ("ImagePullBackOff", "ErrImagePull"):
            image = next((s["image"] for s in out["status"]["containerStatuses"]), "")
            self.emit_event(
                "Pod",
                pod,
                namespace=namespace,
                reason="Failed",
                type="Warning",
                component="kubelet",
                message=f'Failed to pull image "{image}": rpc error: code = NotFound',
            )
        return out

    def set_pod_phase(
        self, pod: str, phase: str, namespace: str = "default", reason: str | None = None, message: str | None = None
    ) -> dict:
        def fn(p):
            p.setdefault("status", {})["phase"] = phase
            for k, v in (("reason", reason), ("message", message)):
                if v is not None:
                    p["status"][k] = v

        return self.store.mutate(self.rt("Pod"), namespace, pod, fn, manager="kubelet")

    def mark_unschedulable(
        self,
        pod: str,
        namespace: str = "default",
        message: str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. "
        "preemption: 0/3 nodes are available: 3 No preemption victims "
        "found for incoming pod.",
    ) -> dict:
        """What the scheduler does: PodScheduled=False/Unschedulable plus a FailedScheduling event."""

        def fn(p):
            st = p.setdefault("status", {})
            st["phase"] = "Pending"
            st["conditions"] = [c for c in st.get("conditions", []) if c["type"] != "PodScheduled"] + [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": iso(),
                }
            ]

        out = self.store.mutate(self.rt("Pod"), namespace, pod, fn, manager="default-scheduler")
        self.emit_event(
            "Pod",
            pod,
            namespace=namespace,
            reason="FailedScheduling",
            message=message,
            type="Warning",
            component="default-scheduler",
        )
        return out

    def append_log(self, pod: str, *lines: str, namespace: str = "default", container: str | None = None) -> None:
        """Add lines to the current instance of a container's log (followers get them at once)."""
        with self.store.cond:
            p = self._pod(pod, namespace)
            c = self._cname(p, container)
            inst = self.logbook.current(namespace, pod, c)
            for text in lines:
                for part in str(text).split("\n"):
                    inst.lines.append((now(), part))
            self.store.cond.notify_all()

    def delete_pod(self, pod: str, namespace: str = "default") -> None:
        """The pod goes away (evicted, preempted, or deleted by a controller)."""
        self.store.delete(self.rt("Pod"), namespace, pod, "Background")

    # ------------------------------------------------------------------ events & conditions

    def emit_event(
        self,
        kind: str,
        name: str,
        *,
        namespace: str = "default",
        reason: str,
        message: str,
        type: str = "Warning",
        component: str = "default-scheduler",
    ) -> dict:
        rt = self.rt(kind)
        target = self.store.peek(rt, namespace, name) or {"metadata": {"name": name, "uid": ""}}
        t = iso()
        ev = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{self.rng.getrandbits(64):016x}", "namespace": namespace},
            "involvedObject": {
                "kind": rt.kind,
                "namespace": namespace,
                "name": name,
                "uid": target["metadata"].get("uid", ""),
                "apiVersion": rt.api_version,
                "resourceVersion": target["metadata"].get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": type,
            "source": {"component": component},
            "firstTimestamp": t,
            "lastTimestamp": t,
            "count": 1,
            "reportingComponent": component,
            "reportingInstance": "",
        }
        return self.store.put(self.rt("Event"), ev, manager=component)

    def set_condition(
        self,
        kind: str,
        name: str,
        type: str,
        namespace: str = "default",
        status: str = "True",
        reason: str = "",
        message: str = "",
    ) -> dict:
        """Add or update one ``status.conditions[]`` entry (via the status subresource)."""
        rt = self.rt(kind)

        def fn(o):
            st = o.setdefault("status", {}) or {}
            o["status"] = st
            conds = st.setdefault("conditions", [])
            t = iso()
            cond = {"type": type, "status": status, "reason": reason, "message": message, "lastTransitionTime": t}
            if rt.kind in ("Job", "PyTorchJob"):
                cond["lastProbeTime" if rt.kind == "Job" else "lastUpdateTime"] = t
            for i, c in enumerate(conds):
                if c.get("type") == type:
                    conds[i] = cond
                    break
            else:
                conds.append(cond)

        return self.store.mutate(rt, namespace, name, fn, manager=self._controller_name(rt))

    @staticmethod
    def _controller_name(rt: ResourceType) -> str:
        return {
            "Job": "kube-controller-manager",
            "PyTorchJob": "training-operator",
            "JobSet": "jobset-controller",
            "TrainJob": "trainer",
        }.get(rt.kind, "kube-controller-manager")

    def finish(
        self,
        kind: str,
        name: str,
        namespace: str = "default",
        succeeded: bool = True,
        reason: str | None = None,
        message: str | None = None,
    ) -> dict:
        """Mark a job finished with the engine's own condition types:
        Job Complete/Failed (after SuccessCriteriaMet/FailureTarget), PyTorchJob Succeeded/Failed,
        JobSet Completed/Failed, TrainJob Complete/Failed."""
        rt = self.rt(kind)
        ok, bad = FINISH_CONDITIONS[rt.kind]
        if rt.kind == "Job":
            pre = "SuccessCriteriaMet" if succeeded else "FailureTarget"
            self.set_condition(
                kind,
                name,
                pre,
                namespace,
                reason=reason or ("CompletionsReached" if succeeded else "BackoffLimitExceeded"),
                message=message
                or (
                    "Reached expected number of succeeded pods"
                    if succeeded
                    else "Job has reached the specified backoff limit"
                ),
            )
        default_reason = {
            ("Job", True): "CompletionsReached",
            ("Job", False): "BackoffLimitExceeded",
            ("PyTorchJob", True): "PyTorchJobSucceeded",
            ("PyTorchJob", False): "PyTorchJobFailed",
            ("JobSet", True): "AllJobsCompleted",
            ("JobSet", False): "FailedJobs",
            ("TrainJob", True): "JobsCompleted",
            ("TrainJob", False): "JobsFailed",
        }[(rt.kind, succeeded)]
        default_msg = f"{rt.kind} {name} " + ("successfully completed." if succeeded else "has failed.")
        out = self.set_condition(
            kind,
            name,
            ok if succeeded else bad,
            namespace,
            reason=reason or default_reason,
            message=message or default_msg,
        )
        if rt.kind == "Job":

            def fn(o):
                st = o["status"]
                st["active"] = 0
                st["completionTime" if succeeded else "failedTime"] = iso()
                if not succeeded:
                    st.pop("failedTime", None)

            out = self.store.mutate(rt, namespace, name, fn, manager="kube-controller-manager")
        return out

    def set_status(self, kind: str, name: str, status: dict, namespace: str = "default") -> dict:
        """Replace ``.status`` wholesale (as a controller's status update would)."""
        rt = self.rt(kind)

        def fn(o):
            o["status"] = copy.deepcopy(status)

        return self.store.mutate(rt, namespace, name, fn, manager=self._controller_name(rt))


__all__ = ["FINISH_CONDITIONS", "Scenario", "owner_ref"]
