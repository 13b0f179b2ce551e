"""etcd: the members of one cluster, the v3 JSON client, and the kind."""
