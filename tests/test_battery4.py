"""The fourth abuse battery's defects (issue 49), each as a test: a malformed server list's pieces
still secret, DNS's limits in the one address parser, redaction in linear time, a Ctrl-C before the
command runs, a signal some library swallowed still ending the command, ..."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockcompare import interrupts
from lockcompare.cli import app
from lockcompare.errors import OutputPathError, PlotDependencyError, ResultsFileError, Terminated
from lockcompare.infra import cgroup, lifecycle
from lockcompare.infra.lifecycle import sigterm_unwinds
from lockcompare.redaction import redact, remember_secrets, url_starts
from lockcompare.render.plots import require_matplotlib
from lockcompare.runner import outfile
from lockcompare.runner.outfile import claim_history_dir, history_dir, prepare_out
from lockcompare.urls import parse_url


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line(result) -> str:
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lockcompare: "), result.stderr
    return lines[0]


# --- 1. a malformed server list is still secret -----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "pieces"),
    [
        (["--lock-servers", "redis://:k1Aq=k1Bq@127.0.0.1:1/0"], ("k1Aq", "k1Bq")),
        (["--lock-servers", "redis=redis://:k2Aq,k2Bq@127.0.0.1:1/0", "--resource", "redis://127.0.0.1:1/1"],
         ("k2Aq", "k2Bq")),
        (["--nodes", "redis://:k3Aq,k3Bq@127.0.0.1:1/0", "--resource", "redis://127.0.0.1:1/1"], ("k3Aq", "k3Bq")),
    ],
)  # fmt: skip
def test_no_piece_of_a_password_cut_by_a_list_parser_is_printed(args: list[str], pieces: tuple[str, ...]) -> None:
    result = invoke("run", *args)
    line = one_line(result)
    assert result.exit_code == 2 and line.startswith("lockcompare: error: ")
    assert not any(piece in result.output for piece in pieces), line
    assert "***" in line  # hidden where it stood, not dropped from the message


def test_the_pieces_of_a_remembered_password_are_hidden_wherever_they_appear() -> None:
    remember_secrets(["--nodes", "redis://:p4Aq=p4Bq,p4Cq@h:1/0"])
    assert redact("unknown kind 'redis://:p4Aq'") == "unknown kind 'redis://:***'"
    assert redact("not a URL: 'p4Bq,p4Cq@h:1/0'") == "not a URL: '***,***@h:1/0'"


def test_a_url_cut_after_its_empty_user_hides_the_rest_but_not_a_port() -> None:
    assert redact("'redis://:ab' refused") == "'redis://:***' refused"
    assert redact("'redis://:6379/0' refused") == "'redis://:6379/0' refused"


# --- 2. DNS's limits in the one address parser ------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "problem"),
    [
        ("a" * 64, "a host name label longer than 63 characters"),
        ("a" * 100_000, "a host name longer than 253 characters"),
        ("a." * 127 + "bb", "a host name longer than 253 characters"),
        ("db..example", "bad host name (an empty label)"),
    ],
)
def test_a_name_getaddrinfo_cannot_encode_is_a_problem_of_the_address(host: str, problem: str) -> None:
    assert parse_url(f"redis://:p@{host}:1/0").problem == problem
    assert parse_url(f"redis://:p@{'a' * 63}.{'b' * 63}.example.:1/0").problem == ""  # at the limits: fine


def test_a_host_label_over_63_characters_is_one_line_and_exit_2() -> None:
    result = invoke(
        "run", "--lock-servers", f"redis=redis://:p@{'a' * 100_000}:1/0", "--resource", "redis://127.0.0.1:1/1"
    )
    line = one_line(result)
    assert result.exit_code == 2 and "longer than 253 characters" in line
    assert len(line) < 400  # the 100 KB address is not echoed whole


# --- 3. redaction in linear time, a Ctrl-C before the command runs ----------------------------------


def _growth(function: Callable[[str], object], make: Callable[[int], str]) -> float:
    """How much longer ``function`` takes on 1 MB than on 100 KB (best of five each): about 10
    when it is linear, about 100 when quadratic. A time under 2 ms counts as 2 ms: on a loaded
    machine one preemption outweighs such a run (the quadratic code took seconds at 100 KB)."""

    def best(n: int) -> float:
        text = make(n)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            function(text)
            times.append(time.perf_counter() - start)
        return max(min(times), 2e-3)

    return best(1_000_000) / best(100_000)


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "a" * n,  # a scheme searched from every letter: quadratic before issue 49
        lambda n: "redis://" + "@" * n,  # an @ with no host after it, looked for from each @
        lambda n: "a://" * (n // 4),
        lambda n: "redis://:pw@" + "h" * n + " and " + "x" * n,
    ],
    ids=["letters", "ats", "schemes", "long-host"],
)
def test_redaction_grows_linearly_with_its_input(make: Callable[[int], str]) -> None:
    assert _growth(redact, make) < 40


def test_remembering_the_secrets_of_a_long_argument_grows_linearly() -> None:
    assert _growth(lambda text: remember_secrets([text]), lambda n: "," * n + "redis://:pw@h:1/0") < 40
    assert _growth(lambda text: remember_secrets([text]), lambda n: "a" * n + "=redis://h:1/0") < 40


def test_url_starts_finds_what_the_scheme_pattern_found() -> None:
    import re

    pattern = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
    for text in ("x redis://a http://b", "1a://b", "a+b.c-d://e", "://x", "a:://b", "é http://x", "ab://cd://e"):
        assert url_starts(text) == [m.start() for m in pattern.finditer(text)], text


def test_a_ctrl_c_while_the_arguments_are_read_is_one_line_and_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("lockcompare.cli.core.remember_secrets", interrupted)
    result = invoke("backends")
    assert result.exit_code == 130 and one_line(result) == "lockcompare: interrupted; servers and workers stopped"


# --- 5. a signal some library swallowed still ends the command ----------------------------------------


def test_a_swallowed_signal_ends_the_command_with_its_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command itself returns normally (the exception was caught below it): the signal noted
    by the handler decides the exit."""

    def swallowed(**_kwargs: object) -> None:
        interrupts.note(signal.SIGTERM)

    monkeypatch.setattr("lockcompare.backends.add_plugin_paths", swallowed)
    result = invoke("backends")
    assert result.exit_code == 143
    assert (
        result.stderr.strip().splitlines()[-1]
        == "lockcompare: error: terminated by SIGTERM; servers and workers stopped"
    )


def test_an_import_cut_by_a_signal_is_not_a_missing_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # the import fails
    interrupts.clear()
    with pytest.raises(PlotDependencyError):
        require_matplotlib()  # no signal came: matplotlib is missing, and the line says so
    interrupts.note(signal.SIGHUP)
    try:
        with pytest.raises(Terminated) as raised:
            require_matplotlib()
        assert raised.value.exit_code == 129
    finally:
        interrupts.clear()


# --- 9. revisions shown whole -----------------------------------------------------------------------


def test_the_mixed_revision_refusal_shows_both_revisions_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    commit = "9e3093b53ea1" + "0" * 28
    monkeypatch.setattr(outfile, "source_revision", lambda: commit + "+dirty")
    with pytest.raises(ResultsFileError) as refused:
        outfile._check_revisions(Path("x.csv"), [{"source_revision": commit}], allow_mixed_revisions=None)
    assert f"holds trials of revision {commit}; this code is {commit}+dirty:" in str(refused.value)


# --- 7. one histories folder per results file, whatever its suffix ------------------------------------


def test_a_file_without_a_suffix_and_one_with_share_no_histories_folder(tmp_path: Path) -> None:

    bare, csv = tmp_path / "x", tmp_path / "x.csv"
    assert claim_history_dir(bare) == tmp_path / "x.histories"
    bare.write_text("schema_version,history\n9,x.histories/t0.jsonl.gz\n")
    assert history_dir(csv) == tmp_path / "x.csv.histories"  # x's rows point into x.histories
    csv.write_text("schema_version,history\n9,x.csv.histories/t0.jsonl.gz\n")
    assert history_dir(bare) == tmp_path / "x.histories"  # the same answers on --resume
    assert history_dir(csv) == tmp_path / "x.csv.histories"


def test_a_file_without_a_suffix_after_one_with_is_refused(tmp_path: Path) -> None:

    (tmp_path / "x.csv").write_text("schema_version,history\n9,x.histories/t0.jsonl.gz\n")
    with pytest.raises(OutputPathError, match=r"x\.histories/, where x\.csv beside it may keep its own"):
        prepare_out(tmp_path / "x", resume=False)
    (tmp_path / "y.csv.lock").write_text("")  # y.csv's run has started, no row yet
    with pytest.raises(OutputPathError):
        history_dir(tmp_path / "y")
    (tmp_path / "z.csv.bak").write_text("schema_version,history\n9,z.csv.histories/t0.jsonl.gz\n")
    assert history_dir(tmp_path / "z.csv") == tmp_path / "z.histories"  # z.csv.bak holds z.csv.histories
    (tmp_path / "z.tsv").write_text("schema_version,history\n9,z.histories/t0.jsonl.gz\n")
    with pytest.raises(OutputPathError, match=r"z\.csv\.bak, z\.tsv"):
        history_dir(tmp_path / "z.csv")  # both of its names are another file's


# --- 6. a worker's cgroup lives as long as the worker -------------------------------------------------


def test_a_worker_whose_cgroup_is_gone_ends_quietly_without_running(tmp_path: Path) -> None:
    ran: list[int] = []
    with pytest.raises(SystemExit) as ended:
        cgroup.enter_and_run((str(tmp_path / "removed"),), ran.append, 1)
    assert ended.value.code == 1 and ran == []


@pytest.mark.skipif(cgroup.probe() == cgroup.PROCESS_GROUP, reason="needs writable cgroups (root)")
def test_a_ctrl_c_during_a_workers_start_leaves_its_cgroup_to_end_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ctrl-C arrives while the spawn holds signals back, and unwinds the caller once they come
    down: the worker is then on record in its cgroup, which is still there for it, and ends with it."""
    real_adopt, real_spawn = cgroup.adopt, lifecycle.SPAWN
    adopted: list[int] = []

    def adopt_and_note(pid: int | None, group: cgroup.ClientCgroup | None) -> None:
        real_adopt(pid, group)
        adopted.append(int(pid or 0))

    real_start = real_spawn.Process.start

    def start_interrupted(self: object) -> None:
        real_start(self)
        os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C while start() runs: held back until it is done

    monkeypatch.setattr(cgroup, "adopt", adopt_and_note)
    monkeypatch.setattr(real_spawn.Process, "start", start_interrupted)
    try:
        with sigterm_unwinds(), pytest.raises(KeyboardInterrupt):
            cgroup.start_in_cgroup(target=time.sleep, args=(30,))
            time.sleep(1)  # (a signal still pending is delivered here at the latest)
    finally:
        interrupts.clear()
    (pid,) = adopted
    group = cgroup.of(pid)
    assert group is not None and all(d.is_dir() for d in group.dirs)  # not removed under the starting worker
    assert pid in cgroup.release(pid)  # killed with its cgroup, which is then removed
    assert not any(d.exists() for d in group.dirs)


# --- 4 and 8. `clients install`: signals end its toolchain child; a full disk names the destination --


LC = [sys.executable, "-m", "lockcompare"]
FAKE_NPM = '#!/bin/sh\nsleep 300 &\necho "$$ $!" > "$NPM_MARKER"\nwait\n'  # npm ci that never ends, with a helper


def _install_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "npm").write_text(FAKE_NPM)
    (bin_dir / "node").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("npm", "node"):
        (bin_dir / tool).chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "LOCKCOMPARE_CLIENTS_DIR": str(tmp_path / "clients"),
        "NPM_MARKER": str(tmp_path / "marker"),
    }


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_clients_install_and_its_toolchain_group(tmp_path: Path, sig: signal.Signals) -> None:
    env = _install_env(tmp_path)
    marker = tmp_path / "marker"
    proc = subprocess.Popen([*LC, "clients", "install", "node"], env=env, stderr=subprocess.PIPE, text=True,
                            stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        npm, helper = (int(p) for p in marker.read_text().split())
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=20)  # the step's limit is 900 s: it did not wait for it
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert _gone(npm) and _gone(helper)  # the toolchain's whole group ended with the command


def test_clients_install_into_a_full_disk_names_the_destination_and_leaves_no_part(tmp_path: Path) -> None:
    """RLIMIT_FSIZE stands for the full disk (EFBIG where ENOSPC would be): no tmpfs or root needed."""
    env = _install_env(tmp_path)
    limited = (
        "import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1])); "
        "os.execv(sys.executable, [sys.executable, '-m', 'lockcompare', 'clients', 'install', 'python'])"
    )
    done = subprocess.run([sys.executable, "-c", limited], env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    clients = tmp_path / "clients"
    (line,) = done.stderr.strip().splitlines()
    assert done.returncode == 1 and line.startswith(f"lockcompare: error: cannot install {clients}/"), line
    failed = Path(line.split("cannot install ", 1)[1].rsplit(":", 1)[0])
    assert not failed.exists()  # no half-copied file under the destination's name
    assert not [p for p in clients.rglob("*") if ".part" in p.name]


# --- 10. a lost Dask scheduler is no host's failure ---------------------------------------------------


def test_a_batch_cancelled_for_a_lost_scheduler_is_no_hosts_failure() -> None:
    from types import SimpleNamespace

    from lockcompare.runner.dask_executor import _scheduler_lost

    running = SimpleNamespace(status="running")
    cancelled = "run_batch-bb3f0c4a cancelled for reason: scheduler-connection-lost."  # as Dask 2026.8 says
    assert _scheduler_lost(running, RuntimeError(cancelled))
    assert not _scheduler_lost(running, RuntimeError("Attempted to run task run_batch-x on 4 workers, all died"))
    assert _scheduler_lost(SimpleNamespace(status="connecting"), RuntimeError("Attempted to run task"))


# --- a child whose parent died before it asked to die with it --------------------------------------


def test_a_child_whose_parent_is_already_gone_exits_instead_of_waiting_for_a_signal() -> None:
    """What a server's pre-exec function does after its prctl: a parent SIGKILLed between the fork
    and the request sends no signal, so the child checks who its parent is now."""
    code = "from lockcompare.infra.lifecycle import die_with_parent as d; d(parent_pid={}); print('ran on')"
    gone = subprocess.run(
        [sys.executable, "-c", code.format(1)], capture_output=True, text=True, timeout=60, check=False
    )
    assert gone.returncode == 1 and gone.stdout == ""  # its parent is not pid 1: "re-parented"
    here = subprocess.run([sys.executable, "-c", code.format(os.getpid())], capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert here.returncode == 0 and here.stdout.strip() == "ran on"


# --- a worker whose parent is SIGKILLed while it starts ----------------------------------------------


def test_a_worker_forked_by_a_parent_killed_at_once_reads_its_whole_start_and_exits_quietly() -> None:
    """The parent dies right after the fork, before the standard library would have written the
    child's start-up data (which then printed ``EOFError: Ran out of input``): the data is already
    in the pipe, so the child unpickles it whole, finds its parent gone and exits 0 without running
    its target."""
    script = (
        "import os, signal\n"
        "from multiprocessing import resource_tracker, util\n"
        "from lockcompare.infra import lifecycle\n"
        "resource_tracker.ensure_running()  # started before the fork below is made fatal\n"
        "fork = util.spawnv_passfds\n"
        "def fork_then_die(*args):\n"
        "    print(fork(*args), flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "util.spawnv_passfds = fork_then_die\n"
        "lifecycle.start_worker_process(target=print, args=('target ran',))\n"
    )
    parent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert parent.returncode == -signal.SIGKILL
    child = int(parent.stdout.split()[0])  # the pipes reached EOF: the child holding them has exited
    assert parent.stdout.split() == [str(child)] and parent.stderr == "", parent.stderr
    assert _gone(child)


# --- a signal while the command is still importing its interface --------------------------------------

#: The ``lockcompare`` command, held inside the import of its interface until the test signals it.
_HELD_IN_IMPORT = """
import sys, time
class Held:
    def find_spec(self, name, path=None, target=None):
        if name == "lockcompare.cli":
            print("importing", flush=True)
            time.sleep(60)
sys.meta_path.insert(0, Held())
sys.argv = ["lockcompare", "backends"]
from lockcompare.__main__ import main
main()
"""


@pytest.mark.parametrize(
    ("sig", "line"),
    [
        (signal.SIGINT, "lockcompare: interrupted"),
        (signal.SIGTERM, "lockcompare: error: terminated by SIGTERM"),
        (signal.SIGHUP, "lockcompare: error: terminated by SIGHUP"),
        (signal.SIGQUIT, "lockcompare: error: terminated by SIGQUIT"),
    ],
)
def test_a_signal_while_the_command_imports_its_interface_is_one_line_and_128_plus_n(
    sig: signal.Signals, line: str
) -> None:
    """Python's defaults would end it with no line (SIGTERM, SIGHUP), a core (SIGQUIT) or a
    traceback from the cut import (SIGINT): the command answers them before it imports anything."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HELD_IN_IMPORT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "importing\n"
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err.splitlines()) == (128 + sig, [line])


def test_the_command_imports_nothing_of_its_own_before_answering_signals() -> None:
    """What runs before the handlers is the interpreter's start and this package's two light
    modules: no typing, no interface."""
    code = (
        "import sys; import lockcompare.__main__\n"
        "print(sorted(m for m in sys.modules if m.startswith(('lockcompare', 'typing'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "['lockcompare', 'lockcompare.__main__']"
