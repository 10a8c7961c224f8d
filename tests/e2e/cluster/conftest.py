"""The real test cluster's fixtures (tests/support/cluster.py) for the tests in this folder."""

from tests.support.cluster import kube, namespace, real_cluster  # noqa: F401 - fixtures, found by name
