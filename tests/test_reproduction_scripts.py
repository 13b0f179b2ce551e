"""The settled reproduction's scripts (issue 55), without a run: the plan's parts and what they leave out
(scripts/reproduction_plan.py, which asks the matrix's own planner), the directives that read another
run (scripts/docs_sources.py) on the committed docs and on a hand-written page, and the floor over
parts (scripts/floor_total.py) on hand-written closing lines."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


plan = _script("reproduction_plan")
sources = _script("docs_sources")
floor_total = _script("floor_total")


def test_the_parts_cover_every_cell_once_settling_the_deciding_ones() -> None:
    parts = {part.name: part for part in plan.parts()}
    assert list(parts) == ["settled-roles", "settled-headline", "fixed", "fixed-headline-others"]
    roles = parts["settled-roles"].experiments
    # the role experiments are read from the catalogue (a step aimed by role), not listed by hand
    assert {"leader-crash", "leader-freeze", "leader-isolated", "holder-minority", "failover", "renewal-cut"} <= set(
        roles
    )
    assert "client-pause" not in roles and "baseline" not in roles
    assert parts["settled-headline"].backends == plan.HEADLINE_BACKENDS
    cells = [(b, e) for part in parts.values() for b in part.backends for e in part.experiments]
    assert len(cells) == len(set(cells))  # no cell in two parts: one trial id, one row
    assert "--until-settled" in parts["settled-roles"].args() and "--until-settled" not in parts["fixed"].args()


def test_the_plan_leaves_out_the_go_clients_holder_minority_with_its_reason() -> None:
    roles = next(part for part in plan.parts() if part.name == "settled-roles")
    specs, left_out = plan.planned(roles)
    kept = {(s.backend, s.experiment) for s in specs}
    assert ("etcd", "holder-minority") in kept and ("etcd-go-mutex", "leader-freeze") in kept
    assert ("etcd-go-mutex", "holder-minority") not in kept
    assert any(
        "etcd-go-fenced, etcd-go-mutex x holder-minority" in line and "every lock node" in line for line in left_out
    )


def test_every_directive_of_the_committed_docs_is_sorted(capsys: pytest.CaptureFixture[str]) -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert sources.main([str(doc) for doc in docs]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "UNCLASSIFIED" not in out
    # Every run the reproduction replaces is retired to results/archive/ or read only where a sentence
    # says it is another run: nothing is left to switch.
    assert "SWITCH:" not in out and "results/consensus.csv" not in out


def test_switch_points_a_page_at_the_reproduction_keeping_its_cells(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "consensus.csv").write_text(
        "backend,experiment\netcd,leader-crash\nzk-lock,leader-freeze\n", encoding="utf-8"
    )
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "<!-- table: ../results/consensus.csv -->\n|x|\n<!-- /table -->\n"
        "lost <!-- value: ../results/consensus.csv backend=etcd sum:lost_updates -->2<!-- /value -->\n"
        "<!-- excerpt: ../results/consensus.csv trial=etcd.t0 from=0 to=5 -->\n",
        encoding="utf-8",
    )
    assert sources.main(["--switch", "docs/page.md"]) == 0
    text = page.read_text(encoding="utf-8")
    assert (
        "<!-- table: ../results/reproduction.csv backend=etcd,zk-lock experiment=leader-crash,leader-freeze -->" in text
    )
    assert "<!-- value: ../results/reproduction.csv backend=etcd experiment=leader-crash,leader-freeze " in text
    assert "sum:lost_updates -->2<!-- /value -->" in text
    assert "<!-- excerpt: ../results/consensus.csv trial=etcd.t0" in text  # picked again by hand, never switched


def test_the_floor_over_parts_is_their_summed_wall_over_their_summed_floors() -> None:
    text = (
        "== part a\n100 trials in 300.0 s wall; floor 250.0 s = max(...); wall/floor 1.20\nsettled: ...\n"
        "== part b\n10 trials in 100.0 s wall; floor 50.0 s = max(...); wall/floor 2.00\n"
    )
    assert (
        floor_total.total_line(text)
        == "over 2 matrix runs (parts, resumed pieces): 110 trials in 400.0 s wall; floor 300.0 s; wall/floor 1.33"
    )
    assert floor_total.total_line("no floor here") is None


rerun_marked = _script("rerun_marked")


@pytest.mark.full
def test_a_marked_trial_runs_again_alone_in_its_place_and_its_marked_row_is_kept(tmp_path: Path) -> None:
    """A real trial, its row marked by hand (the sentinel's mark is what the pass reads), run again:
    one row per trial in the file, the rerun's with its own history and a note; the marked row, with
    the history it was judged from, in the .superseded file."""
    from lockcompare.analysis.results import read_results, rewrite, superseded_path
    from lockcompare.runner.matrix import run_matrix
    from lockcompare.scenario.parsing import Overrides

    out = tmp_path / "r.csv"
    run_matrix(backends=["single"], experiments=["baseline"], trials=1, overrides=Overrides(time_scale=0.5, rounds=2),
               out=out)  # fmt: skip
    (first,) = read_results(out)
    rewrite(out, [{**first, "timing_marked": True}])
    assert rerun_marked.main([str(out), "--dry-run"]) == 0

    assert rerun_marked.main([str(out)]) == 0
    (row,) = read_results(out)
    assert row["trial_id"] == first["trial_id"] and row["run_id"] != first["run_id"]
    assert rerun_marked.RERUN_ALONE_NOTE in row["note"]
    assert row["history"] != first["history"] and (tmp_path / row["history"]).exists()
    (kept,) = read_results(superseded_path(out))
    assert kept["run_id"] == first["run_id"] and kept["timing_marked"] is True
    assert (tmp_path / kept["history"]).exists()  # the marked row keeps the history it was judged from
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("rerun-marked-")]  # no scratch left


def test_rows_of_another_revision_are_refused_before_anything_runs(tmp_path: Path, capsys) -> None:
    from lockcompare.analysis.results import read_results, rewrite, superseded_path

    row = read_results(ROOT / "results" / "reproduction.csv")[0]
    out = tmp_path / "r.csv"
    rewrite(out, [{**row, "source_revision": "deadbeef", "timing_marked": True, "history": ""}])
    assert rerun_marked.main([str(out)]) == 2
    assert "rows of revision deadbeef" in capsys.readouterr().err
    assert len(read_results(out)) == 1 and not superseded_path(out).exists()


marked_reruns = _script("marked_reruns")


def test_marked_reruns_counts_a_runs_reruns_and_names_what_marked_the_rows_they_replaced(
    tmp_path: Path, capsys
) -> None:
    import csv

    from lockcompare.runner.local_executor import RERUN_NOTE

    def write(name: str, *rows: tuple[str, str, str, str, str]) -> None:
        with (tmp_path / name).open("w", newline="") as fh:
            csv.writer(fh).writerows([("backend", "experiment", "note", "timing_marked", "stall_at"), *rows])

    write("run-01.csv", ("single", "baseline", "", "false", ""), ("pottery", "client-pause", RERUN_NOTE, "false", ""),
          ("redlock", "short-ttl", RERUN_NOTE, "true", "w"))  # fmt: skip
    write("run-01.superseded.csv", ("pottery", "client-pause", "", "true", "worker 1 round 0: release call"),
          ("redlock", "short-ttl", "", "true", "w"))  # fmt: skip
    write("run-02.csv", ("single", "baseline", "", "false", ""))
    assert marked_reruns.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "run-01.csv: 2 run again, 1 still marked: pottery x client-pause (worker 1 round 0: release call); "
        "redlock x short-ttl (w)",
        "run-02.csv: 0 run again, 0 still marked",
    ]
    assert marked_reruns.main([str(tmp_path / "none")]) == 2
