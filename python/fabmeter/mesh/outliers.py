"""Which links and hosts of a mesh lie outside the distribution of all links, and
which recorded identity fields differ between the hosts (drift). Pure
functions of the pairs and the hosts' environments; output.py puts their
results in the mesh summary, the matrix's text and mesh.json.

The link rule (docs/cli.md, "Outliers and drift"): a link's figure x (its p50
latency; bw: its Gbit/s) against the median m of every judged link's figure
and their scaled median absolute deviation s = 1.4826 * median(|x_i - m|)
(an estimate of the standard deviation that a minority of outliers cannot
move). The link is an outlier when

    |x - m| > K_MADS * s   and   |x - m| >= MIN_RELATIVE * |m|

K_MADS = 3.5 is Iglewicz and Hoaglin's cut for the modified z-score
(0.6745 (x - m) / MAD); the relative floor keeps a mesh whose links barely
differ (s near 0) from flagging differences nobody would act on. The score
is (x - m) / s (null when s is 0). It holds while fewer than half the judged
links are outliers: a host slow both ways in a mesh of 4 holds 6 of 12.

A host is flagged on a side (`out`: its links as the source, `in`: as the
destination) when that side has at least HOST_MIN_LINKS judged links and
more than half of them are outliers in the same direction: a host that
delays everything it sends shows as all its outgoing links slow, while a
single slow link flags one of its source's and one of its destination's
links only.
"""

from __future__ import annotations

import math
from typing import Optional

from fabmeter.stats import median

K_MADS = 3.5
MIN_RELATIVE = 0.25      # and at least 25 % from the median
MAD_SCALE = 1.4826       # MAD -> standard deviation for normal data
MIN_LINKS = 4            # fewer judged links: nothing is flagged (no distribution to speak of)
HOST_MIN_LINKS = 2       # a host's side with fewer judged links is not judged


FIGURE_WORDS = {"latency_p50_ns": "p50 latency", "gbps": "throughput (Gbit/s)"}


def figure_of(experiment: str) -> tuple[str, bool]:
    """(the figure judged, whether higher is slower): p50 latency, or bw's Gbit/s."""
    return ("gbps", False) if experiment == "bw" else ("latency_p50_ns", True)


def link_figures(experiment: str, pairs: list[dict]) -> dict[tuple[int, int], float]:
    """The judged figure of every pair that completed with one."""
    out = {}
    for p in pairs:
        if p.get("status") != "ok":
            continue
        value = p.get("gbps") if experiment == "bw" else (p.get("latency_ns") or {}).get("p50")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[(p["src"], p["dst"])] = float(value)
    return out


def rule(experiment: str, k: float = K_MADS, min_relative: float = MIN_RELATIVE) -> dict:
    figure, higher_is_slower = figure_of(experiment)
    return {"figure": figure, "slow_is": "higher" if higher_is_slower else "lower", "k_mads": k,
            "mad_scale": MAD_SCALE, "min_relative_difference": min_relative, "min_links": MIN_LINKS,
            "host_min_links": HOST_MIN_LINKS,
            "text": (f"a link is an outlier when its {FIGURE_WORDS[figure]} lies more than {k:g} scaled MADs "
                     f"(1.4826 x the median absolute deviation) from the median of all links and at least "
                     f"{min_relative * 100:g} % from it; a host is flagged when more than half of its links "
                     f"as the source (out), or as the destination (in), are outliers in the same direction "
                     f"(at least {HOST_MIN_LINKS} such links)")}


def find(experiment: str, pairs: list[dict], hosts: list[str], k: float = K_MADS,
         min_relative: float = MIN_RELATIVE) -> dict:
    """The `outliers` object: the rule, the median and scaled MAD it used, the links flagged (figure, score,
    relative difference, direction: slow or fast) and the hosts flagged (which side, which direction, how many
    of how many links)."""
    figures = link_figures(experiment, pairs)
    _, higher_is_slower = figure_of(experiment)
    out = {"rule": rule(experiment, k, min_relative), "links_judged": len(figures), "median": None,
           "scaled_mad": None, "links": [], "hosts": []}
    if len(figures) < MIN_LINKS:
        return out
    m = median(list(figures.values()))
    s = MAD_SCALE * median([abs(x - m) for x in figures.values()])
    out["median"], out["scaled_mad"] = m, s
    flagged: dict[tuple[int, int], str] = {}
    for (src, dst), x in sorted(figures.items()):
        d = x - m
        if not (abs(d) > k * s and m != 0 and abs(d) >= min_relative * abs(m)):
            continue
        direction = "slow" if (d > 0) == higher_is_slower else "fast"
        flagged[(src, dst)] = direction
        out["links"].append({"src": src, "dst": dst, "figure": x, "score": d / s if s > 0 else None,
                             "relative": d / abs(m), "direction": direction})
    for rank, host in enumerate(hosts):
        sides = []
        for side, index in (("out", 0), ("in", 1)):
            links = [link for link in figures if link[index] == rank]
            if len(links) < HOST_MIN_LINKS:
                continue
            for direction in ("slow", "fast"):
                count = sum(flagged.get(link) == direction for link in links)
                if 2 * count > len(links):
                    sides.append({"side": side, "direction": direction, "flagged": count, "links": len(links)})
        if sides:
            out["hosts"].append({"rank": rank, "host": host, "sides": sides})
    return out


# --- drift ------------------------------------------------------------------

def drift(hosts: list[str], environments: list[Optional[dict]], fields: tuple[str, ...]) -> dict:
    """The `drift` object: each of `fields` whose known values differ between hosts, with the value most
    hosts hold (`majority`; null on a tie) and every value with its ranks. A host that did not report a field
    (null, or no environment at all) is listed as unknown, never counted as different."""
    reporting = [r for r, env in enumerate(environments) if isinstance(env, dict)]
    out = {"fields_compared": list(fields), "hosts_reporting": reporting, "fields": []}
    for name in fields:
        groups: dict[str, dict] = {}
        unknown = []
        for rank in range(len(hosts)):
            env = environments[rank] if rank < len(environments) else None
            value = env.get(name) if isinstance(env, dict) else None
            if value is None:
                unknown.append(rank)
                continue
            key = repr(value)
            groups.setdefault(key, {"value": value, "ranks": []})["ranks"].append(rank)
        if len(groups) < 2:
            continue
        values = sorted(groups.values(), key=lambda g: (-len(g["ranks"]), g["ranks"][0]))
        top = values[0] if len(values[0]["ranks"]) > len(values[1]["ranks"]) else None
        out["fields"].append({"field": name, "majority": None if top is None else top["value"],
                              "minority_ranks": sorted(r for g in values if g is not top for r in g["ranks"]),
                              "values": values, "unknown_ranks": unknown})
    return out
