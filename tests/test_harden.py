"""Issue 18: one writer per results file, no secret on disk, bounds, output paths and OS errors,
capped inputs, nothing left after a kill, one server one node (real servers where one is involved)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare.analysis import results as results_mod
from lockcompare.analysis.results import ResultsWriter, inspect_results, read_results, rewrite
from lockcompare.cli import app
from lockcompare.cli.options import read_nodes_file
from lockcompare.errors import (
    InvalidURLError,
    InvalidValueError,
    OutputPathError,
    ResultsBusyError,
    ResultsFileError,
    WriteError,
)
from lockcompare.files import check_output_dir, check_output_file, read_capped, results_lock
from lockcompare.infra import provenance
from lockcompare.infra.cluster import check_distinct_servers
from lockcompare.infra.lifecycle import remove_orphaned_dirs
from lockcompare.infra.redis.client import redact, with_env_password
from lockcompare.runner.matrix import run_matrix
from lockcompare.runner.outfile import prepare_out
from lockcompare.scenario.limits import check_count
from lockcompare.scenario.parsing import Overrides

QUICK = Overrides(time_scale=0.1, rounds=3, call_timeout_ms=1500)


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def _quick_file(out: Path) -> None:
    run_matrix(backends=["single"], experiments=["baseline"], trials=1, overrides=QUICK, out=out)


# --- one writer per results file ---------------------------------------------------------------


def test_a_second_holder_of_a_results_file_is_refused_with_the_first_ones_pid(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    script = (
        "import sys, time\nfrom pathlib import Path\nfrom lockcompare.files import results_lock\n"
        "with results_lock(Path(sys.argv[1])):\n print('locked', flush=True); time.sleep(30)"
    )
    holder = subprocess.Popen([sys.executable, "-c", script, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(ResultsBusyError, match=f"pid {holder.pid}"), results_lock(out):
            pass
        with pytest.raises(ResultsBusyError, match=f"pid {holder.pid}"):
            _quick_file(out)  # refused before any server starts, the file untouched
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    with results_lock(out), results_lock(out):  # the owner gone: free again, and nestable in one process
        assert (tmp_path / "r.csv.lock").read_text().strip() == str(os.getpid())
    assert not (tmp_path / "r.csv.lock").exists()


def test_a_signal_while_the_lock_is_being_taken_leaves_no_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM unwinds as an exception between any two statements (cli/core.py): one landing after
    the lock file was made but before the block began left ``r.csv.lock`` behind. Here the
    exception comes from the last step before the block, deterministically."""
    import lockcompare.files as files_mod

    def interrupted(path: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(files_mod, "_lock_inode", interrupted)
    out = tmp_path / "r.csv"
    with pytest.raises(KeyboardInterrupt), results_lock(out):
        pass
    assert not (tmp_path / "r.csv.lock").exists()
    monkeypatch.undo()
    with results_lock(out):  # and the file is free again in this process
        pass


def _duplicated(tmp_path: Path) -> Path:
    out = tmp_path / "d.csv"
    _quick_file(out)
    (row,) = inspect_results(out).rows
    rewrite(out, [row, dict(row, run_id="other")])  # what two writers at once produced before the lock
    return out


def test_duplicate_trial_ids_are_refused_by_resume_flagged_by_readers_and_dropped_by_upgrade(tmp_path: Path) -> None:
    out = _duplicated(tmp_path)
    assert inspect_results(out).duplicate_ids
    with pytest.raises(ResultsFileError, match="more than one judged row"):
        prepare_out(out, resume=True)
    assert len(read_results(out)) == 1  # readers count a trial once
    result = invoke("table", str(out))
    assert result.exit_code == 0 and "more than one judged row" in result.stderr
    result = invoke("compare", str(out), str(out))
    assert "more than one judged row" in result.stderr
    result = invoke("upgrade", str(out))
    assert result.exit_code == 0 and "dropped 1 earlier row(s)" in result.stderr, result.stderr
    (row,) = inspect_results(out).rows
    assert row["run_id"] == "other" and not inspect_results(out).duplicate_ids


# --- OS errors at write time and output paths --------------------------------------------------


def test_a_failed_append_leaves_the_file_whole_and_is_one_write_error(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "r.csv"
    _quick_file(out)
    before = out.read_bytes()
    (row,) = inspect_results(out).rows
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        real_write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results_mod.os, "write", half_then_full)
    with pytest.raises(WriteError, match="No space left on device"):
        ResultsWriter(out).append(row)
    assert out.read_bytes() == before


def test_output_paths_are_checked_before_anything_runs(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputPathError, match="is a directory"):
        check_output_file(tmp_path, flag="--out")
    with pytest.raises(OutputPathError, match="not a regular file"):
        check_output_file(Path("/dev/null"), flag="--out")
    with pytest.raises(OutputPathError, match=f"{blocker} is not a directory"):
        check_output_file(blocker / "deeper" / "r.csv", flag="--out")
    with pytest.raises(OutputPathError, match="is not a directory"):
        check_output_dir(blocker, flag="--out")
    check_output_file(tmp_path / "new" / "r.csv", flag="--out")  # creates nothing
    assert not (tmp_path / "new").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_inputs_are_read_with_a_cap(tmp_path: Path) -> None:
    with pytest.raises(ResultsFileError, match="larger than 1 MB"):
        read_capped(Path("/dev/zero"), limit=1024 * 1024)
    result = invoke("table", "/dev/zero")
    assert result.exit_code == 2 and "larger than" in result.stderr


# --- secrets ----------------------------------------------------------------------------------


def test_the_run_registry_holds_no_command_line_and_is_private(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(provenance.RUNS_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["lockcompare", "--nodes", "redis://:hunter2@127.0.0.1:7/0"])
    with provenance.registered_run("matrix", out=tmp_path / "r.csv"):
        (entry,) = tmp_path.glob("*.json")
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600
        assert "hunter2" not in entry.read_text()
        assert set(json.loads(entry.read_text())) == {"pid", "what", "since", "out"}
    assert not list(tmp_path.glob("*.json"))


def test_passwords_come_from_the_environment_or_a_file_and_never_show(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LOCKCOMPARE_REDIS_PASSWORD", "hun/ter2")
    assert with_env_password("redis://127.0.0.1:7/0") == "redis://:hun%2Fter2@127.0.0.1:7/0"
    assert with_env_password("redis://:own@127.0.0.1:7/0") == "redis://:own@127.0.0.1:7/0"
    assert redact("redis://u:hunter2@h:notaport/0") == "redis://u:***@h:notaport/0"
    nodes = tmp_path / "nodes"
    nodes.write_text("# lock nodes\nredis://:a@127.0.0.1:1/0\nredis://:a@127.0.0.1:2/0\nresource=redis://:a@h:3/0\n")
    assert read_nodes_file(nodes) == ("redis://:a@127.0.0.1:1/0,redis://:a@127.0.0.1:2/0", "redis://:a@h:3/0")
    result = invoke("run", "--nodes", "redis://:hunter2@127.0.0.1:bad/0", "--resource", "redis://127.0.0.1:7/0")
    assert result.exit_code == 2 and "hunter2" not in result.stderr and ":***@" in result.stderr


def test_aliases_of_one_server_are_one_node(cluster) -> None:
    url = cluster.node_urls[0]
    alias = url.replace("127.0.0.1", "localhost").removesuffix("/0") + "/3"
    with pytest.raises(InvalidURLError, match="same redis-server"):
        check_distinct_servers([url, cluster.node_urls[1], alias])
    check_distinct_servers(cluster.node_urls)


# --- bounds -----------------------------------------------------------------------------------


def test_bounds_are_refused_with_how_to_raise_them(monkeypatch) -> None:
    result = invoke("run", "--pause-ms", "1e12")
    assert result.exit_code == 2 and "--pause-ms must be <= 600000" in result.stderr
    assert "LOCKCOMPARE_MAX_PAUSE_MS" in result.stderr
    with pytest.raises(InvalidValueError, match="--trials must be <= 1000"):
        check_count("trials", 5000)
    monkeypatch.setenv("LOCKCOMPARE_MAX_TRIALS", "6000")
    assert check_count("trials", 5000) == 5000
    result = invoke("bench", "--iterations", "0")
    assert result.exit_code == 2 and "--iterations must be >= 1" in result.stderr
    result = invoke("matrix", "--resume", "--backends", "single")
    assert result.exit_code == 2 and "give --out" in result.stderr
    result = invoke("evaluate", "single", "--time-scale", "1e9")  # before the battery starts any server
    assert result.exit_code == 2 and "--time-scale must be <= 10" in result.stderr


# --- leftovers --------------------------------------------------------------------------------


def test_tagged_dirs_of_a_dead_owner_are_removed_and_a_live_owners_kept(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = tmp_path / f"lockcompare-p{dead.pid}-node0-abc"
    alive = tmp_path / f"lockcompare-p{os.getppid()}-node0-abc"
    untagged = tmp_path / "lockcompare-node0-abc"
    for d in (gone, alive, untagged):
        d.mkdir()
    assert remove_orphaned_dirs(tmp_path) == [gone]
    assert alive.exists() and untagged.exists() and not gone.exists()


def test_a_spawned_child_whose_parent_died_early_exits_quietly(tmp_path: Path) -> None:
    """The parent is SIGKILLed while its children are still starting: each exits on its own (they
    find their parent gone once they run), and none prints a traceback."""
    script = (
        "import time, sys\n"
        "from lockcompare.infra.lifecycle import start_worker_process\n"
        "from lockcompare.runner.trial import _construct_and_close\n"
        "from lockcompare.backends import BackendConfig\n"
        "from multiprocessing import Pipe\n"
        "if __name__ == '__main__':\n"
        "    procs = []\n"
        "    for _ in range(3):\n"
        "        a, b = Pipe(duplex=False)\n"
        "        procs.append(start_worker_process(target=_construct_and_close,\n"
        "            args=('single', BackendConfig(node_urls=('redis://127.0.0.1:1/0',)), b)))\n"
        "        a.close()\n"
        "    print(' '.join(str(p.pid) for p in procs), flush=True)\n"
        "    time.sleep(30)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    parent.kill()
    parent.wait()

    def alive() -> list[int]:
        return [
            p for p in pids if Path(f"/proc/{p}").exists() and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"
        ]

    # Under load a child may still be importing a while after its parent died: how soon it notices is
    # the machine's; that it exits at all is the property (a child that outlived its parent stays).
    deadline = time.monotonic() + 30
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive() == []
    # The children inherited the parent's stderr: it ends once the last of them exited.
    assert "Traceback" not in (parent.stderr.read() if parent.stderr else "")
