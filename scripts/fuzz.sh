#!/usr/bin/env bash
# Runs every libFuzzer target of a FM_FUZZ build for FUZZ_SECONDS each, on a
# copy of its checked-in seed corpus (engine/fuzz/corpus/<name>/), so the
# checked-in corpus only changes when someone adds seeds on purpose.
# Usage: scripts/fuzz.sh BUILD_DIR. A crash leaves its input in
# BUILD_DIR/fuzz-artifacts/ and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: fuzz.sh BUILD_DIR}
seconds=${FUZZ_SECONDS:-300}
shopt -s nullglob
targets=("$build"/fuzz_*)
[ "${#targets[@]}" -gt 0 ] || { echo "fuzz: no fuzz_* targets in $build" >&2; exit 2; }
mkdir -p "$build/fuzz-artifacts"
rc=0
for exe in "${targets[@]}"; do
  [ -x "$exe" ] && [ -f "$exe" ] || continue
  name=$(basename "$exe"); name=${name#fuzz_}
  work="$build/fuzz-corpus/$name"
  rm -rf "$work"; mkdir -p "$work"
  [ -d "engine/fuzz/corpus/$name" ] && cp -r "engine/fuzz/corpus/$name/." "$work/"
  log="$build/fuzz-$name.log"
  echo "fuzz: $name for ${seconds}s ($(ls "$work" | wc -l) seeds)"
  if "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$build/fuzz-artifacts/$name-" "$work" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz: $name ok: $runs executions, corpus $(ls "$work" | wc -l) inputs"
  else
    rc=1
    echo "fuzz: $name FAILED (log: $log):" >&2
    grep -m5 -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" >&2 || tail -20 "$log" >&2
  fi
done
exit $rc
