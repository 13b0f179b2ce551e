"""The figures the docs render from a results file: one statistic over selected rows (``mean``,
``ci``, ``range``, ``scales``, ``span``...), and a plain CSV as a table. Pure: rows in, text out
(render/docs.py finds the markers and fills them)."""

from __future__ import annotations

import re
import statistics
from typing import Any


def selected(rows: list[dict[str, Any]], filters: str) -> list[dict[str, Any]]:
    """The rows matching every ``column=value,value`` of ``filters`` (compared as text).

    >>> selected([{"backend": "single", "trial": 0}, {"backend": "none", "trial": 0}], " backend=single,redlock")
    [{'backend': 'single', 'trial': 0}]
    """
    wanted = {col: set(values.split(",")) for col, _, values in (f.partition("=") for f in filters.split())}
    return [row for row in rows if all(str(row.get(col)) in values for col, values in wanted.items())]


def _number(value: object) -> float | None:
    """A cell as a number: provenance columns stay text (empty in old rows), so "2" counts as 2."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value)) if str(value).strip() else None
    except ValueError:
        return None


def statistic(rows: list[dict[str, Any]], stat: str) -> str:
    """One number over ``rows``, formatted as the tables format it.

    >>> rows = [{"lost_updates": 20, "marked": True}, {"lost_updates": 19, "marked": False}]
    >>> stats = ("mean:lost_updates", "sum:lost_updates", "min:lost_updates", "rows", "true:marked")
    >>> [statistic(rows, s) for s in (*stats, "range:lost_updates", "median:lost_updates")]
    ['19.5', '39', '19', '2', '1', '19–20', '19.5']
    >>> statistic(rows[:1], "range:lost_updates"), statistic(rows * 3, "ci:lost_updates")
    ('20', '19.5 ±0.6')
    >>> statistic([{"source_revision": "48dd125c2ec597053ffc65f77282d71f7b366cb3"}] * 2, "one:source_revision")
    '48dd125'
    >>> statistic([{"verdict": "lost-updates"}, {"verdict": "exclusive"}, {"verdict": "unknown"}], "violations")
    '1/2 50% [1.3–98.7%]'
    """
    if stat == "rows":
        return str(len(rows))
    if stat == "violations":  # the violation rate with its exact interval, as the tables give it
        from lockcompare.analysis.rates import violation_rate

        return violation_rate(rows).text()
    if stat == "scales":
        return scales(rows)
    op, _, column = stat.partition(":")
    if op == "span":
        return duration(wall_span(rows))
    if op == "one":  # the value every row shares (a file's revision), or an error naming the mix
        distinct = sorted({str(row.get(column, "")) for row in rows})
        if len(distinct) != 1:
            raise ValueError(f"the rows hold {len(distinct)} values in column {column!r}: {', '.join(distinct)}")
        (only,) = distinct
        return only[:7] if re.fullmatch(r"[0-9a-f]{40}", only) else only  # a commit, as git shortens it
    if op == "true":
        return str(sum(1 for row in rows if row.get(column) is True or str(row.get(column)).lower() == "true"))
    values = [v for v in (_number(row.get(column)) for row in rows) if v is not None]
    if not values:
        raise ValueError(f"no row has a number in column {column!r}")
    if op == "nonzero":
        return str(sum(1 for v in values if v > 0))
    computed = {"mean": lambda: sum(values) / len(values), "sum": lambda: sum(values), "min": lambda: min(values),
                "max": lambda: max(values), "median": lambda: statistics.median(values)}  # fmt: skip
    if op == "ci":
        from lockcompare.render.table import _mean_with_ci

        return _mean_with_ci(values)
    if op == "range":
        low, high = (f"{v:.1f}".rstrip("0").rstrip(".") for v in (min(values), max(values)))
        return low if low == high else f"{low}–{high}"
    if op not in computed:
        raise ValueError(
            f"unknown statistic {stat!r}"
            " (mean, ci, sum, min, max, median, range, nonzero, true, span, one: COLUMN; or rows)"
        )
    value = computed[op]()
    return f"{value:.1f}".rstrip("0").rstrip(".")


def scales(rows: list[dict[str, Any]]) -> str:
    """The timings the rows ran, as the lesson states its lab's (workers × rounds, work, TTL, pause),
    one group per distinct scale, the experiments that ran it in parentheses — so a sentence that
    states a run's scale is what its rows ran (issue 42: "2 workers × 40 rounds, 300 ms of work, TTL
    1000 ms" was untrue for 315 trials of the reproduction).

    >>> row = {"workers": 2, "rounds": 40, "work_ms": 300.0, "ttl_ms": 1000, "pause_ms": 0, "time_scale": 1.0}
    >>> rows = [{**row, "experiment": "baseline"}, {**row, "experiment": "short-ttl", "ttl_ms": 200},
    ...         {**row, "experiment": "client-pause", "pause_ms": 1200}]
    >>> for part in scales(rows).split("; "):
    ...     print(part)
    2 workers × 40 rounds, 300 ms of work, TTL 1000 ms (baseline)
    TTL 200 ms (short-ttl)
    a 1200 ms pause (client-pause)
    """

    def ms(value: object) -> str:
        number = _number(value)
        return "?" if number is None else f"{number:g}"

    groups: dict[tuple[str, str, str, str, str], list[str]] = {}
    for row in rows:
        key = (ms(row.get("workers")), ms(row.get("rounds")), ms(row.get("work_ms")), ms(row.get("ttl_ms")),
               ms(row.get("pause_ms")))  # fmt: skip
        names = groups.setdefault(key, [])
        if str(row.get("experiment")) not in names:
            names.append(str(row.get("experiment")))
    if not groups:
        raise ValueError("no rows to state a scale of")
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))  # stable: ties in file order
    (workers, rounds, work, ttl, pause), names = ordered[0]
    first = f"{workers} workers × {rounds} rounds, {work} ms of work, TTL {ttl} ms"
    parts = [first + (f", a {pause} ms pause" if pause != "0" else "") + f" ({', '.join(names)})"]
    for (w, r, wk, t, pz), others in ordered[1:]:
        diff = []
        if w != workers:
            diff.append(f"{w} workers")
        if (r, wk) != (rounds, work):
            diff.append(f"{r} rounds of {wk} ms of work")
        if t != ttl:
            diff.append(f"TTL {t} ms")
        if pz != pause:
            diff.append(f"a {pz} ms pause" if pz != "0" else "no pause")
        parts.append(f"{', '.join(diff)} ({', '.join(others)})")
    return "; ".join(parts)


def plain_table(rows: list[dict[str, Any]]) -> str:
    """A CSV that is not a results file (a script's figures, results/derived/), as it is: its
    columns, its cells as text.

    >>> print(plain_table([{"hosts": "1", "trials_per_hour": "212"}, {"hosts": "4", "trials_per_hour": "848"}]))
    | hosts   | trials_per_hour   |
    |---------|-------------------|
    | 1       | 212               |
    | 4       | 848               |
    """
    from tabulate import tabulate

    return str(tabulate([list(row.values()) for row in rows], headers=list(rows[0]), tablefmt="github",
                        disable_numparse=True))  # fmt: skip


def wall_span(rows: list[dict[str, Any]]) -> float:
    """Seconds the runs that wrote ``rows`` took: for each run (``run_id``), from its first trial's
    ``started_at`` to the latest ``started_at + wall_s``, summed over the runs — a file a resumed
    run finished took its parts' time, not the time between them.

    >>> wall_span([{"started_at": "2026-12-03T12:00:00Z", "wall_s": 10.0},
    ...            {"started_at": "2026-12-03T12:01:00Z", "wall_s": "6.5"}])
    66.5
    >>> wall_span([{"run_id": "a", "started_at": "2026-12-03T12:00:00Z", "wall_s": 60.0},
    ...            {"run_id": "b", "started_at": "2026-12-03T13:00:00Z", "wall_s": 6.5}])
    66.5
    """
    from datetime import datetime

    runs: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        wall = _number(row.get("wall_s"))
        if str(row.get("started_at") or "").strip() and wall is not None:
            start = datetime.fromisoformat(str(row["started_at"]).replace("Z", "+00:00")).timestamp()
            runs.setdefault(str(row.get("run_id") or ""), []).append((start, wall))
    if not runs:
        raise ValueError("no row has both started_at and wall_s")
    return sum(max(start + wall for start, wall in spans) - min(start for start, _ in spans) for spans in runs.values())


def duration(seconds: float) -> str:
    """``seconds`` as a reader says it, to the second: "33 min 6 s", "1 h 2 min 0 s", "48 s".

    >>> [duration(s) for s in (1986.4, 48.0, 3720.2, 59.6)]
    ['33 min 6 s', '48 s', '1 h 2 min 0 s', '1 min 0 s']
    """
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min {secs} s"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"
