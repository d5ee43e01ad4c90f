// Test tool (built with the tests): draws request sizes as the load
// experiment does, so tests/test_workload.py can hold the engine's sampler
// against the Python one (tests/workload_model.py) draw for draw.
//
//   workload-tool SPEC SEED N      # SPEC: w1..w5 or a CSV file; prints N sizes, one a line
//
// Exit 2 on bad input, like the engine.
#include <cstdio>
#include <string>

#include "fabmeter/error.hpp"
#include "fabmeter/rng.hpp"
#include "fabmeter/workload.hpp"
#include "tool_main.hpp"

int main(int argc, char** argv) {
  return tool_main("workload-tool", [&] {
    if (argc != 4) fm::usage_error("usage: workload-tool SPEC SEED N");
    const fm::Workload w = fm::Workload::load(argv[1]);
    fm::Rng rng(std::stoull(argv[2]));
    const unsigned long long n = std::stoull(argv[3]);
    std::printf("mean %.17g\n", w.mean_size());
    for (unsigned long long i = 0; i < n; ++i) std::printf("%llu\n", static_cast<unsigned long long>(w.sample(rng)));
    return 0;
  });
}
