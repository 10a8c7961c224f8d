"""The real test cluster's fixtures (tests/support/cluster.py) and the images its real node runs
(tests/support/node_images.py), for the tests in this folder."""

from tests.support.cluster import kube, local_volume, namespace, real_cluster, restricted  # noqa: F401 - fixtures
from tests.support.node_images import node_image, node_images  # noqa: F401 - fixtures, found by name
