"""Shared fixtures: the CLI run in-process, the golden-file flag, CI strictness."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO as REPO
from tests.support import skip_unless as skip_unless

# The API double's fixtures (make_cluster, isolated_kube) for every test module that asks for them.
pytest_plugins = ["tests.support.kube_api_double.fixtures"]


# Fixtures that build or run containers: a test using one is a `docker` test even if its marker is
# forgotten, so `make test-fast` (-m "not docker") never waits for an image build.
DOCKER_FIXTURES = frozenset({"trainer_image", "docker_job", "node_images"})


# `make test` runs on two workers (pytest-xdist): a module is one unit of work, so its module-scoped
# fixtures (an image, a shared run) are set up once; the real-cluster package is one unit too, so its
# cluster and node images are started and loaded once, on one worker, while the other runs the rest.
CLUSTER_PACKAGE = "tests/e2e/cluster/"


def unit_of_work(nodeid: str) -> str:
    """The unit of work a test belongs to: its module, or the whole real-cluster package."""
    return CLUSTER_PACKAGE if nodeid.startswith(CLUSTER_PACKAGE) else nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduler with our units, whichever load mode is asked for: two workers must not
    both start the cluster (xdist's `loadgroup` cannot tag a node id on pytest 9). Not for `each`."""
    if config.getvalue("dist") == "each":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of_work(nodeid)

    return ByUnit(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.docker)
        if "real_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="Rewrite tests/contract/golden/* from the current renderer.",
    )


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Run `ddpctl ARGS` in-process (fresh cwd, no DDPCTL_* env) and return code, stdout, stderr."""
    from ddpctl.app import main

    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.startswith("DDPCTL_"):
            monkeypatch.delenv(key)

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
