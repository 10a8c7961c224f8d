"""The real test cluster's fixtures (tests/support/cluster.py) and the images its real node runs
(tests/support/node_images.py), for the tests in this folder."""

from tests.support.cluster import kube, namespace, real_cluster  # noqa: F401 - fixtures, found by name
from tests.support.node_images import node_images  # noqa: F401 - a fixture, found by name
