"""A spawned child's report of what it imported before its target ran (tests/test_spawn_cost.py)."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection


def report_imports(conn: Connection) -> None:
    conn.send(sorted(name for name in sys.modules if name.startswith("lockcompare.cli")))
    conn.close()
