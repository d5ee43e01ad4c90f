// main() of the engine's small tools: runs `run` and turns an error into one
// stderr line and the engine's exit codes (2 bad input, 3 a failed call).
#pragma once
#include <cstdio>
#include <exception>

#include "fabmeter/error.hpp"

template <class Run>
int tool_main(const char* name, Run run) {
  try {
    return run();
  } catch (const fm::Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return static_cast<int>(e.kind);
  } catch (const std::exception& e) {  // std::stoll and friends on bad input
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 2;
  }
}
