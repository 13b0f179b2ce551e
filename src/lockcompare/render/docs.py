"""Keep the README's result tables rendered from the committed CSVs, never typed by hand.

A table in a Markdown file is delimited by markers naming its source::

    <!-- table: results/seed-pattern.csv -->
    ...rendered here by `python -m lockcompare.render.docs README.md docs/*.md`...
    <!-- /table -->

and optionally which of its rows, by column (comma lists; a row must match every column given),
so one committed run can feed several tables::

    <!-- table: results/reproduction.csv backend=single,redlock experiment=baseline,client-pause -->

A number in prose is rendered the same way, so a sentence cannot keep a figure its CSV no longer
holds::

    single loses <!-- value: results/reproduction.csv backend=single experiment=client-pause
    mean:lost_updates -->19.8<!-- /value --> updates per trial

(one line in the file; broken here to fit).

The statistic is one of ``mean:COLUMN`` (one decimal, as the tables round), ``sum:COLUMN``,
``ci:COLUMN`` (the mean with its 95% interval, "78.6 ±1.1", as the tables give it),
``min:COLUMN``, ``max:COLUMN``, ``median:COLUMN``, ``range:COLUMN`` ("19–20", or "20" when every row agrees),
``nonzero:COLUMN`` (rows where it is > 0), ``true:COLUMN`` (rows where it is true), ``scales`` (the
timings the rows ran, grouped: :func:`scales`), ``span:wall_s``
(each run's wall time from its first trial's ``started_at`` to its last trial's end, summed over the
runs that wrote the rows — a resumed file's parts, not the gap between them: "32 min 11 s"),
or ``rows`` (how many rows match).

A history excerpt is rendered the same way, by the trial's id in a CSV and a time window (ms
after the trial's first event), optionally only some kinds of step, so a story told from a history
is the committed history's and no other run's::

    <!-- excerpt: results/reproduction.csv trial=<trial_id> from=1200 to=1800 kinds=acquire,write -->
    ...the timeline lines, as `lockcompare history --from-ms 1200 --to-ms 1800` prints them...
    <!-- /excerpt -->

A script's printed output, kept in a committed text file (results/derived/), is quoted the same way,
whole, as a code block, so a count a script printed is the committed file's and not a copy::

    <!-- output: results/derived/reproduction-skipped.txt -->
    ...the file's text, fenced...
    <!-- /output -->

``python -m lockcompare.render.docs --check FILE...`` renders without writing and exits 1 naming
every block whose text differs from a fresh rendering (`.ci/run` runs it), and every number in the
prose outside a rendered block, a code span or fence, a link target or an HTML comment that the
short allow-list ``ALLOWED`` (settings of the lesson's lab, versions, names that carry a number)
does not explain: a figure is rendered from a committed file or not written at all. The test suite
checks the same (tests/test_docs_check.py, tests/test_docs_numbers.py).
The fault kinds' table is rendered from their modules (spec/faultkinds), between
``<!-- faultkinds -->`` and ``<!-- /faultkinds -->``; the verdicts' table from analysis/verdicts.py,
between ``<!-- verdicts -->`` and ``<!-- /verdicts -->``.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import latest_rows, read_results
from lockcompare.errors import LockcompareError
from lockcompare.render.table import render

#: A value block: CSV, filters, statistic; the body is the rendered number.
VALUE = re.compile(
    r"(<!-- value: (?P<csv>\S+)(?P<filters>(?: \w+=\S+)*) (?P<stat>rows|scales|\w+:\w+) -->)"
    r"(?P<body>[^<]*)(<!-- /value -->)"
)

BLOCK = re.compile(
    r"(<!-- table: (?P<csv>\S+)(?P<filters>(?: \w+=\S+)*) -->\n)(?P<body>.*?)(<!-- /table -->)", re.DOTALL
)

#: An excerpt block: CSV, the trial's id, a window in ms and optionally the kinds of step shown.
EXCERPT = re.compile(
    r"(<!-- excerpt: (?P<csv>\S+) trial=(?P<trial>\S+) from=(?P<from>[0-9.]+) to=(?P<to>[0-9.]+)"
    r"(?: kinds=(?P<kinds>[\w,-]+))? -->\n)(?P<body>.*?)(<!-- /excerpt -->)",
    re.DOTALL,
)


#: An output block: a committed text file (a script's printed table), quoted whole.
OUTPUT = re.compile(r"(<!-- output: (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- /output -->)", re.DOTALL)

FAULT_KINDS = re.compile(r"(<!-- faultkinds -->\n)(?P<body>.*?)(<!-- /faultkinds -->)", re.DOTALL)
#: The verdicts' table, from their one vocabulary (analysis/verdicts.py).
VERDICTS_TABLE = re.compile(r"(<!-- verdicts -->\n)(?P<body>.*?)(<!-- /verdicts -->)", re.DOTALL)


def fault_kinds_table() -> str:
    """docs/faults.md's table of kinds, one row per module of spec/faultkinds."""
    from lockcompare.spec.faultkinds import KINDS, LINKS, NODES

    whom = {NODES: "`nodes=`", LINKS: "`nodes=` and `worker=`"}
    lines = [
        "| kind | what it does | acts on | parameters | `for=` omitted | lock servers must offer | sentinel excuses |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in KINDS.values():
        params = "; ".join(f"{p.text}{': ' + p.help if p.help else ''}" for p in kind.params) or "–"
        target = whom.get(kind.acts_on, "`worker=`") + (f" (or `{kind.target_alias}=`)" if kind.target_alias else "")
        cells = (
            f"`{kind.name}`", kind.summary, target, params, kind.without_for,
            ", ".join(sorted(kind.needs)) or "–",
            "the workers it delays" if kind.excuses_worker else ("calls while it lasts" if kind.excuses_calls else "–"),
        )  # fmt: skip
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


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
    """
    if stat == "rows":
        return str(len(rows))
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


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """A results CSV (typed, in today's schema; one row per trial, a rerun superseding the row it
    retried, as the tables count them), or any other committed CSV as text — a script's counts, a
    source's published figures — that value blocks can read too."""
    import csv

    with path.open(newline="") as handle:
        header = handle.readline()
    if header.startswith("schema_version,"):
        return latest_rows(read_results(path))
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def rendered_blocks(markdown: str, *, base: Path) -> str:
    """``markdown`` with every table block, value, excerpt and output re-rendered from its file (paths
    relative to ``base``)."""
    return _render(markdown, base=base, stale=None)


def stale_blocks(markdown: str, *, base: Path) -> list[str]:
    """Every block of ``markdown`` whose text differs from a fresh rendering, one line each
    (``line N: table results/x.csv backend=...``), and every marker the renderer cannot read (a
    figure it would silently leave alone); empty when the file is up to date."""
    stale: list[str] = malformed_markers(markdown)
    _render(markdown, base=base, stale=stale)
    return stale


def malformed_markers(markdown: str) -> list[str]:
    """Opening markers (value, table, excerpt, output) that no block pattern reads, e.g. a doubled space.

    >>> malformed_markers("a <!-- value: r.csv  rows -->3<!-- /value --> b <!-- value: r.csv rows -->3<!-- /value -->")
    ['line 1: malformed value marker <!-- value: r.csv  rows -->']
    """
    read = {m.start() for pattern in (VALUE, BLOCK, EXCERPT, OUTPUT) for m in pattern.finditer(markdown)}
    found = []
    for marker in re.finditer(r"<!-- (value|table|excerpt|output): [^>]*-->", markdown):
        if marker.start() not in read:
            line = markdown.count("\n", 0, marker.start()) + 1
            found.append(f"line {line}: malformed {marker[1]} marker {marker[0]}")
    return found


def _render(markdown: str, *, base: Path, stale: list[str] | None) -> str:
    cache: dict[str, list[dict[str, Any]]] = {}

    def rows_of(csv: str) -> list[dict[str, Any]]:
        if csv not in cache:
            cache[csv] = _read_rows(base / csv)
        return cache[csv]

    def note(match: re.Match[str], fresh: str, what: str) -> str:
        if stale is not None and match.group(0) != fresh:
            line = match.string.count("\n", 0, match.start()) + 1
            stale.append(f"line {line}: {what}")
        return fresh

    def value(match: re.Match[str]) -> str:
        rows = selected(rows_of(match["csv"]), match["filters"])
        if not rows:
            raise ValueError(f"no row of {match['csv']} matches{match['filters']}")
        fresh = f"{match.group(1)}{statistic(rows, match['stat'])}{match.group(6)}"
        return note(match, fresh, f"value {match['csv']}{match['filters']} {match['stat']} (says {match['body']!r})")

    def fill(match: re.Match[str]) -> str:
        rows = selected(rows_of(match["csv"]), match["filters"])
        if not rows:
            raise ValueError(f"no row of {match['csv']} matches{match['filters']}")
        table = render(rows, fmt="github") if "schema_version" in rows[0] else plain_table(rows)
        return note(match, f"{match.group(1)}{table}\n{match.group(5)}", f"table {match['csv']}{match['filters']}")

    def excerpt(match: re.Match[str]) -> str:
        fresh = f"{match.group(1)}{excerpt_text(base / match['csv'], rows_of(match['csv']), match)}<!-- /excerpt -->"
        return note(match, fresh, f"excerpt {match['csv']} trial={match['trial']}")

    def output(match: re.Match[str]) -> str:
        text = (base / match["path"]).read_text()
        fresh = f"{match.group(1)}```\n{text.rstrip(chr(10))}\n```\n{match.group(4)}"
        return note(match, fresh, f"output {match['path']}")

    def kinds(match: re.Match[str]) -> str:
        return note(match, f"{match.group(1)}{fault_kinds_table()}{match.group(3)}", "fault kinds table")

    def verdicts(match: re.Match[str]) -> str:
        from lockcompare.analysis.verdicts import markdown_table

        return note(match, f"{match.group(1)}{markdown_table()}\n{match.group(3)}", "verdicts table")

    markdown = FAULT_KINDS.sub(kinds, markdown)
    markdown = VERDICTS_TABLE.sub(verdicts, markdown)
    markdown = VALUE.sub(value, markdown)
    markdown = BLOCK.sub(fill, markdown)
    markdown = OUTPUT.sub(output, markdown)
    return EXCERPT.sub(excerpt, markdown)


def excerpt_text(csv: Path, rows: list[dict[str, Any]], match: re.Match[str]) -> str:
    """The timeline of trial ``match['trial']`` of ``csv`` in its window, fenced as a code block."""
    from lockcompare.render.report import history_path
    from lockcompare.render.timeline import load_history, render_timeline

    row = next((r for r in rows if r.get("trial_id") == match["trial"]), None)
    if row is None:
        raise ValueError(f"{csv}: no trial {match['trial']!r}")
    kinds = set(match["kinds"].split(",")) if match["kinds"] else None
    path = history_path(row, results=csv)
    if path is None:
        raise ValueError(f"{csv}: the history of {match['trial']!r} is outside the CSV's folder")
    events = load_history(path)
    timeline = render_timeline(events, from_ms=float(match["from"]), to_ms=float(match["to"]), kinds=kinds)
    return f"```\n{timeline}\n```\n"


#: Numbers in prose that are not results: the lesson lab's settings and defaults, versions, commands,
#: section numbering. Each is a pattern with the word or unit that makes it a setting, and why; a
#: number matched by none of them is a figure and must come from a block. Keep this list short: a
#: result that fits one of these patterns by accident is still a result, so a new pattern names the
#: setting, never a bare number.
ALLOWED: tuple[tuple[str, str], ...] = (
    (
        # Never "19 trials of 20": a count of some trials out of others is a result (issue 42).
        r"\b\d+\s(?:workers?|rounds?|(?:lock )?nodes?|trials?|jobs|cores?|threads?|CPU hogs?)\b(?!\s+of\s+\d)",
        "the lab's size and a run's shape: 2 workers, 40 rounds, 5 nodes, 5 trials",
    ),
    (
        r"\b(?:TTL|lease|paused?|work|timeouts?|delay|jumps?|think time|margin|offset|every|of every)"
        r"\s(?:of |is |= |> |< )?(?:about )?\d+(?:\.\d+)?(?: ?(?:ms|s)\b)?",
        "a setting named before its value: TTL 1000 ms, work 300, a pause of 1200 ms",
    ),
    (
        r"\b\d+(?:\.\d+)? ?(?:ms|s)\b(?=\s(?:of work|of (?:every|pause)|TTL|lease|pause|work|timeout|delay"
        r"|(?:clock )?jump|sleep|after|into|margin|allowance|interval|window|limit|strobe|stop))",
        "a duration that says what it sets: 300 ms of work, 50 ms after each acquire, a 250 ms margin",
    ),
    (
        r"\b\d+ [−-] \d+ ms\b|\b\d+ ?[/x×] ?TTL\b|\bTTL ?/ ?\d+\b|\bwork ?/ ?\d+\b|[×x] ?\d+(?:\.\d+)?\b",
        "the margins' and faults' formulas (1000 − 300 ms, 2 x TTL, TTL/10, work/2) and time scales (×0.1)",
    ),
    (
        r"(?i:\b(?:python|postgresql|redis|etcd|schema|version|utf)[ -]?[≥>=]*\s?\d+(?:\.\d+)*\b)|\b\d+(?:\.\d+){2,}\b",
        "versions, encodings and addresses: Python ≥ 3.11, schema 7, UTF-8, 127.0.0.1",
    ),
    (r"^#{1,6} .*$|^\s*\d+\.\s", "headings and numbered lists"),
    (
        r"(?i:\b(?:issue|round|step|port|pid|node|nodes|worker|trial|token|exits?|exit codes?|mode|line|run)"
        r"[\s-]?#?\d+(?:(?:, ?| and )\d+)*\b)|#\d+\b",
        "names that carry a number: worker 0, nodes 3,4, token 1, issue 31, trial #3, exit code 2, mode 0600",
    ),
    (
        r"\b\d+-(?:node|worker|core|second|bit|byte)\b|\b[357] of (?:the )?[57]\b|\bK [<>]=? \d(?: of \d)?\b|\bK-1\b",
        "the quorum and set-up of the lab: 2-core, 3 of 5, K < 3",
    ),
    (
        r"^\|\s*`[^`|]*--[^`|]*`[^|]*\|.*$|^\|.*`LOCKCOMPARE_MAX_\w+`.*$",
        "a table row of settings (its first cell an option, or a limit's variable): limits, defaults",
    ),
    (
        r"\bat\s+most\s+\d+(?: \d{3})*\s+(?:steps|characters|bytes|MB|KB)\b",
        "a limit in prose: at most 64 steps, at most 8 192 characters",
    ),
    (
        r"(?:/ ?|\bof )(?:80|40)\b|\bbalance \+ 1\b|\b[A-E] [=>] 0\b|\b95% (?:interval|CI)\b",
        "the lab's 80 planned entries (2 workers × 40 rounds), the write's + 1, the lesson's pattern (B = 0), 95% CI",
    ),
    (r"\b[0-9a-f]*[a-f][0-9a-f]*\b|\b[0-9a-f]{7,40}\b", "revisions and trial ids (hex)"),
)

#: Each pattern is matched on its own, so one that starts earlier cannot hide another's match.
_ALLOWED = [re.compile(pattern, re.MULTILINE) for pattern, _ in ALLOWED]

#: Everything in a file that is not prose: rendered blocks, code fences and spans, HTML comments,
#: link targets and image paths. Removed (replaced by spaces, so lines keep their numbers) before
#: numbers are looked for.
_NOT_PROSE = re.compile(
    "|".join(
        (
            r"<!-- (value|table|excerpt|output): .*?<!-- /\1 -->",  # a rendered block
            r"<!-- faultkinds -->.*?<!-- /faultkinds -->",
            r"<!-- verdicts -->.*?<!-- /verdicts -->",
            r"^```.*?^```[^\n]*$",  # a fenced code block
            r"<!--.*?-->",  # an HTML comment (a marker, or a note for the maintainers)
            r"`[^`\n]+`",  # a code span
            r"\]\([^)\s]+\)",  # a link's or image's target
            r"<https?://[^>]+>|https?://\S+",  # a bare address
        )
    ),
    re.DOTALL | re.MULTILINE,
)

_NUMBER = re.compile(r"(?<![\w.])[-−+]?\d+(?:[.,]\d+)*(?:\s?±\s?\d+(?:\.\d+)?)?%?(?![\w])")


def prose_numbers(markdown: str) -> list[tuple[int, str]]:
    """Every number in ``markdown``'s prose outside a rendered block, a code span or fence, a link
    target or an HTML comment that no pattern of ``ALLOWED`` explains, as (line, number).

    >>> prose_numbers("TTL 1000 ms, 2 workers; single lost 19.8 updates (`--trials 5`)\\n")
    [(1, '19.8')]
    >>> prose_numbers("lost <!-- value: r.csv rows -->5<!-- /value --> of 81 entries\\n```\\n42\\n```\\n")
    [(1, '81')]
    """
    covered = bytearray(len(markdown))  # 1 where a character is not prose or is an allowed setting

    def cover(pattern: re.Pattern[str], text: str) -> None:
        for match in pattern.finditer(text):
            covered[match.start() : match.end()] = b"\1" * (match.end() - match.start())

    cover(_NOT_PROSE, markdown)
    prose = "".join(" " if c and ch != "\n" else ch for c, ch in zip(covered, markdown, strict=True))
    for allowed in _ALLOWED:
        cover(allowed, markdown)  # the original: a settings row is known by its first cell's code span
        cover(allowed, prose)
    return [
        (markdown.count("\n", 0, m.start()) + 1, m.group(0))
        for m in _NUMBER.finditer(markdown)
        if not any(covered[m.start() : m.end()])
    ]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    names = [a for a in args if a != "--check"]
    if not names:
        print("usage: python -m lockcompare.render.docs [--check] README.md docs/*.md", file=sys.stderr)
        return 2
    failed = False
    for name in names:  # a block's CSV path is relative to its own file (docs/ use ../results/...)
        path = Path(name)
        try:
            text = path.read_text()
            if check:
                for line in stale_blocks(text, base=path.parent):
                    print(f"{name}: {line}: stale (run: python -m lockcompare.render.docs {name})", file=sys.stderr)
                    failed = True
                for number_line, number in prose_numbers(text):
                    print(f"{name}: line {number_line}: {number!r} in prose outside a rendered block", file=sys.stderr)
                    failed = True
            else:
                fresh = rendered_blocks(text, base=path.parent)
                if fresh != text:
                    path.write_text(fresh)
        except (OSError, ValueError, LockcompareError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
