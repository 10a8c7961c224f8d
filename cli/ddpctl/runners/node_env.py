"""The environment each node of `ddpctl run` gets: its pod's, as in the cluster.

`cluster_env` is the literal env of a replica's training container (the spec's env plus what the
target's engine injects); `loopback_env` points the rank-0 address at this machine for local runs;
`inherited_env` is the shell's env without torch.distributed wiring. Used by `run --local` and
`run --docker` alike. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping

from ddpctl.plan import Plan

# Variables that wire torch.distributed: never inherited from the shell that runs ddpctl.
_WIRING_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "JOB_COMPLETION_INDEX",
)
_WIRING_PREFIXES = ("PET_", "TORCHELASTIC_")

LOOPBACK = "127.0.0.1"


def cluster_env(plan: Plan, index: int) -> dict[str, str]:
    """The literal env of node `index`'s training container in the cluster: its group's env from
    the plan plus what the target's engine injects (see the engine modules in ddpctl.engines), and
    the downward API's fields resolved as this machine would give them (`downward_values`).
    Secrets are not included."""
    env = plan.node_env(plan.nodes[index])
    fields = downward_values(plan, index)
    env.update({name: fields[path] for name, path in plan.downward_env.items() if path in fields})
    return dict(sorted(env.items()))


def downward_values(plan: Plan, index: int) -> dict[str, str]:
    """The downward API fields the pods read, for node `index` run here: its pod's name is its
    hostname in the cluster, and every node runs on this machine (so the preflight takes the ranks
    of all of them for ranks that share CPU cores, as they do)."""
    import socket

    return {"metadata.name": plan.pod_hostnames[index], "spec.nodeName": socket.gethostname()}


def loopback_env(env: Mapping[str, str], plan: Plan, index: int, host: str, port: int) -> dict[str, str]:
    """`env` with the rank-0 address and port replaced by `host:port` (loopback for local runs)."""
    out = dict(env)
    for key in ("PET_MASTER_ADDR", "MASTER_ADDR"):
        if out.get(key) == plan.rank0_host:
            out[key] = host
    for key in ("PET_MASTER_PORT", "MASTER_PORT"):
        if key in out:
            out[key] = str(port)
    if "PET_RDZV_ENDPOINT" in out:
        out["PET_RDZV_ENDPOINT"] = f"{host}:{port}"
        # Every agent here would take 127.0.0.1 for its own address and try to host the store:
        # say which one does, as the first pod does in the cluster.
        conf = [c for c in out.get("PET_RDZV_CONF", "").split(",") if c and not c.startswith("is_host=")]
        conf.append(f"is_host={'true' if index == 0 else 'false'}")
        out["PET_RDZV_CONF"] = ",".join(conf)
    return out


def start_env(env: Mapping[str, str], port: int, run_id: str) -> dict[str, str]:
    """A node's env for one start of the group on this machine: the rendezvous port chosen for this
    start (`loopback_env` put one there) and the rendezvous id `run_id`, so that an agent that
    reaches another job's store (a port reused by another run on the machine) cannot join it:
    torchrun keys its rendezvous under the id (torchrun's own default, `none`, is the same for all)."""
    out = dict(env)
    for key in ("PET_MASTER_PORT", "MASTER_PORT"):
        if key in out:
            out[key] = str(port)
    if "PET_RDZV_ENDPOINT" in out:
        host = out["PET_RDZV_ENDPOINT"].rsplit(":", 1)[0]
        out["PET_RDZV_ENDPOINT"] = f"{host}:{port}"
    out["PET_RDZV_ID"] = run_id
    return out


def loopback_ifname() -> str | None:
    try:
        import socket

        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return None
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return None


def inherited_env(parent: Mapping[str, str]) -> dict[str, str]:
    """The shell's env minus torch.distributed wiring (a ddpctl started inside torchrun must not
    leak its RANK/PET_* into the job)."""
    return {k: v for k, v in parent.items() if k not in _WIRING_VARS and not k.startswith(_WIRING_PREFIXES)}
