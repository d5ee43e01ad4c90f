// fm::Histogram: HdrHistogram's bucket layout, percentile semantics, merge,
// out-of-range values and the V2 encoding's bytes. The cross-check against a
// real HdrHistogram implementation is tests/test_histogram.py.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "fabmeter/error.hpp"
#include "fabmeter/histogram.hpp"

using fm::Histogram;
using fm::HistogramConfig;

TEST(Histogram, DefaultLayoutIs200KiB) {
  // 1 ns .. 10 s at 3 digits: 2048 sub-buckets, 24 buckets -> 25 * 1024 counts.
  Histogram h;
  EXPECT_EQ(h.counts_len(), 25u * 1024);
  EXPECT_EQ(h.bytes(), 200u * 1024);
}

TEST(Histogram, BucketBoundaries) {
  Histogram h;
  // Below 2048 every value is its own bucket (3 digits need 2000 of them).
  EXPECT_EQ(h.equivalent_range(0), 1);
  EXPECT_EQ(h.equivalent_range(2047), 1);
  EXPECT_EQ(h.lowest_equivalent(2047), 2047);
  // From 2048 the width doubles with every power of two.
  EXPECT_EQ(h.equivalent_range(2048), 2);
  EXPECT_EQ(h.lowest_equivalent(2049), 2048);
  EXPECT_EQ(h.highest_equivalent(2048), 2049);
  EXPECT_EQ(h.lowest_equivalent(4095), 4094);
  EXPECT_EQ(h.equivalent_range(4096), 4);
  EXPECT_EQ(h.lowest_equivalent(4099), 4096);
  // 1 ms: 2^19 <= 1e6 < 2^20, so 512-wide buckets.
  EXPECT_EQ(h.lowest_equivalent(1'000'000), 999'936);
  EXPECT_EQ(h.highest_equivalent(1'000'000), 1'000'447);
  // A lowest discernible value of 1000 makes the unit 512 (2^floor(log2)).
  Histogram coarse(HistogramConfig{1000, 10'000'000'000, 3});
  EXPECT_EQ(coarse.lowest_equivalent(1000), 512);
  EXPECT_EQ(coarse.equivalent_range(100), 512);
}

TEST(Histogram, EveryValueWithinItsSignificantDigits) {
  for (int digits = 1; digits <= 5; digits++) {
    Histogram h(HistogramConfig{1, 10'000'000'000, digits});
    double resolution = std::pow(10.0, -digits);
    for (int64_t v = 1; v <= 10'000'000'000; v = v * 3 / 2 + 1) {
      int64_t lo = h.lowest_equivalent(v), hi = h.highest_equivalent(v);
      ASSERT_LE(lo, v);
      ASSERT_GE(hi, v);
      ASSERT_LE(static_cast<double>(hi - lo), resolution * static_cast<double>(v)) << "digits " << digits << " v " << v;
    }
  }
}

TEST(Histogram, PercentilesAtTheEnds) {
  Histogram h;
  for (int64_t v = 1; v <= 1000; v++) h.record(v);
  EXPECT_EQ(h.count(), 1000u);
  EXPECT_EQ(h.value_at_percentile(0), 1);
  EXPECT_EQ(h.value_at_percentile(50), 500);
  // 0.999 * 1000 is 999.0000000000001 in floating point: the ulp down keeps it rank 999.
  EXPECT_EQ(h.value_at_percentile(99.9), 999);
  EXPECT_EQ(h.value_at_percentile(100), 1000);
  EXPECT_EQ(h.value_at_percentile(150), 1000);  // clamped
  EXPECT_DOUBLE_EQ(h.mean(), 500.5);
  EXPECT_EQ(h.min(), 1);
  EXPECT_EQ(h.max(), 1000);
}

TEST(Histogram, SummaryIsTheUsualPercentileObject) {
  Histogram h;
  for (int64_t v = 1; v <= 1000; v++) h.record(v);
  fm::Summary s = fm::summarize(h);
  EXPECT_EQ(s.count, 1000u);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.p50, 500);
  EXPECT_EQ(s.p90, 900);
  EXPECT_EQ(s.p99, 990);
  EXPECT_EQ(s.p999, 999);
  EXPECT_EQ(s.max, 1000);
  EXPECT_DOUBLE_EQ(s.mean, 500.5);
  // Unit-wide buckets hold exact values: numpy.std(range(1, 1001)).
  EXPECT_NEAR(s.stdev, 288.6749902572095, 1e-9);
}

TEST(Histogram, SummaryPercentilesNeverExceedTheMax) {
  // 100'000 lies in a bucket 64 wide (3 digits): its highest equivalent value is above it.
  Histogram h;
  for (int i = 0; i < 999; i++) h.record(10);
  h.record(100'000);
  ASSERT_GT(h.value_at_percentile(99.95), 100'000);
  fm::Summary s = fm::summarize(h);
  EXPECT_EQ(s.max, 100'000);
  EXPECT_EQ(s.p999, 10);
  h.record(100'000);
  s = fm::summarize(h);
  EXPECT_EQ(s.p999, 100'000);  // rank 1000 of 1001: the bucket of the max, capped at it
}

TEST(Histogram, PercentilesReportTheBucket) {
  // Coarse buckets: p0 is the lowest equivalent value, others the highest;
  // min and max stay exact.
  Histogram h;
  h.record(1'000'000, 10);
  EXPECT_EQ(h.value_at_percentile(0), 999'936);
  EXPECT_EQ(h.value_at_percentile(50), 1'000'447);
  EXPECT_EQ(h.value_at_percentile(100), 1'000'447);
  EXPECT_EQ(h.min(), 1'000'000);
  EXPECT_EQ(h.max(), 1'000'000);
}

TEST(Histogram, EmptyReportsZeros) {
  Histogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.value_at_percentile(99), 0);
  EXPECT_EQ(h.min(), 0);
  EXPECT_EQ(h.max(), 0);
  EXPECT_EQ(h.mean(), 0.0);
}

TEST(Histogram, MergeEqualsRecordingTheUnion) {
  std::mt19937_64 gen(7);
  std::lognormal_distribution<double> lat(9.0, 1.5);  // ~8 us median, long tail
  Histogram a, b, all;
  for (int i = 0; i < 100000; i++) {
    auto v = static_cast<int64_t>(lat(gen));
    (i % 3 ? a : b).record(v);
    all.record(v);
  }
  Histogram merged;
  merged.merge(a);
  merged.merge(b);
  EXPECT_EQ(merged.count(), all.count());
  EXPECT_EQ(merged.min(), all.min());
  EXPECT_EQ(merged.max(), all.max());
  EXPECT_DOUBLE_EQ(merged.mean(), all.mean());
  for (double p : {0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0})
    EXPECT_EQ(merged.value_at_percentile(p), all.value_at_percentile(p)) << p;
  EXPECT_EQ(merged.encode(), all.encode());  // every count, byte for byte
}

TEST(Histogram, MergeAcrossLayouts) {
  // Another host may run with other digits: its buckets are re-recorded.
  Histogram fine(HistogramConfig{1, 10'000'000'000, 4}), coarse(HistogramConfig{1, 1'000'000, 2});
  for (int64_t v = 1000; v < 2'000'000; v += 1000) fine.record(v);
  coarse.merge(fine);
  EXPECT_EQ(coarse.count(), fine.count());
  EXPECT_EQ(coarse.above(), 999u);  // 1'000'000 < v < 2'000'000 does not fit the coarse range
  EXPECT_EQ(coarse.max(), fine.max());
  int64_t p25 = coarse.value_at_percentile(25), want = fine.value_at_percentile(25);
  EXPECT_NEAR(static_cast<double>(p25), static_cast<double>(want), 0.01 * static_cast<double>(want));
}

TEST(Histogram, OutOfRangeIsCountedNotDropped) {
  Histogram h(HistogramConfig{1, 1'000'000, 3});
  for (int64_t v = 1; v <= 98; v++) EXPECT_TRUE(h.record(v));
  EXPECT_FALSE(h.record(5'000'000));
  EXPECT_FALSE(h.record(-3));
  EXPECT_EQ(h.count(), 100u);
  EXPECT_EQ(h.above(), 1u);
  EXPECT_EQ(h.below(), 1u);
  EXPECT_EQ(h.max(), 5'000'000);
  EXPECT_EQ(h.min(), -3);
  // The tail is not hidden: the ranks that fall out of range report the exact extremes.
  EXPECT_EQ(h.value_at_percentile(100), 5'000'000);
  EXPECT_EQ(h.value_at_percentile(99.5), 5'000'000);
  EXPECT_EQ(h.value_at_percentile(99), 98);
  EXPECT_EQ(h.value_at_percentile(0), -3);
  EXPECT_EQ(h.value_at_percentile(1), -3);
  EXPECT_EQ(h.value_at_percentile(2), 1);
  EXPECT_DOUBLE_EQ(h.mean(), (98.0 * 99 / 2 + 5'000'000 - 3) / 100);
}

TEST(Histogram, RefusesImpossibleConfigs) {
  EXPECT_THROW(Histogram(HistogramConfig{0, 1000, 3}), fm::Error);
  EXPECT_THROW(Histogram(HistogramConfig{1000, 1999, 3}), fm::Error);
  EXPECT_THROW(Histogram(HistogramConfig{1, 1000, 0}), fm::Error);
  EXPECT_THROW(Histogram(HistogramConfig{1, 1000, 6}), fm::Error);
  EXPECT_NO_THROW(Histogram(HistogramConfig{1, INT64_MAX, 3}));
}

namespace {

// base64 -> zlib -> the V2 encoding's plain bytes.
std::string unpack(const std::string& b64) {
  std::string packed(b64.size(), '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(packed.data()),
                          reinterpret_cast<const unsigned char*>(b64.data()), static_cast<int>(b64.size()));
  EXPECT_GT(n, 8);
  packed.resize(static_cast<size_t>(n) - std::count(b64.end() - 2, b64.end(), '='));
  EXPECT_EQ(packed.substr(0, 4), std::string("\x1c\x84\x93\x14", 4));  // V2 compression cookie
  uint32_t zlen = 0;
  for (int i = 4; i < 8; i++) zlen = zlen << 8 | static_cast<uint8_t>(packed[i]);
  EXPECT_EQ(zlen, packed.size() - 8);
  std::string plain(1 << 20, '\0');
  uLongf plen = plain.size();
  EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(plain.data()), &plen,
                       reinterpret_cast<const Bytef*>(packed.data() + 8), zlen),
            Z_OK);
  plain.resize(plen);
  return plain;
}

}  // namespace

TEST(Histogram, EncodingBytes) {
  Histogram h(HistogramConfig{1, 3'600'000'000'000, 3});
  h.record(0);
  h.record(3, 300);
  std::string b64 = h.encode();
  EXPECT_EQ(b64.substr(0, 5), "HISTF");
  std::string plain = unpack(b64);
  ASSERT_EQ(plain.size(), 40u + 4);
  const std::string header(
      "\x1c\x84\x93\x13"                   // V2 encoding cookie
      "\x00\x00\x00\x04"                   // payload length
      "\x00\x00\x00\x00"                   // normalizing index offset
      "\x00\x00\x00\x03"                   // significant digits
      "\x00\x00\x00\x00\x00\x00\x00\x01"   // lowest discernible value
      "\x00\x00\x03\x46\x30\xb8\xa0\x00"   // highest trackable value: 1 h in ns
      "\x3f\xf0\x00\x00\x00\x00\x00\x00",  // conversion ratio 1.0
      40);
  EXPECT_EQ(plain.substr(0, 40), header);
  // Counts [1, 0, 0, 300]: zig-zag 1 -> 2, a run of two zeros -2 -> 3, 300 -> 600 = LEB128 d8 04.
  EXPECT_EQ(plain.substr(40), std::string("\x02\x03\xd8\x04", 4));
}

TEST(Histogram, EncodingLongCountsAndEmpty) {
  Histogram h;
  h.record(5, uint64_t{1} << 62);  // needs the 9-byte form: 8 x 7 bits + 8 bits
  std::string plain = unpack(h.encode());
  // 5 zeros (zig-zag 9), then 2^63 zig-zagged (the top bit set: 9 bytes).
  EXPECT_EQ(plain.substr(40), std::string("\x09\x80\x80\x80\x80\x80\x80\x80\x80\x80", 10));
  Histogram empty;
  EXPECT_EQ(unpack(empty.encode()).size(), 40u);
}
