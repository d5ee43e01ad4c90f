"""The engine's latency histograms (`--samples hist`: a point's `latency_hist`,
lat's `rtt_hist`): HdrHistogram's V2 encoding, base64 of a zlib-compressed
block (engine/src/core/histogram.cpp encode()). Only what watch needs: the
recorded values with their counts, never the whole counts array."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Iterator

ENCODING_COOKIE = 0x1C849313
COMPRESSION_COOKIE = 0x1C849314
HEADER = struct.Struct(">IIIIqqd")         # cookie, payload length, offset, digits, lowest, highest, ratio
MAX_DECODED = 4 << 20                      # the engine's histograms decode to ~1 MiB at most (10 s, 3 digits)


class HistogramError(ValueError):
    """Not a histogram the engine writes."""


def _varints(payload: bytes) -> Iterator[int]:
    """HdrHistogram's ZigZag LEB128: at most 9 bytes, the 9th with all 8 bits."""
    i, n = 0, len(payload)
    while i < n:
        value, shift = 0, 0
        for k in range(9):
            if i >= n:
                raise HistogramError("truncated counts")
            b = payload[i]
            i += 1
            if k == 8:
                value |= b << shift
                break
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        yield (value >> 1) ^ -(value & 1)


def values(text: str) -> Iterator[tuple[float, int]]:
    """(value, count) of every recorded value range, in increasing order; value is the middle of the range
    the histogram holds it in (within its significant digits of the value recorded)."""
    try:
        packed = base64.b64decode(text, validate=True)
    except (ValueError, TypeError) as e:
        raise HistogramError(f"not base64: {e}") from None
    if len(packed) < 8:
        raise HistogramError("too short")
    cookie, length = struct.unpack_from(">II", packed)
    if cookie & ~0xF0 != COMPRESSION_COOKIE & ~0xF0:
        raise HistogramError(f"not a compressed V2 histogram (cookie {cookie:#x})")
    d = zlib.decompressobj()
    plain = d.decompress(packed[8:8 + length], MAX_DECODED)
    if d.unconsumed_tail or len(plain) < HEADER.size:
        raise HistogramError("too large or truncated")
    cookie, payload_len, offset, digits, lowest, highest, _ = HEADER.unpack_from(plain)
    if cookie & ~0xF0 != ENCODING_COOKIE & ~0xF0 or offset != 0 or not 1 <= digits <= 5 or lowest < 1:
        raise HistogramError("unexpected header")
    payload = plain[HEADER.size:HEADER.size + payload_len]
    span = 2 * 10 ** digits
    half_mag = max((span - 1).bit_length(), 1) - 1
    unit_mag = lowest.bit_length() - 1
    half_count = 1 << half_mag
    index = 0
    for c in _varints(payload):
        if c < 0:
            index += -c
            continue
        if c > 0:
            bucket = (index >> half_mag) - 1
            sub = (index & (half_count - 1)) + half_count
            if bucket < 0:
                sub -= half_count
                bucket = 0
            low = sub << (bucket + unit_mag)
            width = 1 << (bucket + unit_mag)
            yield low + (width - 1) / 2.0, c
        index += 1
