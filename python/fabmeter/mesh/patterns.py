"""Traffic patterns (which directed pairs) and schedules (in which rounds).

Hosts are ranks 0..n-1. A pair (src, dst) is one experiment: src runs the
engine client, dst the engine server.
"""

from __future__ import annotations

from typing import Iterator

PATTERNS = ("all-to-all", "one-to-all", "all-to-one", "fixed-target", "ring", "pairs")
# load only, every pair at once: each host a client of all the others, its --rate and --count split evenly among
# them. With Poisson arrivals that is Homa's cp_node (each request to a random server): a Poisson stream split at
# random is independent Poisson streams of the shares.
SPLIT_PATTERNS = ("many-to-many",)
ROUND_SCHEDULES = ("scheduled", "chaotic")          # what watch's sweeps take
SCHEDULES = ROUND_SCHEDULES + ("slotted",)   # slotted: all pairs at once, each message in a slot (slotted.py)

Pair = tuple[int, int]


def pairs(pattern: str, n: int) -> list[Pair]:
    """The directed pairs of `pattern` over n hosts, sorted."""
    if n < 2:
        raise ValueError("a mesh needs at least 2 hosts")
    if pattern in ("all-to-all", "many-to-many"):
        out = [(s, d) for s in range(n) for d in range(n) if s != d]
    elif pattern == "one-to-all":       # rank 0 sends to everyone
        out = [(0, d) for d in range(1, n)]
    elif pattern == "all-to-one":       # everyone sends to rank 0
        out = [(s, 0) for s in range(1, n)]
    elif pattern == "fixed-target":     # each host one fixed target half the ring away: a permutation
        out = [(s, (s + n // 2) % n) for s in range(n)]
    elif pattern == "ring":
        out = [(s, (s + 1) % n) for s in range(n)]
    elif pattern == "pairs":            # 0<->1, 2<->3, ...; with odd n the last host is idle
        out = [p for s in range(0, n - 1, 2) for p in ((s, s + 1), (s + 1, s))]
    else:
        raise ValueError(f"unknown pattern '{pattern}' (one of {', '.join(PATTERNS + SPLIT_PATTERNS)})")
    return sorted(set(out))


def tournament(n: int) -> Iterator[list[tuple[int, int]]]:
    """Round-robin tournament by the circle method: n-1 rounds (n even; n odd:
    n rounds with one host resting) of disjoint unordered pairs {a, b}, a < b,
    in which every two hosts meet exactly once. One round at a time: O(n)
    memory, however many rounds."""
    slots = list(range(n)) + ([None] if n % 2 else [])
    m = len(slots)
    for _ in range(m - 1):
        matches = [(slots[i], slots[m - 1 - i]) for i in range(m // 2)]
        yield [tuple(sorted(p)) for p in matches if None not in p]
        slots = [slots[0], slots[-1], *slots[1:-1]]    # host 0 stays, the rest rotate


def iter_rounds(pattern: str, schedule: str, n: int) -> Iterator[list[Pair]]:
    """The pattern's pairs in rounds, one round at a time (each sorted). scheduled:
    tournament rounds, each host with at most one partner per round (both directions
    to that partner run together), empty rounds dropped; chaotic: every pair in one
    round; slotted: as chaotic, one round (its pairs keep to slots within it). A round costs O(n), not O(pairs): 1,000 hosts have ~10^6 pairs."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule '{schedule}' (one of {', '.join(SCHEDULES)})")
    if pattern == "all-to-all" and n >= 2:     # every pair a round holds is wanted: no n^2 set
        wanted = lambda p: True
    else:
        wanted_list = pairs(pattern, n)
        if schedule != "scheduled":
            yield wanted_list
            return
        wanted = set(wanted_list).__contains__
    if schedule != "scheduled":
        yield pairs(pattern, n)
        return
    for matches in tournament(n):
        this = sorted(p for a, b in matches for p in ((a, b), (b, a)) if wanted(p))
        if this:
            yield this


def rounds(pattern: str, schedule: str, n: int) -> list[list[Pair]]:
    """iter_rounds as a list."""
    return list(iter_rounds(pattern, schedule, n))
