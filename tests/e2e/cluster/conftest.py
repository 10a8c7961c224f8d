"""The real test cluster's fixtures (tests/support/cluster.py) and the images its real node runs
(tests/support/node_images.py), for the tests in this folder."""

from collections.abc import Generator

import pytest

from tests.support.cluster import kube, local_volume, namespace, real_cluster, restricted, snapshot  # noqa: F401
from tests.support.node_images import node_image, node_images  # noqa: F401 - fixtures, found by name


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report carries the cluster's state at the failure (`snapshot`)."""
    report = yield
    if report.failed and report.when in ("setup", "call"):
        report.sections.append(("real cluster at the failure", snapshot()))
    return report
