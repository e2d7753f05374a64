"""Former home of the CLI helpers; kept so existing imports keep working.

The helpers moved to modules named for what they are: :func:`print_update` to
:mod:`algenta_graph.console`, :func:`read_records` and :func:`format_records` to
:mod:`algenta_graph.audit`; the subcommands to :mod:`algenta_graph.commands`. Import from
there: this module goes away once nothing imports it.
"""

from __future__ import annotations

from algenta_graph.audit import format_records, read_records
from algenta_graph.console import print_update

__all__ = ["format_records", "print_update", "read_records"]
