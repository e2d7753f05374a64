"""``python -m algenta_graph.cli``: the ``algenta-graph`` command."""

import sys

from algenta_graph.cli import main

sys.exit(main())
