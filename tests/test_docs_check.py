"""Issue 31: the renderer's check mode names every stale block — a changed figure, a table, an
excerpt from another trial — and writes nothing; excerpts come from a committed history by trial id."""

from __future__ import annotations

import csv
from pathlib import Path

from lockcompare.render.docs import main, rendered_blocks, stale_blocks

ROOT = Path(__file__).resolve().parents[1]
CSV = "results/reproduction.csv"


def _trial_ids(backend: str, experiment: str) -> list[str]:
    with (ROOT / CSV).open() as handle:
        return [
            r["trial_id"] for r in csv.DictReader(handle) if (r["backend"], r["experiment"]) == (backend, experiment)
        ]


def _excerpt(trial: str, body: str = "") -> str:
    return f"<!-- excerpt: {CSV} trial={trial} from=0 to=1500 kinds=acquire,write -->\n{body}<!-- /excerpt -->\n"


def test_an_excerpt_renders_the_trials_committed_history_in_its_window() -> None:
    trial = _trial_ids("single", "client-pause")[0]
    text = rendered_blocks(_excerpt(trial), base=ROOT)
    assert text.startswith(f"<!-- excerpt: {CSV} trial={trial}") and "```\n" in text
    body = text.split("```")[1]
    assert "acquire" in body and "write" in body and "release" not in body  # only the kinds asked for
    assert rendered_blocks(text, base=ROOT) == text  # stable


def test_check_mode_names_a_changed_figure_an_excerpt_of_another_run_and_a_stale_table(tmp_path: Path, capsys) -> None:
    first, second = _trial_ids("single", "client-pause")[:2]
    value = f"<!-- value: {CSV} backend=single experiment=client-pause sum:lost_updates -->"
    fresh = rendered_blocks(f"lost {value}0<!-- /value -->\n\n{_excerpt(first)}", base=ROOT)
    assert stale_blocks(fresh, base=ROOT) == []
    figure = fresh.replace(f"{value}{fresh.split(value)[1].split('<')[0]}<", f"{value}12345<")
    other_run = fresh.replace(
        rendered_blocks(_excerpt(first), base=ROOT), _excerpt(first, rendered_blocks(_excerpt(second), base=ROOT)
                                                              .split("-->\n", 1)[1].removesuffix("<!-- /excerpt -->\n"))
    )  # fmt: skip
    stale = stale_blocks(figure, base=ROOT)
    assert len(stale) == 1 and stale[0].startswith("line 1: value") and "'12345'" in stale[0]
    stale = stale_blocks(other_run, base=ROOT)
    assert len(stale) == 1 and stale[0].startswith("line 3: excerpt") and first in stale[0]
    doc = tmp_path / "doc.md"
    (tmp_path / "results").symlink_to(ROOT / "results")
    doc.write_text(figure)
    assert main(["--check", str(doc)]) == 1
    assert doc.read_text() == figure  # check mode writes nothing
    assert "line 1: value" in capsys.readouterr().err
    assert main([str(doc)]) == 0 and main(["--check", str(doc)]) == 0  # rendering repairs it


def test_a_marker_the_renderer_cannot_read_is_named_not_left_blank() -> None:
    # A doubled space once left three figures unrendered while --check stayed silent.
    text = f"ran <!-- value: {CSV}  rows --><!-- /value --> trials"
    assert stale_blocks(text, base=ROOT) == [f"line 1: malformed value marker <!-- value: {CSV}  rows -->"]


def test_a_table_block_on_a_csv_that_is_not_a_results_file_shows_its_columns(tmp_path: Path) -> None:
    (tmp_path / "derived.csv").write_text("hosts,trials_per_hour\n1,958\n4,3832\n")
    text = rendered_blocks("<!-- table: derived.csv hosts=4 -->\n<!-- /table -->\n", base=tmp_path)
    assert "| hosts   | trials_per_hour   |" in text and "| 4       | 3832              |" in text
    assert "958" not in text  # the filter applies as it does to results rows


def test_an_output_block_quotes_a_scripts_committed_output_whole_and_check_names_a_copy_that_drifted(
    tmp_path: Path,
) -> None:
    (tmp_path / "counts.txt").write_text("backend  lost\nredlock     2\n")
    text = rendered_blocks("printed:\n\n<!-- output: counts.txt -->\n<!-- /output -->\n", base=tmp_path)
    assert text == "printed:\n\n<!-- output: counts.txt -->\n```\nbackend  lost\nredlock     2\n```\n<!-- /output -->\n"
    assert stale_blocks(text, base=tmp_path) == []
    (tmp_path / "counts.txt").write_text("backend  lost\nredlock     3\n")  # the script ran again
    assert stale_blocks(text, base=tmp_path) == ["line 3: output counts.txt"]
    assert stale_blocks("<!-- output:  counts.txt -->\n<!-- /output -->", base=tmp_path) == [
        "line 1: malformed output marker <!-- output:  counts.txt -->"
    ]


def test_a_value_counts_a_retried_trial_once_as_the_table_does(tmp_path: Path) -> None:
    # --resume runs an `unknown` trial again and appends its row; the table keeps the rerun only,
    # and a figure in prose must count the same rows (a reproduction once held one such trial).
    with (ROOT / CSV).open(newline="") as handle:
        reader = csv.DictReader(handle)
        first = next(reader)
        fields = reader.fieldnames
    assert fields is not None
    retried = {**first, "verdict": "unknown", "lost_updates": "7", "run_id": "earlier"}
    with (tmp_path / "r.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows([retried, {**first, "lost_updates": "2"}])
    text = rendered_blocks(
        "<!-- value: r.csv rows -->?<!-- /value --> <!-- value: r.csv sum:lost_updates -->?<!-- /value -->",
        base=tmp_path,
    )
    assert ">1<" in text and ">2<" in text and ">7<" not in text
