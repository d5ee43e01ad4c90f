"""--schedule slotted: every message of every pair has its send instant on the
common timebase, so that no receiver is sent to by two senders in one slot.

All pairs run at once (one round). Sender i sends to receiver j only in the
slots s = (j - i - 1) mod n of each period of n - 1 slots ((j - i) mod n is
1..n - 1 over the senders of one receiver, and over the receivers of one
sender): each receiver has exactly one sender a slot, each sender one
receiver. Each pair is a stream (its steps are
its slots): the round's instant plus its slot offset is its --start-at, and
its rate one step a period, so step k of pair (i, j) is due at slot
k (n - 1) + (j - i - 1) mod n. The engine lists each measured step's
send lateness and one-way latency (--per-step); the arrival instant is the
planned one plus the latency, and the slot it falls in says whether the
receiver's arrivals interleaved as planned.

bw runs slotted as bulk transfers: each message is a stream step of its -s size (a sample header and as many
values as fill it, rounded up to whole 8-byte values), each pair's --iters its steps; its data rate is the bytes
that arrived over its measured periods, a receiver's the sum over its senders.

The engine lists at most MAX_STEPS steps of a pair (each step's lateness and latency, held in its memory and sent
back whole). More steps run as several slotted rounds of equal steps (Plan.rounds), each with its warm-up; rank 0
joins each pair's rounds in order (Rounds) as one run: round r's measured step m is measured step
r x round_steps + m, every list, count and rate over all of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from fabmeter.errors import EXIT_USAGE, FabmeterError
from fabmeter.stats import spread

# The shortest slot a transport gets: its one-way trip on an idle host, microseconds (event mode wakes in tens;
# shm and RDMA in a few), plus the message's time on the link (--link-gbps).
FLOOR_US = {"shm": 5.0, "verbs": 10.0, "ofi": 10.0}
OTHER_FLOOR_US = 50.0
LINK_GBPS = 10.0             # --link-gbps's default
DEFAULT_FACTOR = 20          # the default slot's guard: this many one-way floors (a loaded host's wake-ups, queues)
MAX_STEPS = 2048             # the engine's --per-step bound (StreamOptions::kMaxPerStep), warm-up included: a round's
MAX_RATE = 10_000_000        # the engine's --rate bound
SAMPLE_HEADER = 24           # the engine's stream sample header (SampleHeader), then 8-byte values
BULK = "bw"                  # the experiment slotted runs as bulk transfers, each message a stream step
# bw's options a slotted step takes another way (-s: its values, --iters: its --count) or that mean nothing there
# (one message a slot: none in flight to bound, no series to bin).
BULK_ONLY = ("size", "iters", "tx_depth", "series_ms")
def residue(src: int, dst: int, n: int) -> int:
    """The slot of pair (src, dst) within each period of n - 1 slots."""
    return (dst - src - 1) % n


def wire_us(size: int, link_gbps: float) -> float:
    """A message's time on the link."""
    return size * 8 / (link_gbps * 1e3)


def floor_us(transport: str, size: int, link_gbps: float = LINK_GBPS) -> float:
    return FLOOR_US.get(transport, OTHER_FLOOR_US) + wire_us(size, link_gbps)


def default_slot_us(transport: str, size: int, link_gbps: float = LINK_GBPS) -> float:
    """The slot from the message and the link: its time on the link plus a guard of DEFAULT_FACTOR one-way
    floors of the transport."""
    return wire_us(size, link_gbps) + DEFAULT_FACTOR * FLOOR_US.get(transport, OTHER_FLOOR_US)


def engine_experiment(the: Optional[Plan], experiment: str) -> str:
    """The experiment each pair's engine runs: slotted bw's is stream (its messages are the steps)."""
    return "stream" if the is not None and the.bulk else experiment


def one(options: dict, key: str):
    v = options.get(key)
    return v[0] if isinstance(v, list) and v else v


def bulk_values(size: int) -> int:
    """The values of a stream step of `size` bytes (at least one; a size between whole values rounds up)."""
    return max(1, -(-(size - SAMPLE_HEADER) // 8))


@dataclass(frozen=True)
class Plan:
    n: int
    slot_ns: float           # the slot as planned: a whole number of periods a second makes it exact
    rate_hz: int             # every pair's stream rate: one step a period
    size: int = 0            # bytes a message
    bulk: bool = False       # bw: messages of -s bytes, data rates reported
    link_gbps: float = LINK_GBPS   # the links' rate the default slot was sized for
    rounds: int = 1          # slotted rounds run one after the other (MAX_STEPS a pair's round, warm-up included)
    round_steps: int = 0     # each round's measured steps (its --count)
    warmup: int = 0          # each round's warm-up steps

    @property
    def period_ns(self) -> float:
        return self.slot_ns * (self.n - 1)

    def offset_ns(self, src: int, dst: int) -> int:
        """How far after the round's instant pair (src, dst) sends its step 0."""
        return round(residue(src, dst, self.n) * self.slot_ns)

    def slot(self, src: int, dst: int, step: int) -> int:
        """The slot (from the round's instant) step `step` of pair (src, dst) is planned in."""
        return step * (self.n - 1) + residue(src, dst, self.n)

    def gbps(self, arrived: int, steps: int) -> float:
        """The data rate of `arrived` messages over `steps` periods."""
        return arrived * self.size * 8 / (steps * self.period_ns) if steps else 0.0

    def as_json(self) -> dict:
        return {"slot_ns": round(self.slot_ns), "period_ns": round(self.period_ns), "rate_hz": self.rate_hz,
                "size": self.size, "bulk": self.bulk, "link_gbps": self.link_gbps, "rounds": self.rounds,
                "round_steps": self.round_steps, "warmup": self.warmup,
                "planned_gbps": self.gbps(1, 1)}     # one pair's, every message arriving


def plan(n: int, experiment: str, options: dict, slot_us: Optional[float],
         link_gbps: Optional[float] = None) -> Plan:
    """The slotted plan of n hosts, or exit 2 saying why there is none: --slot-us (default: default_slot_us over
    --link-gbps) rounded up so that a whole number of periods make a second; the steps (--count, bw's --iters, or
    --duration's worth; rounded up to a multiple of the rounds) in as few rounds of at most MAX_STEPS as hold
    them."""
    link_gbps = LINK_GBPS if link_gbps is None else link_gbps
    if not 0 < link_gbps < 1e6:
        raise FabmeterError(f"mesh: --link-gbps {link_gbps:g} must be above 0 and below 1e6", EXIT_USAGE)
    if experiment not in ("stream", BULK):
        raise FabmeterError("mesh: --schedule slotted runs stream (each step a slot) or bw (each message a slot): "
                            "add --experiment stream or bw", EXIT_USAGE)
    bulk = experiment == BULK
    for key in ("bidir", "size_spread"):
        if bulk and options.get(key):
            raise FabmeterError("mesh: --schedule slotted sends one message of -s bytes a slot: drop "
                                f"--{key.replace('_', '-')}", EXIT_USAGE)
    for key in ("rate", "values", "size"):
        if key == "rate" and "rate" in options:
            raise FabmeterError("mesh: --schedule slotted sets each pair's --rate (one step a period): drop --rate",
                                EXIT_USAGE)
        if isinstance(options.get(key), list) and len(options[key]) > 1:
            raise FabmeterError(f"mesh: --schedule slotted runs one point: one --{key}", EXIT_USAGE)
    values = bulk_values(one(options, "size") or 1) if bulk else (options.get("values") or [1])[0]
    size = SAMPLE_HEADER + 8 * values
    least = floor_us(options.get("transport") or "", size, link_gbps)
    if slot_us is None:
        slot_us = default_slot_us(options.get("transport") or "", size, link_gbps)
    if not slot_us >= least:
        raise FabmeterError(f"mesh: --slot-us {slot_us:g} is too short for a {size} B sample over "
                            f"{options.get('transport')}: at least {least:g} us", EXIT_USAGE)
    rate = math.floor(1e6 / (slot_us * (n - 1)))
    if rate < 1:
        raise FabmeterError(f"mesh: --slot-us {slot_us:g} x {n - 1} slots makes a period over 1 s", EXIT_USAGE)
    rate = min(rate, MAX_RATE)
    steps = options.get("iters" if bulk else "count")
    steps = steps if isinstance(steps, int) else None
    if steps is None:
        duration = options.get("duration") or 0
        steps = max(1, int(duration * rate)) if duration > 0 else rate
    warmup = options.get("warmup") if isinstance(options.get("warmup"), int) else min(1000, rate // 10)
    if warmup >= MAX_STEPS:
        raise FabmeterError(f"mesh: --schedule slotted runs rounds of at most {MAX_STEPS} steps a pair, warm-up "
                            f"included: {rate} Hz makes a warm-up of {warmup} (lower --warmup)", EXIT_USAGE)
    rounds = -(-steps // (MAX_STEPS - warmup))
    return Plan(n, 1e9 / (rate * (n - 1)), rate, size, bulk, link_gbps, rounds, -(-steps // rounds), warmup)


def pair_options(the: Plan, options: dict) -> dict:
    """A pair's engine options for one round: its steps and warm-up, one step a period, every step listed."""
    if the.bulk:
        # Its sender sleeps to each slot: n - 1 spinning senders a host would take every CPU of a small one.
        options = {**{k: v for k, v in options.items() if k not in BULK_ONLY},
                   "values": [bulk_values(the.size)], "timer": "nanosleep"}
    return {**options, "count": the.round_steps, "warmup": the.warmup, "rate": [the.rate_hz], "per_step": True}


class Rounds:
    """Each pair's results over the plan's rounds, given as one once its last round came: its steps' lists
    joined in round order (a round with none, failed, counts its steps as missed), the last round's figures,
    failed with the first failing round's message if any failed; an interrupted one at once, with the rounds
    so far."""

    def __init__(self, the: Plan):
        self.the = the
        self.held: dict[tuple[int, int], tuple[int, dict, dict]] = {}

    def add(self, pair: dict, steps: Optional[dict]) -> tuple[Optional[dict], Optional[dict]]:
        """(pair, its steps) once every round of it came, else (None, None)."""
        if self.the.rounds == 1:
            return pair, steps
        key = (pair["src"], pair["dst"])
        seen, failed, joined = self.held.pop(key, (0, None, {"first": self.the.warmup, "late_ns": [],
                                                             "latency_ns": []}))
        k = self.the.round_steps
        for name in ("late_ns", "latency_ns"):
            joined[name] += ((steps or {}).get(name, []) + [None] * k)[:k]
        failed = failed or (pair if pair["status"] != "ok" else None)
        if seen + 1 < self.the.rounds and pair["status"] != "interrupted":     # interrupted: no more rounds
            self.held[key] = (seen + 1, failed, joined)
            return None, None
        if failed is not None:
            pair = {**pair, "status": failed["status"], "message": failed["message"]}
        return pair, joined


def _ints(v, n: int) -> bool:
    return isinstance(v, list) and len(v) <= n and all(
        x is None or (isinstance(x, int) and not isinstance(x, bool) and abs(x) < 10**15) for x in v)


def valid_steps(v) -> Optional[dict]:
    """A pair's steps as rank 0 takes them from a rank (None: none or not valid)."""
    if not (isinstance(v, dict) and set(v) == {"first", "late_ns", "latency_ns"} and isinstance(v["first"], int)
            and not isinstance(v["first"], bool) and 0 <= v["first"] <= MAX_STEPS
            and _ints(v["late_ns"], MAX_STEPS) and _ints(v["latency_ns"], MAX_STEPS)
            and len(v["late_ns"]) == len(v["latency_ns"])):
        return None
    return {k: v[k] for k in ("first", "late_ns", "latency_ns")}


def steps_of(point: dict) -> Optional[dict]:
    """The engine point's per-step lists: measured steps from step `first` (its warm-up) on."""
    late, latency = point.get("step_late_ns"), point.get("step_latency_ns")
    if not isinstance(late, list) or not isinstance(latency, list):
        return None
    return valid_steps({"first": point.get("warmup"), "late_ns": late, "latency_ns": latency})


def pair_slots(the: Plan, src: int, dst: int, steps: Optional[dict]) -> Optional[dict]:
    """A pair's messages against the plan: each one's send lateness (actual minus planned send instant) and
    arrival instant (ns after the round's instant, on the common timebase), the lateness spread, how many
    arrivals fell outside their own slot, and the data rate of those that arrived over the measured periods."""
    if steps is None:
        return None
    arrival, slot_shift = [], []
    for m, latency in enumerate(steps["latency_ns"]):
        planned = the.slot(src, dst, steps["first"] + m)
        at = None if latency is None else round(planned * the.slot_ns) + latency
        arrival.append(at)
        if at is not None:
            slot_shift.append(math.floor(at / the.slot_ns) - planned)
    late = [x for x in steps["late_ns"] if x is not None]
    return {"offset_ns": the.offset_ns(src, dst), "first_step": steps["first"],
            "late_ns": spread(late), "missed": sum(x is None for x in steps["late_ns"]),
            "arrived": len(slot_shift), "outside_slot": sum(s != 0 for s in slot_shift),
            "slot_shift": spread(slot_shift), "gbps": the.gbps(len(slot_shift), len(arrival)),
            "step_late_ns": steps["late_ns"], "step_arrival_ns": arrival}


def receivers(the: Plan, pairs: list[dict]) -> dict:
    """Per receiver: each arrival attributed to the slot it fell in; a collision is a slot in which two or more
    senders' messages arrived. Interleaved as planned: every arrival in its own slot, no collision. A receiver's
    data rate is its senders' summed."""
    by_dst: dict[int, dict[int, set]] = {}
    counts: dict[int, list[int]] = {}
    gbps: dict[int, float] = {}
    late: list[int] = []
    for p in pairs:
        s = p.get("slotted")
        if not s:
            continue
        late += [x for x in s["step_late_ns"] if x is not None]
        slots = by_dst.setdefault(p["dst"], {})
        c = counts.setdefault(p["dst"], [0, 0])
        c[0] += s["arrived"]
        c[1] += s["outside_slot"]
        gbps[p["dst"]] = gbps.get(p["dst"], 0.0) + s["gbps"]
        for at in s["step_arrival_ns"]:
            if at is not None:
                slots.setdefault(math.floor(at / the.slot_ns), set()).add(p["src"])
    out = []
    for dst in sorted(by_dst):
        collisions = sum(len(senders) > 1 for senders in by_dst[dst].values())
        arrived, outside = counts[dst]
        out.append({"rank": dst, "arrivals": arrived, "outside_slot": outside, "collisions": collisions,
                    "gbps": gbps[dst], "interleaved": arrived > 0 and outside == 0 and collisions == 0})
    return {**the.as_json(), "late_ns": spread(late), "receivers": out,
            "collisions": sum(r["collisions"] for r in out), "gbps": sum(gbps.values()),
            "interleaved": bool(out) and all(r["interleaved"] for r in out)}


def lines(summary: dict, pairs: list[dict]) -> list[str]:
    """The slotted section under the matrix."""
    s = summary.get("slotted")
    if not s:
        return []
    us = lambda ns: "n/a" if ns is None else f"{ns / 1000:.1f} us"     # noqa: E731
    late = s["late_ns"] or {}
    ok = sum(r["interleaved"] for r in s["receivers"])
    out = [f"slotted: slot {us(s['slot_ns'])} ({s['link_gbps']:g} Gbit/s links), period {us(s['period_ns'])} "
           f"({s['rate_hz']} Hz a pair), {s['rounds']} round(s) of {s['round_steps']} steps a pair; "
           f"send lateness (actual - planned instant) over every message p50 {us(late.get('p50'))}, "
           f"p99 {us(late.get('p99'))}, max {us(late.get('max'))}; receivers interleaved as planned "
           f"{ok}/{len(s['receivers'])}, collisions {s['collisions']}"]
    if s.get("bulk"):
        rates = [r["gbps"] for r in s["receivers"]]
        mbps = lambda gbps: f"{gbps * 1e3:.4g}"     # noqa: E731
        out.append(f"slotted bulk: {s['size']} B a message, {mbps(s['planned_gbps'])} Mbit/s a pair as planned; "
                   f"data rate at a receiver min {mbps(min(rates, default=0))}, max {mbps(max(rates, default=0))}, "
                   f"all receivers {mbps(s['gbps'])} Mbit/s")
    for p in pairs:
        sl = p.get("slotted")
        if sl and sl["outside_slot"]:
            out.append(f"  {p['src']}->{p['dst']}: {sl['outside_slot']}/{sl['arrived']} arrivals outside their "
                       f"slot (shift p50 {sl['slot_shift']['p50']}, max {sl['slot_shift']['max']} slots)")
    return out
