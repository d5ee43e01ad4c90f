"""The report's mesh section: each `fabmeter mesh --out` run's matrices, per-host tables and load figures."""

from __future__ import annotations

from typing import Optional

from fabmeter import analysis, hdr
from fabmeter.report.figures import (THROUGHPUT_CAPTION, Colors, fig_mesh_load_cdf, fig_mesh_matrix, fig_slowdown,
                                     fig_throughput_over_time, fmt_ns)
from fabmeter.report.files import number, obj
from fabmeter.report.markup import Html, el, img
from fabmeter.report.model import throughput_over_time


MESH_LATENCY = {"oneway": "one-way latency (synchronised clocks)", "lat": "one-way latency = RTT/2",
                "stream": "one-way latency from the scheduled step", "load": "RTT from the intended send"}


def _mesh_hosts_table(doc: dict) -> Html:
    head = ["rank", "host", "out pairs (failed)", "out p50 (median of pairs)", "out p99 (max of pairs)",
            "out Gbit/s (sum)", "in pairs (failed)", "in p99 (max of pairs)", "in Gbit/s (sum)"]
    rows = []
    for h in doc.get("per_host") or []:
        o, i = obj(h.get("out")), obj(h.get("in"))
        gbps = lambda v: "-" if number(v) is None else f"{v:.3g}"  # noqa: E731
        rows.append([h.get("rank"), h.get("host"), f"{o.get('pairs')} ({o.get('failed')})",
                     fmt_ns(o.get("p50_ns_median_of_pairs")), fmt_ns(o.get("p99_ns_max_of_pairs")),
                     gbps(o.get("gbps_sum")), f"{i.get('pairs')} ({i.get('failed')})",
                     fmt_ns(i.get("p99_ns_max_of_pairs")), gbps(i.get("gbps_sum"))])
    table = el("table", el("tr", [el("th", h) for h in head]), [el("tr", [el("td", c) for c in r]) for r in rows],
               class_="mesh")
    return el("figure", table, el("figcaption", "per host: its pairs as source (out) and as destination (in)"),
              class_="wide")


def _mesh_start_table(summary: dict) -> Optional[Html]:
    """Per round: how far apart its pairs started (skew) and how late after the planned instant (p50/p99/max), the
    lead, the control traffic; the first row the whole mesh. None for a mesh.json without them."""
    rounds = _objects(summary.get("rounds"))
    if not any("start_late_ns" in r for r in rounds):
        return None
    spread = lambda d: [fmt_ns(obj(d).get(k)) for k in ("p50", "p99", "max")]  # noqa: E731
    head = ["round", "pairs", "start skew", "late p50", "late p99", "late max", "lead", "plan", "control frames"]
    skew = obj(summary.get("start_skew_ns"))
    rows = [["all", summary.get("pairs"), f"p50 {fmt_ns(skew.get('p50'))}, p99 {fmt_ns(skew.get('p99'))}, "
                                          f"max {fmt_ns(skew.get('max'))}", *spread(summary.get("start_late_ns")),
             "", "", ""]]
    for r in rounds:
        c = obj(r.get("control"))
        rows.append([r.get("round"), len(_list(r.get("pairs"))), fmt_ns(r.get("start_skew_ns")),
                     *spread(r.get("start_late_ns")), fmt_ns(r.get("lead_ns")), fmt_ns(c.get("plan_ns")),
                     c.get("frames", "")])
    table = el("table", el("tr", [el("th", h) for h in head]), [el("tr", [el("td", c) for c in r]) for r in rows],
               class_="mesh")
    return el("figure", table, el("figcaption", "round start: skew = the round's pairs' start instants, last minus "
                                                "first, on the coordinator's clock; late = after the planned instant, "
                                                "each on its host's clock; lead = how far ahead the plan was sent"),
              class_="wide")


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _objects(value) -> list[dict]:
    return [x for x in _list(value) if isinstance(x, dict)]


def _mesh_flagged(doc: dict) -> tuple[str, set[tuple[int, int]]]:
    """The figure the outlier rule judged (matrix key) and the links it flagged."""
    found = obj(doc.get("outliers"))
    links = {(x.get("src"), x.get("dst")) for x in _objects(found.get("links"))
             if type(x.get("src")) is int and type(x.get("dst")) is int}
    return str(obj(found.get("rule")).get("figure")), links


def _mesh_outliers_list(doc: dict, hosts: list[str]) -> Optional[Html]:
    """Under the heatmaps: the rule, the hosts and links it flagged, and the identity fields that differ."""
    found, drift = obj(doc.get("outliers")), obj(doc.get("drift"))
    if not found and not drift:
        return None      # a mesh.json from before outliers were judged
    name = lambda r: f"{r} {hosts[r]}" if type(r) is int and 0 <= r < len(hosts) else str(r)  # noqa: E731
    items = []
    gbps = obj(found.get("rule")).get("figure") == "gbps"
    show = lambda v: "-" if number(v) is None else (f"{v:.3g} Gbit/s" if gbps else fmt_ns(v))  # noqa: E731
    for h in _objects(found.get("hosts")):
        sides = "; ".join(f"{s.get('direction')} as {'source' if s.get('side') == 'out' else 'destination'} "
                          f"({s.get('flagged')} of {s.get('links')} links)" for s in _objects(h.get("sides")))
        items.append(el("li", el("b", f"host {name(h.get('rank'))}"), f": {sides}"))
    for x in _objects(found.get("links")):
        score = number(x.get("score"))
        rel = number(x.get("relative"))
        items.append(el("li", f"link {name(x.get('src'))} \u2192 {name(x.get('dst'))}: {show(x.get('figure'))} "
                              f"{x.get('direction')}, score {'-' if score is None else f'{score:+.1f}'}"
                              f"{'' if rel is None else f', {rel * 100:+.0f} % from the median'}"))
    if found and not items:
        items.append(el("li", "no outlier link or host"))
    for f in _objects(drift.get("fields")):
        values = "; ".join(f"{str(v.get('value'))[:80]} on {', '.join(name(r) for r in _list(v.get('ranks')))}"
                           for v in _objects(f.get("values")))
        items.append(el("li", el("b", f"drift {f.get('field')}"), f": {values}"))
    if drift and not _objects(drift.get("fields")):
        items.append(el("li", f"no drift: the identity fields of the {len(_list(drift.get('hosts_reporting')))} "
                              "hosts that reported them agree"))
    rule = str(obj(found.get("rule")).get("text") or "")
    median = f" (median {show(found.get('median'))}, scaled MAD {show(found.get('scaled_mad'))})" if found else ""
    return el("figure", el("ul", items, class_="mesh-outliers"),
              el("figcaption", f"outliers, framed red in the heatmap: {rule}{median}. Drift: identity fields "
                               "(kernel, CPU, governor, idle driver, MTU, link speed, ...) that differ between hosts"),
              class_="wide")


def _count(v) -> int:
    return v if type(v) is int and v >= 0 else 0


def _merged_cdf(side: dict) -> Optional[list[tuple[float, float]]]:
    """A side's merged histogram as a CDF, decoded with hdr's bounds; None if it has none or it does not decode."""
    text, lat = side.get("latency_hist"), obj(side.get("latency_ns"))
    if not isinstance(text, str):
        return None
    merged = hdr.Merged()
    try:
        merged.add(hdr.decode(text), _count(side.get("latency_hist_below")), _count(side.get("latency_hist_above")),
                   number(lat.get("min")), number(lat.get("max")))
    except hdr.HistogramError:
        return None
    return merged.cdf() or None


def _mesh_load(doc: dict, name: str, rel: str) -> list:
    """A load mesh's merged figures: the CDF per server and overall, their requests/s and percentiles in a
    table, and the slowdown per size bucket of the merged bucket histograms."""
    load = obj(doc.get("load"))
    sides = [(f"server {s.get('rank')} {s.get('host')}", s) for s in _objects(load.get("servers"))]
    sides.append(("all", obj(load.get("overall"))))
    figs = []
    curves = [(label, c) for label, side in sides if (c := _merged_cdf(side))]
    if curves:
        figs.append(img(fig_mesh_load_cdf(f"{name}: merged latency per server", curves), f"{name} merged cdf",
                         f"{rel}: every client's histogram added up exactly, one curve per server (the pairs' "
                         "destination) and all the pairs (black); RTT from the intended send"))
    one_bucket = all(len(_list(s.get("slowdown"))) <= 1 for _, s in sides)
    head = ["server", "pairs merged", "requests", "offered req/s", "achieved req/s", "p50", "p99", "p99.9"]
    head += ["slowdown p50", "slowdown p99"] if one_bucket else []
    rate = lambda v: "-" if number(v) is None else analysis.fmt_num(float(v), 0)  # noqa: E731
    rows = []
    for label, side in sides:
        lat = obj(side.get("latency_ns"))
        rounds = _objects(side.get("by_round"))
        rates = ([rate(side.get("offered_rps")), rate(side.get("achieved_rps"))] if len(rounds) <= 1 else
                 [", ".join(f"round {r.get('round')}: {rate(r.get(k))}" for r in rounds)
                  for k in ("offered_rps", "achieved_rps")])
        row = [label, f"{side.get('pairs_merged')} of {side.get('pairs')}", f"{lat.get('count')}", *rates,
               *(fmt_ns(lat.get(k)) for k in ("p50", "p99", "p999"))]
        if one_bucket:
            b = obj((_list(side.get("slowdown")) or [None])[0])
            row += [("-" if number(b.get(k)) is None else f"{b[k]:.3g}") for k in ("p50", "p99")]
        rows.append(row)
    table = el("table", el("tr", [el("th", h) for h in head]), [el("tr", [el("td", c) for c in r]) for r in rows],
               class_="mesh")
    figs.append(el("figure", table, el("figcaption", "per server: the merged histogram's RTT percentiles (nearest "
                                                     "rank, within 10^-3) and requests/s summed over its pairs that "
                                                     "ran together (per round when they ran in several)"),
                   class_="wide"))
    series = {}
    for label, side in sides:
        buckets = [(b["size_hi"], b["p50"], b["p99"]) for b in _objects(side.get("slowdown"))
                   if number(b.get("size_hi")) and number(b.get("p50")) and number(b.get("p99"))]
        if len(buckets) >= 2:
            series[label] = [(side.get("offered_rps"), buckets)]
    if series:
        figs.append(img(fig_slowdown(f"{name}, merged", series, Colors(list(series))), f"{name} merged slowdown",
                         f"{rel}: slowdown per message-size bucket of the merged bucket histograms (latency / the "
                         "merged unloaded p50 of that size), per server and all the pairs", wide=True))
    return figs


def section_mesh(meshes: list[tuple[str, dict]]) -> list[str]:
    """Each `fabmeter mesh --out` run: its matrices (p50 and p99 latency, or Gbit/s) and per-host figures."""
    figs = []
    for rel, doc in meshes:
        summary, matrix = doc["mesh"], doc["matrix"]
        hosts = [str(h) for h in summary.get("hosts") or []]
        experiment = str(summary.get("experiment"))
        skew = summary.get("round_start_skew_ns")
        tool = summary.get("tool") if isinstance(summary.get("tool"), str) else None   # mesh --tool: its figures
        name = (f"mesh {tool + ' ' if tool else ''}{experiment} {summary.get('transport') or ''} "
                f"{summary.get('pattern')} {summary.get('schedule')}").replace("  ", " ")
        failed = {(p.get("src"), p.get("dst")) for p in doc.get("pairs") or [] if p.get("status") != "ok"}
        judged, flagged = _mesh_flagged(doc)
        about = (f"{rel}: {len(hosts)} hosts, {summary.get('pairs')} pairs ({summary.get('failed')} failed), "
                 f"{len(summary.get('rounds') or [])} rounds, round start skew "
                 + (f"p99 {fmt_ns(obj(summary.get('start_skew_ns')).get('p99'))}, " if summary.get("start_skew_ns") else "")
                 + f"max {fmt_ns(skew)}")
        if experiment == "bw":
            figs.append(img(fig_mesh_matrix(f"{name}: Gbit/s", hosts, matrix["gbps"], "Gbit/s at the receiver",
                                             False, failed, flagged if judged == "gbps" else None),
                             f"{name} gbps", about))
            lines = {}
            for p in doc.get("pairs") or []:
                for direction, s in (p.get("throughput_series") or {}).items():
                    src, dst = (p.get("src"), p.get("dst")) if direction == "c2s" else (p.get("dst"), p.get("src"))
                    line = throughput_over_time(s, p.get("size"))
                    if line is not None:
                        lines[f"{src}->{dst}"] = line
            if lines:
                figs.append(img(fig_throughput_over_time(f"{name}: throughput over time per connection", lines,
                                                          Colors(lines)),
                                 f"{name} throughput over time", f"{rel}: one line per directed pair. "
                                 + THROUGHPUT_CAPTION, wide=True))
        else:
            kinds = {str(p.get("latency_kind")) for p in doc.get("pairs") or [] if p.get("latency_kind")}
            kind = (f"latency as {tool} reports it ({', '.join(sorted(kinds))})" if tool
                    else MESH_LATENCY.get(experiment, "latency"))
            for q in ("p50", "p99"):
                key = f"latency_{q}_ns"
                figs.append(img(fig_mesh_matrix(f"{name}: {q} {kind}", hosts, matrix[key], f"{q} {kind}", True,
                                                 failed, flagged if judged == key else None), f"{name} {q}", about))
        if experiment == "load" and doc.get("load"):
            figs += _mesh_load(doc, name, rel)
        listed = _mesh_outliers_list(doc, hosts)
        if listed is not None:
            figs.append(listed)
        figs.append(_mesh_hosts_table(doc))
        start = _mesh_start_table(summary)
        if start is not None:
            figs.append(start)
    return figs
