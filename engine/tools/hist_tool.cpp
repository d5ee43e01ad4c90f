// Test tool (built with the tests): records integers from stdin into
// fm::Histogram and prints what the engine computes, so tests/test_histogram.py
// can hold it against the PyPI hdrhistogram package and numpy.
//
//   hist-tool [--lowest L] [--highest H] [--digits D] [--percentiles P,P,...] < values
//
// stdin: one integer per line; a line "-" starts a new histogram. Prints one
// JSON line per histogram, then, with more than one, the merge of all of them
// ("merged": true). Exit 2 on bad input, like the engine.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fabmeter/error.hpp"
#include "fabmeter/histogram.hpp"
#include "fabmeter/results.hpp"
#include "tool_main.hpp"

namespace {

int64_t to_int(const std::string& what, const std::string& s) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size()) fm::usage_error(what + ": not an integer: '" + s + "'");
  return v;
}

fm::JsonObj describe(const fm::Histogram& h, const std::vector<std::string>& percentiles) {
  fm::JsonObj pct;
  for (const auto& p : percentiles) pct.add(p, h.value_at_percentile(std::stod(p)));
  fm::JsonObj o;
  o.add("count", h.count()).add("below", h.below()).add("above", h.above());
  o.add("min", h.min()).add("max", h.max()).add("mean", h.mean()).add("stdev", h.stdev());
  o.add("percentiles", pct).add("bytes", static_cast<uint64_t>(h.bytes())).add("hdr", h.encode());
  return o;
}

int run(int argc, char** argv) {
  fm::HistogramConfig cfg;
  std::vector<std::string> percentiles = {"0", "50", "90", "99", "99.9", "100"};
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (i + 1 >= argc) fm::usage_error("missing value after " + a);
    std::string v = argv[++i];
    if (a == "--lowest") cfg.lowest = to_int(a, v);
    else if (a == "--highest") cfg.highest = to_int(a, v);
    else if (a == "--digits") cfg.digits = static_cast<int>(to_int(a, v));
    else if (a == "--percentiles") {
      percentiles.clear();
      std::stringstream ss(v);
      for (std::string p; std::getline(ss, p, ',');) {
        size_t used = 0;
        std::stod(p, &used);
        if (used != p.size()) fm::usage_error("--percentiles: not a number: '" + p + "'");
        percentiles.push_back(p);
      }
    } else fm::usage_error("unknown argument " + a);
  }

  std::vector<fm::Histogram> hists;
  hists.emplace_back(cfg);
  long lineno = 0;
  for (std::string line; std::getline(std::cin, line);) {
    lineno++;
    if (line == "-") {
      hists.emplace_back(cfg);
      continue;
    }
    hists.back().record(to_int("stdin line " + std::to_string(lineno), line));
  }
  for (const auto& h : hists) fm::emit_line(describe(h, percentiles));
  if (hists.size() > 1) {
    fm::Histogram all(cfg);
    for (const auto& h : hists) all.merge(h);
    fm::emit_line(describe(all, percentiles).add("merged", true));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tool_main("hist-tool", [&] { return run(argc, argv); });
}
