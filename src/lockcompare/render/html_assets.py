"""The HTML report's page frame: inline CSS and the few lines of JavaScript that sort tables.

Every page carries them inline (no CDN, no shared file to lose: a page opened alone from
``file://`` still looks right). The script sorts a table whose header cell is clicked, by number
where both cells start with one (``12.5 ±3.1`` sorts as 12.5), else by text; it marks each sortable
table ``data-sortable="ready"`` once it is wired, which a browser test can see in the DOM.
"""

from __future__ import annotations

from html import escape

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em 2em;color:#222;max-width:1400px}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin-top:1.4em;border-bottom:1px solid #ddd}
a{color:#08519c}nav{font-size:.9em;margin-bottom:.6em}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;
vertical-align:top}th{background:#f2f2f2}table.sortable th{cursor:pointer;user-select:none}
table.sortable th[aria-sort=ascending]::after{content:" \\25B2"}
table.sortable th[aria-sort=descending]::after{content:" \\25BC"}
table.grid td.cell{width:104px;min-width:104px;height:58px;text-align:center;vertical-align:middle;
font-size:11px;padding:0}
table.grid td.cell a{display:block;color:#111;text-decoration:none;padding:4px 2px}
table.grid td.cell a:hover{outline:2px solid #111}
table.grid td.marked{box-shadow:inset 0 0 0 3px #54278f}table.grid td.empty{color:#969696;font-size:11px}
table.grid th.col{font-size:11px;font-weight:normal;max-width:104px;min-width:104px}
.gridbox{overflow:auto;max-height:85vh;border:1px solid #ddd;margin:.4em 0}.gridbox table.grid{margin:0}
table.grid thead th{position:sticky;top:0;z-index:2}table.grid th.rowhead{position:sticky;left:0;z-index:1;
background:#f2f2f2;white-space:nowrap;vertical-align:middle}table.grid th.corner{left:0;z-index:3}
details.verdicts{font-size:12px;margin:.2em 0 .6em}details.verdicts dl{display:grid;
grid-template-columns:max-content auto;gap:2px 1em;margin:.4em 0}details.verdicts dd{margin:0}
abbr.verdict{text-decoration:none;cursor:help}
.caption{background:#fff7ec;border-left:4px solid #d94801;padding:.5em .8em;margin:.6em 0}
.caption .rule{font-family:monospace;font-size:.92em;color:#7f2704;text-decoration:none;cursor:help}
.caption p{margin:.3em 0}
td{overflow-wrap:break-word}
.verdict{display:inline-block;padding:1px 8px;border-radius:3px;font-weight:bold}
.legend .key{display:inline-block;margin-right:1em;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle;border:1px solid #999}
pre{background:#f7f7f7;border:1px solid #ddd;padding:.5em;overflow-x:auto;font-size:12px}
pre.cmd{white-space:pre-wrap;overflow-wrap:anywhere}
.svgbox,.scroll{overflow-x:auto}dl.kv{display:grid;grid-template-columns:max-content auto;gap:0 1em;font-size:13px}
dl.kv dt{color:#555}dl.kv dd{margin:0;font-family:monospace}.note{color:#555;font-size:.92em}
.cols{display:flex;flex-wrap:wrap;gap:2em}
"""

JS = """
(function(){
  function key(cell){var t=cell.textContent.trim();var m=t.match(/^-?\\d+(\\.\\d+)?/);
    return m?{n:parseFloat(m[0]),t:t}:{n:null,t:t};}
  function compare(a,b){if(a.n!==null&&b.n!==null&&a.n!==b.n){return a.n-b.n;}
    if(a.n!==null&&b.n===null){return -1;}if(a.n===null&&b.n!==null){return 1;}
    return a.t<b.t?-1:(a.t>b.t?1:0);}
  document.querySelectorAll("table.sortable").forEach(function(table){
    var heads=table.querySelectorAll("thead th");
    heads.forEach(function(th,i){th.addEventListener("click",function(){
      var up=th.getAttribute("aria-sort")!=="ascending";
      heads.forEach(function(h){h.removeAttribute("aria-sort");});
      th.setAttribute("aria-sort",up?"ascending":"descending");
      var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
      rows.sort(function(r,s){var c=compare(key(r.cells[i]),key(s.cells[i]));return up?c:-c;});
      rows.forEach(function(r){body.appendChild(r);});});});
    table.setAttribute("data-sortable","ready");});
})();
"""


def page(*, title: str, body: str) -> str:
    """A whole HTML document with the inline style and script."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1"><title>{escape(title)}</title>'
        f"<style>{CSS}</style></head>\n<body>\n{body}\n<script>{JS}</script>\n</body></html>\n"
    )


def table_html(headers: list[str], lines: list[list[str]], *, sortable: bool = True, raw: bool = False) -> str:
    """A table; cells are escaped unless ``raw`` (the caller built their HTML)."""
    cls = ' class="sortable"' if sortable else ""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    rows = "".join("<tr>" + "".join(f"<td>{c if raw else escape(c)}</td>" for c in line) + "</tr>\n" for line in lines)
    # a wide table scrolls inside its box instead of running off the page
    return f'<div class="scroll"><table{cls}><thead><tr>{head}</tr></thead><tbody>\n{rows}</tbody></table></div>'


def key_values(pairs: list[tuple[str, str]]) -> str:
    return '<dl class="kv">' + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in pairs) + "</dl>"
