"""The protocols a backend's ``servers`` names, as values (what its clients speak: ``redis``, ...).

Only the values live here, with no behaviour: a default, a CSV column's value, a legacy row's value,
a per-protocol schedule in the experiment catalogue. Which kind of server serves a protocol, and
everything its servers can do, is the kind's (infra/kinds.py, which exports these names too); the
pure layers (scenario, analysis) that cannot import infra take them from here. The kind named for a
protocol has its name (``--server redis``). The one thing read here is which protocols the installed
resources live on: the names of their entry points, nothing loaded (:func:`resource_protocols`).
"""

from importlib.metadata import entry_points

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

#: The entry-point group the resources are declared under, by the protocol of the server they live
#: on (pyproject.toml; runner/resource.py loads them).
RESOURCE_ENTRY_POINT_GROUP = "lockcompare.resources"


def resource_protocols() -> tuple[str, ...]:
    """Where the resource can live (``--resource-kind``'s choices besides "auto"): the protocols of
    the installed resources, the default first, then by name — a plug-in distribution's resource as
    much as a built-in's. Read from the entry points' names alone, loading none of them: the pure
    settings table asks, and it cannot import the runner that loads them (runner/resource.py)."""
    names = {entry.name for entry in entry_points(group=RESOURCE_ENTRY_POINT_GROUP)}
    return tuple(sorted(names, key=lambda name: (name != DEFAULT_PROTOCOL, name)))
