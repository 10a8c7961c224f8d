"""A command resolves its spec once: ddp.yaml and the DDPCTL_* environment are read once, and the
engine derives one plan, however many times the command asks for the spec (a target, an image, what
the user chose). Counted in-process by wrapping the readers and `Engine.plan`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SPEC = "name: counted\nnodes: 2\nprocsPerNode: 2\nscript: train.py\nworkspace:\n  dir: .\nrendezvous:\n  port: 29511\n"


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Counter[str]:
    from ddpctl.engines.base import Engine
    from ddpctl.spec import sources

    (tmp_path / "ddp.yaml").write_text(SPEC)
    (tmp_path / "train.py").write_text("print('train')\n")
    seen: Counter[str] = Counter()

    def counted(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(sources, "layer_from_file", counted("file", sources.layer_from_file))
    monkeypatch.setattr(sources, "layer_from_env", counted("env", sources.layer_from_env))
    monkeypatch.setattr(Engine, "plan", counted("plan", Engine.plan))
    return seen


@pytest.mark.parametrize(
    "args",
    [
        ("render",),
        ("render", "-t", "jobset"),
        ("submit", "--dry-run=client"),
        ("submit", "--dry-run=client", "--target", "auto"),
        ("submit", "--dry-run=client", "-o", "yaml", "--image", "example.com/me/t:1"),
        ("run", "--local", "--dry-run"),
        ("init", "--force"),
    ],
    ids=" ".join,
)
def test_a_command_reads_its_spec_once_and_plans_once(cli, counts: Counter[str], args: tuple[str, ...]) -> None:
    r = cli(*args)
    assert r.code == 0, r.err
    assert counts == Counter(file=1, env=1, plan=1), r.err  # init plans the spec it writes: its target must run it


@pytest.mark.parametrize(
    ("extra", "context_namespace", "plans"),
    [
        ((), "default", 1),  # the context's namespace is the spec's default: the plan made before contact goes
        (("--target", "auto"), "default", 1),  # job: the engine the check before contact planned for
        ((), "team", 2),  # another namespace: names and addresses change, so the plan is made again
        (("-n", "team"), "default", 1),  # chosen: known before contact
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else str(v),
)
def test_submit_reads_once_and_plans_again_only_for_what_the_cluster_changed(
    cli, make_cluster, counts: Counter[str], extra: tuple[str, ...], context_namespace: str, plans: int
) -> None:
    c = make_cluster(context_namespace=context_namespace)
    r = cli("submit", *c.args, *extra)
    assert r.code == 0, r.err
    assert "created" in r.out
    assert counts == Counter(file=1, env=1, plan=plans), r.err


@pytest.mark.parametrize("command", [("status",), ("logs",), ("delete", "--ignore-not-found"), ("list",)], ids=" ".join)
def test_a_command_on_a_job_by_name_reads_the_spec_once(
    cli, make_cluster, counts: Counter[str], command: tuple[str, ...]
) -> None:
    """No NAME: the job's name and namespace are ddp.yaml's, read once for both."""
    c = make_cluster(namespaces=("default", "team"))
    cli(*command, *c.args, "--on", "cluster")
    assert counts == Counter(file=1, env=1)
