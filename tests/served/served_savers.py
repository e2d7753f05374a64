"""Custom checkpointers a served test's ``langgraph.json`` names (``checkpointer.path``).

The ``langgraph dev`` subprocess imports this module (its directory on the server's
``PYTHONPATH``): a saver of a class the project does not know, a subclass of
``AsyncSqliteSaver`` on the SQLite file ``SERVED_SAVER_DB`` names.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver


class SubclassSaver(AsyncSqliteSaver):
    """A subclass of a saver the project knows: its class says nothing of where it keeps state."""


@contextlib.asynccontextmanager
async def subclass_checkpointer() -> AsyncIterator[SubclassSaver]:
    """The server's checkpointer: a :class:`SubclassSaver` on ``SERVED_SAVER_DB``."""
    import aiosqlite

    async with aiosqlite.connect(os.environ["SERVED_SAVER_DB"]) as conn:
        saver = SubclassSaver(conn)
        await saver.setup()
        yield saver
