"""The engine's latency histograms (`--samples hist`: a point's `latency_hist`,
lat's `rtt_hist`; load writes `latency_hist` always): HdrHistogram's V2
encoding, base64 of a zlib-compressed block (engine/src/core/histogram.cpp
encode()), decoded by the hdrhistogram package. A histogram comes from a
relaying serve or a mesh rank, so its zlib block is first inflated with a
bound (zlib's own max_length): a small line cannot make us allocate without
limit before the library reads it. `watch` reads them into buckets
(values), `mesh` adds them up exactly (Merged)."""

from __future__ import annotations

import base64
import binascii
import math
import struct
import zlib
from typing import TYPE_CHECKING, Iterator, Optional

if TYPE_CHECKING:       # the library is imported where a histogram is read: not by every start of the CLI (test_cli)
    from hdrh.histogram import HdrHistogram

MAX_DECODED = 4 << 20   # the engine's histograms inflate to ~1 MiB at most (10 s, 3 digits)
MAX_COUNTS = 1 << 20    # counters a layout may need (the engine's: 25,600): the library allocates them before reading
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9))   # the engine's summary keys


class HistogramError(ValueError):
    """Not a histogram the engine writes."""


def _bounded(text: str) -> None:
    """Raises HistogramError unless `text` is base64 of one compressed block that inflates within MAX_DECODED."""
    try:
        packed = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError) as e:
        raise HistogramError(f"not base64: {e}") from None
    if len(packed) < 8:
        raise HistogramError("too short")
    _, length = struct.unpack_from(">II", packed)
    inflate = zlib.decompressobj()
    try:
        payload = inflate.decompress(packed[8:8 + length], MAX_DECODED)
    except zlib.error as e:
        raise HistogramError(f"not a compressed histogram: {e}") from None
    if inflate.unconsumed_tail:
        raise HistogramError(f"inflates beyond {MAX_DECODED} bytes")
    _counters(payload)


def _counters(payload: bytes) -> None:
    """Raises HistogramError unless the layout the payload's header states (V2: cookie, length, normalising
    offset, digits, lowest, highest) needs at most MAX_COUNTS counters, counted as the library will."""
    if len(payload) < 32:
        raise HistogramError("too short")
    digits, lowest, highest = struct.unpack_from(">IQQ", payload, 12)
    if not (1 <= digits <= 5 and 1 <= lowest and 2 * lowest <= highest < 1 << 63):
        raise HistogramError(f"not a layout: {digits} digits, {lowest} .. {highest}")
    from hdrh.histogram import get_bucket_count
    sub_buckets = 1 << math.ceil(math.log2(2 * 10 ** digits))
    counts = (get_bucket_count(highest, sub_buckets, int(math.log2(lowest))) + 1) * (sub_buckets // 2)
    if counts > MAX_COUNTS:
        raise HistogramError(f"its layout ({digits} digits, {lowest} .. {highest}) needs {counts} counters, "
                             f"more than {MAX_COUNTS}")


def decode(text: str) -> HdrHistogram:
    """The histogram `text` encodes, inflated with a bound first; HistogramError if it is not one."""
    from hdrh.histogram import HdrHistogram
    _bounded(text)
    try:
        return HdrHistogram.decode(text)
    except Exception as e:   # the library raises its own cookie and length errors, zlib's, struct's
        raise HistogramError(f"not a histogram the engine writes: {type(e).__name__}: {e}") from None


def _recorded(h: HdrHistogram) -> list[tuple[int, int]]:
    """(highest value of the range, count) of every recorded value range, in increasing order."""
    try:
        return [(it.value_iterated_to, it.count_at_value_iterated_to) for it in h.get_recorded_iterator()]
    except Exception as e:
        raise HistogramError(f"not a histogram the engine writes: {type(e).__name__}: {e}") from None


def values(text: str) -> Iterator[tuple[float, int]]:
    """(value, count) of every recorded value range, in increasing order; value is the middle of the range
    the histogram holds it in (within its significant digits of the value recorded)."""
    h = decode(text)
    for highest, count in _recorded(h):
        low = h.get_lowest_equivalent_value(highest)
        yield (low + highest) / 2.0, count


def layout(h: HdrHistogram) -> tuple[int, int, int]:
    """(lowest, highest, significant digits): histograms of one layout add up exactly."""
    return h.lowest_trackable_value, h.highest_trackable_value, h.significant_figures


class Merged:
    """Histograms of one layout added exactly (their counts summed range by range), with the values each held
    outside its range (the engine's NAME_hist_below, _above) and, where known, the exact extremes of what they
    hold (their points' summaries)."""

    def __init__(self) -> None:
        self.hist: Optional[HdrHistogram] = None
        self.below = self.above = 0
        self.min: Optional[float] = None
        self.max: Optional[float] = None

    def add(self, h: HdrHistogram, below: int, above: int, lo: Optional[float] = None,
            hi: Optional[float] = None) -> None:
        """One decoded engine histogram (decode), its out-of-range counts and its exact min and max, if known.
        HistogramError if its layout differs from the others'."""
        if self.hist is not None and layout(h) != layout(self.hist):
            raise HistogramError(f"layout {layout(h)} is not the others' {layout(self.hist)}")
        if self.hist is None:
            from hdrh.histogram import HdrHistogram
            self.hist = HdrHistogram(*layout(h))
        self.hist.add(h)
        self.below += below
        self.above += above
        if lo is not None:
            self.min = lo if self.min is None else min(self.min, lo)
        if hi is not None:
            self.max = hi if self.max is None else max(self.max, hi)

    def count(self) -> int:
        return (self.hist.get_total_count() if self.hist is not None else 0) + self.below + self.above

    def percentile(self, p: float) -> Optional[float]:
        """The engine's rule (Histogram::value_at_percentile): the smallest rank covering p (p one ulp down),
        the highest value of its range, never above the exact max when known; values below the range read as
        the min, above it as the max."""
        total = self.count()
        if not total:
            return None
        q = min(max(math.nextafter(p, -math.inf), 0.0), 100.0)
        rank = min(max(math.ceil(q / 100.0 * total), 1), total)
        seen = self.below
        if seen >= rank:
            return self.min
        for highest, count in _recorded(self.hist):
            seen += count
            if seen >= rank:
                return highest if self.max is None else min(highest, self.max)
        return self.max

    def summary(self) -> dict:
        """count, min, p50, p90, p99, p999 (p99.9), max; None where there are no values."""
        return {"count": self.count(), "min": self.min, **{k: self.percentile(p) for k, p in PERCENTILES},
                "max": self.max}

    def encode(self) -> Optional[str]:
        """The sum in the engine's encoding (HdrHistogram V2, base64); None without a histogram."""
        return None if self.hist is None else self.hist.encode().decode()

    def cdf(self) -> list[tuple[float, float]]:
        """(highest value of a range, fraction of the values at or below it) for every recorded range, the values
        outside the range counted at the ends."""
        total = self.count()
        if not total or self.hist is None:
            return []
        seen, out = self.below, []
        for highest, count in _recorded(self.hist):
            seen += count
            out.append((highest if self.max is None else min(highest, self.max), seen / total))
        return out
