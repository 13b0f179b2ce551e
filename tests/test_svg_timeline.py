"""The HTML report's pure parts: the SVG timeline (render/svg_timeline.py) on hand-built histories,
and how render/html_report.py and render/report.py treat the html/ folder. The browser's view of
the same pages is tests/test_html_report.py (full tier)."""

from __future__ import annotations

import doctest
import importlib.util
from html.parser import HTMLParser
from pathlib import Path

import pytest

from lockcompare.analysis import incidents
from lockcompare.analysis.results import latest_rows, read_results
from lockcompare.errors import RenderError
from lockcompare.render import svg_timeline
from lockcompare.render.html_report import write_html_report
from lockcompare.render.report import write_report
from lockcompare.render.svg_timeline import keys_lost, render_svg, story_window

RESULTS = Path(__file__).resolve().parent.parent / "results" / "contend.csv"  # 15 trials, 3 cells, committed
TINY = Path(__file__).resolve().parent / "data" / "golden" / "tiny.csv"  # the report tests' smallest results
MS = 1_000_000


class Dom(HTMLParser):
    """The elements of a page as (tag, attributes, the text inside it, nested elements' included)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], list[str]]] = []
        self._open: list[int] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, []))
        self._open.append(len(self.elements) - 1)

    def handle_endtag(self, tag: str) -> None:
        while self._open and self.elements[self._open.pop()][0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        for index in self._open:
            self.elements[index][2].append(data)

    def having(self, tag: str, cls: str | None = None) -> list[tuple[str, dict[str, str], list[str]]]:
        return [e for e in self.elements if e[0] == tag and (cls is None or cls in e[1].get("class", "").split())]


def _event(worker: int, rnd: int, kind: str, t0_ms: float, t1_ms: float | None = None, **fields: object) -> dict:
    t1 = t0_ms if t1_ms is None else t1_ms
    return {"worker": worker, "round": rnd, "kind": kind, "t0": int(t0_ms * MS), "t1": int(t1 * MS), **fields}


def _zombie_history() -> list[dict]:
    """Worker 0 is paused past its lease; worker 1 gets the lock; both write 1: one update lost."""
    return [
        _event(0, 0, "acquire", 0, 1, ok=True, attempts=1, t_attempt=0, valid_until=100 * MS, owner="a"),
        _event(0, 0, "enter", 2, inside=1),
        _event(0, 0, "read", 3, balance=0),
        _event(0, 0, "pause", 4, 150, how="sigstop"),
        _event(-1, 0, "fault", 4, fault="pause", action="inject", nodes=[], detail="SIGSTOP"),
        _event(-1, 0, "fault", 150, fault="pause", action="heal", nodes=[], detail="SIGCONT"),
        _event(1, 0, "acquire", 5, 101, ok=True, attempts=9, t_attempt=100 * MS, valid_until=200 * MS, owner="b"),
        _event(1, 0, "enter", 102, inside=2),
        _event(1, 0, "read", 103, balance=0),
        _event(1, 0, "write", 140, value=1, accepted=True),
        _event(1, 0, "exit", 141),
        _event(1, 0, "release", 142, released=True),
        _event(0, 0, "write", 151, value=1, accepted=True),
        _event(0, 0, "exit", 152),
        _event(0, 0, "release", 153, released=False),
    ]


def test_the_svg_has_a_lane_per_worker_the_fault_and_the_lost_update() -> None:
    dom = Dom(render_svg(_zombie_history(), ttl_ms=100.0))
    assert [e[1]["data-worker"] for e in dom.having("g", "lane")] == ["0", "1"]
    assert len(dom.having("rect", "cs")) == 2 and len(dom.having("rect", "pause")) == 1
    assert len(dom.having("rect", "fault")) == 1 and "pause" in "".join(dom.having("text", "fault-label")[0][2])
    assert len(dom.having("circle", "lost-update")) == 1
    assert dom.having("rect", "crowded") and dom.having("line", "first-incident")
    tips = ["".join(e[2]) for e in dom.having("title")]
    assert "worker 0 wrote 1 at 151.0 ms: accepted: it overwrote an increment (lost update)" in tips
    # the key on the nodes: worker 1's is deleted by its release, worker 0's expires after the TTL
    assert any("deleted by the release at 142.0 ms" in t for t in tips)
    assert any("expires at 100.0 ms (attempt + TTL)" in t for t in tips)


def test_a_restart_that_takes_the_majority_ends_the_key_on_the_servers_and_opens_the_window() -> None:
    """Worker 0 holds on nodes 0-2 of 5 (a bare majority); node 0 restarts empty at 60 ms: the key
    is lost there (2 of 5 left), worker 1 gets the lock at 120 ms, reads 0 before worker 0 writes 1,
    and overwrites it with 1 at 300 ms."""
    five = ["a", "a", "a", None, None]
    history = [
        _event(0, 0, "acquire", 0, 1, ok=True, attempts=1, t_attempt=0, valid_until=1000 * MS, owner="a"),
        _event(0, 0, "enter", 2, inside=1),
        _event(0, 0, "read", 3, balance=0),
        _event(-1, 0, "fault", 60, fault="restart", action="inject", nodes=[0], detail="SIGKILL", holders=five),
        _event(-1, 0, "fault", 61, fault="restart", action="heal", nodes=[0], detail="restarted (empty)"),
        _event(1, 0, "acquire", 5, 120, ok=True, attempts=9, t_attempt=119 * MS, valid_until=1120 * MS, owner="b"),
        _event(1, 0, "enter", 121, inside=2),
        _event(1, 0, "read", 122, balance=0),
        _event(0, 0, "write", 130, value=1, accepted=True),
        _event(0, 0, "exit", 131),
        _event(0, 0, "release", 132, released=False),
        _event(1, 0, "write", 300, value=1, accepted=True),
        _event(1, 0, "exit", 301),
        _event(1, 0, "release", 302, released=True),
    ]
    assert keys_lost(history, origin=0) == {"a": (60.0, "restart of node(s) [0] left it on 2 of 5 nodes")}
    assert incidents.default_window(history).from_ms > 60  # the incident's rounds alone start after the loss
    window = story_window(history)
    assert window.from_ms < 60 and "from the key lost at 60.0 ms" in window.why
    dom = Dom(render_svg(history, ttl_ms=1000.0))
    tips = ["".join(e[2]) for e in dom.having("title")]
    assert len(dom.having("path", "key-lost")) == 1
    assert any("key lost at 60.0 ms: restart of node(s) [0]" in t for t in tips)
    # the same restart with the key on 4 nodes leaves 3 of 5: still a majority, nothing lost
    history[3] = _event(-1, 0, "fault", 60, fault="restart", action="inject", nodes=[0], holders=["a"] * 4 + [None])
    assert keys_lost(history, origin=0) == {}


def test_a_folder_it_did_not_write_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "html"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    with pytest.raises(RenderError, match="did not write it"):
        write_html_report(rows=latest_rows(read_results(RESULTS)), results=RESULTS, out=out)
    assert (out / "mine.txt").read_text() == "mine"


needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="the Markdown report needs matplotlib: pip install -e '.[plot]'",
)


@needs_matplotlib
def test_the_report_rerenders_its_html_folder_through_a_symbolic_link(tmp_path: Path) -> None:
    """Through a symlinked --out the report's files move in one by one (render/staging.py): the
    earlier rendering's html/ folder is replaced, not an error."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for _ in range(2):  # the smallest committed results: what is checked is the folder's move, not the plots
        written = write_report(results=TINY, out=tmp_path / "link")
    assert written[-1] == tmp_path / "link" / "html" and (tmp_path / "real" / "html" / "index.html").is_file()


@needs_matplotlib
def test_the_report_refuses_an_html_folder_of_the_users(tmp_path: Path) -> None:
    (tmp_path / "r" / "html").mkdir(parents=True)
    (tmp_path / "r" / "html" / "mine.txt").write_text("mine")
    with pytest.raises(RenderError, match="holds html that lockcompare did not write"):
        write_report(results=RESULTS, out=tmp_path / "r")
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["html"]


def test_the_doctests() -> None:
    assert doctest.testmod(svg_timeline).failed == 0
