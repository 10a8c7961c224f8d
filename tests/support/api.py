"""What the cluster-command tests against the API server double share: names and error checks."""

from __future__ import annotations

NS = "team"
NAME = "ddp-train"


def one_error(r, code: int, *needles: str) -> str:
    """The command failed with `code` and exactly one `ddpctl: error:` line, no traceback."""
    assert r.code == code, (r.code, r.out, r.err)
    assert "Traceback" not in r.err + r.out
    errors = [line for line in r.err.splitlines() if line.startswith("ddpctl: error: ")]
    assert len(errors) == 1, r.err
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def objects_left(d, ns: str = NS) -> list[str]:
    kinds = ["Job", "Service", "Pod", "Secret"] + [
        k
        for k, e in (("PyTorchJob", "pytorchjob"), ("JobSet", "jobset"), ("TrainJob", "trainjob"))
        if e in d.registry.installed
    ]
    return [f"{k}/{o['metadata']['name']}" for k in kinds for o in d.objects(k, ns)]
