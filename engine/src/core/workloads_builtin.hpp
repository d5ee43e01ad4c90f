// The shipped workloads (data/workloads/*.csv), compiled in by
// engine/cmake/embed_workloads.cmake so `--workload w2` needs no file at run time.
#pragma once
#include <cstddef>
#include <string_view>

namespace fm::builtin {

struct WorkloadText {
  std::string_view name;  // "w1"
  std::string_view csv;   // the file, verbatim
};
extern const WorkloadText kWorkloads[];
extern const size_t kWorkloadCount;

}  // namespace fm::builtin
