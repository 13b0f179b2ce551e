"""Redis-protocol servers (redis-server, valkey-server): the process, the client, the clock
check, the failover pair, and the kind."""
