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

#: The protocol of a backend that names none (its traits' ``servers`` default), the resource's
#: default home, and what a row written before a protocol column recorded.
DEFAULT_PROTOCOL = REDIS_PROTOCOL

#: The protocol whose kind ``--server`` chooses (several kinds speak it: redis, valkey, plug-ins)
#: and whose binary ``--redis-server`` gives; a trial that starts no server of it records the
#: neutral ``server``.
SERVER_OPTION_PROTOCOL = REDIS_PROTOCOL

#: Where the resource can live (``--resource-kind``'s choices besides "auto"): the protocols of the
#: installed resources (entry-point group ``lockcompare.resources``; tests/test_routes.py holds the two
#: equal), here as values for the pure settings table, which cannot load the registry.
RESOURCE_PROTOCOLS = (REDIS_PROTOCOL, POSTGRES_PROTOCOL)
