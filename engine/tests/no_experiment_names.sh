#!/bin/sh
# The engine names an experiment only in the experiment's own header and in
# the option table (an option's scope): the session, the transports and the
# core run any experiment of the table (experiment/table.hpp) without
# knowing it. Fails on a quoted experiment name or a comparison with
# p.experiment anywhere else.
set -eu
src=$1
# The experiments' names as params.hpp's kExperiments lists them (the table's, GoogleTest checks).
names=$(sed -n 's/.*kExperiments = "\([a-z,]*\)";.*/\1/p' "$src/include/fabmeter/params.hpp" | tr , '|')
[ -n "$names" ] || { echo "no kExperiments in $src/include/fabmeter/params.hpp"; exit 2; }
own="experiment/($names)\.hpp\$|core/params\.cpp\$|fabmeter/params\.hpp\$"
files=$(find "$src/src" "$src/include" -name '*.[ch]pp' | grep -Ev "$own")
[ -n "$files" ] || { echo "no sources under $src"; exit 2; }
# shellcheck disable=SC2086
if grep -nE "\"($names)\"|experiment *[!=]= *\"" $files; then
  echo "experiment named outside its header and the option table (above)"
  exit 1
fi
