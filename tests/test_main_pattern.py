"""scripts/main_pattern.py's judgement of one run, on hand-built CSV rows (the runs themselves are a benchmark)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "main_pattern.py"
spec = importlib.util.spec_from_file_location("main_pattern", SCRIPT)
assert spec is not None and spec.loader is not None
main_pattern = importlib.util.module_from_spec(spec)
sys.modules["main_pattern"] = main_pattern  # its dataclasses look their module up there
spec.loader.exec_module(main_pattern)


def row(
    backend: str, experiment: str, *, conflicts: int = 0, lost: int = 0, rejected: int = 0, marked: bool = False
) -> dict[str, str]:
    return {
        "backend": backend, "experiment": experiment, "conflicts": str(conflicts), "lost_updates": str(lost),
        "writes_rejected": str(rejected), "verdict": "x", "timing_marked": "true" if marked else "false",
    }  # fmt: skip


def the_pattern() -> list[dict[str, str]]:
    rows = [row("none", "baseline", conflicts=43, lost=40), row("single", "short-ttl", conflicts=79, lost=40)]
    rows += [row(b, "client-pause", conflicts=39, lost=20) for b in ("single", "redlock", "pottery", "redis-py")]
    rows += [row("fenced", "client-pause", conflicts=39, rejected=20)]
    rows += [row(b, "baseline") for b in ("single", "redlock", "fenced", "atomic")]
    rows += [row("atomic", "baseline", conflicts=70)]  # lock-free: conflicts are its design, not a failure
    return rows


def test_a_run_with_the_pattern_holds() -> None:
    checks = main_pattern.judge_pattern(the_pattern())
    assert [c.ok for c in checks] == [True, True, True, True], checks


def test_each_break_of_the_pattern_is_named() -> None:
    rows = the_pattern()
    rows[6] = row("fenced", "client-pause", conflicts=39, lost=1, rejected=19)  # write-only fencing lost one
    rows.append(row("redlock", "baseline", conflicts=1))
    rows[0] = row("none", "baseline", conflicts=79, lost=40)
    rows[1] = row("single", "short-ttl", conflicts=60, lost=30)  # below no lock: a short TTL that helped
    checks = main_pattern.judge_pattern(rows)
    assert [c.ok for c in checks] == [True, False, False, False]
    assert checks[1].evidence == "1 lost, 19 writes rejected in 1 trials"
    assert checks[2].evidence == "redlock 1"


def test_timing_marked_cells_are_named_with_their_counts() -> None:
    rows = [*the_pattern(), row("fenced", "client-pause", rejected=20, marked=True)]
    assert main_pattern.marked_cells(rows) == ["fenced × client-pause (1 of 2)"]


def test_the_script_runs_the_readmes_main_command() -> None:
    readme = (SCRIPT.parents[1] / "README.md").read_text()
    command = " ".join(main_pattern.MAIN_COMMAND)
    assert f".venv/bin/lockcompare {command}\n" in readme, "scripts/main_pattern.py must time the README's command"
