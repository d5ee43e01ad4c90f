#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest: bw (or lat) of two tools *at the same
# time*, each on its own rxe pair, so that the guest's speed modes (a run
# moves between about 1.3, 2, 4 and 9 k msg/s under TCG) strike both alike
# and their ratio holds to about 1 %, where alternated runs spread over
# +-40 %.
#
#   rdma/guest/run.sh --share "$PWD" -- rdma/paired-bw.sh ENGINE OUTDIR [VARIANT_ENGINE]
#   rdma/paired_bw.py OUTDIR/pairs.txt
#
# Pair 0 is the guest's rxe0 -> rxe1 (10.77.0.x); this script adds pair 1,
# rxe2 -> rxe3 on a second veth pair (10.78.0.x), routed like the first. Both
# clients run on CPU 0 and both servers on CPU 1, so the scheduler gives each
# an equal share: the ratio of their rates is the ratio of their costs per
# message. A run's rate is its client device's sent_pkts (one packet per
# 1 KiB message or read request) over common windows taken while both run.
# Every entry runs twice, the tools swapped between the pairs, so the pairs'
# own difference cancels (rdma/paired_bw.py). rxe acknowledges every RDMA
# write, so a fabmeter client of --op write or write-imm also sends one ACK
# per credit write of its server (one per --rq-refill messages, 64 by
# default), plus, where it reads writes too, its own credit writes (none
# for plain writes of 16 B or more, which carry them): divide its rate by
# 1 + 1/rq_refill for messages (docs/performance.md).
#
# Tools: fm (ENGINE), pt (perftest's ib_OP_bw), fvX (VARIANT_ENGINE with the
# environment in FM_PAIRED_ENV_X, e.g. FM_PAIRED_ENV_A='FM_EXP_KNOB=1', and
# the client options in FM_PAIRED_ARGS_X, e.g. FM_PAIRED_ARGS_B='--sq-depth 2').
# OP: read, send, write, fadd or cswap (bw: 1 KiB, atomics 8 B, 128 in
# flight; "+bidir" and "+pl8" after it add -b / --bidir and -l 8 /
# --post-list 8: in bidir the client's packets include fabmeter's credit
# writes, one per --rq-refill of the server's messages), or lat-OP (ping-pong, 32 B, atomics 8 B, send and write inline
# up to 64 B as make test-rdma's rows; ib_OP_lat): a lat run's
# rate is its round trips per second, one request packet each, so at equal
# CPU shares the ratio is that of the tools' costs per round trip (on
# Soft-RoCE the whole of a one-sided op runs inside its post's system call).
# OP ofi-send or ofi-write-imm: libfabric's verbs provider (msg endpoints,
# 1 KiB, 128 in flight), fm being fabmeter's ofi transport and pt fabtests'
# fi_msg_bw or fi_rma_bw -o writedata, both on the libfabric that
# rdma/fabtests.sh builds (FM_FABTESTS, default <repo>/build/fabtests), as
# make test-rdma's ofi bw rows; fi_getinfo over verbs is slow under TCG, so
# give these a longer FM_PAIRED_SETTLE_S (15).
# FM_PAIRED_PLAN: entries OP:A:B (default "read:fm:pt send:fm:pt write:fm:pt");
# FM_PAIRED_ROUNDS (3), FM_PAIRED_WINDOWS (3) of FM_PAIRED_WIN_S seconds (3),
# after FM_PAIRED_SETTLE_S (5); FM_PAIRED_N messages per run (1000000: longer
# than the windows even at the guest's fastest, about 18 k msg/s; the runs
# are stopped after them). A line whose client ended before the last window
# closed ends in "ended-early" instead of a rate (rdma/paired_bw.py skips it).
set -uo pipefail
# Not under /tmp: the engine loads plugins only from folders nobody else may write.
mkdir -p -m 0755 /opt/fabmeter-paired
ENGINE=/opt/fabmeter-paired/fabmeter-engine
VARIANT=/opt/fabmeter-paired/variant/fabmeter-engine   # with its own plugins beside it
cp "$1" "$ENGINE"
cp -r "$(dirname "$1")/plugins" /opt/fabmeter-paired/   # the transport plugins, found beside the engine
OUT=$2
mkdir -p "$OUT"
[[ -n ${3:-} ]] && mkdir -p -m 0755 "$(dirname "$VARIANT")" && cp "$3" "$VARIANT" &&
  cp -r "$(dirname "$3")/plugins" "$(dirname "$VARIANT")/"
N=${FM_PAIRED_N:-1000000}
WIN=${FM_PAIRED_WIN_S:-3}
WINDOWS=${FM_PAIRED_WINDOWS:-3}
PORT=19500

source "$(dirname "$0")/guest/rxe-pair.sh"
rxe_pair 1 || exit 1

client_dev() { rxe_dev "$1" 0; }
server_dev() { rxe_dev "$1" 1; }
server_addr() { rxe_addr "$1" 1; }
sent_pkts() { cat "/sys/class/infiniband/$(client_dev "$1")/ports/1/hw_counters/sent_pkts"; }

# listening FILE: waits up to 30 s for a fabmeter server's "listening" in FILE.
listening() {
  local i
  for ((i = 0; i < 300; i++)); do
    grep -q listening "$1" 2>/dev/null && return
    sleep 0.1
  done
}

# start_ofi FILE TOOL PAIR OP: start's ofi-* ops (fm: fabmeter, pt: fabtests).
FABTESTS=${FM_FABTESTS:-$(cd "$(dirname "$0")/.." && pwd)/build/fabtests}
start_ofi() {
  local f=$1 tool=$2 pair=$3 op=${4#ofi-} ft=fi_msg_bw ft_opts=()
  [[ $op == write-imm ]] && ft=fi_rma_bw ft_opts=(-o writedata)
  PORT=$((PORT + 1))
  if [[ $tool == pt ]]; then
    local common=(-p verbs -e msg -S 1024 -I "$N" -W 128 "${ft_opts[@]}")
    LD_LIBRARY_PATH=$FABTESTS/lib taskset -c 1 timeout 300 "$FABTESTS/bin/$ft" "${common[@]}" \
      -d "$(server_dev "$pair")" -B $PORT >"$f.server.out" 2>&1 &
    sleep 1
    LD_LIBRARY_PATH=$FABTESTS/lib taskset -c 0 timeout 300 "$FABTESTS/bin/$ft" "${common[@]}" \
      -d "$(client_dev "$pair")" -P $PORT "$(server_addr "$pair")" >"$f.out" 2>&1 &
    CLIENT=$!
    return
  fi
  LD_LIBRARY_PATH=$FABTESTS/lib timeout 300 "$ENGINE" serve --bind "$(server_addr "$pair")" --port $PORT --once \
    --cpu 1 >"$f.server.out" 2>&1 &
  listening "$f.server.out"
  LD_LIBRARY_PATH=$FABTESTS/lib timeout 300 "$ENGINE" run bw --server "$(server_addr "$pair"):$PORT" --cpu 0 \
    -t ofi --provider verbs --ep msg --op "$op" -s 1K -n "$N" --warmup 200 --tx-depth 128 --timeout-ms 30000 \
    >"$f.out" 2>"$f.err" &
  CLIENT=$!
}

# start FILE TOOL PAIR OP: the tool's server and client, in the background;
# CLIENT is the client's pid.
start() {
  if [[ $4 == ofi-* ]]; then start_ofi "$@"; return; fi
  local f=$1 tool=$2 pair=$3 op=$4 exp=bw size=1024 mods=
  if [[ $op == *+* ]]; then mods=+${op#*+} op=${op%%+*}; fi
  if [[ $op == lat-* ]]; then exp=lat op=${op#lat-} size=32; fi
  local perftest=ib_${op}_$exp fm_op=$op pt_opts fm_opts=()
  case $op in
    fadd | cswap)
      perftest=ib_atomic_$exp fm_op=atomic-$op size=8
      pt_opts=(-A "$([[ $op == fadd ]] && echo FETCH_AND_ADD || echo CMP_AND_SWAP)") ;;
    *) pt_opts=(-s $size) ;;
  esac
  if [[ $exp == bw ]]; then
    fm_opts=(--tx-depth 128)
    [[ $mods == *+bidir* ]] && pt_opts+=(-b) fm_opts+=(--bidir)
    [[ $mods == *+pl8* ]] && pt_opts+=(-l 8) fm_opts+=(--post-list 8)
  elif [[ $op == send || $op == write ]]; then
    pt_opts+=(-I 64) fm_opts=(--inline 64)
  fi
  PORT=$((PORT + 1))
  if [[ $tool == pt ]]; then
    taskset -c 1 timeout 300 "$perftest" -d "$(server_dev "$pair")" -x 1 -p $PORT -F -n "$N" "${pt_opts[@]}" \
      >"$f.server.out" 2>&1 &
    sleep 1
    taskset -c 0 timeout 300 "$perftest" -d "$(client_dev "$pair")" -x 1 -p $PORT -F -n "$N" "${pt_opts[@]}" \
      "$(server_addr "$pair")" >"$f.out" 2>&1 &
    CLIENT=$!
    return
  fi
  local engine=$ENGINE env=() args=()
  if [[ $tool == fv* ]]; then
    engine=$VARIANT
    local var=FM_PAIRED_ENV_${tool#fv} opts=FM_PAIRED_ARGS_${tool#fv}
    read -ra env <<<"${!var:-}"
    read -ra args <<<"${!opts:-}"
  fi
  env "${env[@]}" timeout 300 "$engine" serve --bind "$(server_addr "$pair")" --port $PORT --once --cpu 1 \
    >"$f.server.out" 2>&1 &
  listening "$f.server.out"
  env "${env[@]}" timeout 300 "$engine" run $exp --server "$(server_addr "$pair"):$PORT" --cpu 0 -t verbs --cm raw \
    -n "$N" --warmup 200 "${fm_opts[@]}" -s $size --service rc --op "$fm_op" "${args[@]}" >"$f.out" 2>"$f.err" &
  CLIENT=$!
}

# pair NAME TOOL0 TOOL1 OP: one line "NAME OP p0=TOOL0 p1=TOOL1 R0/R1 ..." (msg/s per window).
pair() {
  local name=$1 t0=$2 t1=$3 op=$4
  start "$OUT/$name-p0-$t0" "$t0" 0 "$op"
  local c0=$CLIENT
  start "$OUT/$name-p1-$t1" "$t1" 1 "$op"
  local c1=$CLIENT
  sleep "${FM_PAIRED_SETTLE_S:-5}"
  local a0 a1 b0 b1 w line="$name $op p0=$t0 p1=$t1"
  a0=$(sent_pkts 0) a1=$(sent_pkts 1)
  for ((w = 0; w < WINDOWS; w++)); do
    sleep "$WIN"
    b0=$(sent_pkts 0) b1=$(sent_pkts 1)
    line+=" $(((b0 - a0) / WIN))/$(((b1 - a1) / WIN))"
    a0=$b0 a1=$b1
  done
  # A client gone before the windows closed ran alone for part of them.
  kill -0 "$c0" 2>/dev/null && kill -0 "$c1" 2>/dev/null || line+=" ended-early"
  pkill -f "ib_[a-z]+_(bw|lat) -d rxe"
  pkill -f "bin/fi_(msg|rma)_bw -p verbs"
  pkill -f "fabmeter-paired-(engine|variant) (run|serve)"
  wait
  echo "$line" | tee -a "$OUT/pairs.txt"
}

: >"$OUT/pairs.txt"
for ((round = 1; round <= ${FM_PAIRED_ROUNDS:-3}; round++)); do
  for entry in ${FM_PAIRED_PLAN:-read:fm:pt send:fm:pt write:fm:pt}; do
    IFS=: read -r op a b <<<"$entry"
    pair "r$round-$op-$a-$b" "$a" "$b" "$op"
    pair "r$round-$op-$b-$a" "$b" "$a" "$op"
  done
done
