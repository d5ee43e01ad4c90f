"""The engine's latency histograms (`--samples hist`: a point's `latency_hist`,
lat's `rtt_hist`): HdrHistogram's V2 encoding, base64 of a zlib-compressed
block (engine/src/core/histogram.cpp encode()), decoded by the hdrhistogram
package. A histogram comes from a relaying serve, so its zlib block is first
inflated with a bound (zlib's own max_length): a small line cannot make
watch allocate without limit before the library reads it."""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from typing import Iterator

from hdrh.histogram import HdrHistogram

MAX_DECODED = 4 << 20   # the engine's histograms inflate to ~1 MiB at most (10 s, 3 digits)


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
        inflate.decompress(packed[8:8 + length], MAX_DECODED)
    except zlib.error as e:
        raise HistogramError(f"not a compressed histogram: {e}") from None
    if inflate.unconsumed_tail:
        raise HistogramError(f"inflates beyond {MAX_DECODED} bytes")


def values(text: str) -> Iterator[tuple[float, int]]:
    """(value, count) of every recorded value range, in increasing order; value is the middle of the range
    the histogram holds it in (within its significant digits of the value recorded)."""
    _bounded(text)
    try:
        h = HdrHistogram.decode(text)
        recorded = [(it.value_iterated_to, it.count_at_value_iterated_to) for it in h.get_recorded_iterator()]
    except Exception as e:   # the library raises its own cookie and length errors, zlib's, struct's
        raise HistogramError(f"not a histogram the engine writes: {type(e).__name__}: {e}") from None
    for highest, count in recorded:
        low = h.get_lowest_equivalent_value(highest)
        yield (low + highest) / 2.0, count
