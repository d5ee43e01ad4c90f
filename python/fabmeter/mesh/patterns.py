"""Traffic patterns (which directed pairs) and schedules (in which rounds).

Hosts are ranks 0..n-1. A pair (src, dst) is one experiment: src runs the
engine client, dst the engine server.
"""

from __future__ import annotations

PATTERNS = ("all-to-all", "one-to-all", "all-to-one", "fixed-target", "ring", "pairs")
SCHEDULES = ("scheduled", "chaotic")

Pair = tuple[int, int]


def pairs(pattern: str, n: int) -> list[Pair]:
    """The directed pairs of `pattern` over n hosts, sorted."""
    if n < 2:
        raise ValueError("a mesh needs at least 2 hosts")
    if pattern == "all-to-all":
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
        raise ValueError(f"unknown pattern '{pattern}' (one of {', '.join(PATTERNS)})")
    return sorted(set(out))


def tournament(n: int) -> list[list[tuple[int, int]]]:
    """Round-robin tournament by the circle method: n-1 rounds (n even; n odd:
    n rounds with one host resting) of disjoint unordered pairs {a, b}, a < b,
    in which every two hosts meet exactly once."""
    slots = list(range(n)) + ([None] if n % 2 else [])
    m = len(slots)
    rounds = []
    for _ in range(m - 1):
        matches = [(slots[i], slots[m - 1 - i]) for i in range(m // 2)]
        rounds.append([tuple(sorted(p)) for p in matches if None not in p])
        slots = [slots[0], slots[-1], *slots[1:-1]]    # host 0 stays, the rest rotate
    return rounds


def rounds(pattern: str, schedule: str, n: int) -> list[list[Pair]]:
    """The pattern's pairs in rounds. scheduled: tournament rounds, each
    host with at most one peer per round (both directions to that peer run
    together), empty rounds dropped; chaotic: every pair in one round."""
    wanted = pairs(pattern, n)
    if schedule == "chaotic":
        return [wanted]
    if schedule != "scheduled":
        raise ValueError(f"unknown schedule '{schedule}' (one of {', '.join(SCHEDULES)})")
    out = []
    for matches in tournament(n):
        met = set(matches)
        this = [p for p in wanted if tuple(sorted(p)) in met]
        if this:
            out.append(this)
    return out
