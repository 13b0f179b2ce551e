"""An independent audit of fault strikes: was every injection the history calls struck on a lease that
was current when it acted?

    python scripts/audit_strikes.py RESULTS.csv [MORE.csv ...]     (each row's history)
    python scripts/audit_strikes.py HISTORY.jsonl.gz [...]

Independent of lockcompare on purpose: its own reader of the ``.jsonl.gz`` events (one JSON object a
line), its own idea of "struck" and "current", none of the checker's or the runner's code. For every
lease-aimed injection (a target ``holders:K``/``others:K``/``holder-member``, ``worker=holder``, or a
session-kill) that the history calls struck — an ``inject`` event whose ``struck`` is not false,
whose ``aim`` is not ``missed`` or ``raced``, and whose ``lease_held`` (when recorded) is true — it
finds the lease the event says it hit (``lease_owner``; a session kill: the lease whose session was
ended) among the workers' own ``acquire`` events, and checks that lease was *current* at the moment
the fault acted (``acted_ns``, else the event's ``t0``): granted before (its acquire returned), its
release not yet begun, its deadline (``valid_until``) not passed. A node fault aimed at the lease's
nodes also has its nodes checked against the nodes that granted the lease, where the backend said
(``granted_by``). One summary line per file; each failure after it; exit status 1 if any failed.
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from dataclasses import dataclass
from pathlib import Path

LEASE_TARGETS = ("holders:", "others:", "holder-member")


@dataclass
class LeaseSpan:
    owner: str
    worker: int
    round: int
    granted_ns: int  # the acquire returned
    valid_until: int | None
    released_ns: int | None  # its release began
    session: str | None
    granted_by: list[int] | None

    def current_at(self, t: int) -> str:
        """ "" when current at ``t``, else why not."""
        if self.granted_ns > t:
            return f"granted {(self.granted_ns - t) / 1e6:.1f} ms after the fault acted"
        if self.released_ns is not None and self.released_ns <= t:
            return f"its release began {(t - self.released_ns) / 1e6:.1f} ms before the fault acted"
        if self.valid_until is not None and self.valid_until <= t:
            return f"it expired {(t - self.valid_until) / 1e6:.1f} ms before the fault acted"
        return ""


def read_events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def lease_spans(events: list[dict]) -> list[LeaseSpan]:
    spans: list[LeaseSpan] = []
    open_span: dict[int, LeaseSpan] = {}
    for e in sorted((e for e in events if e.get("worker", -1) >= 0), key=lambda e: e["t0"]):
        worker = e["worker"]
        if e.get("kind") == "acquire" and e.get("ok") and e.get("owner"):
            span = LeaseSpan(
                owner=str(e["owner"]), worker=worker, round=e.get("round", -1), granted_ns=e["t1"],
                valid_until=e.get("valid_until"), released_ns=None,
                session=None if e.get("session") is None else str(e["session"]), granted_by=e.get("granted_by"),
            )  # fmt: skip
            spans.append(span)
            open_span[worker] = span
        elif e.get("kind") == "release" and worker in open_span:
            open_span.pop(worker).released_ns = e["t0"]
    return spans


def lease_aimed(e: dict) -> bool:
    target = str(e.get("target") or "")
    return (
        target.startswith(LEASE_TARGETS) or e.get("target_worker_spec") == "holder" or e.get("fault") == "session-kill"
    )


def called_struck(e: dict) -> bool:
    if e.get("action") != "inject" or e.get("struck") is False or e.get("aim") in ("missed", "raced"):
        return False
    if "lease_held" in e and e["lease_held"] is not True:
        return False
    return not str(e.get("detail") or "").startswith("skipped")


def lease_hit(e: dict, spans: list[LeaseSpan], acted: int) -> LeaseSpan | None:
    """The lease the event says it struck: by owner token where it names one; else (older events) the
    latest lease granted before it acted of the session it ended (a session kill) or of the worker it
    names (``worker=holder``; ``holder-member``: the roles' ``holder_worker``)."""
    owner = e.get("lease_owner") or (e.get("aimed_owner") if e.get("aim") == "struck" else None)
    if owner:
        return next((s for s in spans if s.owner == owner), None)

    def latest(matching: list[LeaseSpan]) -> LeaseSpan | None:
        before = [s for s in matching if s.granted_ns <= acted]
        return max(before, key=lambda s: s.granted_ns) if before else (matching[0] if matching else None)

    if e.get("fault") == "session-kill":
        ended = {str(s) for s in e.get("sessions_ended") or ()}
        ended |= {f"{s:x}" for s in e.get("sessions_ended") or () if isinstance(s, int)}  # ZooKeeper's ids

        def of_ended(s: LeaseSpan) -> bool:  # a PostgreSQL backend pid; a ZooKeeper owner token.<session>.<znode>
            parts = s.owner.split(".")
            return (s.session is not None and s.session in ended) or (len(parts) > 2 and parts[1] in ended)

        return latest([s for s in spans if of_ended(s)])
    worker = e.get("lease_worker", e.get("target_worker"))
    if worker is None and isinstance(e.get("roles"), dict):
        worker = e["roles"].get("holder_worker")
    return latest([s for s in spans if s.worker == worker]) if worker is not None else None


def audit(events: list[dict]) -> tuple[int, int, list[str]]:
    """(lease-aimed injections, those called struck, what is wrong with any of those)."""
    spans = lease_spans(events)
    aimed = [e for e in events if e.get("worker") == -1 and e.get("kind") == "fault" and lease_aimed(e)]
    aimed = [e for e in aimed if e.get("action") in ("inject", "skipped") and e.get("skipped") != "prepare"]
    struck = [e for e in aimed if called_struck(e)]
    wrong = []
    for e in struck:
        acted = e.get("acted_ns") or e["t0"]
        where = f"round {e.get('round')} {e.get('fault')} {e.get('target') or e.get('target_worker_spec')}"
        span = lease_hit(e, spans, acted)
        if span is None:
            wrong.append(f"{where}: no lease of the history is the one it says it struck")
            continue
        why = span.current_at(acted)
        if why:
            wrong.append(f"{where}: struck worker {span.worker}'s lease of round {span.round}, not current: {why}")
            continue
        if str(e.get("target") or "").startswith("holders:") and span.granted_by is not None:
            outside = [n for n in e.get("nodes") or () if n not in span.granted_by]
            if outside:
                wrong.append(f"{where}: nodes {outside} did not grant the lease it struck ({span.granted_by})")
    return len(aimed), len(struck), wrong


def histories(arg: Path) -> list[Path]:
    if arg.suffix != ".csv":
        return [arg]
    with arg.open(newline="") as f:
        return [arg.parent / row["history"] for row in csv.DictReader(f) if row.get("history")]


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: audit_strikes.py RESULTS.csv|HISTORY.jsonl.gz ...", file=sys.stderr)
        return 2
    failed = 0
    totals = [0, 0, 0]
    for arg in map(Path, argv):
        if not arg.exists():
            print(f"audit_strikes: {arg}: no such file", file=sys.stderr)
            return 2
        for path in histories(arg):
            if not path.exists():
                print(f"{path.name}: history missing")
                failed += 1
                continue
            n, struck, wrong = audit(read_events(path))
            totals = [totals[0] + n, totals[1] + struck, totals[2] + len(wrong)]
            verdict = "ok" if not wrong else f"{len(wrong)} NOT on a current lease"
            print(f"{path.name}: {n} lease-aimed injections, {struck} called struck: {verdict}")
            for line in wrong:
                print(f"    {line}")
            failed += bool(wrong)
    print(
        f"total: {totals[0]} lease-aimed injections, {totals[1]} called struck, "
        f"{totals[1] - totals[2]} on the lease current when they acted, {totals[2]} not"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
