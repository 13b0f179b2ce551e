"""Pictures from a results CSV and from one trial's history, with matplotlib (the ``plot`` extra).

Importing lockcompare never needs matplotlib: it is imported when a picture is drawn, and its
absence is a :class:`~lockcompare.errors.PlotDependencyError` that says what to install. The
figures use matplotlib's object API with the Agg canvas (no pyplot, so no global figure state and
no display is ever needed) and are written at a fixed size, 800 px wide, so they can be committed
and diffed.

- :func:`plot_matrix` — one figure per experiment (``matrix-<experiment>.png``): conflict rate
  with its 95% interval over trials above, lost updates per trial below, one bar per backend in
  every cell. One figure per experiment, not subplots of one figure, because the number of cells
  per experiment differs (a pause sweep has many) and a figure per experiment stays readable at
  800 px however many experiments a file holds, and can be shown on its own in a report.
- :func:`plot_timeline` — Kleppmann's diagram from a real trial: one lane per worker with its
  lease as it believes it, the key's real expiry on the nodes, its critical sections, pauses,
  reads and writes, and the runner's faults as shaded spans.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lockcompare import interrupts
from lockcompare.analysis import incidents
from lockcompare.analysis.cells import Cell, group_cells, slug
from lockcompare.analysis.history import Event
from lockcompare.analysis.stats import MeanCI, mean_ci
from lockcompare.errors import InvalidValueError, PlotDependencyError, RenderError
from lockcompare.render.pool import run_pieces

INSTALL_HINT = "plots need matplotlib: pip install 'lockcompare[plot]'"

#: Every known backend's colour, in the order bars are drawn: the same backend looks the same in
#: every figure (a colour-blind-safe-ish tab10 assignment; grey for no lock at all).
BACKEND_COLOURS: dict[str, str] = {
    "none": "#7f7f7f",
    "single": "#1f77b4",
    "redlock": "#d62728",
    "fenced": "#2ca02c",
    "pottery": "#ff7f0e",
    "redis-py": "#9467bd",
    "atomic": "#8c564b",
    "optimistic": "#e377c2",
    "etcd": "#17becf",
}
#: Colours for backends not in the mapping (plug-ins), picked by a hash of the name so a plug-in
#: keeps its colour across figures and runs (two plug-ins may share one; their names tell them apart).
EXTRA_COLOURS = ("#bcbd22", "#393b79", "#637939", "#e7ba52", "#6b6ecf", "#b5cf6b", "#9c9ede", "#252525")

WIDTH_PX = 800
DPI = 100
MATRIX_HEIGHT_PX = 600


def backend_colour(name: str) -> str:
    if name in BACKEND_COLOURS:
        return BACKEND_COLOURS[name]
    digest = hashlib.sha256(name.encode()).digest()
    return EXTRA_COLOURS[int.from_bytes(digest[:4], "big") % len(EXTRA_COLOURS)]


def backend_order(names: Sequence[str]) -> list[str]:
    """Known backends in :data:`BACKEND_COLOURS` order, then the others by name."""
    known = list(BACKEND_COLOURS)
    return sorted(set(names), key=lambda n: (0, known.index(n), "") if n in known else (1, 0, n))


def timeline_height_px(workers: int) -> int:
    """Room for the titles, the axis and the legend, plus 70 px per worker lane."""
    return 220 + 70 * max(workers, 1)


def require_matplotlib() -> Any:
    """The matplotlib pieces the figures use; :class:`PlotDependencyError` when it is missing."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        interrupts.raise_if_received()  # an import cut by Ctrl-C or SIGTERM is not a missing one
        raise PlotDependencyError(INSTALL_HINT) from None
    interrupts.raise_if_received()  # a signal matplotlib's import code caught and swallowed (issue 49)
    return SimpleNamespace(Figure=Figure, FigureCanvasAgg=FigureCanvasAgg, Patch=Patch)


def _figure(height_px: int) -> Any:
    mpl = require_matplotlib()
    fig = mpl.Figure(figsize=(WIDTH_PX / DPI, height_px / DPI), dpi=DPI, layout="constrained")
    mpl.FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # No "Software" entry: the bytes then depend on what is drawn, not on the matplotlib version.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    return path


# ---------------------------------------------------------------------------------------------
# the matrix


@dataclass(frozen=True)
class BarStats:
    """What one bar shows: means over the trials that can be judged, and what was left out."""

    conflict_rate: MeanCI  # percent of critical-section entries that found another worker inside
    lost_updates: MeanCI  # per trial
    unknown: int  # trials judged "unknown": their numbers are not trusted, so not averaged
    no_entries: int  # trials with no entry at all (the lock was never granted): no rate exists


def bar_stats(rows: Sequence[dict[str, Any]]) -> BarStats:
    judged = [r for r in rows if r["verdict"] != "unknown"]
    measured = [r for r in judged if r["entries"] > 0]
    return BarStats(
        conflict_rate=mean_ci([100.0 * r["conflicts"] / r["entries"] for r in measured]),
        lost_updates=mean_ci([float(r["lost_updates"]) for r in measured]),
        unknown=len(rows) - len(judged),
        no_entries=len(judged) - len(measured),
    )


def _natural(value: str) -> tuple[int, float, str]:
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def plot_matrix(rows: Sequence[dict[str, Any]], *, out: Path) -> list[Path]:
    """One PNG per experiment in the directory ``out``: ``matrix-<experiment>.png``."""
    cells = group_cells(rows)
    if not cells:
        raise RenderError("no trials to plot")
    experiments = list(dict.fromkeys(c.experiment for c in cells))
    pieces = [([c for c in cells if c.experiment == exp], exp, out / matrix_png_name(exp)) for exp in experiments]
    return run_pieces(_draw_experiment, pieces)


def _draw_experiment(cells: list[Cell], experiment: str, path: Path) -> Path:
    """One experiment's PNG (a piece of render/pool.py's work)."""
    return _plot_experiment(cells, experiment=experiment, path=path)


def matrix_png_name(experiment: str) -> str:
    return f"matrix-{slug(experiment)}.png"


def _plot_experiment(cells: list[Cell], *, experiment: str, path: Path) -> Path:
    groups = sorted({c.conditions for c in cells}, key=lambda cond: [_natural(v) for _, v in cond])
    backends = backend_order([c.backend for c in cells])
    stats = {(c.backend, c.conditions): bar_stats(c.rows) for c in cells}
    fig = _figure(MATRIX_HEIGHT_PX)
    rate_ax, lost_ax = fig.subplots(2, 1, sharex=True)
    width = 0.8 / len(backends)
    usual_n = Counter(s.conflict_rate.n for s in stats.values()).most_common(1)[0][0]
    label_bars = len(stats) <= 24
    lost_top = 1.0
    ticks: list[tuple[float, str]] = []
    for g, group in enumerate(groups):
        for i, backend in enumerate(backends):
            s = stats.get((backend, group))
            if s is None:
                continue
            x = g + (i - (len(backends) - 1) / 2) * width
            if len(groups) == 1:
                ticks.append((x, backend))
            for ax, ci, upper, fmt in (
                (rate_ax, s.conflict_rate, 100.0, "{:.0f}%"),
                (lost_ax, s.lost_updates, math.inf, "{:.1f}"),
            ):
                text = fmt.format(ci.mean) + ("" if ci.n == usual_n else f"\nn={ci.n}")
                _bar(ax, x=x, width=width, ci=ci, upper=upper, colour=backend_colour(backend),
                     text=text if label_bars else None)  # fmt: skip
            lost_top = max(lost_top, _top(s.lost_updates))
        if len(groups) > 1:
            ticks.append((g, ", ".join(f"{c} {v}" for c, v in group)))
    rate_ax.set_ylim(0, 112)  # the same 0-100% scale in every figure, with room for the labels
    rate_ax.set_ylabel("conflict rate\n(% of CS entries)")
    lost_ax.set_ylim(0, lost_top * 1.25)
    lost_ax.set_ylabel("lost updates\n(count per trial)")
    lost_ax.set_xticks([x for x, _ in ticks], [label for _, label in ticks], rotation=20 if len(ticks) > 4 else 0)
    for ax in (rate_ax, lost_ax):
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    fig.suptitle(f"{experiment}: conflicts and lost updates by backend", fontsize=12)
    rate_ax.set_title(_matrix_subtitle(list(stats.values()), usual_n), fontsize=9)
    handles = [require_matplotlib().Patch(facecolor=backend_colour(b), label=b) for b in backends]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6), fontsize=9, title="backend")
    return _save(fig, path)


def _matrix_subtitle(stats: list[BarStats], usual_n: int) -> str:
    others = any(s.conflict_rate.n != usual_n for s in stats)
    if usual_n == 1 and not others:
        text = "bars: one trial each, so no confidence interval"
    else:
        n = f"{usual_n} trial{'s' * (usual_n != 1)}" + (" (n on a bar that has another count)" if others else "")
        text = f"bars: mean of {n}; whiskers: 95% confidence interval (Student t)"
    unknown = sum(s.unknown for s in stats)
    empty = sum(s.no_entries for s in stats)
    left = [f"{unknown} judged unknown"] * bool(unknown) + [f"{empty} with no entries"] * bool(empty)
    return text + (f"\nleft out of the means: {', '.join(left)}" if left else "")


def _top(ci: MeanCI) -> float:
    if ci.n == 0:
        return 0.0
    return ci.mean + (ci.half_width if math.isfinite(ci.half_width) else 0.0)


def _bar(ax: Any, *, x: float, width: float, ci: MeanCI, upper: float, colour: str, text: str | None) -> None:
    """One bar with its interval, clipped to [0, upper] (a t-interval knows no bounds, a rate does)."""
    if ci.n == 0:
        ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7)
        return
    half = ci.half_width if math.isfinite(ci.half_width) else 0.0
    low, high = max(0.0, ci.mean - half), min(upper, ci.mean + half)
    ax.bar(x, ci.mean, width=width * 0.92, color=colour, edgecolor="black", linewidth=0.5)
    if half > 0:
        ax.errorbar(x, ci.mean, yerr=[[ci.mean - low], [high - ci.mean]], fmt="none", ecolor="black", capsize=3, lw=1)
    if text is not None:
        ax.annotate(text, (x, high), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7)


# ---------------------------------------------------------------------------------------------
# one trial's timeline

LEASE = "#9ecae1"
LEASE_OPEN = "#deebf7"
SECTION = "#08519c"
NODE_EXPIRY = "#a50f15"
ACCEPTED = "#238b45"
REJECTED = "#e31a1c"
CROWDED = "#fb6a4a"
FAULT = "#807dba"  # violet: never mistaken for the red of a conflict
#: A read's or write's value is written beside it only this far (px) from the lane's previous one.
LABEL_GAP_PX = 30
#: The share of the figure's width the plotting area takes (the rest: lane names, margins).
AXES_SHARE = 0.85
#: How far outside the window (a share of its width) an artist is still drawn: a marker is at most
#: a few dozen px wide, the plotting area several hundred.
EDGE_SHARE = 0.05


def plot_timeline(
    history: Sequence[Event],
    *,
    out: Path,
    title: str,
    ttl_ms: float | None = None,
    from_ms: float | None = None,
    to_ms: float | None = None,
) -> Path:
    """Draw one trial (see the module docstring) into the PNG ``out``.

    The window is ``from_ms``..``to_ms`` (ms after the first event); with neither, it is
    :func:`lockcompare.analysis.incidents.default_window` (around the first lost update or conflict), with
    one bound only, the 3 s after ``from_ms`` or before ``to_ms``. With
    ``ttl_ms`` the key's real expiry on the nodes (successful attempt + TTL) is marked too.
    """
    if not history:
        raise RenderError("the history has no events")
    window = _window(history, from_ms=from_ms, to_ms=to_ms)
    workers = sorted({e["worker"] for e in history if e["worker"] >= 0})
    fig = _figure(timeline_height_px(len(workers)))
    ax = fig.add_subplot()
    lanes = {w: len(workers) - 1 - i for i, w in enumerate(workers)}  # worker 0 on top
    legend = _Legend(window)
    _draw_faults(ax, history, legend=legend)
    _draw_crowding(ax, history, legend=legend)
    _draw_rounds(ax, history, lanes=lanes, ttl_ms=ttl_ms, legend=legend)
    _draw_sections(ax, history, lanes=lanes, legend=legend)
    _draw_steps(ax, history, lanes=lanes, legend=legend)
    ax.set_xlim(window.from_ms, window.to_ms)
    ax.set_ylim(-0.6, len(workers) - 0.4)
    ax.set_yticks(list(lanes.values()), [f"worker {w}" for w in lanes])
    ax.set_xlabel("time since the trial's first event (ms)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    fig.suptitle(title, fontsize=11)
    ttl = f"TTL {ttl_ms:g} ms" if ttl_ms is not None else "TTL unknown: the nodes' expiry is not marked"
    ax.set_title(f"{window.from_ms:.0f}–{window.to_ms:.0f} ms shown ({window.why}); {ttl}", fontsize=9)
    fig.legend(list(legend.entries.values()), list(legend.entries), loc="outside lower center", ncol=3, fontsize=8)
    return _save(fig, out)


def _window(history: Sequence[Event], *, from_ms: float | None, to_ms: float | None) -> incidents.Window:
    """The default window, or the one asked for; with one bound only, 3 s from / up to it."""
    if from_ms is None and to_ms is None:
        return incidents.default_window(history)
    span = incidents.QUIET_WINDOW_MS
    if from_ms is not None:
        lo = from_ms
    else:
        assert to_ms is not None  # both None returned above
        lo = max(0.0, to_ms - span)
    hi = to_ms if to_ms is not None else lo + span
    if hi <= lo:
        raise InvalidValueError(f"--to-ms ({hi:g}) must be after --from-ms ({lo:g})")
    return incidents.Window(lo, hi, "window chosen")


class _Legend:
    """Legend entries for what the window shows: an artist drawn wholly outside it adds none."""

    def __init__(self, window: incidents.Window) -> None:
        self.window = window
        self.entries: dict[str, Any] = {}  # label -> the first handle drawn with it

    def add(self, label: str, handle: Any, lo: float, hi: float | None = None) -> None:
        if (lo if hi is None else hi) >= self.window.from_ms and lo <= self.window.to_ms:
            self.entries.setdefault(label, handle)

    def near(self, lo: float, hi: float | None = None) -> bool:
        """Whether an artist spanning ``lo``..``hi`` (a point: ``lo``) can show in the window: it is
        drawn only then. A trial's history is many windows long, and drawing what the axes clip
        away cost most of a picture's time; the margin keeps a marker whose centre lies just
        outside, and shows partly."""
        margin = EDGE_SHARE * (self.window.to_ms - self.window.from_ms)
        return (lo if hi is None else hi) >= self.window.from_ms - margin and lo <= self.window.to_ms + margin


def _draw_faults(ax: Any, history: Sequence[Event], *, legend: _Legend) -> None:
    window = legend.window
    for span in incidents.fault_spans(history):
        end = span.end_ms if span.end_ms is not None else span.start_ms
        if end < window.from_ms or span.start_ms > window.to_ms:
            continue  # not in the picture: not in its legend either
        if span.end_ms is None:
            handle = ax.axvline(span.start_ms, color=FAULT, lw=2, label="fault injected (never healed)")
            legend.add("fault injected (never healed)", handle, span.start_ms)
        else:
            visible_end = max(span.end_ms, span.start_ms + 0.002 * (window.to_ms - window.from_ms))  # never 0 px
            handle = ax.axvspan(span.start_ms, visible_end,
                                color=FAULT, alpha=0.25, lw=0, label="fault, injected to healed")  # fmt: skip
            legend.add("fault, injected to healed", handle, span.start_ms, span.end_ms)
        ax.annotate(span.label, (max(span.start_ms, window.from_ms), 1), xycoords=("data", "axes fraction"),
                    xytext=(2, -2), textcoords="offset points", ha="left", va="top", fontsize=8,
                    color="#3f007d", clip_on=True)  # fmt: skip


def _draw_crowding(ax: Any, history: Sequence[Event], *, legend: _Legend) -> None:
    for lo, hi in incidents.crowded_spans(incidents.sections(history)):
        if not legend.near(lo, hi):
            continue
        handle = ax.axvspan(lo, hi, color=CROWDED, alpha=0.15, lw=0)
        legend.add("conflict: two or more inside", handle, lo, hi)


def _draw_rounds(
    ax: Any, history: Sequence[Event], *, lanes: dict[int, int], ttl_ms: float | None, legend: _Legend
) -> None:
    """Per round: the wait for the lock, the lease as believed, and the key's expiry on the nodes."""
    origin = incidents.origin_ns(history)
    released = {(e["worker"], e["round"]): e["t1"] for e in history if e["kind"] == "release"}
    end = max(e["t1"] for e in history)
    for e in history:
        if e["kind"] != "acquire" or e["worker"] < 0:
            continue
        y = lanes[e["worker"]]
        t0, t1 = incidents.ms(e["t0"], origin), incidents.ms(e["t1"], origin)
        if not legend.near(t0, _acquire_reach_ms(e, origin=origin, released=released, end=end, ttl_ms=ttl_ms)):
            continue
        (wait,) = ax.plot([t0, t1], [y - 0.3, y - 0.3], color="#969696", lw=1)
        legend.add("waiting to acquire", wait, t0, t1)
        if not e.get("ok"):
            (gave_up,) = ax.plot([t1], [y - 0.3], "x", color="#525252", ms=6)
            legend.add("acquire gave up", gave_up, t1)
            continue
        until_ms = _lease_end_ms(e, origin=origin, released=released, end=end)
        if e.get("valid_until") is not None:
            handle = ax.broken_barh([(t1, until_ms - t1)], (y + 0.17, 0.22), facecolor=LEASE)
            legend.add("lease as believed (to valid_until)", handle, t1, until_ms)
        else:
            handle = ax.broken_barh([(t1, until_ms - t1)], (y + 0.17, 0.22),
                                    facecolor=LEASE_OPEN, edgecolor=LEASE, hatch="..")  # fmt: skip
            legend.add("lease with no deadline (to release)", handle, t1, until_ms)
        if ttl_ms is not None and e.get("t_attempt") is not None and not e.get("no_ttl"):
            x = incidents.ms(e["t_attempt"], origin) + ttl_ms
            (tick,) = ax.plot([x], [y + 0.28], "|", color=NODE_EXPIRY, ms=16, mew=2.5)
            legend.add("key expires on nodes (attempt+TTL)", tick, x)


def _acquire_reach_ms(
    e: Event, *, origin: int, released: dict[tuple[int, int], int], end: int, ttl_ms: float | None
) -> float:
    """The latest time an acquire's artists reach (its lease, its key's expiry on the nodes), in ms."""
    reach = [incidents.ms(e["t1"], origin)]
    if e.get("ok"):
        reach.append(_lease_end_ms(e, origin=origin, released=released, end=end))
    if ttl_ms is not None and e.get("t_attempt") is not None:
        reach.append(incidents.ms(e["t_attempt"], origin) + ttl_ms)
    return max(reach)


def _lease_end_ms(e: Event, *, origin: int, released: dict[tuple[int, int], int], end: int) -> float:
    """Where a granted lease's bar ends: its ``valid_until``, else its release (else the history's end)."""
    deadline = e.get("valid_until")
    return incidents.ms(deadline if deadline is not None else released.get((e["worker"], e["round"]), end), origin)


def _draw_sections(ax: Any, history: Sequence[Event], *, lanes: dict[int, int], legend: _Legend) -> None:
    for s in incidents.sections(history):
        if not legend.near(s.start_ms, s.end_ms):
            continue
        handle = ax.broken_barh([(s.start_ms, s.end_ms - s.start_ms)], (lanes[s.worker] - 0.14, 0.28),
                                facecolor=SECTION, hatch="//" if s.open else None)  # fmt: skip
        legend.add("critical section (enter to exit)", handle, s.start_ms, s.end_ms)


def _draw_steps(ax: Any, history: Sequence[Event], *, lanes: dict[int, int], legend: _Legend) -> None:
    """Pauses as hatched bars; reads and writes as markers, with their values where there is room."""
    origin = incidents.origin_ns(history)
    labels: list[tuple[float, float, str]] = []
    for e in history:
        if e["worker"] < 0:
            continue
        y = lanes[e["worker"]]
        t = incidents.midpoint_ms(e, origin)
        if not legend.near(incidents.ms(e["t0"], origin), incidents.ms(e["t1"], origin)):
            continue
        if e["kind"] == "pause":
            t0, t1 = incidents.ms(e["t0"], origin), incidents.ms(e["t1"], origin)
            handle = ax.broken_barh([(t0, t1 - t0)], (y - 0.38, 0.16),
                                    facecolor="white", edgecolor="#525252", hatch="////")  # fmt: skip
            legend.add(f"paused ({e.get('how') or 'pause'})", handle, t0, t1)
        elif e["kind"] == "read":
            (handle,) = ax.plot([t], [y], "o", color="white", mec="black", ms=5)
            legend.add("read (r = balance read)", handle, t)
            if e.get("balance") is not None:
                labels.append((y, t, f"r={e['balance']}"))
        elif e["kind"] == "write":
            accepted = bool(e.get("accepted"))
            marker, colour = ("^", ACCEPTED) if accepted else ("X", REJECTED)
            (handle,) = ax.plot([t], [y], marker, color=colour, mec="black", mew=0.5, ms=8)
            legend.add("write accepted (w = value)" if accepted else "write rejected by the resource", handle, t)
            if e.get("value") is not None:
                labels.append((y, t, f"w={e['value']}"))
    for e in incidents.overwriting_writes(history):
        t = incidents.midpoint_ms(e, origin)
        if not legend.near(t):
            continue
        (ring,) = ax.plot([t], [lanes[e["worker"]]], "o", mfc="none", mec=REJECTED, mew=2, ms=15)
        legend.add("write that lost an update", ring, t)
    _draw_values(ax, labels, window=legend.window)


def _draw_values(ax: Any, labels: list[tuple[float, float, str]], *, window: incidents.Window) -> None:
    """Values above their markers, skipping any that would print over the lane's previous one
    (a wide window of a fast trial has sections a few pixels long)."""
    gap_ms = LABEL_GAP_PX * (window.to_ms - window.from_ms) / (WIDTH_PX * AXES_SHARE)
    last: dict[float, float] = {}
    for y, t, text in sorted(labels):
        if not window.from_ms <= t <= window.to_ms or t - last.get(y, -math.inf) < gap_ms:
            continue
        last[y] = t
        ax.annotate(text, (t, y + 0.14), xytext=(0, 1), textcoords="offset points", ha="center", va="bottom",
                    fontsize=7, clip_on=True)  # fmt: skip
