#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest, under QEMU with rdma/tbcount.c loaded:
# fabmeter's and perftest's one-sided ping-pongs (or, COUNT_EXP=bw, their
# bandwidth runs: 128 in flight), one tool at a time, each bracketed by two
# snapshots of every block's count, for N1 and then N2 round trips (or
# messages). rdma/count_insns.py takes the difference (N2 - N1: start-up
# cancels) and prints the instructions per round trip (message), user space
# and kernel (by symbol: /proc/kallsyms is saved), of each tool.
#
#   cc -O2 -shared -fPIC -o build/tbcount.so rdma/tbcount.c -lpthread
#   mkdir -p build/count
#   FM_QEMU_ACCEL=tcg,thread=single rdma/guest/run.sh --share "$PWD" \
#     --plugin "$PWD/build/tbcount.so,arg=dir=$PWD/build/count" -- \
#     rdma/count-insns.sh build/engine/fabmeter-engine build/count
#   rdma/count_insns.py build/count
#
# OUTDIR must be the plugin's dir, shared with the host. One vCPU thread
# (thread=single) keeps the counts exact. One-sided ops by default: their
# server sleeps, where a busy-polling server's spins would count too.
# COUNT_OPS (default "fadd cswap read"), COUNT_NS (default "5000 25000"),
# COUNT_EXP (lat, the default, or bw). A bw client spins only while its
# window is full, which on Soft-RoCE is seldom: a one-sided op runs inside
# its post's system call. COUNT_EXP=bw also takes the ops write and
# write+bidir (1 KiB), whose receivers spin in user space: there only the
# kernel's count per message compares; write+passive (--passive-rx, whose
# receiver sleeps as ib_write_bw's) compares whole.
set -uo pipefail
# Not under /tmp: the engine loads plugins only from folders nobody else may write.
mkdir -p -m 0755 /opt/fabmeter-count || exit 1
ENGINE=/opt/fabmeter-count/fabmeter-engine
cp "$1" "$ENGINE" || exit 1
cp -r "$(dirname "$1")/plugins" /opt/fabmeter-count/ || exit 1   # the transport plugins, found beside the engine
OUT=$2
[[ -d $OUT ]] || { echo "count-insns: no directory $OUT (the plugin's dir=)" >&2; exit 1; }
cat /proc/kallsyms >"$OUT/kallsyms"
PORT=19800

# snap NAME: wait for the plugin's snapshot (it polls every 10 ms).
snap() {
  : >"$OUT/req-$1"
  local i
  for ((i = 0; i < 600; i++)); do
    [[ -e $OUT/snap-$1 ]] && return 0
    sleep 0.05
  done
  echo "count-insns: no snapshot $1 in 30 s: is rdma/tbcount.c loaded with dir=$OUT?" >&2
  exit 1
}

# run TOOL OP N: one client run between snapshots TOOL-OP-N-a and -b.
run() {
  local tool=$1 op=$2 n=$3 tag=$1-$2-$3 size=32 exp=${COUNT_EXP:-lat} pt_opts=() fm_op=$2 fm_opts=()
  local pt=ib_read_$exp
  PORT=$((PORT + 1))
  [[ $exp == bw ]] && fm_opts=(--tx-depth 128)
  case $op in
    read) ;;
    write*)  # bw only, 1 KiB: fabmeter's receiver spins, so only the kernel's count compares, unless +passive
      pt=ib_write_$exp size=1024 fm_op=write
      [[ $op == *+passive* ]] && fm_opts+=(--passive-rx)
      [[ $op == *+bidir* ]] && pt_opts+=(-b) fm_opts+=(--bidir) ;;
    *)
      size=8 pt=ib_atomic_$exp fm_op=atomic-$op
      pt_opts=(-A "$([[ $op == fadd ]] && echo FETCH_AND_ADD || echo CMP_AND_SWAP)") ;;
  esac
  if [[ $tool == pt ]]; then
    taskset -c 1 timeout 600 $pt -d rxe1 -x 1 -p $PORT -F -n "$n" -s $size "${pt_opts[@]}" >"$OUT/$tag.server.out" 2>&1 &
    sleep 1
    snap "$tag-a"
    taskset -c 0 timeout 600 $pt -d rxe0 -x 1 -p $PORT -F -n "$n" -s $size "${pt_opts[@]}" 10.77.0.2 \
      >"$OUT/$tag.out" 2>&1
  else
    timeout 600 "$ENGINE" serve --bind 10.77.0.2 --port $PORT --once --cpu 1 >"$OUT/$tag.server.out" 2>&1 &
    local i
    for ((i = 0; i < 300; i++)); do
      grep -q listening "$OUT/$tag.server.out" 2>/dev/null && break
      sleep 0.1
    done
    snap "$tag-a"
    timeout 600 "$ENGINE" run "$exp" --server 10.77.0.2:$PORT --cpu 0 -t verbs --cm raw -n "$n" --warmup 200 \
      -s $size --service rc --op "$fm_op" "${fm_opts[@]}" --timeout-ms 60000 >"$OUT/$tag.out" 2>&1
  fi
  local rc=$?
  snap "$tag-b"
  wait
  echo "$tag rc=$rc"
}

for n in ${COUNT_NS:-5000 25000}; do
  for op in ${COUNT_OPS:-fadd cswap read}; do
    run fm "$op" "$n"
    run pt "$op" "$n"
  done
done
