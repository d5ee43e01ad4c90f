#include "fabmeter/workload.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>

#include "core/workloads_builtin.hpp"
#include "fabmeter/error.hpp"

namespace fm {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

Workload Workload::parse(std::string_view text, const std::string& origin) {
  auto fail = [&](size_t line, const std::string& msg) {
    usage_error("workload " + origin + ":" + std::to_string(line) + ": " + msg);
  };
  if (text.size() > kMaxFileBytes)
    usage_error("workload " + origin + ": larger than " + std::to_string(kMaxFileBytes) + " bytes");

  Workload w;
  w.name_ = origin;
  std::vector<double> weights;
  bool header = false;
  size_t lineno = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    lineno++;
    if (line.empty() || line.front() == '#') continue;
    if (!header) {
      // The header names the columns, so a cumulative-fraction file (or any
      // other CSV) is refused instead of read as weights.
      if (line != "length_bytes,weight") fail(lineno, "expected the header 'length_bytes,weight'");
      header = true;
      continue;
    }
    size_t comma = line.find(',');
    if (comma == std::string_view::npos || line.find(',', comma + 1) != std::string_view::npos)
      fail(lineno, "expected two fields: length_bytes,weight");
    std::string_view len_s = trim(line.substr(0, comma)), weight_s = trim(line.substr(comma + 1));

    uint64_t len = 0;
    auto [lp, lerr] = std::from_chars(len_s.data(), len_s.data() + len_s.size(), len);
    if (lerr != std::errc() || lp != len_s.data() + len_s.size() || len_s.empty())
      fail(lineno, "length_bytes is not a whole number: '" + std::string(len_s) + "'");
    if (len < 1 || len > kMaxLength)
      fail(lineno, "length_bytes must be 1.." + std::to_string(kMaxLength) + ", not " + std::to_string(len));
    if (!w.lengths_.empty() && len <= w.lengths_.back())
      fail(lineno, "length_bytes must increase from line to line (" + std::to_string(len) + " after " +
                       std::to_string(w.lengths_.back()) + ")");

    double weight = 0;
    auto [wp, werr] = std::from_chars(weight_s.data(), weight_s.data() + weight_s.size(), weight);
    if (werr != std::errc() || wp != weight_s.data() + weight_s.size() || weight_s.empty())
      fail(lineno, "weight is not a number: '" + std::string(weight_s) + "'");
    if (!std::isfinite(weight) || weight < 0) fail(lineno, "weight must be finite and >= 0");

    if (w.lengths_.size() == kMaxPoints) fail(lineno, "more than " + std::to_string(kMaxPoints) + " sizes");
    w.lengths_.push_back(len);
    weights.push_back(weight);
  }
  if (!header) usage_error("workload " + origin + ": no header 'length_bytes,weight'");
  if (w.lengths_.empty()) usage_error("workload " + origin + ": no sizes after the header");

  double total = 0, weighted = 0;
  for (size_t i = 0; i < weights.size(); i++) {
    total += weights[i];
    weighted += weights[i] * static_cast<double>(w.lengths_[i]);
  }
  if (!(total > 0) || !std::isfinite(total)) usage_error("workload " + origin + ": the weights add up to 0");
  w.mean_ = weighted / total;
  double run = 0;
  for (double x : weights) w.cdf_.push_back((run += x) / total);
  // Exactly 1 at the end (not 1 - ulp from rounding), so a draw in [0, 1)
  // always finds a size; trailing zero weights share that value and
  // upper_bound never picks them.
  const double top = w.cdf_.back();
  for (size_t i = w.cdf_.size(); i-- > 0 && w.cdf_[i] == top;) w.cdf_[i] = 1.0;
  return w;
}

Workload Workload::load(const std::string& spec) {
  for (size_t i = 0; i < builtin::kWorkloadCount; i++)
    if (builtin::kWorkloads[i].name == spec) return parse(builtin::kWorkloads[i].csv, spec);
  std::ifstream f(spec, std::ios::binary);
  if (!f) {
    std::string names;
    for (const auto& n : builtin_names()) names += (names.empty() ? "" : ", ") + n;
    usage_error("workload '" + spec + "': neither a built-in workload (" + names + ") nor a readable file");
  }
  // Read one byte past the limit so an oversized file is refused, not cut.
  std::string text(kMaxFileBytes + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  return parse(text, spec);
}

std::vector<std::string> Workload::builtin_names() {
  std::vector<std::string> names;
  for (size_t i = 0; i < builtin::kWorkloadCount; i++) names.emplace_back(builtin::kWorkloads[i].name);
  return names;
}

uint64_t Workload::sample(Rng& rng) const { return at(rng.uniform()); }

Workload::Share Workload::share_above(uint64_t limit) const {
  Share s;
  for (size_t i = 0; i < lengths_.size(); i++) {
    if (lengths_[i] <= limit) continue;
    const double pr = cdf_[i] - (i ? cdf_[i - 1] : 0.0);
    s.messages += pr;
    s.bytes += pr * static_cast<double>(lengths_[i]);
  }
  s.bytes = mean_ > 0 ? s.bytes / mean_ : 0;
  return s;
}

uint64_t Workload::at(double u) const {
  size_t i = static_cast<size_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  return lengths_[std::min(i, lengths_.size() - 1)];
}

}  // namespace fm
