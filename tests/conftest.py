"""Shared fixtures: one embedded cluster of real redis-server processes for the whole session, the
etcd and ZooKeeper clusters of the modules that use them, a private temp directory; and the
``needs`` marker, which skips a test whose server kind or extra is missing here, naming the install."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from doctest_count import RAN
from lockcompare.backends import BackendConfig
from lockcompare.infra import provenance
from lockcompare.infra.cluster import Cluster, open_cluster
from lockcompare.infra.kinds import server_for
from needs import missing
from serial_lock import SERIAL_HELP, alone_when_marked  # noqa: F401 (an autouse fixture: imported here, it applies)

#: The full tier (issue 44): modules of real-server trials, clusters and browsers, run by
#: ``python -m pytest --full`` (CI runs it on every Python). The README's test command runs the
#: fast tier: pure logic, doctests, and one real-server smoke per kind of server (test_smoke.py).
FULL_OPTION = "--full"
#: Modules wholly in the full tier, by their cost on a 2-core machine (`pytest --durations`): every
#: trial, cluster, server-kind contract, browser and build test. A new module of that kind joins here
#: (or marks its heavy tests ``@pytest.mark.full``); the fast tier keeps pure logic, doctests, the
#: CLI's refusals and test_smoke.py's one trial per kind of server.
FULL_TIER_MODULES = frozenset({
    "test_async_example", "test_bench_proxy", "test_catalogue_experiments", "test_cgroups", "test_check_then_act",
    "test_claims",
    "test_conformance", "test_dask", "test_etcd_conformance", "test_explore_real", "test_external_clients",
    "test_failover", "test_fair_workload", "test_fault_experiments", "test_fault_targeting", "test_go_client",
    "test_html_report", "test_java_client", "test_network_faults", "test_parallel", "test_peer_partitions",
    "test_pgbouncer", "test_postgres", "test_postgres_conformance", "test_process_group", "test_renewing",
    "test_replicated_failover", "test_trustworthy", "test_wheel", "test_zookeeper", "test_zookeeper_conformance",
})  # fmt: skip


#: The modules that cost most (``pytest --full --durations=0`` on a 2-core machine, issue 54: each
#: module's test time summed, at 2221c14), dearest first: collected first, so
#: pytest-xdist (``--dist loadscope --no-loadscope-reorder``: modules handed out in collection order)
#: starts them early and the workers end together, rather than one worker running a long module at
#: the end while the others wait.
DEAREST_FIRST = (
    "test_zookeeper_conformance", "test_catalogue_experiments", "test_dask", "test_explore_real",
    "test_zookeeper", "test_trustworthy", "test_etcd_conformance", "test_replicated_failover", "test_cgroups",
    "test_lockfree_alternatives", "test_pgbouncer", "test_java_client", "test_process_group",
    "test_external_clients", "test_network_faults", "test_wheel", "test_etcd", "test_fault_strikes",
    "test_conformance", "test_postgres",
)  # fmt: skip


def _cost_rank(item: pytest.Item) -> int:
    stem = item.path.stem
    return DEAREST_FIRST.index(stem) if stem in DEAREST_FIRST else len(DEAREST_FIRST)


def _full_tier(item: pytest.Item) -> bool:
    return item.get_closest_marker("full") is not None or item.path.stem in FULL_TIER_MODULES


#: pytest-xdist workers when the command line names none (``-n 0``: one process). Three on two cores:
#: a real-server test spends most of its time waiting on servers, leases and sleeps, and the two
#: workers of before left the CPUs half idle (issue 54, 2-core machine, alone: the full tier's 610 s
#: used 636 CPU-s; with three it took 450 s, the fast tier 121 s against 131 s).
DEFAULT_WORKERS = 3


@pytest.hookimpl(tryfirst=True)  # before xdist's own (registered earlier, so called later)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Three xdist workers, each module on one of them in the order above (``--dist loadscope
    --no-loadscope-reorder``), unless ``-n`` was given, this is a worker, or pytest-xdist is not
    installed (``pip install -e . pytest``: the suite then runs in one process, as it must).
    Not in pyproject's addopts: there ``-n`` is an error wherever xdist is missing."""
    if not hasattr(config.option, "numprocesses") or hasattr(config, "workerinput"):
        return
    if config.option.numprocesses is None and not config.getoption("collectonly"):
        config.option.numprocesses = DEFAULT_WORKERS
        if config.option.dist == "no":
            config.option.dist = "loadscope"
        config.option.loadscopereorder = False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs(*names): server kinds (the registry's names) or extras (plot, dask, yaml) the test needs; "
        "where one is missing the test skips, naming the install",
    )
    config.addinivalue_line("markers", SERIAL_HELP)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs"):
        for name in mark.args:
            problem = missing(name)
            if problem:
                pytest.skip(problem)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        FULL_OPTION,
        action="store_true",
        help="Run the full tier too: the tests marked `full` (real-server trials, clusters, a browser).",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The dearest modules first (a stable sort: the rest keep their order); without --full, leave out
    (deselect, and say so) the full tier's tests."""
    items.sort(key=_cost_rank)
    if config.getoption(FULL_OPTION):
        return
    kept = [item for item in items if not _full_tier(item)]
    left_out = [item for item in items if _full_tier(item)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
        config.stash[_LEFT_OUT] = len(left_out)


_LEFT_OUT = pytest.StashKey[int]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker, hand what the summary counts to the controller, which prints it."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[_RAN_KEY] = [list(pair) for pair in session.config.stash.get(RAN, [])]
        workeroutput[_LEFT_OUT_KEY] = session.config.stash.get(_LEFT_OUT, 0)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's controller, as each worker ends: every worker ran its own share of the doctests
    (added up) and deselected the same full-tier tests (counted once)."""
    config = node.config
    output = getattr(node, "workeroutput", {})
    config.stash[RAN] = config.stash.get(RAN, []) + [(module, n) for module, n in output.get(_RAN_KEY, [])]
    config.stash[_LEFT_OUT] = max(config.stash.get(_LEFT_OUT, 0), output.get(_LEFT_OUT_KEY, 0))


_RAN_KEY = "lockcompare_doctests_ran"
_LEFT_OUT_KEY = "lockcompare_full_tier_left_out"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    ran = config.stash.get(RAN, [])
    if ran:
        terminalreporter.write_line(
            f"doctests: {sum(n for _, n in ran)} docstring examples in {len(ran)} modules ran (tests/test_doctests.py)"
        )
    left_out = config.stash.get(_LEFT_OUT, 0)
    if left_out:
        terminalreporter.write_line(
            f"fast tier: {left_out} tests of the full tier left out (real-server trials, clusters, a browser); "
            f"all of them: python -m pytest {FULL_OPTION}"
        )


@pytest.fixture(scope="session", autouse=True)
def private_runs_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite's own runs register in a private directory, so a lockcompare measurement running
    elsewhere on the machine cannot add its "another run is active" warning to the one-line errors
    the tests count; the suite itself is registered in the machine-wide one, so such a measurement
    still records that it ran beside the tests (provenance.concurrent_runs)."""
    with provenance.registered_run("pytest"):
        before = os.environ.get(provenance.RUNS_DIR_ENV)
        os.environ[provenance.RUNS_DIR_ENV] = str(tmp_path_factory.mktemp("runs"))
        try:
            yield
        finally:
            if before is None:
                del os.environ[provenance.RUNS_DIR_ENV]
            else:
                os.environ[provenance.RUNS_DIR_ENV] = before


@pytest.fixture(scope="session", autouse=True)
def embedded_default_said_once() -> None:
    """``--server auto`` is resolved once per process, saying so in one line where it is not Redis
    (Python >= 3.13: Valkey); resolved here, before any test counts the lines a command prints."""
    server_for("redis")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """5 lock nodes + 1 resource, spawned once; tests must leave every node running."""
    with open_cluster() as c:
        yield c


@pytest.fixture
def fresh_cluster() -> Iterator[Cluster]:
    """A private cluster for tests that crash or restart nodes."""
    with open_cluster() as c:
        yield c


@pytest.fixture
def backend_config(cluster: Cluster) -> BackendConfig:
    return BackendConfig(node_urls=cluster.node_urls, request_timeout_s=0.5)


@pytest.fixture
def key() -> str:
    """A lock key no other test uses."""
    return f"lockcompare-test:{uuid.uuid4().hex}"


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every temp dir lockcompare makes in the test lands here, and none may be left behind."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    yield tmp
    assert sorted(p.name for p in tmp.iterdir()) == []


@pytest.fixture(scope="module")
def etcd_cluster() -> Iterator[Cluster]:
    """One embedded etcd member + the resource, for the module."""
    with open_cluster(node_count=1, lock_servers="etcd") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def zk_cluster() -> Iterator[Cluster]:
    """A standalone ZooKeeper server + the resource, for the module; afterwards every java process it
    started and every data directory must be gone."""
    from lockcompare.infra.zookeeper.server import ZooKeeperServer
    from test_lifecycle import alive

    with open_cluster(node_count=1, lock_servers="zookeeper") as cluster:
        servers = [s for s in cluster.servers if isinstance(s, ZooKeeperServer)]
        pids = [s.pid for s in servers]
        dirs = [s.data_dir for s in servers]
        yield cluster
    assert pids and not [pid for pid in pids if pid is not None and alive(pid)], "a java process survived"
    assert not [d for d in dirs if d.exists()], "a data directory survived"
