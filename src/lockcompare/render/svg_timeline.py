"""One trial's timeline as inline SVG, for the HTML report (render/html_report.py): no matplotlib.

The picture is Jepsen's ``timeline.html`` turned on its side, and the same story as the PNG of
render/plots.py: a lane per worker, time running right, over the window
:func:`lockcompare.analysis.incidents.default_window` picks (around the first lost update, else the
first conflict). In each lane, top to bottom:

- the lease as the worker believed it (successful acquire to its ``valid_until``; hatched when the
  lease has no deadline: to its release);
- the lease as the server saw it: the key lives on the lock nodes from the successful attempt for
  the TTL, or until the release deleted it, or until a node fault left it on fewer than a majority
  of the nodes (by the holders the runner read from every node at the injection; a red cross);
- the acquire wait (grey), the hold (the critical section, enter to exit), pauses (hatched), reads
  (open dots) and writes (green triangle accepted, red cross rejected by the resource).

Faults are violet bands across every lane, labelled; stretches where two or more workers were
inside are red bands, writes that lost an update are ringed in red, and the first incident is a
dashed red line. Every mark carries a ``<title>`` (a tooltip with its numbers) and a class
(``lane``, ``lease``, ``server-lease``, ``cs``, ``fault``, ``violation``...) so a browser test can
find it. Pure: a history in, a string out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from lockcompare.analysis import incidents
from lockcompare.analysis.history import Event
from lockcompare.analysis.holders import NODE_LOSING_FAULTS, UNREADABLE
from lockcompare.scenario import faultkinds

WIDTH = 1000
LEFT, RIGHT, TOP, BOTTOM = 84, 16, 34, 30
LANE_H = 58
LEASE = "#9ecae1"
SERVER = "#a50f15"
SECTION = "#08519c"
WAIT = "#969696"
ACCEPTED = "#238b45"
REJECTED = "#e31a1c"
CROWDED = "#fb6a4a"
FAULT = "#807dba"  # violet, as in the PNG: never mistaken for the red of a conflict


class _Scale:
    def __init__(self, window: incidents.Window) -> None:
        self.lo, self.hi = window.from_ms, max(window.to_ms, window.from_ms + 1e-3)
        self.width = WIDTH - LEFT - RIGHT

    def x(self, t_ms: float) -> float:
        clamped = min(max(t_ms, self.lo), self.hi)
        return round(LEFT + (clamped - self.lo) / (self.hi - self.lo) * self.width, 1)

    def shows(self, lo: float, hi: float) -> bool:
        return hi >= self.lo and lo <= self.hi

    def span(self, lo: float, hi: float) -> tuple[float, float]:
        """x and width of ``lo..hi`` clipped to the window, never under 1 px (a fast step still shows)."""
        x0, x1 = self.x(lo), self.x(hi)
        return x0, round(max(x1 - x0, 1.0), 1)


def _title(text: str) -> str:
    return f"<title>{escape(text)}</title>"


def _rect(cls: str, x: float, y: float, w: float, h: float, fill: str, tip: str, extra: str = "") -> str:
    return f'<rect class="{cls}" x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}"{extra}>{_title(tip)}</rect>'


def tick_step(span_ms: float, *, ticks: int = 8) -> float:
    """A round step (1, 2 or 5 × 10^k ms) giving about ``ticks`` ticks over ``span_ms``.

    >>> tick_step(1000), tick_step(37), tick_step(0)
    (200.0, 5.0, 1.0)
    """
    if span_ms <= 0:
        return 1.0
    raw = span_ms / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def render_svg(history: Sequence[Event], *, ttl_ms: float | None, window: incidents.Window | None = None) -> str:
    """The ``<svg>`` element of one trial (see the module docstring); ``window`` defaults to the incident's."""
    window = window or story_window(history)
    scale = _Scale(window)
    workers = sorted({int(e["worker"]) for e in history if e["worker"] >= 0})
    lanes: dict[int, float] = {w: float(TOP + i * LANE_H) for i, w in enumerate(workers)}
    height = TOP + LANE_H * max(1, len(workers)) + BOTTOM
    bottom = TOP + LANE_H * max(1, len(workers))
    origin = incidents.origin_ns(history) if history else 0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">',
        "<defs>"
        '<pattern id="hatch" width="5" height="5" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<line x1="0" y1="0" x2="0" y2="5" stroke="#525252" stroke-width="1.5"/></pattern>'
        f'<clipPath id="plot"><rect x="{LEFT}" y="0" width="{scale.width}" height="{height}"/></clipPath>'
        "</defs>",
    ]
    for w, y in lanes.items():
        shade = "#f7f7f7" if (y - TOP) // LANE_H % 2 == 0 else "#ffffff"
        parts.append(
            f'<g class="lane" data-worker="{w}"><rect x="{LEFT}" y="{y}" width="{scale.width}" height="{LANE_H}" '
            f'fill="{shade}"/><text x="{LEFT - 6}" y="{y + LANE_H / 2 + 4}" text-anchor="end">worker {w}</text></g>'
        )
    body: list[str] = []
    body += _bands(history, scale=scale, top=TOP, bottom=bottom)
    body += _rounds(history, scale=scale, lanes=lanes, ttl_ms=ttl_ms, origin=origin)
    body += _steps(history, scale=scale, lanes=lanes, origin=origin)
    body += _incident(history, scale=scale, top=TOP, bottom=bottom)
    parts.append('<g clip-path="url(#plot)">' + "".join(body) + "</g>")
    parts += _axis(scale, y=bottom)
    parts.append("</svg>")
    return "\n".join(parts)


def _bands(history: Sequence[Event], *, scale: _Scale, top: float, bottom: float) -> list[str]:
    out = []
    for lo, hi in incidents.crowded_spans(incidents.sections(history)):
        if scale.shows(lo, hi):
            x, w = scale.span(lo, hi)
            tip = f"conflict: two or more workers inside, {lo:.1f}–{hi:.1f} ms"
            out.append(_rect("violation crowded", x, top, w, bottom - top, CROWDED, tip, ' fill-opacity="0.22"'))
    for span in incidents.fault_spans(history):
        end = span.end_ms if span.end_ms is not None else span.start_ms
        if not scale.shows(span.start_ms, end):
            continue
        x, w = scale.span(span.start_ms, end)
        healed = f"{span.ended} at {span.end_ms:.1f} ms" if span.end_ms is not None else "never healed"
        tip = f"fault {span.label} {span.detail}: injected at {span.start_ms:.1f} ms, {healed}".replace("  ", " ")
        out.append(_rect("fault", x, top - 14, max(w, 2.0), bottom - top + 14, FAULT, tip, ' fill-opacity="0.28"'))
        out.append(f'<text class="fault-label" x="{x + 2}" y="{top - 4}" fill="#3f007d">{escape(span.label)}</text>')
    return out


def _rounds(
    history: Sequence[Event], *, scale: _Scale, lanes: dict[int, float], ttl_ms: float | None, origin: int
) -> list[str]:
    """Per round: the acquire wait, the lease as believed, and the key's life on the nodes."""
    released = {(e["worker"], e["round"]): e for e in history if e["kind"] == "release"}
    lost = keys_lost(history, origin=origin)
    end = incidents.ms(max(e["t1"] for e in history), origin) if history else 0.0
    out = []
    for e in history:
        if e["kind"] != "acquire" or e["worker"] < 0:
            continue
        y = lanes[e["worker"]]
        t0, t1 = incidents.ms(e["t0"], origin), incidents.ms(e["t1"], origin)
        if scale.shows(t0, t1):
            x, w = scale.span(t0, t1)
            tip = f"worker {e['worker']} round {e['round']}: acquire {t0:.1f}–{t1:.1f} ms, {e.get('attempts')} attempts"
            out.append(_rect("acquire", x, y + 37, w, 4, WAIT, tip + ("" if e.get("ok") else ", gave up")))
        if not e.get("ok"):
            continue
        release = released.get((e["worker"], e["round"]))
        release_ms = incidents.ms(release["t1"], origin) if release is not None else end
        deadline = e.get("valid_until")
        # Believed until its deadline or its release, whichever came first: the next round's lease
        # must not merge with this one (the deadline is in the tooltip).
        valid_ms = incidents.ms(deadline, origin) if deadline is not None else release_ms
        until = min(valid_ms, release_ms)
        if scale.shows(t1, until):
            x, w = scale.span(t1, until)
            fence = f", fence {e['fence']}" if e.get("fence") is not None else ""
            if deadline is not None:
                tip = f"round {e['round']}: lease as believed from {t1:.1f} ms, valid until {valid_ms:.1f} ms{fence}"
                out.append(_rect("lease", x, y + 6, w, 9, LEASE, tip))
            else:
                tip = f"round {e['round']}: lease with no deadline, {t1:.1f} ms to its release{fence}"
                out.append(_rect("lease", x, y + 6, w, 9, "url(#hatch)", tip, f' stroke="{LEASE}"'))
            if e.get("fence") is not None:  # the token in sight: a token that went back shows on the page
                out.append(f'<text class="fence" x="{x + 2}" y="{y + 4}" font-size="9">token {e["fence"]}</text>')
        attempt = e.get("t_attempt")
        if ttl_ms is None or attempt is None or e.get("no_ttl"):
            continue
        lo = incidents.ms(attempt, origin)
        expiry = lo + ttl_ms
        deleted = release is not None and release.get("released") and release_ms < expiry
        hi = release_ms if deleted else expiry
        why = f"deleted by the release at {hi:.1f} ms" if deleted else f"expires at {hi:.1f} ms (attempt + TTL)"
        wiped = lost.get(str(e.get("owner")))
        if wiped is not None and lo <= wiped[0] < hi:
            hi, why = wiped[0], f"lost at {wiped[0]:.1f} ms: {wiped[1]}"
        if wiped is not None and hi == wiped[0] and scale.shows(hi, hi):
            tip, xl = f"round {e['round']}: key {why}", scale.x(hi)
            cross = f"M{xl - 4},{y + 15} L{xl + 4},{y + 27} M{xl - 4},{y + 27} L{xl + 4},{y + 15}"
            out.append(f'<path class="violation key-lost" d="{cross}" stroke="{SERVER}" stroke-width="2">'
                       f"{_title(tip)}</path>")  # fmt: skip
        if scale.shows(lo, hi):
            x, w = scale.span(lo, hi)
            tip = f"round {e['round']}: key on the lock nodes from {lo:.1f} ms, {why}"
            out.append(_rect("server-lease", x, y + 18, w, 6, "none", tip, f' stroke="{SERVER}" stroke-width="1.2"'))
    return out


def keys_lost(history: Sequence[Event], *, origin: int) -> dict[str, tuple[float, str]]:
    """Owner token -> (ms, why) where a node fault took the lease's majority away, as the servers
    showed it: the holders the runner read from every lock node at the injection
    (analysis/holders.py), less the nodes the fault wiped, leave its owner on fewer than a majority
    it had, or on none (a single-node lock's key on the node that restarted empty)."""
    lost: dict[str, tuple[float, str]] = {}
    for e in sorted(history, key=lambda e: e["t0"]):
        if e["worker"] != -1 or e["kind"] != "fault" or e.get("action") == "heal":
            continue
        holders = e.get("holders")
        if faultkinds.event_fault(e.get("fault", "")) not in NODE_LOSING_FAULTS or not isinstance(holders, list):
            continue
        hit = set(e.get("nodes") or ())
        majority = len(holders) // 2 + 1
        for owner in {h for h in holders if h not in (None, UNREADABLE)}:
            held = [i for i, h in enumerate(holders) if h == owner]
            spared = [i for i in held if i not in hit]
            # a majority lost, or every node that held it (a single-node lock's one node)
            if held and (len(held) >= majority > len(spared) or not spared) and owner not in lost:
                why = f"{e.get('fault')} of node(s) {sorted(hit)} left it on {len(spared)} of {len(holders)} nodes"
                lost[owner] = (incidents.ms(e["t0"], origin), why)
    return lost


def story_window(history: Sequence[Event]) -> incidents.Window:
    """The incident's window (analysis/incidents.py), widened back to the last majority a node fault
    took away before it (at most MAX_BEFORE_MS earlier): the cause in the same picture as the damage."""
    window = incidents.default_window(history)
    if not history or incidents.first_incident(history) is None:
        return window
    losses = [t for t, _ in keys_lost(history, origin=incidents.origin_ns(history)).values()]
    earlier = [t for t in losses if window.from_ms - incidents.MAX_BEFORE_MS <= t < window.from_ms]
    if not earlier:
        return window
    lo = max(earlier)
    lo = max(0.0, lo - (window.to_ms - lo) * incidents.MARGIN)
    return incidents.Window(lo, window.to_ms, f"{window.why}, from the key lost at {max(earlier):.1f} ms")


def _steps(history: Sequence[Event], *, scale: _Scale, lanes: dict[int, float], origin: int) -> list[str]:
    out = []
    for s in incidents.sections(history):
        if scale.shows(s.start_ms, s.end_ms):
            x, w = scale.span(s.start_ms, s.end_ms)
            tip = f"worker {s.worker} round {s.round}: inside {s.start_ms:.1f}–{s.end_ms:.1f} ms" + (
                " (never exited)" if s.open else ""
            )
            out.append(_rect("cs", x, lanes[s.worker] + 28, w, 14, SECTION, tip))
    lost = {id(e) for e in incidents.overwriting_writes(history)}
    for e in history:
        if e["worker"] < 0 or e["kind"] not in ("pause", "read", "write"):
            continue
        y = lanes[e["worker"]] + 35
        t0, t1 = incidents.ms(e["t0"], origin), incidents.ms(e["t1"], origin)
        if not scale.shows(t0, t1):
            continue
        if e["kind"] == "pause":
            x, w = scale.span(t0, t1)
            tip = f"worker {e['worker']} paused ({e.get('how') or 'pause'}) {t0:.1f}–{t1:.1f} ms"
            out.append(_rect("pause", x, y + 9, w, 9, "url(#hatch)", tip, ' stroke="#525252"'))
            continue
        x = scale.x((t0 + t1) / 2)
        if e["kind"] == "read":
            tip = f"worker {e['worker']} read balance {e.get('balance')} at {t0:.1f} ms"
            out.append(f'<circle class="read" cx="{x}" cy="{y - 16}" r="3" fill="white" stroke="black">'
                       f"{_title(tip)}</circle>")  # fmt: skip
            continue
        accepted = bool(e.get("accepted"))
        tip = f"worker {e['worker']} wrote {e.get('value')} at {t0:.1f} ms: " + (
            "accepted" if accepted else "rejected by the resource"
        )
        if accepted:
            shape = f'<path class="write accepted" d="M{x - 5},{y - 9} L{x + 5},{y - 9} L{x},{y - 18} Z" '
            out.append(shape + f'fill="{ACCEPTED}" stroke="black" stroke-width="0.5">{_title(tip)}</path>')
        else:
            cross = f"M{x - 4},{y - 17} L{x + 4},{y - 9} M{x - 4},{y - 9} L{x + 4},{y - 17}"
            out.append(f'<path class="write rejected" d="{cross}" stroke="{REJECTED}" stroke-width="2.5">'
                       f"{_title(tip)}</path>")  # fmt: skip
        if id(e) in lost:
            out.append(f'<circle class="violation lost-update" cx="{x}" cy="{y - 13}" r="9" fill="none" '
                       f'stroke="{REJECTED}" stroke-width="2">'
                       f'{_title(tip + ": it overwrote an increment (lost update)")}</circle>')  # fmt: skip
    return out


def _incident(history: Sequence[Event], *, scale: _Scale, top: float, bottom: float) -> list[str]:
    incident = incidents.first_incident(history)
    if incident is None or not scale.shows(incident.at_ms, incident.at_ms):
        return []
    x = scale.x(incident.at_ms)
    return [
        f'<line class="violation first-incident" x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="{REJECTED}" '
        f'stroke-dasharray="4 3" stroke-width="1.5">'
        f"{_title(f'first {incident.what} at {incident.at_ms:.1f} ms')}</line>"
    ]


def _axis(scale: _Scale, *, y: float) -> list[str]:
    step = tick_step(scale.hi - scale.lo)
    out = [f'<line x1="{LEFT}" y1="{y}" x2="{LEFT + scale.width}" y2="{y}" stroke="black"/>']
    t = math.ceil(scale.lo / step) * step
    while t <= scale.hi + 1e-9:
        x = scale.x(t)
        out.append(f'<line x1="{x}" y1="{y}" x2="{x}" y2="{y + 4}" stroke="black"/>')
        out.append(f'<text x="{x}" y="{y + 16}" text-anchor="middle">{t:g}</text>')
        t += step
    out.append(
        f'<text x="{LEFT + scale.width}" y="{y + 28}" text-anchor="end">ms since the trial\'s first event</text>'
    )
    return out


LEGEND = (
    ("lease", LEASE, "lease as the worker believed it (to its deadline or release)"),
    ("server-lease", SERVER, "key on the lock nodes (attempt to TTL, release, or its majority lost: ×)"),
    ("acquire", WAIT, "waiting to acquire"),
    ("cs", SECTION, "hold: critical section"),
    ("accepted", ACCEPTED, "write accepted"),
    ("rejected", REJECTED, "write rejected / lost update ringed"),
    ("fault", FAULT, "fault, injected to healed"),
    ("crowded", CROWDED, "conflict: two or more inside"),
)


def legend_html() -> str:
    """The key to the picture, as HTML (swatches in the same colours)."""
    items = "".join(
        f'<span class="key"><i style="background:{colour}"></i>{escape(text)}</span>' for _, colour, text in LEGEND
    )
    return f'<p class="legend">{items}</p>'
