"""What happened in every cell that did not stay exclusive, read from one trial's history each.

    python scripts/cell_mechanisms.py results/consensus.csv

For each (backend, experiment) whose trials are not all ``exclusive``, its worst trial (by the one
verdict order, analysis/verdicts.py): the verdict and why (``problem``), the evidence counts, and
the runner's fault events as they were recorded — the role each step aimed at, who led before and
after (``roles_before`` / ``roles``), the failover's new master — then the first incident (a lost
update's overwrite, else a conflicting entry) in ms after the trial began. The mechanism a doc tells
is read from these lines and the trial's own history (``lockcompare history``), not assumed.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from lockcompare.analysis.incidents import first_incident, ms, origin_ns
from lockcompare.analysis.results import read_results
from lockcompare.analysis.verdicts import severity
from lockcompare.render.timeline import load_history

EVIDENCE = ("conflicts", "lost_updates", "grants_while_held", "stale_writes_accepted", "releases_failed",
            "rounds_denied", "entries", "entries_planned")  # fmt: skip


def _fault_line(event: dict, origin: int) -> str:
    parts = [f"{ms(event['t0'], origin):8.1f} ms  {event.get('fault')} {event.get('action')}"]
    for field in ("target", "nodes", "aim", "detail", "roles_before", "roles"):
        value = event.get(field)
        if value not in (None, "", []):
            text = str(value)
            parts.append(f"{field}={text if len(text) < 90 else text[:87] + '...'}")
    return "  ".join(parts)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: cell_mechanisms.py RESULTS.csv", file=sys.stderr)
        return 2
    path = Path(argv[0])
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in read_results(path):
        cells[(str(row["backend"]), str(row["experiment"]))].append(row)
    for (backend, experiment), rows in cells.items():
        if all(r["verdict"] == "exclusive" for r in rows):
            continue
        worst = min(rows, key=lambda r: (severity(str(r["verdict"])), int(r["trial"])))
        verdicts = ", ".join(sorted({str(r["verdict"]) for r in rows}))
        print(
            f"== {backend} x {experiment}: {len(rows)} trials ({verdicts}); trial {worst['trial']}: {worst['verdict']}"
        )
        print(f"   {worst['trial_id']}")
        counts = ", ".join(f"{c} {worst[c]}" for c in EVIDENCE if str(worst.get(c, "")) not in ("", "0"))
        print(f"   {counts}")
        if worst.get("problem"):
            print(f"   problem: {str(worst['problem'])[:300]}")
        events = load_history(path.parent / str(worst["history"]))
        origin = origin_ns(events)
        faults = [e for e in events if e.get("kind") == "fault" and e.get("action") in ("inject", "heal", "skipped")]
        for event in faults[:4]:
            print("   " + _fault_line(event, origin))
        incident = first_incident(events)
        if incident is not None:
            print(f"   first incident: {incident}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
