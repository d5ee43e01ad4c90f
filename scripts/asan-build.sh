#!/usr/bin/env bash
# The engine under ASan+UBSan in build/engine-asan: clang with libFuzzer's
# coverage (-DFM_FUZZ=ON), so one build serves `make test-sanitize`'s
# ASan pass and `make fuzz`'s targets (CI compiles the engine once less).
# Usage: scripts/asan-build.sh [TARGET...]: configures, then builds the targets
# (needs install-deps.sh --fuzz: clang).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build/engine-asan
[ -f "$dir/build.ninja" ] && grep -q '^FM_FUZZ:BOOL=ON' "$dir/CMakeCache.txt" ||
  { rm -rf "$dir"; cmake -S engine -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++-14 -DFM_FUZZ=ON >/dev/null; }
[ $# -eq 0 ] || cmake --build "$dir" --target "$@"
