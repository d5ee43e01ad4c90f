"""The comparison table: every measured point, sortable by any column in the page, each row linked to its run's
histogram."""

from __future__ import annotations

from typing import Optional

from fabmeter import analysis
from fabmeter.report.files import obj
from fabmeter.report.context import io_thread_shared
from fabmeter.report.markup import Html, el, trusted
from fabmeter.report.model import EXPERIMENT_ORDER, Entry, Run, stat

HEAD = ["run", "experiment", "transport / mode", "size", "latency", "p50 [ns]", "p99 [ns]", "max [ns]", "Gbit/s",
        "msg/s", "missed steps [%]", "lost", "status", "note"]
DEFAULT_SORT = HEAD.index("p50 [ns]")

# Clicking a header sorts the rows by that column, again reverses; a cell's data-v (a number) is its key, else
# its text; empty cells stay last either way.
SORT_SCRIPT = trusted("""
document.querySelectorAll("table.sortable").forEach(table => {
  const heads = Array.from(table.tHead.rows[0].cells);
  const key = cell => {
    if (!cell || cell.textContent.trim() === "" || cell.textContent.trim() === "-") return null;
    return cell.dataset.v !== undefined ? Number(cell.dataset.v) : cell.textContent.trim();
  };
  heads.forEach((th, col) => th.addEventListener("click", () => {
    const dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    heads.forEach(h => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    rows.sort((a, b) => {
      const ka = key(a.cells[col]), kb = key(b.cells[col]);
      if (ka === null || kb === null) return (ka === null) - (kb === null);
      const c = typeof ka === "number" && typeof kb === "number" ? ka - kb
        : String(ka).localeCompare(String(kb), undefined, {numeric: true});
      return dir * c;
    });
    rows.forEach(r => body.appendChild(r));
  }));
});
// A link to a histogram folded away opens its section first.
document.querySelectorAll('a[href^="#run-"]').forEach(a => a.addEventListener("click", () => {
  const target = document.getElementById(a.getAttribute("href").slice(1));
  for (let d = target && target.closest("details"); d; d = d.parentElement.closest("details")) d.open = true;
}));
""")


def _num(value, digits: int = 1) -> Html:
    return el("td", analysis.fmt_num(value, digits), data_v=value)


def _where_key(p: dict):
    """What the size column shows, as a number: the offered rate for load, the rate for stream, else the size."""
    return p.get("offered_rps") or p.get("rate_hz") or p.get("size")


def _row(e: Entry, anchors: dict[int, str]) -> tuple[Optional[float], Html]:
    """(p50, the row) of one point."""
    p = e.point
    # One-way figures; a peer that reports only the round trip keeps it, labelled RTT.
    block = "latency_ns" if p.get("latency_ns") else "rtt_ns"
    named = str(p.get("latency_kind"))
    kind = ("RTT/2" if named == "rtt/2" else "RTT" if named.startswith("rtt") else "") if p.get(block) else ""
    if p.get(block) and not kind:
        kind = "RTT/2" if e.rtt_half else "one-way"
    status = e.run.status + (" (partial)" if p.get("partial") else "")
    note = ""
    if e.run.peer:   # peers.json records: points, and cases the tool skipped or failed
        status = "peer" if p.get("type", "point") == "point" else str(p.get("type"))
        note = str(p.get("statistic_note") or p.get("reason") or "")
    elif isinstance(p.get("flows"), list):  # --flows: the figures are the flows' aggregate
        note = f"{len(p['flows'])} flows (sum), Jain's index {analysis.fmt_num(p.get('jain_index'), 3)}"
    if kind and not e.run.peer and io_thread_shared(e.run):
        note = "; ".join(filter(None, [note, "the tail includes the library's I/O thread sharing the busy loop's CPU"]))
    anchor = anchors.get(id(e.run))
    p50 = stat(p, block, "p50")
    cells = [el("td", el("a", e.run.rel, href=f"#{anchor}") if anchor else e.run.rel),
             el("td", f"peer: {p.get('tool') or '?'}" if e.run.peer else e.experiment), el("td", e.label),
             el("td", e.where(), data_v=_where_key(p)), el("td", kind),
             _num(p50), _num(stat(p, block, "p99")), _num(stat(p, block, "max")), _num(p.get("gbps"), 3),
             _num(p.get("msg_rate"), 0), _num(p.get("missed_pct"), 2), _num(p.get("lost")), el("td", status),
             el("td", note, class_="note")]
    return p50, el("tr", cells, class_="peer" if e.run.peer else None)


def section_table(entries: list[Entry], runs: list[Run], anchors: dict[int, str]) -> Html:
    """Every measured point (and every run that measured none), peers marked, sorted by p50 (points without
    one after, in experiment order); `anchors`: the id of each run's histogram on the page."""
    def order(e: Entry):
        return (e.run.peer, EXPERIMENT_ORDER.get(e.experiment, 9), e.label, e.point.get("size") or 0,
                e.point.get("rate_hz") or 0, e.point.get("values") or 0)

    rows = [_row(e, anchors) for e in sorted(entries, key=order)]
    rows.sort(key=lambda r: (r[0] is None, r[0] or 0))
    body = [row for _, row in rows]
    with_points = {id(e.run) for e in entries}
    for r in runs:
        if id(r) not in with_points:
            msg = r.doc.get("message") or "no points measured"
            exp = obj(r.doc.get("config")).get("experiment", "?")
            body.append(el("tr", el("td", r.rel), el("td", exp), el("td", msg, colspan=len(HEAD) - 4),
                           el("td", r.status), el("td"), class_="failed"))
    head = el("tr", [el("th", h, aria_sort="ascending" if i == DEFAULT_SORT else None, title="sort by " + h)
                     for i, h in enumerate(HEAD)])
    return el("div", el("table", el("thead", head), el("tbody", body), class_="cmp sortable"), class_="scroll")
