"""ZooKeeper: a standalone server or an ensemble, the kazoo client, the sessions it ends, and the kind."""
