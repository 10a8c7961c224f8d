"""What the cluster tests share: every cluster command (a fixture that runs a test once each), and a
job submitted to the API server double with a Cluster connected to it."""

from __future__ import annotations

import pytest

from tests.support.api import NAME, NS

COMMANDS = {
    "submit": ["submit", "--target", "job"],
    "status": ["status", NAME],
    "logs": ["logs", NAME],
    "list": ["list"],
    "delete": ["delete", NAME],
}


@pytest.fixture(params=sorted(COMMANDS))
def command(request):
    return COMMANDS[request.param]


@pytest.fixture
def submitted(cli, make_cluster):
    """submitted(*flags, engines=()) -> (the double, a Cluster connected to it): job NAME submitted
    with `ddpctl submit -n NS FLAGS` to an API server double, for the modules that read it back."""
    from ddpctl.cluster.config import ClusterOptions, connect

    clusters = []

    def make(*flags: str, engines: tuple[str, ...] = ()):
        c = make_cluster(engines)
        result = cli("submit", *c.args, "-n", NS, *flags)
        assert result.code == 0, result.err
        cluster = connect(ClusterOptions(str(c.kubeconfig), namespace=NS), lambda text: None)
        clusters.append(cluster)
        return c.double, cluster

    yield make
    for cluster in clusters:
        cluster.close()
