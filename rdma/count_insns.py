#!/usr/bin/env python3
"""Summarises rdma/count-insns.sh: instructions per round trip, whole guest
(user space and kernel), of fabmeter (fm) and perftest (pt) per op.

    rdma/count_insns.py OUTDIR

A snapshot file OUTDIR/snap-TOOL-OP-N-{a,b} (rdma/tbcount.c) holds one line
"vaddr n_insns execs" per translated block; a run's count is b - a. With two
run lengths N1 < N2, (count(N2) - count(N1)) / (N2 - N1) is the count per
round trip with start-up and teardown cancelled. Kernel addresses (the upper
half) are named from OUTDIR/kallsyms; the rest is user space. Prints each
tool's instructions and blocks per round trip, user and kernel, and the
kernel symbols whose counts differ most between the two tools (COUNT_TOP of
them, default 8). Standard library only.
"""
import bisect
import collections
import os
import re
import sys

SNAP = re.compile(r"snap-(fm|pt)-([\w+]+)-(\d+)-a$")
KERNEL = 0xFFFF800000000000


def load_symbols(path):
    syms = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and int(parts[0], 16):
                syms.append((int(parts[0], 16), parts[2]))
    syms.sort()
    return [a for a, _ in syms], [n for _, n in syms]


def load_snapshot(path):
    blocks = {}
    with open(path) as f:
        for line in f:
            va, n, execs = line.split()
            blocks[(int(va, 16), int(n))] = int(execs)
    return blocks


def run_counts(outdir, tag, symbols):
    """{name: instructions, "[user]": ..., "#blocks user"/"#blocks kernel": ...} of one run (b - a)."""
    addrs, names = symbols
    before = load_snapshot(os.path.join(outdir, f"snap-{tag}-a"))
    after = load_snapshot(os.path.join(outdir, f"snap-{tag}-b"))
    counts = collections.Counter()
    for (va, n), execs in after.items():
        runs = execs - before.get((va, n), 0)
        if runs <= 0:
            continue
        if va < KERNEL:
            counts["[user]"] += runs * n
            counts["#blocks user"] += runs
        else:
            i = bisect.bisect_right(addrs, va) - 1
            counts[names[i] if i >= 0 else "[kernel, unnamed]"] += runs * n
            counts["#blocks kernel"] += runs
    return counts


def per_round_trip(outdir, symbols):
    """{(op, tool): {name: per round trip}} from every op and tool run at two lengths."""
    lengths = collections.defaultdict(set)
    for name in os.listdir(outdir):
        m = SNAP.match(name)
        if m and os.path.exists(os.path.join(outdir, name[:-1] + "b")):
            lengths[(m.group(2), m.group(1))].add(int(m.group(3)))
    out = {}
    for (op, tool), ns in sorted(lengths.items()):
        if len(ns) < 2:
            continue
        n1, n2 = min(ns), max(ns)
        c1 = run_counts(outdir, f"{tool}-{op}-{n1}", symbols)
        c2 = run_counts(outdir, f"{tool}-{op}-{n2}", symbols)
        out[(op, tool)] = {k: (c2[k] - c1[k]) / (n2 - n1) for k in set(c1) | set(c2)}
    return out


def totals(per):
    user = per.get("[user]", 0)
    kernel = sum(v for k, v in per.items() if not k.startswith(("#", "[user]")))
    return user, kernel


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    outdir = argv[1]
    per = per_round_trip(outdir, load_symbols(os.path.join(outdir, "kallsyms")))
    if not per:
        sys.exit(f"count_insns: no tool ran at two lengths in {outdir}")
    print("op      tool  insns/rt    user  kernel  blocks/rt (user, kernel)")
    for (op, tool), p in sorted(per.items()):
        user, kernel = totals(p)
        print(f"{op:7} {tool:4} {user + kernel:9.0f} {user:7.0f} {kernel:7.0f}  "
              f"{p.get('#blocks user', 0):.0f}, {p.get('#blocks kernel', 0):.0f}")
    for op in sorted({op for op, _ in per}):
        fm, pt = per.get((op, "fm")), per.get((op, "pt"))
        if not fm or not pt:
            continue
        names = [k for k in set(fm) | set(pt) if not k.startswith("#")]
        names.sort(key=lambda k: -abs(fm.get(k, 0) - pt.get(k, 0)))
        print(f"\n{op}: largest differences, instructions per round trip (fm - pt)")
        for k in names[:int(os.environ.get("COUNT_TOP", 8))]:
            print(f"  {k:40} {fm.get(k, 0):9.0f} {pt.get(k, 0):9.0f} {fm.get(k, 0) - pt.get(k, 0):+8.0f}")


if __name__ == "__main__":
    main(sys.argv)
