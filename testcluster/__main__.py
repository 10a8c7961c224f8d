"""`python -m testcluster COMMAND`, from the clone's root: the test cluster's one entry point."""

import sys

from testcluster.cli import main

sys.exit(main())
