"""Judge recorded trials again with today's checker, from their saved histories and counters.

    python scripts/rejudge.py results/*.csv            # report what changed
    python scripts/rejudge.py --write results/*.csv    # and rewrite each file with today's judgment

For every row with a history: the verdict recorded beside the verdict today's checker gives the
same history and the same resource counts (taken from the row). Only rows whose verdict changed
are listed, with the evidence behind the change; then a count per file, and every other field the
checker computes that the row records (conflicts, lost updates, ...), compared the same way. Without
``--write`` nothing is rewritten: a changed verdict is for a person to look at (and to re-run, if the
rule that changed it is news). With ``--write`` each file is rewritten atomically in the current
schema with every checker-computed field as today's checker gives it; a row whose verdict changed
says so in its ``note`` ("re-judged at <revision>: was <verdict>"), so a committed file never keeps a
verdict the current rules refuse, and never hides that it was re-judged. A file that is not a
results CSV is passed over with one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lockcompare.analysis.checker import check
from lockcompare.analysis.counters import ResourceCounters
from lockcompare.analysis.results import _format, read_results, rewrite
from lockcompare.backends import load_backend, traits_of
from lockcompare.errors import LockcompareError, ResultsFileError
from lockcompare.infra.provenance import source_revision
from lockcompare.render.timeline import load_history
from lockcompare.scenario.experiments import rests_on_renewal

EVIDENCE = (
    "grants_while_held", "stale_writes_accepted", "backwards_writes_accepted", "rounds_denied", "workers_starved",
    "progress_by_worker",
)  # fmt: skip


def declared_unavailable(backend: str) -> tuple[str, ...]:
    """The fault kinds the row's backend declares leave it unavailable (its ``unavailable_under``);
    () when the backend does not load here (a plug-in not installed): judged without the declaration."""
    try:
        return traits_of(load_backend(backend, check_viable=False)).unavailable_under
    except LockcompareError:
        return ()


def rejudge(csv_path: Path, *, write: bool = False) -> tuple[int, int]:
    """(rows judged, rows whose verdict changed), printing each change; ``write``: rewrite the file
    with today's judgment (module docstring)."""
    judged = changed = 0
    rows = read_results(csv_path)
    for row in rows:
        # An unknown the run itself gave (a worker that died, a trial cut short) rests on more than the
        # history; an unknown a re-judgment gave rests on the history and a rule, and a refined rule may
        # give its verdict back: judged again.
        if not row.get("history") or (row["verdict"] == "unknown" and "re-judged at" not in (row.get("note") or "")):
            continue
        try:
            events = load_history(csv_path.parent / row["history"])
        except ResultsFileError as exc:
            print(f"{csv_path}: {row['trial_id']}: {exc}")
            continue
        extra = max(row["extra_entries"], 0)
        counters = ResourceCounters(
            entries=row["entries"] + extra,
            # With extra rounds the row's conflicts are the planned work's only; the resource's own
            # count (every entry that found someone inside) is not in the row: taken from the history.
            conflicts=sum(1 for e in events if e["kind"] == "enter" and e["inside"] > 1) if extra else row["conflicts"],
            writes_accepted=row["writes_accepted"],
            writes_rejected=row["writes_rejected"],
            final_balance=row["final_balance"],
            occupancy=0,
            reads_rejected=max(row["reads_rejected"], 0),
        )
        metrics = check(
            events,
            counters,
            entries_planned=row["entries_planned"],
            unavailable_under=declared_unavailable(row["backend"]),
            rests_on_renewal=rests_on_renewal(row["experiment"]),
        )
        judged += 1
        now = metrics.as_row()
        was = row["verdict"]
        if metrics.verdict != was:
            changed += 1
            evidence = ", ".join(f"{k} {now[k]}" for k in EVIDENCE if now[k] not in (0, ""))
            print(f"{csv_path}: {row['trial_id']}: {was} -> {metrics.verdict} ({evidence})")
        # Every other field the checker computes that the row records: counted the same way today?
        for field, value in now.items():
            if field == "verdict" or field not in row:
                continue
            recorded, today = _format(row[field]), _format(value)
            if recorded == "" and today != "":  # a column the row's run did not record yet (older schema)
                not_recorded[field] = not_recorded.get(field, 0) + 1
            elif recorded != today:
                fields_changed[field] = fields_changed.get(field, 0) + 1
                if fields_changed[field] <= 3:  # the first few, as evidence; then a count
                    print(f"{csv_path}: {row['trial_id']}: {field} {recorded!r} -> {today!r}")
        if write:
            row.update({field: value for field, value in now.items() if field in row})
            if metrics.verdict != was:
                said = f"re-judged at {source_revision()[:12]}: was {was}"
                row["note"] = f"{row['note']}; {said}" if row.get("note") else said
    if write:
        rewrite(csv_path, rows)
    return judged, changed


#: Fields whose value changed, and on how many rows (all files of the run), as the CSV writes them.
fields_changed: dict[str, int] = {}
#: Fields the rows leave empty (their run predates the column) that today's checker computes.
not_recorded: dict[str, int] = {}


def main(paths: list[Path], *, write: bool = False) -> None:
    for path in paths:
        try:
            judged, changed = rejudge(path, write=write)
        except ResultsFileError as exc:
            print(f"{path}: not a results file, passed over ({exc})")
            continue
        rewritten = " (file rewritten)" if write else ""
        print(f"{path}: {judged} trials judged again, {changed} verdicts changed{rewritten}")
    counted = ", ".join(f"{field} on {n} rows" for field, n in sorted(fields_changed.items())) or "none"
    print(f"other fields the checker computes that differ from the rows: {counted}")
    older = ", ".join(f"{field} on {n} rows" for field, n in sorted(not_recorded.items())) or "none"
    print(f"fields the rows' runs did not record yet (empty in the row): {older}")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    write = "--write" in arguments
    files = [Path(p) for p in arguments if p != "--write"]
    if not files:
        sys.exit("usage: python scripts/rejudge.py [--write] RESULTS.csv ...")
    if write and (not source_revision() or source_revision().endswith("+dirty")):
        # A committed file's judgment names the code that made it: that code must be committed.
        sys.exit(f"rejudge: --write needs a clean checkout (this code is {source_revision() or 'outside git'})")
    main(files, write=write)
