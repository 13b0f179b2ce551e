"""The protocols a backend's ``servers`` names, as values (what its clients speak: ``redis``, ...).

Only the values live here, with no behaviour: a default, a CSV column's value, a legacy row's value,
a per-protocol schedule in the experiment catalogue. Which kind of server serves a protocol, and
everything its servers can do, is the kind's (infra/kinds.py, which exports these names too); the
pure layers (scenario, analysis) that cannot import infra take them from here. The kind named for a
protocol has its name (``--server redis``).
"""

REDIS_PROTOCOL = "redis"
ETCD_PROTOCOL = "etcd"
POSTGRES_PROTOCOL = "postgres"
ZOOKEEPER_PROTOCOL = "zookeeper"
