"""Issue 53: the README's who-survives-what table in words — lock family × fault family, each cell a
word and its violation rate — rendered by a ``<!-- words: CSV -->`` block from hand-built rows."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from lockcompare.render.docs import rendered_blocks, stale_blocks
from lockcompare.render.docs_words import cell_words, words_table
from lockcompare.render.families import FAULT_FAMILIES, LOCK_FAMILIES, Family

ROOT = Path(__file__).resolve().parents[1]
LOCKS = (Family(name="quorum locks", members=("q1", "q2")), Family(name="lock-free", members=("free",)))
FAULTS = (Family(name="pauses", members=("pause", "stop")), Family(name="crashes", members=("crash",)))


def row(backend: str, experiment: str, verdict: str) -> dict[str, str]:
    return {"backend": backend, "experiment": experiment, "verdict": verdict}


def test_a_cell_pools_its_familys_trials_and_names_the_worst_damage() -> None:
    rows = [
        row("q1", "pause", "lost-updates"), row("q2", "stop", "lease-violated"), row("q2", "pause", "exclusive"),
        row("q1", "pause", "unknown"),  # left out of the rate, counted apart
        row("q1", "crash", "degraded"), row("q2", "crash", "conflicts-no-damage"),
        row("free", "pause", "double-applied"),
    ]  # fmt: skip
    lines = words_table(rows, locks=LOCKS, faults=FAULTS).splitlines()
    assert lines[0] == "| lock family | pauses | crashes |"
    # two backends and two experiments in one cell: 2 of the 3 observed trials violated safety
    assert (
        lines[2]
        == "| quorum locks | **loses updates**<br>2/3 66.7% [9.4–99.2%] (+1 unknown) | **held**<br>0/2 0% [0–84.2%] |"
    )
    assert lines[3] == "| lock-free | **applies updates twice**<br>1/1 100% [2.5–100%] | *not run* |"


def test_a_cell_no_trial_observed_is_unknown_never_held() -> None:
    assert cell_words([row("q1", "pause", "unknown"), row("q1", "pause", "unavailable")]).startswith("*unknown*")
    assert cell_words([row("q1", "pause", "lease-violated")]).startswith("**breaks its lease**")


def test_a_backend_or_experiment_in_no_family_is_refused_not_left_out() -> None:
    with pytest.raises(ValueError, match="backend 'stray' is in no family"):
        words_table([row("stray", "pause", "exclusive")], locks=LOCKS, faults=FAULTS)
    doubled = (*LOCKS, Family(name="again", members=("q1",)))
    with pytest.raises(ValueError, match="backend 'q1' is in 2 families"):
        words_table([row("q1", "pause", "exclusive")], locks=doubled, faults=FAULTS)
    with pytest.raises(ValueError, match="experiment 'slow' is in no family"):
        words_table([row("q1", "slow", "exclusive")], locks=LOCKS, faults=FAULTS)


def test_the_declared_families_name_each_member_once() -> None:
    for families in (LOCK_FAMILIES, FAULT_FAMILIES):
        members = [m for family in families for m in family.members]
        assert len(members) == len(set(members))
        assert len({f.name for f in families}) == len(families)


def test_a_words_block_renders_from_its_csv_and_check_names_it_when_stale(tmp_path: Path) -> None:
    # the reproduction's own columns, so the renderer reads it as a results file
    with (ROOT / "results" / "reproduction.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        first = next(reader)
        fields = reader.fieldnames
    assert fields is not None
    with (tmp_path / "r.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerow({**first, "backend": "redlock", "experiment": "client-pause", "verdict": "lost-updates"})
        writer.writerow({**first, "backend": "redlock", "experiment": "client-pause", "verdict": "exclusive",
                         "trial": "1", "trial_id": "other"})  # fmt: skip
    text = rendered_blocks("<!-- words: r.csv -->\n<!-- /words -->\n", base=tmp_path)
    assert "| Redlock and its libraries | *not run* | **loses updates**<br>1/2 50% [1.3–98.7%] |" in text
    assert "- Redlock and its libraries: `redlock`, `pottery`, `node-redlock`" in text  # the members, rendered
    assert stale_blocks(text, base=tmp_path) == []
    stale = stale_blocks(text.replace("1/2 50%", "2/2 100%"), base=tmp_path)
    assert stale == ["line 1: words r.csv"]
    assert stale_blocks("<!-- words:  r.csv -->\n<!-- /words -->", base=tmp_path) == [
        "line 1: malformed words marker <!-- words:  r.csv -->"
    ]
