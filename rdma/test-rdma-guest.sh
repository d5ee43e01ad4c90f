#!/usr/bin/env bash
# Runs INSIDE the Soft-RoCE guest (rdma/guest), started by rdma/test-rdma.sh:
# fabmeter's verbs transport end to end from rxe0 (client, CPU 0) to rxe1
# (server, CPU 1), perftest with the same parameters, and the libfabric verbs
# provider through fabmeter's ofi transport. Every case leaves files in
# OUTDIR (NAME.out, .err, .rc, .expect, .cmd, .server.*); the host's
# rdma/test_rdma_report.py checks them and prints the tables.
#
#   rdma/test-rdma-guest.sh ENGINE OUTDIR [SEED]
set -uo pipefail
OUT=$2
# From guest RAM: executing from the 9p share costs ~2 s per process under TCG.
# Not under /tmp: the engine loads plugins only from folders nobody else may write.
mkdir -p -m 0755 /opt/fabmeter
ENGINE=/opt/fabmeter/fabmeter-engine
cp "$1" "$ENGINE"
cp -r "$(dirname "$1")/plugins" /opt/fabmeter/   # the transport plugins, found beside the engine
SERVER=${FM_RDMA_ADDR1:-10.77.0.2}   # rxe1's address; the client reaches it through rxe0
PORT=19000
mkdir -p "$OUT"

[[ ${FM_RDMA_OK:-0} == 1 ]] || { echo "the guest's rxe setup failed" | tee "$OUT/_setup_failed"; exit 1; }
echo "$EPOCHREALTIME" >"$OUT/_started"
{ uname -r; ls /sys/class/infiniband; } >"$OUT/_guest"

# FM_RDMA_CASES (an extended regular expression; rdma/guest/README.md): only the
# cases whose NAME it matches run, the faults whole if it matches "fault-";
# unset or empty: every case.
selected() { [[ -z ${FM_RDMA_CASES:-} || $1 =~ $FM_RDMA_CASES ]]; }
[[ -z ${FM_RDMA_CASES:-} ]] || echo "$FM_RDMA_CASES" >"$OUT/_selected"

# Waits up to 5 s for a background process, then stops it; prints its status.
reap() {
  local pid=$1 i
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill "$pid" 2>/dev/null
  wait "$pid"
  echo $?
}

# listening FILE PID: returns when the serve or forward PID, writing its
# stdout to FILE, listens or has ended; 30 s at most (under TCG on a busy
# host a start can take seconds).
listening() {
  local i
  for ((i = 0; i < 300; i++)); do
    grep -q listening "$1" 2>/dev/null && return
    kill -0 "$2" 2>/dev/null || return
    sleep 0.1
  done
}

# Starts a server on PORT writing FILE.server.*; returns when it listens.
serve() {
  local f=$1
  timeout "${CASE_TIMEOUT:-120}" "$ENGINE" serve --bind "$SERVER" --port "$PORT" --once --cpu 1 >"$f.server.out" 2>"$f.server.err" &
  SPID=$!
  listening "$f.server.out" $SPID
}

# fabmeter's Python CLI in the guest: Debian's python3 with the repository's
# package and the host venv's (numpy, matplotlib; the same Python minor).
REPO=${FM_RDMA_REPO:-$(cd "$(dirname "$0")/.." && pwd)}
PY=(env FABMETER_ENGINE="$ENGINE" PYTHONPATH="$REPO/python:$(echo "$REPO"/.venv/lib/python3*/site-packages)" python3)

# A starved guest must not turn into a timeout failure: generous waits.
TIMEOUT=(--timeout-ms 15000)

# fm NAME EXPECT EXPERIMENT [OPTIONS...]: one fabmeter run. EXPECT is the
# client's exit code the case wants (0, or 2 for a refused combination).
fm() {
  selected "$1" || return 0
  local name=$1 expect=$2 exp=$3 f=$OUT/$1
  shift 3
  PORT=$((PORT + 1))
  echo "$expect" >"$f.expect"
  echo "fabmeter-engine run $exp $*" >"$f.cmd"
  local t0=$EPOCHREALTIME spid=
  # A refused combination is refused before connecting: no server for it.
  if [[ $expect == 0 ]]; then
    serve "$f"
    spid=$SPID
  fi
  timeout "${CASE_TIMEOUT:-120}" "$ENGINE" run "$exp" --server "$SERVER:$PORT" --cpu 0 -t verbs "${TIMEOUT[@]}" "$@" >"$f.out" 2>"$f.err"
  local rc=$?
  echo $rc >"$f.rc"
  [[ -n $spid ]] && reap $spid >"$f.server.rc"
  printf '%-58s rc=%-3s %5.1f s\n' "$name" "$rc" "$(echo "$EPOCHREALTIME $t0" | awk '{print $1 - $2}')"
}

# ofi NAME OPTIONS...: fabmeter's ofi transport over the libfabric verbs provider.
ofi() {
  selected "$1" || return 0
  local name=$1 f=$OUT/$1
  shift
  PORT=$((PORT + 1))
  echo 0 >"$f.expect"
  echo "fabmeter-engine run $*" >"$f.cmd"
  serve "$f"
  # fi_getinfo over verbs is slow under TCG: a longer handshake timeout.
  timeout 120 "$ENGINE" run "$@" --timeout-ms 30000 --server "$SERVER:$PORT" --cpu 0 >"$f.out" 2>"$f.err"
  echo $? >"$f.rc"
  reap $SPID >"$f.server.rc"
  printf '%-58s rc=%s\n' "$name" "$(cat "$f.rc")"
}

# pt NAME TOOL OPTIONS...: a perftest pair, server on rxe1, client on rxe0.
pt() {
  selected "$1" || return 0
  local name=$1 tool=$2 f=$OUT/$1
  shift 2
  PORT=$((PORT + 1))
  echo "$tool $*" >"$f.cmd"
  taskset -c 1 timeout 120 "$tool" -d "${FM_RDMA_DEV1:-rxe1}" -x "${FM_RDMA_GID_INDEX:-1}" -p "$PORT" -F "$@" \
    >"$f.server.out" 2>&1 &
  local spid=$! rc try
  for try in 1 2 3; do  # the server needs a moment to listen
    sleep 1
    taskset -c 0 timeout 120 "$tool" -d "${FM_RDMA_DEV0:-rxe0}" -x "${FM_RDMA_GID_INDEX:-1}" -p "$PORT" -F "$@" \
      "$SERVER" >"$f.out" 2>&1
    rc=$?
    grep -q "Couldn't connect\|Unable to open file descriptor" "$f.out" || break
  done
  echo $rc >"$f.rc"
  reap $spid >"$f.server.rc"
  printf '%-58s rc=%s\n' "$name" "$rc"
}

# fab NAME TOOL OPTIONS...: a pair of libfabric's own tools (fi_pingpong, or
# fabtests' fi_msg_bw and fi_rma_bw: one option parser), the server on rxe1,
# the client on rxe0 (verbs domains are device names). TOOL is a name on PATH
# or a path; NAME.cmd records its base name.
fab() {
  selected "$1" || return 0
  local name=$1 tool=$2 f=$OUT/$1
  shift 2
  PORT=$((PORT + 1))
  echo "${tool##*/} $*" >"$f.cmd"
  taskset -c 1 timeout 120 "$tool" "$@" -d "${FM_RDMA_DEV1:-rxe1}" -B "$PORT" >"$f.server.out" 2>&1 &
  local spid=$! rc try
  for try in 1 2 3; do  # the server needs a moment to listen
    sleep 1
    taskset -c 0 timeout 120 "$tool" "$@" -d "${FM_RDMA_DEV0:-rxe0}" -P "$PORT" "$SERVER" >"$f.out" 2>&1
    rc=$?
    ((rc == 0)) && break
  done
  echo $rc >"$f.rc"
  reap $spid >"$f.server.rc"
  printf '%-58s rc=%s\n' "$name" "$rc"
}

# rdma_cm cannot connect UC; UD has no RDMA write. The matrix runs the ops
# that receive completions (--poll event applies); plain write, read and
# atomics have their own section below.
cms_for() { case $1 in uc) echo raw ;; *) echo rdma_cm raw ;; esac; }
ops_for() { case $1 in ud) echo send ;; *) echo send write-imm ;; esac; }

# CI's mode (FM_RDMA_CI=1) runs a covering subset of the knob matrices below,
# every value of every knob at least once, not their product (make test-rdma
# runs the product): `ci_runs COMBO INNER N` is true outside CI's mode, and in
# it for one of a combination's N variants, a different one each combination.
ci_runs() { ((!${FM_RDMA_CI:-0} || $2 == $1 % $3)); }
not_ci() { ((!${FM_RDMA_CI:-0})); }

SMALL_LAT=(-s 32 -n 200 --warmup 50)
ONEWAY=(-s 32 --bursts 2 --burst-size 100 --pause-us 200 --warmup 20)
BW=(-s 1K -n 2000 --warmup 100)

# in_turn ROUND A B: runs the commands held in the arrays named A and B, A
# first in odd rounds and B first in even ones, so that neither tool of a row
# always runs second (just after the other's teardown).
in_turn() {
  local -n in_turn_a=$2 in_turn_b=$3
  if (($1 % 2)); then
    "${in_turn_a[@]}"; "${in_turn_b[@]}"
  else
    "${in_turn_b[@]}"; "${in_turn_a[@]}"
  fi
}

# cmp ROUND ROW "FABMETER ARGS" PERFTEST-TOOL PERFTEST-ARGS...: one round of
# one row (in_turn). Rows: lat-* at 32 B (atomics 8 B) with 2000
# iterations, inline 64 where the op allows it; bw-* at 1 KiB (atomics 8 B),
# 5000 messages, 128 in flight (perftest's -t default). The report takes
# each row's median over the rounds.
cmp() {
  local round=$1 row=$2 fmargs=$3 tool=$4
  shift 4
  local mine=(fm "cmp-r$round-fabmeter-$row" 0 $fmargs --cm raw) theirs=(pt "cmp-r$round-perftest-$row" "$tool" "$@")
  control_of mine theirs "$round" "$row"
  in_turn "$round" mine theirs
}
# control_of MINE THEIRS ROUND ROW: with FM_CMP_CONTROL=1 (test-rdma.sh
# --control) fabmeter's side of a row runs its peer as well, named
# cmp-rROUND-control-ROW: an A/A run of two equal tools.
control_of() {
  ((${FM_CMP_CONTROL:-0})) || return 0
  local -n control_mine=$1 control_theirs=$2
  control_mine=("${control_theirs[@]}")
  control_mine[1]="cmp-r$3-control-$4"
}
# ofi_fabtests NAME ARGS...: ofi on fabtests' own libfabric (rdma/fabtests.sh);
# NAME.libfabric names it, the version the host expects the case to report.
ofi_fabtests() {
  cp "$FM_FABTESTS/version" "$OUT/$1.libfabric"
  LD_LIBRARY_PATH=$FM_FABTESTS/lib ofi "$@"
}
LATC=(-n 2000 --warmup 200)
BWC=(-n 5000 --warmup 200 --tx-depth 128)
run_comparison() {
  if ((${FM_CMP_ROUNDS:-5} == 0)); then
    echo "== comparison: none (FM_CMP_ROUNDS=0)"
    return
  fi
  local vs="fabmeter vs perftest"
  ((${FM_CMP_CONTROL:-0})) && vs="CONTROL: each peer against itself"
  echo "== comparison: $vs, alternated (odd rounds fabmeter's side first, even rounds its peer) ${FM_CMP_ROUNDS:-5} rounds, raw QP setup"
  for ((round = 1; round <= ${FM_CMP_ROUNDS:-5}; round++)); do
    # CI's mode: RC's rows (one of each perftest tool), which check that both sides run.
    for svc in rc $(not_ci && echo uc ud); do
      cmp $round "lat-$svc-send" "lat -s 32 ${LATC[*]} --inline 64 --service $svc" ib_send_lat -c "${svc^^}" -s 32 -n 2000 -I 64
    done
    for svc in rc $(not_ci && echo uc); do
      cmp $round "lat-$svc-write" "lat -s 32 ${LATC[*]} --inline 64 --service $svc --op write" \
        ib_write_lat -c "${svc^^}" -s 32 -n 2000 -I 64
    done
    cmp $round lat-rc-read "lat -s 32 ${LATC[*]} --service rc --op read" ib_read_lat -s 32 -n 2000
    cmp $round lat-rc-atomic-fadd "lat -s 8 ${LATC[*]} --service rc --op atomic-fadd" ib_atomic_lat -A FETCH_AND_ADD -n 2000
    not_ci && cmp $round lat-rc-atomic-cswap "lat -s 8 ${LATC[*]} --service rc --op atomic-cswap" ib_atomic_lat -A CMP_AND_SWAP -n 2000
    # ib_write_bw's server takes no part: the write rows' twin is --passive-rx.
    for op in send "write --passive-rx" read; do
      cmp $round "bw-rc-${op%% *}" "bw -s 1K ${BWC[*]} --service rc --op $op" "ib_${op%% *}_bw" -s 1024 -n 5000
    done
    cmp $round bw-rc-atomic-fadd "bw -s 8 ${BWC[*]} --service rc --op atomic-fadd" ib_atomic_bw -A FETCH_AND_ADD -n 5000
    cmp $round bw-rc-write-bidir "bw -s 1K ${BWC[*]} --service rc --op write --passive-rx --bidir" \
      ib_write_bw -s 1024 -n 5000 -b
    not_ci && cmp $round bw-rc-write-postlist8 "bw -s 1K ${BWC[*]} --service rc --op write --passive-rx --post-list 8" \
      ib_write_bw -s 1024 -n 5000 -l 8
    if "$ENGINE" options | grep -q '"ofi"'; then  # libfabric's verbs provider beside fi_pingpong (msg endpoints)
      local mine=(ofi "cmp-r$round-fabmeter-lat-ofi-verbs-msg" lat -t ofi --provider verbs --ep msg -s 32 "${LATC[@]}")
      local theirs=(fab "cmp-r$round-fi_pingpong-lat-ofi-verbs-msg" fi_pingpong -p verbs -e msg -S 32 -I 2000)
      control_of mine theirs "$round" lat-ofi-verbs-msg
      in_turn "$round" mine theirs
      # bw beside fabtests, both ends of both tools on fabtests' own libfabric
      # (rdma/fabtests.sh), so the two rows compare callers of one library.
      if [[ -n ${FM_FABTESTS:-} ]]; then
        local ft=(-S 1024 -I 5000 -w 200 -W 128)
        mine=(ofi_fabtests "cmp-r$round-fabmeter-bw-ofi-verbs-send" bw -t ofi --provider verbs --ep msg -s 1K "${BWC[@]}")
        theirs=(fab "cmp-r$round-fi_msg_bw-bw-ofi-verbs-send" "$FM_FABTESTS/bin/fi_msg_bw" -p verbs -e msg "${ft[@]}")
        control_of mine theirs "$round" bw-ofi-verbs-send
        in_turn "$round" mine theirs
        mine=(ofi_fabtests "cmp-r$round-fabmeter-bw-ofi-verbs-write-imm"
          bw -t ofi --provider verbs --ep msg --op write-imm -s 1K "${BWC[@]}")
        theirs=(fab "cmp-r$round-fi_rma_bw-bw-ofi-verbs-write-imm" "$FM_FABTESTS/bin/fi_rma_bw" -p verbs -e msg
          -o writedata "${ft[@]}")
        control_of mine theirs "$round" bw-ofi-verbs-write-imm
        in_turn "$round" mine theirs
      fi
    fi
  done
}

# FM_RDMA_COMPARE_ONLY=1 (rdma/test-rdma.sh --compare-only): the comparison alone.
if [[ ${FM_RDMA_COMPARE_ONLY:-0} == 1 ]]; then
  run_comparison
  echo compare-only >"$OUT/_compare_only"
  echo "$EPOCHREALTIME" >"$OUT/_finished"
  exit 0
fi

# Inline and signaling are independent knobs (one decides how the payload
# goes, the other which WRs complete): their pairs are covered, not their
# product, which keeps CI within its time (32 cases instead of 64).
echo "== verbs: lat over every knob (RC/UC/UD x send/write-imm x (inline, signaling) pairs x poll x cm)"
combo=0
for svc in rc uc ud; do
  for cm in $(cms_for $svc); do
    for op in $(ops_for $svc); do
      variant=0
      for pair in 0:1 64:auto; do
        inl=${pair%:*} sig=${pair#*:}
        for poll in busy event; do
          sigopt=()
          [[ $sig == 1 ]] && sigopt=(--signal-every 1)
          ci_runs $combo $((variant++)) 4 &&
            fm "lat-$svc-$op-$cm-inline$inl-sig$sig-$poll" 0 lat "${SMALL_LAT[@]}" --service $svc --op $op \
              --cm $cm --inline $inl "${sigopt[@]}" --poll $poll
        done
      done
      combo=$((combo + 1))
    done
  done
done

echo "== verbs: oneway (t_comp from send completions) and bw, per service x op x cm"
combo=0
for svc in rc uc ud; do
  for cm in $(cms_for $svc); do
    for op in $(ops_for $svc); do
      ci_runs $combo 0 2 && fm "oneway-$svc-$op-$cm-busy" 0 oneway "${ONEWAY[@]}" --service $svc --op $op --cm $cm
      ci_runs $combo 1 2 && fm "bw-$svc-$op-$cm-busy" 0 bw "${BW[@]}" --service $svc --op $op --cm $cm
      combo=$((combo + 1))
    done
  done
done
fm "oneway-rc-send-rdma_cm-event-inline64" 0 oneway "${ONEWAY[@]}" --service rc --poll event --inline 64
fm "oneway-uc-write-imm-raw-event-sig1" 0 oneway "${ONEWAY[@]}" --service uc --op write-imm --poll event --signal-every 1
fm "bw-rc-write-imm-raw-event" 0 bw "${BW[@]}" --service rc --op write-imm --cm raw --poll event
fm "bw-ud-send-rdma_cm-event" 0 bw "${BW[@]}" --service ud --poll event

echo "== verbs: t_send, the HCA's read of the payload (oneway's time thread, on a CPU of its own: $(nproc) CPUs here)"
nproc >"$OUT/_nproc"
# One send in flight (every send signaled, 100 us apart): the thread's pass covers one payload, its
# finest stamp (rxe reads the payload inside ibv_post_send; under TCG most reads beat the thread: missed).
TSEND=(-s 32 --bursts 4 --burst-size 250 --gap-us 100 --pause-us 200 --warmup 50 --service rc --signal-every 1)
fm "oneway-rc-send-raw-tsend" 0 oneway "${TSEND[@]}" --cm raw
fm "oneway-rc-write-imm-rdma_cm-tsend" 0 oneway "${TSEND[@]}" --op write-imm
fm "oneway-rc-send-raw-inline64-tsend" 0 oneway "${TSEND[@]}" --cm raw --inline 64

echo "== verbs: perftest's ops (plain write polled at the receiver; read and atomics, one-sided, RC)"
combo=0
for cm in raw rdma_cm; do
  for inl in 0 64; do
    ci_runs $combo $((inl ? 1 : 0)) 2 &&
      fm "lat-rc-write-$cm-inline$inl" 0 lat "${SMALL_LAT[@]}" --service rc --op write --cm $cm --inline $inl
  done
  ci_runs $combo 0 2 && fm "lat-rc-read-$cm" 0 lat "${SMALL_LAT[@]}" --service rc --op read --cm $cm
  ci_runs $combo 1 2 && fm "lat-rc-atomic-fadd-$cm" 0 lat -s 8 -n 200 --warmup 50 --service rc --op atomic-fadd --cm $cm
  ci_runs $combo 0 2 && fm "lat-rc-atomic-cswap-$cm" 0 lat -s 8 -n 200 --warmup 50 --service rc --op atomic-cswap --cm $cm
  ci_runs $combo 1 2 && fm "bw-rc-write-$cm" 0 bw "${BW[@]}" --service rc --op write --cm $cm
  ci_runs $combo 0 2 && fm "bw-rc-read-$cm" 0 bw "${BW[@]}" --service rc --op read --cm $cm
  combo=$((combo + 1))
done
fm "lat-uc-write-raw-inline64-sig1" 0 lat "${SMALL_LAT[@]}" --service uc --op write --inline 64 --signal-every 1
fm "oneway-rc-write-raw" 0 oneway "${ONEWAY[@]}" --service rc --op write --cm raw
fm "bw-uc-write-raw-64K-credits" 0 bw -s 64K -n 300 --warmup 20 --service uc --op write --rq-depth 16 --rq-refill 4
fm "bw-rc-read-raw-bidir" 0 bw "${BW[@]}" --service rc --op read --cm raw --bidir
fm "bw-rc-atomic-fadd-raw" 0 bw -s 8 -n 2000 --warmup 100 --service rc --op atomic-fadd --cm raw
fm "bw-rc-atomic-cswap-rdma_cm-bidir" 0 bw -s 8 -n 2000 --warmup 100 --service rc --op atomic-cswap --bidir
# One-sided bw signals every --signal-every-th op (auto: 64 here), its last
# warm-up op and its last op:
# an answer ring smaller than that, and a --duration run whose last op is
# whichever comes after the time, must still see every answer.
fm "bw-rc-read-raw-ring8" 0 bw "${BW[@]}" --service rc --op read --cm raw --rq-depth 8
fm "bw-rc-atomic-fadd-raw-duration" 0 bw -s 8 --duration 1 --warmup 100 --service rc --op atomic-fadd --cm raw
# --post-list: chained WRs, one ibv_post_send a list (a list of 7 never
# divides the 2100 sends nor the send window: the tail is a partial list).
fm "bw-rc-send-raw-postlist7" 0 bw "${BW[@]}" --service rc --cm raw --post-list 7
fm "bw-ud-send-rdma_cm-postlist7-inline64" 0 bw -s 32 -n 2000 --warmup 100 --service ud --post-list 7 --inline 64
fm "bw-rc-write-raw-postlist7-bidir" 0 bw "${BW[@]}" --service rc --op write --cm raw --post-list 7 --bidir
fm "bw-uc-write-imm-raw-postlist7-event" 0 bw "${BW[@]}" --service uc --op write-imm --post-list 7 --poll event
fm "bw-rc-read-raw-postlist7" 0 bw "${BW[@]}" --service rc --op read --cm raw --post-list 7
fm "bw-rc-write-64K-postlist4-credits" 0 bw -s 64K -n 300 --warmup 20 --service rc --op write --cm raw --rq-depth 16 --rq-refill 4 --post-list 4
# --passive-rx: plain writes counted by their acknowledgements, the receiver
# idle (ib_write_bw's way); bidir with a partial list at the tail, and
# multi-packet writes through rdma_cm into a ring smaller than the window.
fm "bw-rc-write-passive-raw" 0 bw "${BW[@]}" --service rc --op write --cm raw --passive-rx
fm "bw-rc-write-passive-raw-postlist7-bidir" 0 bw "${BW[@]}" --service rc --op write --cm raw --passive-rx --post-list 7 --bidir
fm "bw-rc-write-passive-rdma_cm-64K-ring16" 0 bw -s 64K -n 300 --warmup 20 --service rc --op write --passive-rx --rq-depth 16
fm "lat-rc-read-raw-sweep" 0 lat -a --max-size 64K -n 50 --warmup 10 --service rc --op read --cm raw
fm "lat-rc-write-raw-sweep" 0 lat -a --max-size 64K -n 50 --warmup 10 --service rc --op write --cm raw

echo "== verbs: check (length, content and order of every size to 256 KiB; UD to the MTU)"
CHECK=(--max-size 256K)
fm "check-rc-send-rdma_cm" 0 check "${CHECK[@]}" --service rc
fm "check-rc-write-imm-raw" 0 check "${CHECK[@]}" --service rc --op write-imm --cm raw
fm "check-rc-write-imm-rdma_cm-event-inline64" 0 check "${CHECK[@]}" --service rc --op write-imm --poll event --inline 64
fm "check-uc-send-raw-inline64" 0 check "${CHECK[@]}" --service uc --inline 64
fm "check-uc-write-imm-raw-event" 0 check "${CHECK[@]}" --service uc --op write-imm --poll event
fm "check-ud-send-rdma_cm-event" 0 check "${CHECK[@]}" --service ud --poll event
fm "check-ud-send-raw-inline64" 0 check "${CHECK[@]}" --service ud --cm raw --inline 64
fm "check-rc-write-raw-inline64" 0 check "${CHECK[@]}" --service rc --op write --cm raw --inline 64
fm "check-uc-write-raw-smallring" 0 check "${CHECK[@]}" --service uc --op write --rq-depth 4 --rq-refill 1

echo "== verbs: queue knobs, multi-packet messages, one device for both ends"
fm "bw-rc-write-imm-raw-64K-credits" 0 bw -s 64K -n 300 --warmup 20 --service rc --op write-imm --cm raw --rq-depth 16 --rq-refill 4
fm "bw-uc-write-imm-raw-64K-credits" 0 bw -s 64K -n 300 --warmup 20 --service uc --op write-imm --rq-depth 16 --rq-refill 4
fm "bw-rc-send-rdma_cm-smallq" 0 bw -s 256 -n 1000 --warmup 100 --service rc --sq-depth 8 --rq-depth 8 --rq-refill 2 --signal-every 4
fm "bw-rc-send-raw-bidir" 0 bw -s 1K -n 2000 --warmup 100 --service rc --cm raw --bidir
fm "lat-rc-send-raw-sweep" 0 lat -a --max-size 16K -n 50 --warmup 10 --service rc --cm raw
fm "lat-rc-write-imm-rdma_cm-sweep" 0 lat -a --max-size 16K -n 50 --warmup 10 --service rc --op write-imm
fm "lat-uc-send-raw-mtu512-3K" 0 lat -s 3K -n 100 --warmup 10 --service uc --mtu 512
fm "lat-ud-send-raw-sweep" 0 lat -a --max-size 64K -n 50 --warmup 10 --service ud --cm raw
fm "lat-rc-send-raw-device-rxe0-both-ends" 0 lat "${SMALL_LAT[@]}" --service rc --cm raw --device rxe0 --gid-index 1

echo "== verbs: refused combinations (exit 2, one line)"
fm "refuse-ud-above-mtu" 2 lat -s 2048 -n 10 --service ud
fm "refuse-ud-write-imm" 2 lat -n 10 --service ud --op write-imm
fm "refuse-ud-write" 2 lat -n 10 --service ud --op write
fm "refuse-ud-read" 2 lat -n 10 --service ud --op read
fm "refuse-ud-atomic-fadd" 2 lat -s 8 -n 10 --service ud --op atomic-fadd
fm "refuse-uc-read" 2 lat -n 10 --service uc --op read
fm "refuse-uc-atomic-cswap" 2 lat -s 8 -n 10 --service uc --op atomic-cswap
fm "refuse-write-event" 2 lat -n 10 --service rc --op write --poll event
fm "refuse-atomic-64B" 2 lat -s 64 -n 10 --service rc --op atomic-fadd
fm "refuse-read-oneway" 2 oneway --bursts 1 --burst-size 10 --service rc --op read
fm "refuse-uc-rdma_cm" 2 lat -n 10 --service uc --cm rdma_cm
fm "refuse-rdma_cm-mtu" 2 lat -n 10 --service rc --mtu 512
fm "refuse-no-such-device" 2 lat -n 10 --service rc --cm raw --device mlx5_9
fm "refuse-signal-every-above-sq" 2 lat -n 10 --service rc --sq-depth 16 --signal-every 32
fm "refuse-post-list-above-sq" 2 bw -n 10 --service rc --sq-depth 16 --post-list 32
fm "refuse-post-list-lat" 2 lat -n 10 --service rc --post-list 4
fm "refuse-passive-rx-uc" 2 bw -n 10 --service uc --op write --passive-rx
fm "refuse-passive-rx-send" 2 bw -n 10 --service rc --op send --passive-rx
fm "refuse-passive-rx-lat" 2 lat -n 10 --service rc --op write --passive-rx

echo "== verbs: load (open loop request/response, one point each)"
LOAD=(--rate 2000 --count 400 --warmup 50 --loss-timeout-ms 500)
for svc in rc uc ud; do
  fm "load-$svc-send-busy" 0 load "${LOAD[@]}" --service $svc
done
fm "load-rc-write-imm-raw-event" 0 load "${LOAD[@]}" --service rc --op write-imm --cm raw --poll event
fm "load-rc-send-conns2-threads2" 0 load "${LOAD[@]}" --service rc --conns 2 --threads 2 --server-threads 2
# w1's sizes go to 100 KB, beyond UD's one-packet messages: refused with the share it would lose, and run
# clamped to the MTU only when asked to (--max-size; counted in `clamped`).
fm "refuse-load-ud-workload-w1" 2 load "${LOAD[@]}" --service ud --workload w1
fm "load-ud-send-workload-w1-clamped" 0 load "${LOAD[@]}" --service ud --workload w1 --max-size 1024
fm "refuse-load-event-conns2" 2 load "${LOAD[@]}" --service rc --poll event --conns 2

echo "== verbs: --flows (a QP and a thread per flow; the host checks the flows add up)"
# Fewer messages in CI's mode (FM_RDMA_CI=1).
FLOWS_N=$((${FM_RDMA_CI:-0} ? 500 : 5000))
fm "bw-rc-send-flows4" 0 bw -s 1K -n "$FLOWS_N" --warmup 100 --service rc --flows 4
fm "lat-ud-send-raw-flows2" 0 lat -s 32 -n 200 --warmup 20 --service ud --cm raw --flows 2

echo "== verbs: loss counted exactly (UC/UD; nftables drops RoCE packets at random and counts them)"
# loss NAME PERCENT EXPERIMENT OPTIONS...: while the case runs, a rule on the
# input hook drops PERCENT % of the RoCE v2 packets (udp 4791; both ends are
# in this namespace, so both directions) and counts each drop in NAME.dropped.
# Raw connections (no CM packets) and single-packet messages make every drop
# one lost message: the report wants lost + warmup_lost == NAME.dropped.
loss() {
  selected "$1" || return 0
  local name=$1 pct=$2 f=$OUT/$1
  shift 2
  nft -f - <<EOF
table inet fmloss
delete table inet fmloss
table inet fmloss {
  chain input {
    type filter hook input priority 0; policy accept;
    udp dport 4791 numgen random mod 1000 < $((pct * 10)) counter drop
  }
}
EOF
  fm "$name" 0 "$@"
  nft list chain inet fmloss input | grep -o 'packets [0-9]*' | cut -d' ' -f2 >"$f.dropped"
  nft delete table inet fmloss
}
LOSS=(-s 64 --warmup 50 --cm raw --loss-timeout-ms 1000)
for svc in uc ud; do
  not_ci && loss "loss-$svc-oneway-1pct" 1 oneway "${LOSS[@]}" --bursts 10 --burst-size 100 --pause-us 1000 --service $svc
  loss "loss-$svc-oneway-10pct" 10 oneway "${LOSS[@]}" --bursts 4 --burst-size 100 --pause-us 1000 --service $svc
  # lat waits out each lost round trip (about 1 in 5 here): 250 ms each, not 1 s.
  loss "loss-$svc-lat-10pct" 10 lat "${LOSS[@]/#1000/250}" -n 60 --service $svc
  loss "loss-$svc-bw-10pct" 10 bw "${LOSS[@]}" -n 400 --service $svc
done
# UC is ordered but may lose: check must number arrivals by their payload, not
# their count, or one drop turns every later message into a size error (20 %:
# check sends 46 single-packet messages, 0.8^46 that none is dropped).
loss "loss-uc-check-20pct" 20 check --max-size 1K --cm raw --loss-timeout-ms 1000 --service uc

# dup NAME PERCENT EXPERIMENT OPTIONS...: netem on veth0 (client -> server)
# delays every packet 5 ms +- 5 ms, which reorders them (and the control
# channel's), and duplicates PERCENT %: stragglers arrive after the client's
# end-of-point message, duplicates before them. Nothing is dropped, so nothing
# may be counted lost (a duplicate must not stand in for a straggler). The
# report asks for at least one duplicate counted, so PERCENT is sized to the
# message count: check sends 45 messages, and at 5 % none was duplicated in
# about one run in ten (0.95^45); at 25 % that is 0.75^45, below 1e-5.
dup() {
  selected "$1" || return 0
  local name=$1 pct=$2
  shift 2
  tc qdisc add dev "${FM_RDMA_NETDEV0:-veth0}" root netem delay 5ms 5ms duplicate "$pct%"
  fm "$name" 0 "$@"
  tc qdisc del dev "${FM_RDMA_NETDEV0:-veth0}" root
}
dup "dup-ud-oneway" 5 oneway "${LOSS[@]}" --bursts 4 --burst-size 100 --pause-us 1000 --service ud
dup "dup-ud-check" 25 check --max-size 1K --cm raw --loss-timeout-ms 1000 --service ud

run_comparison

# suite NAME FILE [host]: a suite (a path under the repository, or absolute)
# through `fabmeter suite --server`, every point a session of one serve on
# rxe1, then `fabmeter report` on it; with "host" the report is left to
# rdma/test-rdma.sh, which draws it on the host (matplotlib under TCG takes
# minutes).
suite() {
  selected "$1" || return 0
  local name=$1 file=$2 where=${3:-guest} f=$OUT/$1 spid
  PORT=$((PORT + 1))
  echo "fabmeter suite $file" >"$f.cmd"
  echo 0 >"$f.expect"
  timeout 900 "$ENGINE" serve --bind "$SERVER" --port "$PORT" --cpu 1 >"$f.server.out" 2>"$f.server.err" &
  spid=$!
  listening "$f.server.out" $spid
  local t0=$EPOCHREALTIME
  [[ $file == /* ]] || file=$REPO/$file
  timeout 900 "${PY[@]}" -m fabmeter suite "$file" --server "$SERVER:$PORT" --cpus 0 --out "$f.results" \
    >"$f.out" 2>"$f.err"
  echo $? >"$f.rc"
  if [[ $where == guest ]]; then
    timeout 300 "${PY[@]}" -m fabmeter report "$f.results" >>"$f.err" 2>&1
    echo $? >"$f.report.rc"
  fi
  kill -INT $spid 2>/dev/null
  wait $spid
  printf '%-58s rc=%-3s %5.1f s\n' "$name" "$(cat "$f.rc")" "$(echo "$EPOCHREALTIME $t0" | awk '{print $1 - $2}')"
}
# FM_RDMA_SUITES: suites/NAME.toml to run, space-separated; "none" runs none.
SUITES=${FM_RDMA_SUITES:-perftest-parity}
[[ $SUITES == none ]] && SUITES=
echo "== suites through fabmeter's Python CLI (${SUITES:-none})"
if [[ -z $SUITES ]]; then
  :
elif "${PY[@]}" -c 'import numpy, matplotlib' 2>"$OUT/_python_skipped"; then
  rm -f "$OUT/_python_skipped"
  for s in $SUITES; do
    if ((${FM_RDMA_CI:-0})); then  # CI: the suite's first point (rdma/narrow_suite.py), its report drawn on the host
      "${PY[@]}" "$REPO/rdma/narrow_suite.py" first "$REPO/suites/$s.toml" "$OUT/suite-$s.toml"
      suite "suite-$s" "$OUT/suite-$s.toml" host
    else
      suite "suite-$s" "suites/$s.toml"
    fi
  done
else
  echo "suites skipped: the host venv's packages do not import under the guest's $(python3 -V 2>&1)" |
    tee -a "$OUT/_python_skipped"
fi

# mesh NAME OPTIONS...: `fabmeter mesh` of two ranks, rank 0 on rxe0's address
# and rank 1 on rxe1's (each pair's client leaves by its own device), every
# pair over verbs; rank 0's JSON lines are the case's output.
mesh() {
  selected "$1" || return 0
  local name=$1 f=$OUT/$1 r1
  shift
  PORT=$((PORT + 1))
  echo "fabmeter mesh $*" >"$f.cmd"
  echo 0 >"$f.expect"
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$f.token"
  chmod 600 "$f.token"
  local args=(mesh --hosts "${FM_RDMA_ADDR0:-10.77.0.1},$SERVER" --mesh-port "$PORT" --token-file "$f.token" -t verbs "$@")
  timeout 300 "${PY[@]}" -m fabmeter "${args[@]}" --rank 1 >"$f.rank1.out" 2>"$f.rank1.err" &
  r1=$!
  timeout 300 "${PY[@]}" -m fabmeter "${args[@]}" --rank 0 --json >"$f.out" 2>"$f.err"
  echo $? >"$f.rc"
  wait $r1
  echo $? >"$f.rank1.rc"
  printf '%-58s rc=%s\n' "$name" "$(cat "$f.rc")"
}
# fabric NAME OPTIONS...: `fabmeter lat --server --out` over verbs; run.json
# must name each end's rxe device, its port, MTU, link layer and GID.
fabric() {
  selected "$1" || return 0
  local name=$1 f=$OUT/$1
  shift
  PORT=$((PORT + 1))
  echo "fabmeter fabric lat -t verbs $*" >"$f.cmd"
  echo 0 >"$f.expect"
  serve "$f"
  local spid=$SPID t0=$EPOCHREALTIME
  timeout 120 "${PY[@]}" -m fabmeter lat -t verbs --server "$SERVER:$PORT" --cpus 0 --timeout-ms 15000 "$@" \
    --out "$f.results" >"$f.out" 2>"$f.err"
  echo $? >"$f.rc"
  reap $spid >"$f.server.rc"
  printf '%-58s rc=%-3s %5.1f s\n' "$name" "$(cat "$f.rc")" "$(echo "$EPOCHREALTIME $t0" | awk '{print $1 - $2}')"
}
# hop NAME ONWARD OPTIONS...: `fabmeter lat -t verbs --via-hop`: fabmeter-engine
# forward on rxe0's address (CPU 2, event mode) forwards each round trip to a
# serve on rxe1 over ONWARD (verbs: the thesis' super-node between two verbs
# nodes; shm: verbs in, shared memory out), beside the direct path in the same
# run; run.json's "hop" must hold both figures and their difference.
hop() {
  selected "$1" || return 0
  local name=$1 onward=$2 f=$OUT/$1 spid hpid hport
  shift 2
  PORT=$((PORT + 1))
  hport=$((PORT + 1000))
  echo "fabmeter hop lat -t verbs --to-transport $onward $*" >"$f.cmd"
  echo 0 >"$f.expect"
  # Two sessions (direct, then through the hop): no --once.
  timeout 300 "$ENGINE" serve --bind "$SERVER" --port "$PORT" --cpu 1 >"$f.server.out" 2>"$f.server.err" &
  spid=$!
  timeout 300 "$ENGINE" forward --bind "${FM_RDMA_ADDR0:-10.77.0.1}" --port "$hport" --to "$SERVER:$PORT" \
    --to-transport "$onward" --cpu 2 --poll event --once >"$f.hop.out" 2>"$f.hop.err" &
  hpid=$!
  listening "$f.server.out" $spid && listening "$f.hop.out" $hpid
  local t0=$EPOCHREALTIME
  timeout 240 "${PY[@]}" -m fabmeter lat -t verbs --server "$SERVER:$PORT" --via-hop "${FM_RDMA_ADDR0:-10.77.0.1}:$hport" \
    --hop-rounds 1 --cpus 0 --timeout-ms 15000 "$@" --out "$f.results" >"$f.out" 2>"$f.err"
  echo $? >"$f.rc"
  reap $hpid >"$f.hop.rc"
  kill -INT $spid 2>/dev/null
  reap $spid >"$f.server.rc"
  printf '%-58s rc=%-3s %5.1f s\n' "$name" "$(cat "$f.rc")" "$(echo "$EPOCHREALTIME $t0" | awk '{print $1 - $2}')"
}
# The thesis' node-type benchmark over verbs: suites/thesis-stream.toml's verbs
# rows (RC, UC, UD; every rate x values point, inline 188, S = D_SQ/2), read
# from the suite (rdma/suite_rows.py), at FM_STREAM_COUNT samples a point
# (test-rdma.sh sets it: the suite's own 250 000 unless told; CI 20). Each
# case may take 120 s beyond twice its messages' planned time.
STREAM_COUNT=${FM_STREAM_COUNT:-suite}
[[ $STREAM_COUNT == suite ]] && STREAM_COUNT=
if [[ ! -f $OUT/_python_skipped ]]; then
  echo "== verbs: thesis-stream's verbs rows (${STREAM_COUNT:-250000, as the suite has it,} samples a point)"
  # The rows read are kept in _stream_rows (the host's report wants them there).
  "${PY[@]}" "$REPO/rdma/suite_rows.py" "$REPO/suites/thesis-stream.toml" verbs $STREAM_COUNT \
    >"$OUT/_stream_rows" 2>"$OUT/_stream_rows.err"
  while IFS=$'\t' read -r pid seconds args; do
    CASE_TIMEOUT=$((120 + 2 * seconds)) eval "fm \"suite-\$pid\" 0 $args"
  done <"$OUT/_stream_rows"
fi
if [[ ! -f $OUT/_python_skipped ]]; then
  echo "== the fabric in run.json (each end's rxe device)"
  fabric "fabric-rc-rdma_cm" --service rc -n 200 --warmup 20
  echo "== the forwarding hop over verbs (the thesis' super-node: verbs in; verbs or shared memory onward)"
  hop "hop-verbs-to-verbs" verbs --service rc -s 32 -n 200 --warmup 20 --poll event
  hop "hop-verbs-to-shm" shm --service rc -s 32 -n 200 --warmup 20 --poll event
  echo "== fabmeter mesh over verbs (two ranks, one per rxe device)"
  mesh "mesh-verbs-rc-oneway" --service rc --bursts 2 --burst-size 100 --warmup 20 -s 32
  mesh "mesh-verbs-uc-bw-chaotic" --service uc --experiment bw -n 2000 --warmup 100 -s 1K --schedule chaotic
  echo "== suites/ramcloud-load.toml's verbs rows: every pool size, offered rate past capacity, closed-loop clients"
  # In CI's mode (FM_RDMA_CI=1) fewer points, shorter (rdma/narrow_suite.py);
  # else the suite's own. The host checks each row's run.json and the
  # report's figures (drawn on the host).
  "${PY[@]}" "$REPO/rdma/narrow_suite.py" verbs "$REPO/suites/ramcloud-load.toml" "$OUT/ramcloud-load-verbs.toml" \
    "${FM_RDMA_CI:-0}"
  suite "ramcloud-load-verbs" "$OUT/ramcloud-load-verbs.toml" host
fi

# through_serve COMMAND NAME OPTIONS...: `fabmeter COMMAND --server` over
# verbs (peers, doctor): each tool's server side on rxe1's address, started
# by a standing serve (token, CPU 1) from its allow-list; the clients on rxe0
# (CPU 0; the 1 of --cpus 0,1 is the serve's own --cpu). NAME.left lists any
# tool process still running afterwards (there must be none).
through_serve() {
  selected "$2" || return 0
  local command=$1 name=$2 f=$OUT/$2 spid
  shift 2
  PORT=$((PORT + 1))
  echo "fabmeter $command --server $*" >"$f.cmd"
  echo 0 >"$f.expect"
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$f.token"
  chmod 600 "$f.token"
  timeout 600 "$ENGINE" serve --bind "$SERVER" --port "$PORT" --cpu 1 --token-file "$f.token" \
    >"$f.server.out" 2>"$f.server.err" &
  spid=$!
  listening "$f.server.out" $spid
  local t0=$EPOCHREALTIME
  local gid=(--gid-index "${FM_RDMA_GID_INDEX:-1}")
  [[ " $* " == *" --cm rdma_cm "* ]] && gid=()   # rdma_cm takes the GID of the address
  timeout 600 "${PY[@]}" -m fabmeter "$command" --server "$SERVER:$PORT" --token-file "$f.token" \
    --device "${FM_RDMA_DEV0:-rxe0}" --server-device "${FM_RDMA_DEV1:-rxe1}" "${gid[@]}" \
    --cpus 0,1 --json "$@" >"$f.out" 2>"$f.err"
  echo $? >"$f.rc"
  pgrep -a -f '^(/usr/(local/)?bin/)?(ib_(send|write|read|atomic)_|qperf)' >"$f.left"
  kill -TERM $spid 2>/dev/null
  reap $spid >"$f.server.rc"
  printf '%-58s rc=%-3s %5.1f s\n' "$name" "$(cat "$f.rc")" "$(echo "$EPOCHREALTIME $t0" | awk '{print $1 - $2}')"
}
# peers NAME OPTIONS...: `fabmeter peers --server` over verbs (through_serve), its results in NAME.results.
peers() {
  local name=$1
  shift
  through_serve peers "$name" --transports verbs --out "$OUT/$name.results" "$@"
}
if [[ ! -f $OUT/_python_skipped ]]; then
  echo "== peer tools' server sides through the serve (perftest, qperf RDMA)"
  # An image built before qperf was among its packages: the host's copy (the
  # same Debian release), when the share carries one.
  if ! command -v qperf >/dev/null && [[ -x $REPO/build/guest-tools/qperf ]]; then
    install -o root -m 755 "$REPO/build/guest-tools/qperf" /usr/local/bin/qperf
  fi
  # qperf's UC and UD tests take GID 0, link-local here: they cannot run (python/fabmeter/peers/qperf.py).
  if ((${FM_RDMA_CI:-0})); then
    # CI: a latency and a bandwidth test of each tool. 4 KiB for bw: 64 KiB
    # writes under TCG go at ~50/s, and ib_write_bw's 1 s window (its margins
    # left out) measured none on a loaded machine.
    peers "peers-server-rdma" --tools perftest,qperf -n 200 --duration 2 --bw-size 4K \
      --tests ib_send_lat,ib_write_bw,rc_lat,rc_bw
  else
    tests=ib_send_lat,ib_send_bw,ib_write_lat,ib_write_bw,ib_read_lat,ib_read_bw,ib_atomic_lat,ib_atomic_bw
    tests+=,rc_lat,rc_bw,rc_rdma_read_lat,rc_rdma_write_lat,rc_rdma_read_bw,rc_rdma_write_bw
    peers "peers-server-rdma" --tools perftest,qperf -n 1000 --duration 2 --tests "$tests"
    peers "peers-server-rdma-rc-bidir" --tools perftest -n 1000 --duration 2 --bw-size 4K --bidir \
      --tests ib_send_bw,ib_write_bw,ib_read_bw
  fi
  # perftest with fabmeter's verbs knobs (the paper's UC and UD rows, inline, MTU, -b).
  peers "peers-server-rdma-ud" --tools perftest -n 200 --duration 2 --bw-size 512 --service ud --bidir \
    --tests ib_send_lat,ib_send_bw
  peers "peers-server-rdma-uc-inline" --tools perftest -n 200 --service uc --inline 64 --mtu 1024 \
    --tests ib_send_lat,ib_write_lat
  # perftest -R: its QPs connected by rdma_cm (the serve sees its listener with iproute2's rdma); UD outside CI.
  peers "peers-server-rdma-cm" --tools perftest -n 200 --duration 2 --bw-size 4K --cm rdma_cm \
    --tests ib_send_lat,ib_send_bw
  not_ci && peers "peers-server-rdma-cm-ud" --tools perftest -n 200 --duration 2 --bw-size 512 --service ud \
    --cm rdma_cm --tests ib_send_lat,ib_send_bw
fi

# pytest_case NAME ARGS...: tests of the Python CLI that need the guest (elsewhere they skip).
pytest_case() {
  selected "$1" || return 0
  local name=$1 f=$OUT/$1 t0=$EPOCHREALTIME
  shift
  echo "pytest $*" >"$f.cmd"
  (cd "$REPO" && timeout 900 "${PY[@]}" -m pytest -q -p no:cacheprovider "$@") >"$f.out" 2>&1
  echo $? >"$f.rc"
  printf '%-58s rc=%-3s %5.1f s\n' "$name" "$(cat "$f.rc")" "$(echo "$EPOCHREALTIME $t0" | awk '{print $1 - $2}')"
}
if [[ ! -f $OUT/_python_skipped ]]; then
  echo "== fabmeter doctor: rxe's port, GID, RoCE version and MTUs at both ends; --parity against perftest"
  pytest_case "doctor-rxe" tests/test_doctor.py -k rxe
  # FM_DOCTOR_ROUNDS (rdma/test-rdma.sh: 5; none in CI's mode, where `peers` runs the same perftest path
  # through the serve and one round's verdict would be "cannot tell": ~2 min of CI saved).
  if ((${FM_DOCTOR_ROUNDS:-5} > 0)); then
    through_serve doctor "doctor-parity" --parity --rounds "${FM_DOCTOR_ROUNDS:-5}"
  fi
fi

echo "== setup: connection establishment and memory registration over verbs"
# Registrations from 4 KiB up to SETUP_MAX: 16 MiB in CI (FM_RDMA_CI=1;
# the guest has 2 GiB of RAM and the case stays within a few seconds of
# TCG), else 256 MiB; FM_SETUP_MAX_SIZE overrides both (at most 1G).
SETUP=(-n 10 --warmup 2)
SETUP_MAX=${FM_SETUP_MAX_SIZE:-$(((${FM_RDMA_CI:-0})) && echo 16M || echo 256M)}
fm "setup-rc-raw-all" 0 setup "${SETUP[@]}" --service rc --cm raw --what all -a --max-size "$SETUP_MAX"
fm "setup-rc-rdma_cm-connect" 0 setup "${SETUP[@]}" --service rc
fm "setup-ud-rdma_cm-connect" 0 setup "${SETUP[@]}" --service ud
# The guest reserves no huge pages: setup-rc-raw-all's huge-page figures are
# THP's. With 16 reserved (32 MiB), every size up to 16 MiB takes hugetlbfs
# pages (MAP_HUGETLB).
echo 16 >/proc/sys/vm/nr_hugepages
fm "setup-rc-raw-mr-hugetlb" 0 setup "${SETUP[@]}" --service rc --cm raw --what mr -a --max-size 16M
echo 0 >/proc/sys/vm/nr_hugepages
fm "refuse-setup-mr-above-1G" 2 setup --what mr -s 2G --service rc

echo "== libfabric verbs provider through fabmeter's ofi transport"
if "$ENGINE" options | grep -q '"ofi"'; then
  ofi "ofi-verbs-msg-setup" setup -t ofi --provider verbs --ep msg --what all -a --max-size "$SETUP_MAX" "${SETUP[@]}"
  ofi "ofi-verbs-msg-lat" lat -t ofi --provider verbs --ep msg -s 32 -n 200 --warmup 50
  ofi "ofi-verbs-rdm-lat" lat -t ofi --provider verbs --ep rdm -s 32 -n 200 --warmup 50
  ofi "ofi-verbs-msg-bw" bw -t ofi --provider verbs --ep msg -s 1K -n 2000 --warmup 100
  ofi "ofi-verbs-msg-load" load -t ofi --provider verbs --ep msg --rate 2000 --count 400 --warmup 50
  ofi "ofi-verbs-msg-oneway-tsend" oneway -t ofi --provider verbs --ep msg -s 32 --bursts 4 --burst-size 250 --gap-us 100 \
    --warmup 50
else
  echo "skipped: this engine has no ofi transport (libfabric not found at build time)" | tee "$OUT/_ofi_skipped"
fi
echo "== verbs: --ops (several ops at once, a QP and a thread per op; the host checks each op's rate and their sum)"
# dapltest's concurrent SR + RR + RW (-t 2: --flows 2). Fewer messages in CI's mode (FM_RDMA_CI=1).
OPS_N=$((${FM_RDMA_CI:-0} ? 500 : 5000))
fm "bw-rc-ops-send-read-write" 0 bw -s 1K -n "$OPS_N" --warmup 100 --service rc --ops send,read,write
fm "bw-rc-ops-send-read-write-flows2" 0 bw -s 1K -n "$OPS_N" --warmup 100 --service rc --ops send,read,write --flows 2
fm "bw-uc-ops-send-write-imm" 0 bw -s 1K -n "$OPS_N" --warmup 100 --service uc --ops send,write-imm
fm "refuse-ops-ud-read" 2 bw -n 10 --service ud --ops send,read
fm "refuse-ops-uc-read" 2 bw -n 10 --service uc --ops send,read
fm "refuse-ops-lat" 2 lat -n 10 --service rc --ops send,read
if ! selected fault-; then   # the faults run whole or not at all (the report counts their 12 cases)
  echo "$EPOCHREALTIME" >"$OUT/_finished"
  exit 0
fi
. "$(dirname "$0")/guest-faults.sh"   # kill -9 / SIGSTOP either end in connect or point
echo "$EPOCHREALTIME" >"$OUT/_finished"
