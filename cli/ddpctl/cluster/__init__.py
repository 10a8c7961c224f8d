"""Talking to a Kubernetes cluster: the logic under `ddpctl submit/status/logs/list/delete`.

The command modules in `ddpctl.commands` are thin Typer layers over these modules:

* `config`     -- kubeconfig (KUBECONFIG, --kubeconfig), --context, namespace, in-cluster config,
                  a short connect retry, and `Cluster`, the one place requests are made.
* `errors`     -- the client's exceptions and Status bodies as one-line ddpctl errors.
* `kinds`      -- the four workload kinds (and Service, Pod, ...): paths, ranks of pods.
* `discovery`  -- which engines the cluster serves; `--target auto`.
* `apply`      -- server-side apply of a job's objects with rollback; find, list, delete jobs.
* `watch`      -- live state of a job (list + watch), status lines, why a job failed or stalls.
* `logs`       -- logs of every rank, prefixed, followed across container restarts.

Nothing here imports `kubernetes` at module level: only the functions that talk to a cluster do,
so `ddpctl --help` and `ddpctl render` stay light.
"""
