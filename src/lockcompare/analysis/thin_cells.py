"""Cells that were hardly exercised: the run's closing lines name every cell that made under half
its planned entries, with the reason (issue 48.1). Pure: rows of a results file in, lines out.

Not every thin cell is a defect — a single-node lock whose only node crashed rightly stays down,
Node's redlock under ``partition-clock-jump`` gets every grant back too late — and a thin cell
whose lock stopped being exercised says nothing about the lock. A reader must be able to tell
which is which without opening a history. The reason given, first that applies:

- *unknown*: trials the checker could not judge, with the first one's ``problem`` (e.g. "the lock
  stopped being exercised: … ConnectionError …", analysis/exercised.py);
- *declared*: the backend declares that unavailability its own (``unavailable_under``; the
  trials' ``problem`` says "as the backend declares");
- *stopped*: a violation came first, so the verdict stands, but the lock then stopped being
  exercised (the trials' ``problem`` says so, with the error);
- otherwise the cell's refusals by kind (``error:5656;held:49``), the lock's own answers.

>>> rows = [
...     {"backend": "single", "experiment": "node-crash", "entries": 7, "entries_planned": 80, "verdict": "degraded",
...      "refusals": "error:1100;held:9",
...      "problem": "unavailable after the crash, as the backend declares (unavailable_under: crash)"},
...     {"backend": "node-redlock", "experiment": "partition-clock-jump", "entries": 0, "entries_planned": 80,
...      "verdict": "unavailable", "refusals": "late:6", "problem": ""},
...     {"backend": "redlock", "experiment": "baseline", "entries": 80, "entries_planned": 80, "verdict": "exclusive",
...      "refusals": "held:120", "problem": ""},
... ]
>>> for line in thin_cell_lines(rows):
...     print(line)
cells that made under half their planned entries: 2
  single × node-crash: 7 of 80 entries: the backend's declared unavailability (unavailable after the crash)
  node-redlock × partition-clock-jump: 0 of 80 entries: refused late:6
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lockcompare.analysis.cells import Cell, group_cells

Row = dict[str, Any]

#: How much of an unknown trial's problem a closing line quotes.
QUOTED_CHARS = 240
#: What the checker's note says when a backend declares its unavailability (analysis/exercised.py).
DECLARED_MARK = ", as the backend declares (unavailable_under: "
#: ...and when a lock stopped being exercised after a violation (its verdict stands).
STOPPED_MARK = "the lock stopped being exercised"


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def thin_cells(rows: Sequence[Row]) -> list[Cell]:
    """The cells whose trials entered under half of what they planned (planned > 0)."""
    found = []
    for cell in group_cells(rows):
        planned = sum(_count(r.get("entries_planned")) for r in cell.rows)
        entries = sum(_count(r.get("entries")) for r in cell.rows)
        if planned and 2 * entries < planned:
            found.append(cell)
    return found


def refusals_by_kind(rows: Sequence[Row]) -> str:
    """The rows' refusals summed by kind, most first: ``error:5656;held:49``."""
    totals: dict[str, int] = {}
    for row in rows:
        for part in filter(None, str(row.get("refusals") or "").split(";")):
            reason, _, n = part.rpartition(":")
            if n.isdigit():
                totals[reason] = totals.get(reason, 0) + int(n)
    return ";".join(f"{k}:{v}" for k, v in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))) or "nothing"


def _quoted(text: str) -> str:
    return text if len(text) <= QUOTED_CHARS else text[: QUOTED_CHARS - 1] + "…"


def thin_reason(cell: Cell) -> str:
    """Why ``cell`` made under half its planned entries (module docstring)."""
    unknown = [r for r in cell.rows if r.get("verdict") == "unknown"]
    if unknown:
        problem = str(unknown[0].get("problem") or "no problem recorded")
        return f"unknown in {len(unknown)} of {len(cell.rows)} trials: {_quoted(problem)}"
    declared = [str(r.get("problem") or "") for r in cell.rows if DECLARED_MARK in str(r.get("problem") or "")]
    if declared:
        note = next(p for p in declared[0].split("; ") if DECLARED_MARK in p)
        return f"the backend's declared unavailability ({note.split(DECLARED_MARK)[0]})"
    stopped = [str(r.get("problem") or "") for r in cell.rows if STOPPED_MARK in str(r.get("problem") or "")]
    if stopped:  # a violation came first, so the verdict stands: the lock still stopped being exercised
        note = _quoted(stopped[0][stopped[0].index(STOPPED_MARK) :])
        return f"in {len(stopped)} of {len(cell.rows)} trials {note}"
    return f"refused {refusals_by_kind(cell.rows)}"


def thin_cell_lines(rows: Sequence[Row]) -> list[str]:
    """A heading and one line per thin cell ([] when every cell made at least half its entries)."""
    cells = thin_cells(rows)
    if not cells:
        return []
    lines = [f"cells that made under half their planned entries: {len(cells)}"]
    for cell in cells:
        planned = sum(_count(r.get("entries_planned")) for r in cell.rows)
        entries = sum(_count(r.get("entries")) for r in cell.rows)
        lines.append(f"  {cell.title}: {entries} of {planned} entries: {thin_reason(cell)}")
    return lines
