"""pytest fixtures for the CLI tests that talk to the double (import them into a test module)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .scripted import ScriptedDouble, install_runtime


@dataclass
class KubeCluster:
    double: ScriptedDouble
    kubeconfig: Path
    extra: list[Any] = field(default_factory=list)

    @property
    def args(self) -> list[str]:
        return ["--kubeconfig", str(self.kubeconfig)]


@pytest.fixture
def isolated_kube(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No kubeconfig or cluster of the machine leaks in; the connect retry is short."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    from ddpctl.cluster import config as kconfig

    monkeypatch.setattr(kconfig, "RETRY_BACKOFF", 0.01)
    monkeypatch.setattr(kconfig, "CONNECT_TIMEOUT", 2.0)
    monkeypatch.setattr(kconfig, "SERVICE_ACCOUNT_DIR", tmp_path / "no-service-account")


@pytest.fixture
def make_cluster(isolated_kube: None, tmp_path: Path) -> Iterator[Any]:
    """make_cluster(engines=(...), runtime=True, namespaces=(...), context_namespace="default", **double_kw)"""
    made: list[ScriptedDouble] = []

    def make(
        engines: tuple[str, ...] = (),
        *,
        runtime: bool = False,
        namespaces: tuple[str, ...] = ("default", "team"),
        context_namespace: str = "default",
        name: str = "kubeconfig",
        **kw: Any,
    ) -> KubeCluster:
        d = ScriptedDouble(engines=engines, namespaces=namespaces, seed=len(made) + 1, **kw).start()
        made.append(d)
        if runtime:
            install_runtime(d)
        path = d.write_kubeconfig(tmp_path / f"{name}-{len(made)}", context="double", namespace=context_namespace)
        return KubeCluster(d, path)

    yield make
    for d in made:
        d.stop()


__all__ = ["KubeCluster", "isolated_kube", "make_cluster"]
