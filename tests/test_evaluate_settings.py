"""evaluate and explore as matrix runs them (issue 25, items 4 and 5): a time scale every backend can
express, matrix's server options and trial settings, reproduce commands that run as printed in a
fresh shell, a failure without faults reported as such, and rows that never claim a fault they did
not have. Pure logic on hand-built inputs; the commands against real redis-servers and workers."""

from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from expect import error_lines
from lockcompare.analysis.cells import varying_conditions
from lockcompare.analysis.reproduce import plugin_dir, run_command
from lockcompare.backends import load_backend
from lockcompare.backends.redis_lock_renew import RedisLockRenew
from lockcompare.cli import app
from lockcompare.errors import InvalidValueError
from lockcompare.evaluation.evaluate import overrides_for, scales_for
from lockcompare.evaluation.explore_trials import fitting_scale
from lockcompare.evaluation.shrink import NO_FAULT
from lockcompare.faults.targets import lease_nodes, never_resolves
from lockcompare.scenario.experiments import EXPERIMENTS
from lockcompare.scenario.schedule import parse_schedule
from lockcompare.scenario.trialspec import Overrides, custom_faults, make_spec

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def one_line_refusal(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    lines = error_lines(result.stderr)  # without the "skipping <optional backend>" notes
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.stderr)
    return lines[0]


# --- item 5: a row never claims a fault it did not have --------------------------------------------


def test_an_empty_schedule_is_refused_for_an_experiment_that_is_its_fault(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="removes client-pause's own fault"):
        make_spec(backend="single", experiment=EXPERIMENTS["client-pause"], trial=0, overrides=Overrides(faults=""))
    # baseline has no fault of its own: an empty schedule is what it runs anyway
    assert make_spec(backend="single", experiment=EXPERIMENTS["baseline"], trial=0, overrides=Overrides(faults=""))
    for command in ("matrix", "run"):
        flag = "--experiments" if command == "matrix" else "--experiment"
        # one backend: a matrix of all of them would first say which cannot run here (a missing kind)
        backend = ["--backends" if command == "matrix" else "--backend", "single"]
        line = one_line_refusal(
            [command, flag, "client-pause", *backend, "--faults", "", "--out", str(tmp_path / "x.csv")]
        )
        assert "--faults '' removes client-pause's own fault (pause worker=0" in line
    assert not (tmp_path / "x.csv").exists()


def test_a_custom_schedule_is_named_by_the_table_even_when_it_is_the_only_one() -> None:
    own = make_spec(backend="single", experiment=EXPERIMENTS["client-pause"], trial=0, overrides=Overrides())
    custom = make_spec(
        backend="single", experiment=EXPERIMENTS["client-pause"], trial=0,
        overrides=Overrides(faults="crash nodes=holders:1 after-acquire=50 once"),
    )  # fmt: skip
    assert not custom_faults(own.recorded_settings()) and custom_faults(custom.recorded_settings())
    assert "faults" not in varying_conditions([own.recorded_settings()])
    assert "faults" in varying_conditions([custom.recorded_settings()])  # one schedule, still shown
    legacy = EXPERIMENTS["node-restart"]
    old = make_spec(
        backend="single",
        experiment=legacy,
        trial=0,
        overrides=Overrides(faults="restart nodes=0 after-acquire=50 every for=0"),
    )
    assert not custom_faults(old.recorded_settings())  # what node-restart ran before schedules: its own


def test_steps_that_can_never_reach_the_lock_are_named() -> None:
    def why(schedule: str, *, nodes: int, fixed: bool = True) -> str:
        return never_resolves(parse_schedule(schedule).steps, lease_nodes=nodes, fixed_nodes=fixed)

    atomic, single, redlock = (load_backend(n) for n in ("atomic", "single", "redlock"))
    assert (
        lease_nodes(atomic, node_count=5),
        lease_nodes(single, node_count=5),
        lease_nodes(redlock, node_count=3),
    ) == (
        0,
        1,
        3,
    )
    assert "holds no lease on any lock node" in why("crash nodes=holders:1 after-acquire=50 once", nodes=0)
    assert "at most 1 lock node" in why("restart nodes=holders:3 after-acquire=50 every", nodes=1)
    assert "uses lock node 0 only" in why("crash nodes=3 after-acquire=50 once", nodes=1)
    assert "at most 0 beside" in why("crash nodes=others:1 after-acquire=50 once", nodes=1)
    assert why("crash nodes=holders:3 after-acquire=50 once", nodes=5) == ""
    assert why("crash nodes=0 after-acquire=50 once", nodes=1) == ""
    assert why("pause worker=0 after-acquire=0 once for=100", nodes=0) == ""  # a worker fault needs no lease
    # ...unless it is aimed at the lease's holder (cpu-starvation on none, atomic, optimistic: every step skipped)
    assert "holds no lease on any lock node, so no worker is its holder" in why(
        "starve worker=holder after-acquire=0 once for=100 duty=0.5", nodes=0
    )
    # the catalogue's five-node scenarios keep their fixed steps (bare-majority on single restarts its holder)
    bare = "cut nodes=3,4 worker=0 at=start; restart nodes=holders:1 after-acquire=50 every"
    assert why(bare, nodes=1, fixed=False) == "" and why(bare, nodes=1) != ""
    # a client connected to every node (etcd's Go client) has no one holder's member to cut off
    minority = "split minority=holder-member after-acquire=50 once for=3000"
    assert why(minority, nodes=3) == ""
    everywhere = never_resolves(parse_schedule(minority).steps, lease_nodes=3, on_every_node=True)
    assert "connected to every lock node at once" in everywhere
    leader = "split minority=leader after-acquire=50 once for=3000"  # a role it does not hang on
    assert never_resolves(parse_schedule(leader).steps, lease_nodes=3, on_every_node=True) == ""


def test_unresolvable_targets_are_refused_up_front_in_one_line(tmp_path: Path) -> None:
    out = str(tmp_path / "x.csv")
    line = one_line_refusal(["run", "--backend", "atomic", "--faults", "crash nodes=holders:1 after-acquire=50 once",
                             "--out", out])  # fmt: skip
    assert "holds no lease on any lock node" in line
    line = one_line_refusal(["run", "--backend", "single", "--experiment", "node-restart", "--fault-nodes", "3",
                             "--out", out])  # fmt: skip
    assert "nodes=holders:3" in line and "at most 1 lock node" in line
    line = one_line_refusal(
        ["run", "--backend", "single", "--faults", "crash nodes=3 after-acquire=50 once", "--out", out]
    )
    assert "uses lock node 0 only" in line


# --- item 4: time scale, options, reproduce commands -------------------------------------------------


def test_a_whole_second_backend_runs_at_a_scale_it_can_express() -> None:
    assert scales_for(RedisLockRenew, time_scale=0.1) == {"baseline": 1.0, "client-pause": 1.0, "short-ttl": 5.0}
    assert fitting_scale("redis-lock-renew") == 1.0 and fitting_scale("single") == 0.5
    assert fitting_scale("redis-lock-renew", ttl_ms=4000) == 0.5  # the TTL the user chose
    assert RedisLockRenew.min_ttl_ms == 1000  # the battery's short lease is one it can grant
    with pytest.raises(InvalidValueError, match="cannot express the baseline TTL"):
        scales_for(RedisLockRenew, time_scale=0.1, ttl_ms={"baseline": 1234})


def test_short_ttl_keeps_its_ttl_below_the_chosen_work() -> None:
    chosen = Overrides(work_ms=600.0, ttl_ms=2000, retry_delay_ms=1.0)
    assert overrides_for("baseline", settings=chosen) == chosen
    short = overrides_for("short-ttl", settings=chosen)
    assert (short.given("ttl_ms"), short.given("work_ms"), short.given("retry_delay_ms")) == (400, 600.0, 1.0)
    assert overrides_for("short-ttl", settings=Overrides(workers=3)) == Overrides(workers=3)


def test_the_run_command_says_every_setting_off_its_default_and_where_a_plugin_lives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    assert plugin_dir("careless_lock:CarelessLock") == str(EXAMPLES)
    assert plugin_dir("single") is None and plugin_dir("lockcompare.backends.single:SingleNodeLock") is None
    command = run_command(
        backend="careless_lock:CarelessLock", experiment="baseline",
        settings={"workers": 3, "retry_delay_ms": 1.0, "think_ms": 20.0, "faults": ""}, extra=("--nodes", "redis://h:1"),
    )  # fmt: skip
    assert command == (
        f"lockcompare --plugin-path {EXAMPLES} run --backend careless_lock:CarelessLock --experiment baseline "
        "--workers 3 --retry-delay-ms 1 --nodes redis://h:1"
    )


def test_evaluate_and_explore_take_matrixs_server_options_and_settings(tmp_path: Path) -> None:
    for command in (["evaluate", "single"], ["explore", "single"]):
        line = one_line_refusal([*command, "--postgres", "mysql://x", "--out", str(tmp_path / "o")])
        assert "--postgres takes a postgresql:// URL" in line
        line = one_line_refusal([*command, "--retry-delay-ms", "1,2", "--out", str(tmp_path / "o")])
        assert "--retry-delay-ms takes one value" in line
        line = one_line_refusal([*command, "--workers", "0", "--out", str(tmp_path / "o")])
        assert "--workers must be >= 1" in line


def test_every_backend_is_told_the_retry_delay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "tests"))
    args = ["run", "--backend", "plugins.retry_aware:RetryAware", "--rounds", "1", "--time-scale", "0.1",
            "--retry-delay-ms", "30", "--out", str(tmp_path / "r.csv")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    (history,) = (tmp_path / "r.histories").iterdir()
    owners = {e["owner"] for e in map(json.loads, gzip.open(history, "rt")) if e["kind"] == "acquire" and e["ok"]}
    assert owners and all(o.startswith("retry-delay-3.0-") for o in owners), owners  # 30 ms x 0.1, as run


def test_explore_blames_a_lock_that_fails_without_faults_and_prints_a_command_that_runs_in_a_fresh_shell(
    tmp_path: Path,
) -> None:
    """The forgot-NX lock grants over a valid lease from the first round: the shrinker's first cut,
    no fault at all, still fails. The printed command, pasted into a shell with no lockcompare
    environment in another directory, reruns a trial that fails the same way."""
    lockcompare = shutil.which("lockcompare", path=str(Path(sys.executable).parent))
    assert lockcompare is not None
    fresh = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    runs = os.environ.get("LOCKCOMPARE_RUNS_DIR", str(tmp_path))  # the suite's private registry of runs
    explore = subprocess.run(
        [lockcompare, "--plugin-path", str(EXAMPLES), "explore", "forgot_nx_lock:ForgotNxLock", "--faults", "pause",
         "--property", "no-grant-over-valid-lease", "--budget", "60s", "--rounds", "2", "--reruns", "1",
         "--rate-runs", "2", "--time-scale", "0.1", "--retry-delay-ms", "2", "--workers", "3",
         "--out", str(tmp_path / "search")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
        env=fresh | {"LOCKCOMPARE_RUNS_DIR": runs},
    )  # fmt: skip
    print(explore.stdout)
    assert explore.returncode == 1, explore.stdout + explore.stderr
    lines = {
        line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
        for line in explore.stdout.splitlines()
        if ":" in line
    }
    assert lines["schedule"].startswith(f"none — {NO_FAULT}"), explore.stdout
    command = lines["reproduce"]
    assert command.startswith(f"lockcompare --plugin-path {EXAMPLES} run --backend forgot_nx_lock:ForgotNxLock")
    assert "--retry-delay-ms 2" in command and "--workers 3" in command and "--faults" not in command
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rerun = subprocess.run(
        shlex.split(command), capture_output=True, text=True, timeout=120, cwd=elsewhere, env=fresh, check=False
    )
    assert rerun.returncode == 0, rerun.stderr
    metrics = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in rerun.stdout.splitlines())}
    assert int(metrics["grants_while_held"]) > 0 and metrics["workers"] == "3", rerun.stdout


def test_the_card_says_the_settings_and_the_scales_it_ran_at(tmp_path: Path) -> None:
    from lockcompare.evaluation.card_lines import CardLine
    from lockcompare.evaluation.card_text import render_card
    from lockcompare.evaluation.conformance import Status as CardStatus
    from lockcompare.evaluation.evaluate import ReportCard

    card = ReportCard(
        backend="redis-lock-renew", summary="s", lines=(CardLine(title="t", status=CardStatus.PASS, evidence="e"),),
        results_csv=tmp_path / "ev.csv", rows=(), time_scale=0.1, rounds=20, trials=1,
        notes=("redis-lock-renew cannot express these TTLs at --time-scale 0.1: it runs baseline at --time-scale 1",),
        settings=("--workers 3", "--retry-delay-ms 1"),
    )  # fmt: skip
    text = render_card(card, fmt="text")
    assert "1 trial(s) per cell, --workers 3 --retry-delay-ms 1; results: " in text
    assert "it runs baseline at --time-scale 1" in text
