"""`python -m cluster COMMAND`, from the clone's root: the test cluster's one entry point."""

import sys

from cluster.cli import main

sys.exit(main())
