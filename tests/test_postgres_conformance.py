"""The shipped conformance battery passes for ``pg-lease`` on a real PostgreSQL, through the pytest
plugin exactly as a plug-in author uses it: the plugin starts a PostgreSQL server for a backend that
declares ``servers = "postgres"`` and crashes servers of a private cluster for the quorum property.
(``pg-advisory``'s NOT CLAIMED TTL properties are checked in test_postgres.py.)
"""

from __future__ import annotations

import pytest

from lockcompare.errors import BackendNotViableError

try:
    from lockcompare.infra.postgres.server import find_postgres_bin

    find_postgres_bin()
    import psycopg  # noqa: F401 - the client the backends need
except (BackendNotViableError, ImportError) as exc:
    pytest.skip(f"PostgreSQL not installed: {exc}", allow_module_level=True)

from lockcompare.testing import BackendContract


class TestPgLeaseContract(BackendContract):
    backend_name = "lockcompare.backends.pg_lease:PgLeaseLock"
