"""A test double of kube-apiserver, over real HTTP, for driving the official ``kubernetes`` client.

THIS IS A TEST DOUBLE, NOT KUBERNETES. It runs in the test process on ``127.0.0.1:<ephemeral port>``
(plain HTTP, bearer-token auth) and answers the REST API the way kube-apiserver 1.33 does for the
resources ddpctl uses, so that ``ddpctl submit/status/logs/list/delete`` can be tested end to end
with the real client library, its serialisation and its error handling.

Implemented faithfully (shapes checked against the apiserver's and the client's models):

* discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis`` (only installed groups), ``/apis/<g>``,
  ``/apis/<g>/<v>`` (APIResourceList with ``name``, ``singularName``, ``namespaced``, ``kind``,
  ``verbs``, ``shortNames``, subresources); an unknown group, version or resource gives the 404 Status
  "the server could not find the requested resource" (how a missing CRD looks).
* resources: namespaced ``pods`` (+``/status``, ``/log``), ``services``, ``configmaps``, ``events``,
  ``jobs.batch``, ``pytorchjobs.kubeflow.org``, ``jobsets.jobset.x-k8s.io``,
  ``trainjobs.trainer.kubeflow.org``; cluster-scoped ``namespaces``, ``clustertrainingruntimes``.
* verbs get, list (``labelSelector`` with ``=``, ``==``, ``!=``, ``in``, ``notin``, exists, ``!``;
  ``fieldSelector`` with the field labels kube supports per resource; ``limit``/``continue``), watch,
  create (incl. ``generateName``), update (PUT; resourceVersion precondition -> 409 Conflict; custom
  resources require it), patch (server-side apply, merge patch, strategic merge patch for built-ins as
  a merge patch, JSON patch), delete (``propagationPolicy`` Foreground/Background/Orphan from a
  DeleteOptions body or the query; batch/v1 Jobs default to Orphan like the real API; dependents
  found through ``ownerReferences``, transitively).
* metadata: ``uid``, a global increasing ``resourceVersion``, ``creationTimestamp``, ``generation``
  (bumped on spec changes), ``managedFields`` per manager (FieldsV1), ``status`` kept apart: writes to
  the main resource ignore status and ``/status`` writes touch only status.
* server-side apply: ``application/apply-patch+yaml``, ``fieldManager`` required (422 like kube),
  ``force``; create if absent (201), merge otherwise; a field owned by another manager and changed
  without force -> 409 Conflict with ``FieldManagerConflict`` causes and kube's message; fields a
  manager stops applying are removed when nobody else owns them; re-applying the same config is a
  no-op (same resourceVersion).
* ``dryRun=All`` on create/apply/update/patch/delete: validated, answered, nothing stored.
* Status bodies (``kind: Status``) for 400, 401, 403 (kube's "... is forbidden: User ... cannot ..."),
  404 (object, namespace, resource), 405, 409 (AlreadyExists, Conflict), 410 (Expired watch), 415,
  422 (Invalid, ``details.causes[].field`` paths like ``spec.template.spec.containers[0].image``).
* validation of every object written through the API: name rules (DNS-1123 subdomain; DNS-1035
  label of <= 63 chars for Services; <= 63 chars for Jobs) plus schemas: core kinds against the
  Kubernetes 1.33 OpenAPI schemas of ``kubernetes-validate`` (strict), custom kinds against the
  CRDs' ``openAPIV3Schema`` in ``tests/contract/schemas/crds`` (see :mod:`.validation`; the render tests'
  ``tests/support/k8s_schemas.validate_object`` is used instead when it exists).
* watch: ``?watch=true`` streams ``{"type": ..., "object": ...}`` lines (chunked); without
  ``resourceVersion`` (or with ``"0"``) it starts with synthetic ADDED events for what exists; with one
  it replays every change after it; label/field selectors turn transitions into ADDED/DELETED; a
  compacted resourceVersion gets an ERROR event with a 410 Expired Status; ``timeoutSeconds`` ends it.
* pod logs: ``container`` (required when a pod has several), ``follow`` (streams until that container
  instance terminates, the pod goes away or the server stops), ``tailLines``, ``previous``,
  ``timestamps``, ``limitBytes``, ``sinceTime`` (at whole seconds, as kube-apiserver passes it on to the
  kubelet); kube's 400 messages for a waiting container or a missing previous one (``sinceSeconds`` is
  accepted and ignored). ``ScriptedDouble.drop_log_streams`` ends the follow streams of a container that
  keeps running (a connection the apiserver, the kubelet or a proxy closed).

Simplified, on purpose:

* one process, no persistence, no TLS, one user per token; authorization is a deny list / hook.
* field ownership treats lists as atomic (the real one merges keyed lists such as ``containers`` by
  key); fieldsV1 of lists therefore read ``"f:containers": {}``.
* defaulting only where a client can notice: Job selector/labels/backoffLimit/completionMode/
  parallelism, Service clusterIP/type/ports, Namespace phase. Custom resources get no defaults and
  CRD CEL rules (``x-kubernetes-validations``) are not evaluated.
* unknown fields are rejected with 422 Invalid ("field not declared in schema"), stricter than a
  real cluster's default (``fieldValidation=Warn`` drops them with a warning; ``Strict`` answers 400).
* deletion is immediate (no graceful pod termination, no finalizers other than the transient
  ``foregroundDeletion`` marker that Foreground deletion shows in a MODIFIED event); deleting a
  namespace deletes its contents at once.
* controllers are test-driven (see :class:`Scenario` methods on the double): creating a Job,
  PyTorchJob, JobSet or TrainJob creates the children and pods the engine would (names, labels,
  ownerReferences, env) when ``auto_pods`` is on, but nothing runs: tests move pods and jobs through
  their states with ``start_container``, ``terminate_container``, ``restart_container``,
  ``set_container_waiting``, ``mark_unschedulable``, ``append_log``, ``finish`` and so on.
* no aggregated discovery (the v2 APIGroupDiscoveryList); the python client uses the plain forms.
* watches send no BOOKMARK events (allowed: bookmarks are optional for a server).

Usage::

    from kubernetes import client, config
    from tests.support.kube_api_double import KubeApiDouble

    with KubeApiDouble(engines=("pytorchjob",), namespaces=("default", "team")) as kube:
        kc = kube.write_kubeconfig(tmp_path / "kubeconfig", context="double", namespace="team")
        api = config.new_client_from_config(config_file=str(kc), context="double")
        ...  # run ddpctl / the client against kube.url
        [master, *workers] = kube.pod_names_for("PyTorchJob", "pj", "team")
        kube.start_pods("PyTorchJob", "pj", "team")
        kube.append_log(master, "epoch 1 loss 0.3", namespace="team")
        kube.terminate_container(workers[0], "team", exit_code=137, reason="OOMKilled")
        kube.finish("PyTorchJob", "pj", "team", succeeded=False)
        assert kube.requests_to("PATCH")[0].param("fieldManager") == "ddpctl"

Note for clients: ``DynamicClient`` caches discovery in ``$TMPDIR/osrcp-<md5(url)>.json``; as ports are
reused between tests, give it ``cache_file=`` (or a per-test TMPDIR).
"""

from .controller import FINISH_CONDITIONS, Scenario
from .server import KubeApiDouble, RecordedRequest
from .status import KubeError
from .validation import FieldError, default_crd_dir, resolve_default_validator, validate_object

__all__ = [
    "FINISH_CONDITIONS",
    "FieldError",
    "KubeApiDouble",
    "KubeError",
    "RecordedRequest",
    "Scenario",
    "default_crd_dir",
    "resolve_default_validator",
    "validate_object",
]
