// HdrHistogram's layout and its V2 encoding, written from the format's
// definition (HdrHistogram's Java reference: AbstractHistogram,
// EncodableHistogram, ZigZagEncoding) so its libraries decode fabmeter's
// histograms; tests/test_histogram.py checks that with the PyPI package.
#include "fabmeter/histogram.hpp"

#include <openssl/evp.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>

#include "fabmeter/error.hpp"

namespace fm {

namespace {

// V2 cookies; the 0x10 is the word-size nibble V2 always sets.
constexpr uint32_t kEncodingCookie = 0x1c849303 | 0x10;
constexpr uint32_t kCompressionCookie = 0x1c849304 | 0x10;

void put_be32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>(v >> s));
}
void put_be64(std::string& out, uint64_t v) {
  for (int s = 56; s >= 0; s -= 8) out.push_back(static_cast<char>(v >> s));
}

// HdrHistogram's "LEB128-64b9B": LEB128 of the zig-zagged value, except that
// a 9th byte carries 8 bits with no continuation bit, so 9 bytes hold 64 bits.
void put_zigzag(std::string& out, int64_t v) {
  uint64_t u = (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
  for (int i = 0; i < 8; i++) {
    if (u < 0x80) {
      out.push_back(static_cast<char>(u));
      return;
    }
    out.push_back(static_cast<char>((u & 0x7f) | 0x80));
    u >>= 7;
  }
  out.push_back(static_cast<char>(u));
}

}  // namespace

Histogram::Histogram(const HistogramConfig& cfg) : cfg_(cfg) {
  if (cfg.lowest < 1) usage_error("histogram: lowest discernible value must be >= 1");
  if (cfg.highest < 2 || cfg.highest / 2 < cfg.lowest)
    usage_error("histogram: highest trackable value must be >= 2 * lowest discernible value");
  if (cfg.digits < 1 || cfg.digits > 5) usage_error("histogram: significant digits must be 1..5");

  // 2 * 10^digits values at unit resolution need sub_bucket_count >= that.
  uint64_t single_unit_span = 2;
  for (int i = 0; i < cfg.digits; i++) single_unit_span *= 10;
  int sub_bucket_count_magnitude = std::bit_width(single_unit_span - 1);  // ceil(log2)
  sub_bucket_half_count_magnitude_ = std::max(sub_bucket_count_magnitude, 1) - 1;
  unit_magnitude_ = std::bit_width(static_cast<uint64_t>(cfg.lowest)) - 1;  // floor(log2)
  if (unit_magnitude_ + sub_bucket_half_count_magnitude_ > 61)
    usage_error("histogram: lowest discernible value too large for the significant digits");
  sub_bucket_count_ = 1 << (sub_bucket_half_count_magnitude_ + 1);
  sub_bucket_half_count_ = sub_bucket_count_ / 2;
  sub_bucket_mask_ = static_cast<uint64_t>(sub_bucket_count_ - 1) << unit_magnitude_;

  // Buckets until one covers `highest` (HdrHistogram's getBucketsNeededToCoverValue).
  int64_t smallest_untrackable = static_cast<int64_t>(sub_bucket_count_) << unit_magnitude_;
  int buckets = 1;
  while (smallest_untrackable <= cfg.highest) {
    if (smallest_untrackable > INT64_MAX / 2) {
      buckets++;
      break;
    }
    smallest_untrackable <<= 1;
    buckets++;
  }
  counts_.assign(static_cast<size_t>(buckets + 1) * sub_bucket_half_count_, 0);
}

bool Histogram::record_outside(int64_t v) {
  (v < 0 ? below_ : above_)++;
  sum_ += v;
  min_ = std::min(min_, v);
  max_ = std::max(max_, v);
  return false;
}

bool Histogram::record(int64_t v, uint64_t n) {
  if (n == 0) return v >= 0 && v <= cfg_.highest;
  if (v < 0 || v > cfg_.highest) {
    (v < 0 ? below_ : above_) += n;
  } else {
    counts_[index_of(v)] += n;
    in_range_ += n;
  }
  sum_ += static_cast<__int128>(v) * n;
  min_ = std::min(min_, v);
  max_ = std::max(max_, v);
  return v >= 0 && v <= cfg_.highest;
}

void Histogram::merge(const Histogram& o) {
  if (o.cfg_.lowest == cfg_.lowest && o.cfg_.highest == cfg_.highest && o.cfg_.digits == cfg_.digits) {
    for (size_t i = 0; i < counts_.size(); i++) counts_[i] += o.counts_[i];
    in_range_ += o.in_range_;
  } else {
    for (size_t i = 0; i < o.counts_.size(); i++) {
      if (!o.counts_[i]) continue;
      int64_t v = o.value_at_index(i);
      if (v > cfg_.highest) {
        above_ += o.counts_[i];
      } else {
        counts_[index_of(v)] += o.counts_[i];
        in_range_ += o.counts_[i];
      }
    }
  }
  below_ += o.below_;
  above_ += o.above_;
  sum_ += o.sum_;
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
}

void Histogram::reset() {
  std::fill(counts_.begin(), counts_.end(), 0);
  in_range_ = below_ = above_ = 0;
  sum_ = 0;
  min_ = INT64_MAX;
  max_ = INT64_MIN;
}

double Histogram::mean() const {
  uint64_t n = count();
  return n ? static_cast<double>(sum_) / static_cast<double>(n) : 0.0;
}

int64_t Histogram::value_at_index(size_t i) const {
  int bucket = static_cast<int>(i >> sub_bucket_half_count_magnitude_) - 1;
  int sub = static_cast<int>(i & (sub_bucket_half_count_ - 1)) + sub_bucket_half_count_;
  if (bucket < 0) {  // the first half of bucket 0 lives below the "+1" offset
    sub -= sub_bucket_half_count_;
    bucket = 0;
  }
  return static_cast<int64_t>(sub) << (bucket + unit_magnitude_);
}

int64_t Histogram::lowest_equivalent(int64_t v) const { return value_at_index(index_of(v)); }

int64_t Histogram::equivalent_range(int64_t v) const {
  int pow2ceiling = 64 - std::countl_zero(static_cast<uint64_t>(v) | sub_bucket_mask_);
  int bucket = pow2ceiling - unit_magnitude_ - (sub_bucket_half_count_magnitude_ + 1);
  return int64_t{1} << (unit_magnitude_ + bucket);
}

int64_t Histogram::value_at_percentile(double p) const {
  uint64_t total = count();
  if (!total) return 0;
  // One ulp down, as the reference, so 99.9 % of 1000 is rank 999, not 1000
  // through rounding; then the smallest rank that covers p.
  double q = std::clamp(std::nextafter(p, -INFINITY), 0.0, 100.0);
  uint64_t rank = std::max<uint64_t>(static_cast<uint64_t>(std::ceil(q / 100.0 * static_cast<double>(total))), 1);
  rank = std::min(rank, total);
  uint64_t seen = below_;
  if (seen >= rank) return min_;
  for (size_t i = 0; i < counts_.size(); i++) {
    seen += counts_[i];
    if (seen >= rank) {
      int64_t v = value_at_index(i);
      return p == 0.0 ? v : highest_equivalent(v);
    }
  }
  return max_;  // the rank falls among the values above highest
}

double Histogram::stdev() const {
  uint64_t n = count();
  if (!n) return 0;
  double m = mean(), acc = 0;
  for (size_t i = 0; i < counts_.size(); i++) {
    if (!counts_[i]) continue;
    int64_t lo = value_at_index(i);
    double d = static_cast<double>(lo + equivalent_range(lo) / 2) - m;
    acc += d * d * static_cast<double>(counts_[i]);
  }
  double dmin = static_cast<double>(min_) - m, dmax = static_cast<double>(max_) - m;
  acc += dmin * dmin * static_cast<double>(below_) + dmax * dmax * static_cast<double>(above_);
  return std::sqrt(acc / static_cast<double>(n));
}

Summary summarize(const Histogram& h) {
  Summary s;
  s.count = h.count();
  s.min = static_cast<double>(h.min());
  s.max = static_cast<double>(h.max());
  s.mean = h.mean();
  s.stdev = h.stdev();
  // A bucket's highest equivalent value may lie above the largest value
  // recorded: a percentile never reads above the (exact) max.
  auto at = [&](double p) { return std::min(static_cast<double>(h.value_at_percentile(p)), s.max); };
  s.p10 = at(10), s.p50 = at(50), s.p90 = at(90), s.p99 = at(99), s.p999 = at(99.9), s.p9999 = at(99.99);
  for (double q : reported_percentiles()) s.extra.emplace_back(q, at(q));
  return s;
}

std::string Histogram::encode() const {
  // Counts up to the last non-zero one; a run of zeros is one negative number.
  size_t limit = counts_.size();
  while (limit > 0 && counts_[limit - 1] == 0) limit--;
  std::string payload;
  for (size_t i = 0; i < limit;) {
    uint64_t c = counts_[i++];
    if (c != 0) {
      put_zigzag(payload, static_cast<int64_t>(c));
      continue;
    }
    int64_t zeros = 1;
    while (i < limit && counts_[i] == 0) {
      zeros++;
      i++;
    }
    put_zigzag(payload, zeros > 1 ? -zeros : 0);
  }

  std::string plain;
  put_be32(plain, kEncodingCookie);
  put_be32(plain, static_cast<uint32_t>(payload.size()));
  put_be32(plain, 0);  // normalizing index offset
  put_be32(plain, static_cast<uint32_t>(cfg_.digits));
  put_be64(plain, static_cast<uint64_t>(cfg_.lowest));
  put_be64(plain, static_cast<uint64_t>(cfg_.highest));
  put_be64(plain, 0x3ff0000000000000ull);  // integer to double conversion ratio: 1.0
  plain += payload;

  uLongf zlen = compressBound(plain.size());
  std::string packed;
  put_be32(packed, kCompressionCookie);
  put_be32(packed, 0);  // compressed length, set below
  packed.resize(8 + zlen);
  if (compress2(reinterpret_cast<Bytef*>(packed.data() + 8), &zlen, reinterpret_cast<const Bytef*>(plain.data()),
                plain.size(), Z_DEFAULT_COMPRESSION) != Z_OK)
    runtime_error("histogram: zlib compression failed");
  packed.resize(8 + zlen);
  for (int i = 0; i < 4; i++) packed[4 + i] = static_cast<char>(static_cast<uint32_t>(zlen) >> (24 - 8 * i));

  std::string out(4 * ((packed.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(packed.data()), static_cast<int>(packed.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace fm
