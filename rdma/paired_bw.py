#!/usr/bin/env python3
"""Summarises rdma/paired-bw.sh: for each op and pair of tools, the ratio of
their message (lat-*: round-trip) rates with the two rxe pairs' own
difference cancelled.

    rdma/paired_bw.py OUTDIR/pairs.txt

A line "NAME OP p0=A p1=B R0/R1 ..." holds A's and B's rates (msg/s) in
common windows, A on pair 0 and B on pair 1; its partner, the same round
and op, has them swapped. With pair 0 running at p times pair 1's speed,
the first gives (A/B) * p and the second (B/A) * p per window (geometric
mean over the windows), so A/B = sqrt(first / second) and p = sqrt(first *
second). Prints each round's A/B and the median; lines that do not parse
(a client that ended before the windows closed: "ended-early") are named
on stderr and skipped. Standard library only.
"""
import math
import re
import statistics
import sys

LINE = re.compile(r"(r\d+)-\S+ (\S+) p0=(\S+) p1=(\S+)((?: \d+/\d+)+)$")


def window_ratio(windows):
    """Geometric mean of R0/R1 over the windows; None if a tool stood still."""
    if any(r0 == 0 or r1 == 0 for r0, r1 in windows):
        return None
    return math.exp(sum(math.log(r0 / r1) for r0, r1 in windows) / len(windows))


def paired_ratios(lines, skipped=None):
    """{(op, A, B): [(round, A/B, pair factor), ...]} from pairs.txt lines;
    the lines that do not parse are appended to `skipped`."""
    runs = {}
    for line in lines:
        m = LINE.match(line.strip())
        if not m:
            if line.strip() and skipped is not None:
                skipped.append(line.strip())
            continue
        rnd, op, t0, t1, rest = m.groups()
        windows = [tuple(int(x) for x in w.split("/")) for w in rest.split()]
        runs[(rnd, op, t0, t1)] = window_ratio(windows)
    out = {}
    for (rnd, op, a, b), first in sorted(runs.items()):
        if a >= b or (rnd, op, b, a) not in runs:
            continue  # each pair once, from its alphabetically first placement
        second = runs[(rnd, op, b, a)]
        if first is None or second is None:
            continue
        out.setdefault((op, a, b), []).append((rnd, math.sqrt(first / second), math.sqrt(first * second)))
    return out


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    skipped = []
    with open(argv[1]) as f:
        ratios = paired_ratios(f, skipped)
    for line in skipped:
        print(f"skipped: {line}", file=sys.stderr)
    if not ratios:
        sys.exit(f"{argv[1]}: no complete pair of runs")
    print("op        A/B        median   rounds (A/B; pair 0 / pair 1 speed)")
    for (op, a, b), rows in sorted(ratios.items()):
        med = statistics.median(r for _, r, _ in rows)
        each = "  ".join(f"{r:.3f} ({p:.3f})" for _, r, p in rows)
        print(f"{op:9s} {a + '/' + b:10s} {med:6.3f}   {each}")


if __name__ == "__main__":
    main(sys.argv)
