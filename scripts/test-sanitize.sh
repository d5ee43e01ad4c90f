#!/usr/bin/env bash
# make test-sanitize: the engine built with ASan+UBSan (build/engine-asan,
# scripts/asan-build.sh) runs the GoogleTest binary and the end-to-end tests; a TSan build
# (build/engine-tsan) runs the paths with threads or shared memory (shm,
# the stream's file sink writer thread). Sanitizer reports go to log files
# (a report in a server process would not fail the client's test), and any
# report fails the run.
# ASAN_TESTS / TSAN_TESTS: pytest files; ASAN_K / TSAN_K: their -k expressions;
# TSAN_TRANSPORTS: the transports the TSan build compiles (the ones its
# tests run; the ASan build has every one).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
# The end-to-end files whose transports and paths run here without peer tools
# or guests. Tests that kill or stop an engine after a fixed sleep are left to the
# plain build: under a sanitizer's slowdown the sleep ends before the run starts.
ASAN_TESTS=${ASAN_TESTS:-"tests/test_cli.py tests/test_conformance.py tests/test_failures.py tests/test_stream.py tests/test_bw.py tests/test_sweep.py tests/test_messaging.py tests/test_hardening.py"}
ASAN_K=${ASAN_K:-"not late_source and not killed_mid_run"}
TSAN_TESTS=${TSAN_TESTS:-"tests/test_stream.py tests/test_conformance.py tests/test_hardening.py"}
TSAN_K=${TSAN_K:-"(shm or file_sink) and not late_source and not killed_mid_run"}
TSAN_TRANSPORTS=${TSAN_TRANSPORTS:-"shm;tcp"}

# The engine, its transport plugins and GoogleTest, and the rawpp_* peer tools (the ones this build has)
# when TESTS include test_messaging.py, whose rawpp tests run them: each tool
# more costs CI about 10 s per sanitizer build.
targets() {  # DIR TESTS
  local t=(fabmeter-engine fabmeter-plugins engine-tests)
  [[ " $2 " == *" tests/test_messaging.py "* && -f "$1/build.ninja" ]] &&
    t+=($(ninja -C "$1" -t targets all | awk -F: '/^rawpp_[a-z]+: / {print $1}'))
  echo "${t[@]}"
}

# Fails (after printing the first lines of each) if any report was logged.
reports() {  # LOGDIR
  shopt -s nullglob
  local logs=("$1"/*)
  [ "${#logs[@]}" -eq 0 ] && return 0
  for f in "${logs[@]}"; do echo "== $f" >&2; head -30 "$f" >&2; done
  echo "test-sanitize: ${#logs[@]} sanitizer report(s) in $1" >&2
  return 1
}

run_suite() {  # NAME DIR TESTS K
  local name=$1 dir=$2 logs
  logs=$(realpath "$dir")/reports
  rm -rf "$logs"; mkdir -p "$logs"
  local rc=0
  echo "test-sanitize: $name: GoogleTest"
  "$dir/engine-tests" --gtest_brief=1 || rc=1
  echo "test-sanitize: $name: pytest $3"
  # shellcheck disable=SC2086  # $3 is a list of files and options
  FABMETER_ENGINE=$(realpath "$dir/fabmeter-engine") $PY -m pytest -q -p no:cacheprovider -k "$4" $3 || rc=1
  reports "$logs" || rc=1
  return $rc
}

rc=0
bash scripts/asan-build.sh   # configured first: targets() reads its rawpp_* targets
bash scripts/asan-build.sh $(targets build/engine-asan "$ASAN_TESTS")
export ASAN_OPTIONS="log_path=$PWD/build/engine-asan/reports/asan:halt_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="log_path=$PWD/build/engine-asan/reports/ubsan:print_stacktrace=1:halt_on_error=1"
run_suite asan+ubsan build/engine-asan "$ASAN_TESTS" "$ASAN_K" || rc=1
unset ASAN_OPTIONS UBSAN_OPTIONS

cmake -S engine -B build/engine-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFM_SANITIZE=thread \
  -DFM_TRANSPORTS="$TSAN_TRANSPORTS" >/dev/null
cmake --build build/engine-tsan --target $(targets build/engine-tsan "$TSAN_TESTS")
export TSAN_OPTIONS="log_path=$PWD/build/engine-tsan/reports/tsan:halt_on_error=0:second_deadlock_stack=1"
run_suite tsan build/engine-tsan "$TSAN_TESTS" "$TSAN_K" || rc=1
[ $rc -eq 0 ] && echo "test-sanitize: no sanitizer reports"
exit $rc
