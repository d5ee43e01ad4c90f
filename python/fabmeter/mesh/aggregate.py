"""`mesh --experiment load`, added up: every pair's latency histogram (its
last point's, as the pair's other figures) merged exactly into one per
server (the pair's destination) and one for the whole run, the same per
message-size bucket for the slowdown, and the offered and achieved
requests/s summed over the pairs that ran together (one round).

The histograms come from the ranks (output.valid_pair bounded their size);
each is inflated with a bound and decoded by fabmeter.hdr, and a pair whose
histograms do not decode, or whose layout differs from the first one's,
is left out of every sum and named in `unmerged`."""

from __future__ import annotations

from typing import Optional

from fabmeter import hdr

RATES = ("offered_rps", "achieved_rps", "completed")


class _Side:
    """One server's pairs, or all of them."""

    def __init__(self) -> None:
        self.latency = hdr.Merged()
        self.buckets: dict[tuple, tuple[hdr.Merged, hdr.Merged]] = {}     # (size_lo, size_hi): latency, unloaded
        self.pairs = 0
        self.merged: list[dict] = []            # the load figures of the pairs merged, with src and dst
        self.without_buckets = 0                # merged pairs that brought no per-bucket histograms

    def add(self, pair: dict, main, buckets: Optional[list]) -> None:
        load = pair["load"]
        lat = pair.get("latency_ns") or {}
        self.latency.add(main, load["latency_hist_below"] or 0, load["latency_hist_above"] or 0,
                         lat.get("min"), lat.get("max"))
        if buckets is None:
            self.without_buckets += 1
        else:
            for b, (h, u) in zip(load["slowdown"], buckets):
                lat_m, unl_m = self.buckets.setdefault((b["size_lo"], b["size_hi"]), (hdr.Merged(), hdr.Merged()))
                lat_m.add(h, b["latency_hist_below"] or 0, b["latency_hist_above"] or 0)
                unl_m.add(u, b["unloaded_hist_below"] or 0, b["unloaded_hist_above"] or 0)
        self.merged.append({"src": pair["src"], "dst": pair["dst"], **{k: load[k] for k in RATES}})

    def slowdown(self) -> Optional[list[dict]]:
        """Per size bucket, the merged latency's p50 and p99 over the merged unloaded p50; None unless every
        merged pair brought its bucket histograms."""
        if self.without_buckets or not self.merged:
            return None
        out = []
        for (lo, hi), (lat, unl) in sorted(self.buckets.items()):
            p50, p99, base = lat.percentile(50), lat.percentile(99), unl.percentile(50)
            ratio = lambda v: v / base if v is not None and base else None      # noqa: E731
            out.append({"size_lo": lo, "size_hi": hi, "count": lat.count(), "p50": ratio(p50), "p99": ratio(p99),
                        "latency_p50_ns": p50, "latency_p99_ns": p99, "unloaded_p50_ns": base,
                        "unloaded_count": unl.count()})
        return out

    def as_json(self, round_of: dict) -> dict:
        """`round_of`: each pair's round. The rates are sums over pairs that ran at the same time: per round,
        and for the side only when all its merged pairs ran in one round (else null)."""
        rounds: dict[int, dict] = {}
        for p in self.merged:
            r = rounds.setdefault(round_of.get((p["src"], p["dst"])), {"pairs": 0, **{k: 0 for k in RATES}})
            r["pairs"] += 1
            for k in RATES:
                r[k] = None if r[k] is None or p[k] is None else r[k] + p[k]
        by_round = [{"round": i, **r} for i, r in sorted(rounds.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))]
        together = by_round[0] if len(by_round) == 1 and by_round[0]["round"] is not None else None
        return {"pairs": self.pairs, "pairs_merged": len(self.merged),
                **{k: together[k] if together else None for k in RATES}, "by_round": by_round,
                "latency_ns": self.latency.summary(), "latency_hist": self.latency.encode(),
                "latency_hist_below": self.latency.below, "latency_hist_above": self.latency.above,
                "slowdown": self.slowdown()}


class LoadTotals:
    """The merged histograms and summed rates of a load mesh, per server and overall, as the pairs come."""

    def __init__(self, hosts: list[str]) -> None:
        self.hosts = hosts
        self.servers: dict[int, _Side] = {}
        self.overall = _Side()
        self.unmerged: list[dict] = []
        self._layout: Optional[tuple] = None

    def add(self, pair: dict) -> None:
        server = self.servers.setdefault(pair["dst"], _Side())
        server.pairs += 1
        self.overall.pairs += 1
        load = pair.get("load")
        if pair["status"] != "ok" or not load:
            return
        try:
            main, buckets = self._decode(load)
        except hdr.HistogramError as e:
            self.unmerged.append({"src": pair["src"], "dst": pair["dst"], "reason": str(e)[:200]})
            return
        server.add(pair, main, buckets)
        self.overall.add(pair, main, buckets)

    def _decode(self, load: dict):
        """The pair's histograms decoded, all of one layout (the first pair's), before any is added: a pair is
        merged whole or not at all. Its bucket histograms None if it brought none."""
        if load["latency_hist"] is None:
            raise hdr.HistogramError("the pair brought no histogram")
        main = hdr.decode(load["latency_hist"])
        buckets = None
        if load["slowdown"] and all(b["latency_hist"] is not None and b["unloaded_hist"] is not None
                                    for b in load["slowdown"]):
            buckets = [(hdr.decode(b["latency_hist"]), hdr.decode(b["unloaded_hist"])) for b in load["slowdown"]]
        for h in [main, *(x for pair in buckets or [] for x in pair)]:
            self._layout = self._layout or hdr.layout(h)
            if hdr.layout(h) != self._layout:
                raise hdr.HistogramError(f"histogram layout {hdr.layout(h)} is not the first pair's {self._layout}")
        return main, buckets

    def as_json(self, rounds: list[dict]) -> dict:
        round_of = {tuple(p): r["round"] for r in rounds for p in r["pairs"]}
        return {"from": "each pair's last point",
                "servers": [{"rank": r, "host": self.hosts[r], **s.as_json(round_of)}
                            for r, s in sorted(self.servers.items())],
                "overall": self.overall.as_json(round_of), "unmerged": self.unmerged}
