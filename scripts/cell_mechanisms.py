"""What happened in every cell that did not stay exclusive, read from one trial's history each.

    python scripts/cell_mechanisms.py results/reproduction.csv
    python scripts/cell_mechanisms.py results/reproduction.csv --backends etcd,zk-lock --experiments leader-crash

For each (backend, experiment) whose trials are not all ``exclusive``, its worst trial (by the one
verdict order, analysis/verdicts.py; an unmarked one first): the verdict and why (``problem``), the evidence counts, and
the runner's fault events as they were recorded — the role each step aimed at, who led before and
after (``roles_before`` / ``roles``), the failover's new master — then the first incident (a lost
update's overwrite, else a conflicting entry) in ms after the trial began. The mechanism a doc tells
is read from these lines and the trial's own history (``lockcompare history``), not assumed.
``--backends`` and ``--experiments`` (comma-separated) keep only those cells, in that order.
"""

from __future__ import annotations

import argparse
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


def _names(text: str | None) -> list[str] | None:
    return [name for name in text.split(",") if name] if text else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--backends", help="only these backends' cells, in this order")
    parser.add_argument("--experiments", help="only these experiments' cells, in this order")
    options = parser.parse_args(argv)
    path: Path = options.results
    backends, experiments = _names(options.backends), _names(options.experiments)
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in read_results(path):
        backend, experiment = str(row["backend"]), str(row["experiment"])
        if (backends is None or backend in backends) and (experiments is None or experiment in experiments):
            cells[(backend, experiment)].append(row)
    order = sorted(
        cells,
        key=lambda cell: (
            backends.index(cell[0]) if backends else 0,
            experiments.index(cell[1]) if experiments else 0,
        ),
    )
    for backend, experiment in order:
        rows = cells[(backend, experiment)]
        if all(r["verdict"] == "exclusive" for r in rows):
            continue
        # Of the worst verdict, an unmarked trial first: its mechanism is the lock's, not the machine's.
        worst = min(rows, key=lambda r: (severity(str(r["verdict"])), r.get("timing_marked") is True, int(r["trial"])))
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
