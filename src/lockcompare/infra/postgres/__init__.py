"""PostgreSQL: embedded servers, the libpq client, streaming replication, the sessions it ends, and the kind."""
