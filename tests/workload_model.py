"""Message-size workloads, sampled exactly as the engine samples them.

The engine's load experiment draws request sizes from a size CDF
(engine/include/fabmeter/workload.hpp) with std::mt19937_64 and its own
draw to [0, 1) (engine/include/fabmeter/rng.hpp). This module reads the same
files (the built-in W1-W5 in data/workloads/, or a user's CSV of
`length_bytes,weight` rows), builds the CDF with the same floating-point
operations in the same order, and draws with the same generator, so a seed
gives the same sizes in Python as in the engine (tests/test_workload.py holds
the two side by side). The engine validates files and names the bad line;
here a file the engine would refuse raises ValueError.

It lives with the tests: an independent model of the engine's sampler, which
no command needs.
"""

from __future__ import annotations

import bisect
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parents[1] / "data" / "workloads"
BUILTIN = ("w1", "w2", "w3", "w4", "w5")
_MASK = (1 << 64) - 1


class Mt19937_64:
    """std::mt19937_64 (its sequence is fixed by the C++ standard)."""

    _N, _M = 312, 156
    _A, _UPPER, _LOWER = 0xB5026F5AA96619E9, 0xFFFFFFFF80000000, 0x7FFFFFFF

    def __init__(self, seed: int):
        mt = [seed & _MASK]
        for i in range(1, self._N):
            mt.append((6364136223846793005 * (mt[-1] ^ (mt[-1] >> 62)) + i) & _MASK)
        self._mt, self._i = mt, self._N

    def _twist(self) -> None:
        mt, n, m = self._mt, self._N, self._M
        for i in range(n):
            x = (mt[i] & self._UPPER) | (mt[(i + 1) % n] & self._LOWER)
            mt[i] = mt[(i + m) % n] ^ (x >> 1) ^ (self._A if x & 1 else 0)
        self._i = 0

    def __call__(self) -> int:
        if self._i >= self._N:
            self._twist()
        x = self._mt[self._i]
        self._i += 1
        x ^= (x >> 29) & 0x5555555555555555
        x ^= (x << 17) & 0x71D67FFFEDA60000
        x ^= (x << 37) & 0xFFF7EEE000000000
        return (x ^ (x >> 43)) & _MASK


class Rng:
    """The engine's fm::Rng: uniform in [0, 1) from the top 53 bits."""

    def __init__(self, seed: int):
        self._gen = Mt19937_64(seed)

    def uniform(self) -> float:
        return (self._gen() >> 11) * 2.0 ** -53


class Workload:
    def __init__(self, name: str, lengths: list[int], weights: list[float]):
        if not lengths or not lengths == sorted(set(lengths)):
            raise ValueError(f"workload {name}: sizes must rise from row to row")
        total = weighted = 0.0
        for w, n in zip(weights, lengths):
            total += w
            weighted += w * float(n)
        if not total > 0:
            raise ValueError(f"workload {name}: the weights add up to 0")
        self.name, self.lengths, self.mean_size = name, lengths, weighted / total
        run, self.cdf = 0.0, []
        for w in weights:
            run += w
            self.cdf.append(run / total)
        top = self.cdf[-1]  # exactly 1 at the end, as the engine: every draw finds a size
        self.cdf = [1.0 if c == top else c for c in self.cdf]

    @classmethod
    def load(cls, spec: str) -> "Workload":
        path = WORKLOADS / f"{spec}.csv" if spec in BUILTIN else Path(spec)
        lengths, weights, header = [], [], False
        for line in path.read_text().splitlines():
            line = line.strip(" \t\r")
            if not line or line.startswith("#"):
                continue
            if not header:
                if line != "length_bytes,weight":
                    raise ValueError(f"workload {spec}: expected the header 'length_bytes,weight'")
                header = True
                continue
            size, weight = line.split(",")
            lengths.append(int(size))
            weights.append(float(weight))
        return cls(spec, lengths, weights)

    def at(self, u: float) -> int:
        """The size at cumulative probability u in [0, 1) (the engine's upper_bound)."""
        return self.lengths[min(bisect.bisect_right(self.cdf, u), len(self.lengths) - 1)]

    def sample(self, rng: Rng) -> int:
        return self.at(rng.uniform())
