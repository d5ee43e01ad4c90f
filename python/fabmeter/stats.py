"""Side by side: what two sets of figures can tell apart on a noisy machine.

Every comparison fabmeter prints (`fabmeter bench`, `fabmeter compare`,
`make bench-ab`, the Soft-RoCE comparison) goes through here, so a ratio
always comes with an interval and a verdict that may be "cannot tell".
Four kinds of evidence, best first:

- Alternated rounds (both sides measured once per round, back to back, in
  alternating order): the ratio of each round's two figures; the interval is
  distribution-free, the k-th lowest to the k-th highest round ratio, k the
  largest whose binomial coverage of the median is at least `CONFIDENCE`
  (`median_interval`). Five rounds are the fewest with an interval.
- Repeated runs, not paired (several runs of one point on each side): the
  Hodges-Lehmann interval of the ratio, from every cross-pair's ratio and the
  exact Mann-Whitney distribution (`shift_interval`); three runs a side are
  the fewest with an interval.
- One run a side with raw samples: a moving-block bootstrap of the ratio of
  the two medians (`bootstrap_interval`). It knows only the noise inside each
  run, not how much a second run would differ.
- Fewer runs a side than repeated runs need, against the run-to-run spread
  measured for that kind of point (`compare_beyond_spread`): the ratio's
  interval (the bootstrap's where there are samples) widened by the spread,
  and a verdict only where it lies wholly beyond 1; else `cannot tell`,
  never `indistinguishable`: a run or two a side cannot show that two
  things are alike.

A ratio is always new / base (or fabmeter / peer). Its verdict, for a
figure where lower is better (latency) or higher is (throughput): `better` or
`worse` when the interval lies wholly on one side of the reference (1.0, or
a row's target), `indistinguishable` when it spans it, `cannot tell` when
there is no interval.

Standard library only, but for the bootstrap (numpy, imported there): the
Soft-RoCE comparison runs before any virtual environment exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:
    import numpy as np

CONFIDENCE = 0.90
MIN_ROUNDS = 5             # the fewest rounds whose whole range covers the median at >= CONFIDENCE
BOOTSTRAP_RESAMPLES = 400
BLOCKS = 20                # a run's samples cut into this many contiguous blocks for the bootstrap
MAX_BOOTSTRAP_SAMPLES = 10000   # a longer run is thinned to about this many for the bootstrap
MIN_SAMPLES = 100          # below this, a bootstrap interval of a median means little

BETTER, WORSE, SAME, UNKNOWN = "better", "worse", "indistinguishable", "cannot tell"


def spread(values: list) -> Optional[dict]:
    """p50, p99 (nearest rank) and max of `values`, with their count; None for none."""
    if not values:
        return None
    v = sorted(values)
    rank = lambda q: v[max(0, -(-len(v) * q // 100) - 1)]     # ceil(n q / 100) - 1
    return {"n": len(v), "p50": rank(50), "p99": rank(99), "max": v[-1]}


def median(xs: Sequence[float]) -> Optional[float]:
    """The median of the finite numbers in xs (None if there are none)."""
    vals = sorted(x for x in xs if isinstance(x, (int, float)) and math.isfinite(x))
    if not vals:
        return None
    n = len(vals)
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2


def median_interval(xs: Sequence[float], confidence: float = CONFIDENCE) -> Optional[tuple[float, float, float]]:
    """(low, high, coverage): a distribution-free interval for the median of xs, the k-th lowest to the k-th
    highest value, k the largest whose coverage 1 - 2 P(B < k), B ~ Binomial(n, 1/2), is at least
    `confidence`; None when even the whole range covers less (fewer than 5 values at 90 %)."""
    vals = sorted(xs)
    n = len(vals)
    tail, best = 0.0, None   # tail: P(B < k)
    for k in range(1, n // 2 + 1):
        tail += math.comb(n, k - 1) / 2 ** n
        if 1 - 2 * tail < confidence:
            break
        best = (vals[k - 1], vals[n - k], 1 - 2 * tail)
    return best


def _mann_whitney_counts(n: int, m: int) -> list[int]:
    """How many of the C(n+m, n) orderings of two samples give each value of the Mann-Whitney U."""
    # counts[i][j][u] over i of n and j of m, kept one i at a time.
    prev = [[1] + [0] * (n * m) for _ in range(m + 1)]   # i = 0: U = 0 for every j
    for i in range(1, n + 1):
        cur = [[1] + [0] * (n * m)]                        # j = 0: U = 0
        for j in range(1, m + 1):
            row = [0] * (n * m + 1)
            for u in range(i * j + 1):
                row[u] = (prev[j][u - j] if u >= j else 0) + cur[j - 1][u]
            cur.append(row)
        prev = cur
    return prev[m]


def shift_interval(base: Sequence[float], new: Sequence[float],
                   confidence: float = CONFIDENCE) -> Optional[tuple[float, float, float]]:
    """(low, high, coverage): the Hodges-Lehmann interval of new / base for two unpaired sets of positive
    figures: the c-th lowest to the c-th highest of the n x m cross ratios, c the largest whose exact
    Mann-Whitney coverage is at least `confidence`; None when even the extremes cover less."""
    b = [x for x in base if isinstance(x, (int, float)) and x > 0 and math.isfinite(x)]
    n_ = [x for x in new if isinstance(x, (int, float)) and x > 0 and math.isfinite(x)]
    if not b or not n_ or len(b) * len(n_) > 2500:   # beyond 50 x 50 runs, use rounds or samples
        return None
    ratios = sorted(y / x for x in b for y in n_)
    counts = _mann_whitney_counts(len(b), len(n_))
    total = sum(counts)
    tail, best = 0, None   # tail: orderings with U < c
    for c in range(1, len(ratios) // 2 + 1):
        tail += counts[c - 1]
        coverage = 1 - 2 * tail / total
        if coverage < confidence:
            break
        best = (ratios[c - 1], ratios[len(ratios) - c], coverage)
    return best


def bootstrap_interval(base: np.ndarray, new: np.ndarray, confidence: float = CONFIDENCE,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> Optional[tuple[float, float]]:
    """(low, high): the percentile interval of median(new) / median(base) over moving-block bootstrap
    resamples of each side: BLOCKS contiguous blocks drawn with replacement, so a run's slow drift (a
    neighbour's burst, a frequency step) widens the interval as it should. A fixed seed: the same data gives
    the same interval. None with fewer than MIN_SAMPLES a side."""
    import numpy as np
    sides = [np.asarray(x, dtype=np.float64) for x in (base, new)]
    if min(x.size for x in sides) < MIN_SAMPLES:
        return None
    rng = np.random.default_rng(seed)
    medians = []
    for x in sides:
        x = x[::max(1, x.size // MAX_BOOTSTRAP_SAMPLES)]   # every k-th, in order: wider, never narrower
        blocks = np.array_split(x, min(BLOCKS, x.size))
        pick = rng.integers(0, len(blocks), (resamples, len(blocks)))
        medians.append(np.array([np.median(np.concatenate([blocks[i] for i in row])) for row in pick]))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = medians[1] / medians[0]
    lo, hi = np.quantile(ratios, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def verdict(interval: Optional[Sequence[float]], higher_is_better: bool, reference: float = 1.0) -> str:
    """better / worse / indistinguishable from where the ratio's interval lies against `reference`."""
    if interval is None:
        return UNKNOWN
    lo, hi = interval[0], interval[1]
    if lo > reference:
        return BETTER if higher_is_better else WORSE
    if hi < reference:
        return WORSE if higher_is_better else BETTER
    return SAME


def against_target(interval: Optional[Sequence[float]], target: float, higher_is_better: bool) -> str:
    """A target is a bound the ratio may reach (<= target, or >= for a rate): "met" when the whole interval
    keeps it, "not met" when the whole interval breaks it, else "cannot tell"."""
    if interval is None:
        return UNKNOWN
    lo, hi = interval[0], interval[1]
    if (lo >= target) if higher_is_better else (hi <= target):
        return "met"
    if (hi < target) if higher_is_better else (lo > target):
        return "not met"
    return UNKNOWN


@dataclass
class Comparison:
    """new against base: each side's median, their ratio new / base, the ratio's interval and verdict."""
    base: Optional[float]
    new: Optional[float]
    ratio: Optional[float]
    interval: Optional[tuple[float, float]]
    verdict: str
    method: str            # "rounds" (alternated), "runs" (repeated, unpaired), "samples" (one run a side),
    #                        "spread" (few runs, against a measured run-to-run spread) or "none"
    reason: str = ""       # why this verdict, in words
    spread: Optional[float] = None   # "spread": the run-to-run spread the interval was widened by

    def json(self) -> dict:
        return {"base": self.base, "new": self.new, "ratio": self.ratio,
                "interval": None if self.interval is None else list(self.interval),
                "confidence": CONFIDENCE, "verdict": self.verdict, "method": self.method, "reason": self.reason,
                "spread": self.spread}


def _ratio(new: Optional[float], base: Optional[float]) -> Optional[float]:
    return new / base if new is not None and base else None


def compare_rounds(base: Sequence[float], new: Sequence[float], higher_is_better: bool,
                   reference: float = 1.0) -> Comparison:
    """Alternated rounds, base[i] and new[i] measured back to back: the interval of the median round ratio."""
    mb, mn = median(base), median(new)
    per_round = [n / b for b, n in zip(base, new)
                 if isinstance(b, (int, float)) and isinstance(n, (int, float)) and b and math.isfinite(n / b)]
    found = median_interval(per_round)
    interval = None if found is None else (found[0], found[1])
    return Comparison(mb, mn, _ratio(mn, mb), interval, verdict(interval, higher_is_better, reference),
                      "rounds" if interval else "none")


def compare_samples(base: np.ndarray, new: np.ndarray, higher_is_better: bool = False) -> Comparison:
    """Two runs' raw samples of one figure (no rounds): medians and the bootstrap interval of their ratio."""
    import numpy as np
    base, new = np.asarray(base, dtype=np.float64), np.asarray(new, dtype=np.float64)
    mb = float(np.median(base)) if base.size else None
    mn = float(np.median(new)) if new.size else None
    interval = bootstrap_interval(base, new)
    return Comparison(mb, mn, _ratio(mn, mb), interval, verdict(interval, higher_is_better),
                      "samples" if interval else "none")


def compare_runs(base: Sequence[float], new: Sequence[float], higher_is_better: bool,
                 reference: float = 1.0) -> Comparison:
    """Several runs of one point a side, not paired: medians of the runs' figures, the Hodges-Lehmann
    interval of their ratio."""
    mb, mn = median(base), median(new)
    found = shift_interval(base, new)
    interval = None if found is None else (found[0], found[1])
    return Comparison(mb, mn, _ratio(mn, mb), interval, verdict(interval, higher_is_better, reference),
                      "runs" if interval else "none")


def compare_beyond_spread(base: Sequence[float], new: Sequence[float], higher_is_better: bool,
                          spread: Optional[float], within: Optional[tuple[float, float]] = None) -> Comparison:
    """Fewer runs a side than `compare_runs` needs: the medians of each side's runs and their ratio. `spread`
    (>= 1): the factor by which two runs of one configuration measured apart at most (compare's run-to-run
    spread), None where none was measured. The interval is the ratio's (`within`, the bootstrap's of one run a
    side, where there is one) divided and multiplied by the spread: a verdict only where it lies wholly
    beyond 1, else cannot tell (never indistinguishable)."""
    mb, mn = median(base), median(new)
    ratio = _ratio(mn, mb)
    if ratio is None or spread is None:
        return Comparison(mb, mn, ratio, None, UNKNOWN, "none")
    lo, hi = within or (ratio, ratio)
    interval = (lo / spread, hi * spread)
    found = verdict(interval, higher_is_better)
    return Comparison(mb, mn, ratio, interval, UNKNOWN if found == SAME else found, "spread", spread=spread)


def compare_values(base: Optional[float], new: Optional[float]) -> Comparison:
    """One figure a side, nothing to judge its noise by: the ratio, and no verdict."""
    return Comparison(base, new, _ratio(new, base), None, UNKNOWN, "none")
