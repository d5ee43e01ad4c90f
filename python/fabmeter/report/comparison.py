"""The report's comparison with a base folder (`fabmeter report DIR --compare BASE`): compare.py's table as
HTML, the environment's differences above it."""

from __future__ import annotations

from fabmeter import stats
from fabmeter.report.markup import Html, el, join

VERDICT_CLASS = {stats.BETTER: "ok", stats.WORSE: "bad", stats.SAME: "", stats.UNKNOWN: "dim"}
VERDICT_TEXT = {stats.BETTER: "better", stats.WORSE: "worse", stats.SAME: "~ (cannot tell apart)",
                stats.UNKNOWN: "cannot tell"}


def _num(x) -> str:
    return "-" if x is None else f"{x:,.1f}"


def section(doc: dict) -> list[Html]:
    """compare.compare()'s document: what differs in the environments, then a row per matched point."""
    out = [el("p", "Base: ", el("code", doc["base"]), "; this folder against it, point by point.", class_="meta")]
    if doc["environment_diff"]:
        out.append(el("table", el("tr", el("th", "environment field"), el("th", "base"), el("th", "this")),
                      [el("tr", el("td", d["field"]), el("td", d["base"]), el("td", d["new"]))
                       for d in doc["environment_diff"]]))
    else:
        out.append(el("p", "No recorded environment field differs.", class_="meta"))
    if doc["message"]:   # nothing matched
        out.append(el("p", doc["message"], class_="meta"))
    rows = []
    for p in doc["points"]:
        interval = "-" if p["interval"] is None else f"{p['interval'][0]:.3f} .. {p['interval'][1]:.3f}"
        why = f" ({p['reason']})" if p["verdict"] == stats.UNKNOWN else ""
        rows.append(el("tr", el("td", p["point"]), el("td", p["figure"]), el("td", _num(p["base"])),
                       el("td", _num(p["new"])), el("td", "-" if p["ratio"] is None else f"{p['ratio']:.3f}"),
                       el("td", interval),
                       el("td", VERDICT_TEXT[p["verdict"]] + why, class_=VERDICT_CLASS[p["verdict"]]),
                       el("td", f"{p['method']} ({p['runs'][0]} + {p['runs'][1]} runs)")))
    out.append(el("table", el("tr", [el("th", h) for h in ("point", "figure", "base", "this", "this/base",
                                                            f"{stats.CONFIDENCE:.0%} interval", "verdict",
                                                            "evidence")]), rows))
    unmatched = [f"only in base: {x}" for x in doc["unmatched_base"]] + [f"only here: {x}" for x in doc["unmatched_new"]]
    if unmatched:
        out.append(el("ul", [el("li", u) for u in unmatched], class_="meta"))
    return [join(out)]
