# Sourced by rdma/test-rdma-guest.sh INSIDE the Soft-RoCE guest, after its
# other cases: the "verbs: faults" section. It uses the driver's ENGINE, OUT,
# SERVER, PORT, TIMEOUT, cms_for, listening and reap;
# rdma/guest_report/faults.py judges what it leaves.
echo "== verbs: faults (kill -9 / SIGSTOP the client or the server's session in connect or point)"
# One non-once server for the section; per service every victim x action
# once, with phase, cm, experiment and delay (0-300 ms after the phase mark)
# drawn at random (SEED, from FM_SEED on the host, replays). Each case leaves NAME.fault
# (key=value: whether it struck, the survivor's exit / session end and how
# long it took, what was left, the next normal client's exit), NAME.err (the
# client's stderr), NAME.server.err (the server's stderr during the case) and
# NAME.next.*; rdma/guest_report/faults.py judges them.
FAULT_SEED=${3:-$((10#${EPOCHREALTIME/./} % 1000000))}
RANDOM=$FAULT_SEED
TRACE=/tmp/fm-phases
FPORT=$((PORT + 100))
FWAIT=20  # how long a survivor is watched: far above the report's bound, so a late end is still timed

# Seconds since $1.
since() { echo "$EPOCHREALTIME $1" | awk '{printf "%.2f", $1 - $2}'; }
# PID of the first "ROLE PHASE PID" mark in the trace, if any.
mark() {
  local r ph pid
  while read -r r ph pid; do
    [[ $r == "$1" && $ph == "$2" ]] && { echo "$pid"; return; }
  done <"$TRACE"
}
# Alive and not a zombie.
alive() { local st; { read -r st <"/proc/$1/stat"; } 2>/dev/null && [[ $st != *") Z "* ]]; }
kids() { cat "/proc/$FSPID/task/$FSPID/children" 2>/dev/null; }

# fault NAME SERVICE VICTIM ACTION PHASE
fault() {
  local name=$1 svc=$2 victim=$3 action=$4 phase=$5 f=$OUT/$1
  local cms=($(cms_for "$svc")) cm exp delay cpid vpid="" session t0 t_fault took="" rc="" ended="" struck=1 i off
  cm=${cms[RANDOM % ${#cms[@]}]}
  exp=lat
  ((RANDOM % 2)) && exp=bw  # (no $RANDOM in a subshell: it would not advance the seeded sequence)
  delay=$((RANDOM % 301))
  : >"$TRACE"
  off=$(wc -c <"$FSERR")
  t0=$EPOCHREALTIME
  FABMETER_TRACE_PHASES=$TRACE "$ENGINE" run "$exp" --server "$SERVER:$FPORT" --cpu 0 -t verbs "${TIMEOUT[@]}" \
    -s 64 --duration 2 --warmup 100 --service "$svc" --cm "$cm" >"$f.out" 2>"$f.err" &
  cpid=$!
  for ((i = 0; i < 600; i++)); do  # the mark: within 60 s even on a starved guest
    vpid=$(mark "$victim" "$phase")
    [[ -n $vpid ]] && break
    kill -0 $cpid 2>/dev/null || break
    sleep 0.1
  done
  session=$(mark server hello)
  if [[ -z $vpid ]]; then
    struck=0
    echo "the $victim never reached $phase" >"$f.nostrike"
  else
    sleep "$((delay / 1000)).$(printf %03d $((delay % 1000)))"
    if ! kill -0 $cpid 2>/dev/null || ! alive "$vpid"; then
      struck=0  # the run ended before the fault landed
    else
      kill -s "$([[ $action == kill ]] && echo KILL || echo STOP)" "$vpid"
      t_fault=$EPOCHREALTIME
      if [[ $victim == server ]]; then
        # The client notices (control channel closed, or no heartbeat) and ends.
        for ((i = 0; i < FWAIT * 20; i++)); do kill -0 $cpid 2>/dev/null || break; sleep 0.05; done
        took=$(since "$t_fault")
        kill -0 $cpid 2>/dev/null && kill -KILL $cpid
        wait $cpid
        rc=$?
        ((rc == 0)) && struck=0  # it had finished before the fault landed
      else
        # The server's session ends by itself; the listener stays.
        for ((i = 0; i < FWAIT * 20; i++)); do alive "$session" || break; sleep 0.05; done
        took=$(since "$t_fault")
        [[ -n $session ]] && { alive "$session" && ended=0 || ended=1; }
      fi
    fi
  fi
  # Whatever is left of the run: the frozen victim, the client.
  [[ $action == stop && -n $vpid ]] && kill -KILL "$vpid" 2>/dev/null
  kill -0 $cpid 2>/dev/null && kill -KILL $cpid
  wait $cpid 2>/dev/null
  local w=$?
  [[ -z $rc ]] && rc=$w
  # No session left in the server (it reaps and cleans after them).
  for ((i = 0; i < 50; i++)); do [[ -z $(kids) ]] && break; sleep 0.1; done
  local left serve_alive=0
  left=$(kids)
  kill -0 $FSPID 2>/dev/null && serve_alive=1
  tail -c +$((off + 1)) "$FSERR" >"$f.server.err"
  # And the server serves the next client.
  timeout 120 "$ENGINE" run lat --server "$SERVER:$FPORT" --cpu 0 -t verbs "${TIMEOUT[@]}" -s 32 -n 200 --warmup 50 \
    --service "$svc" --cm "$cm" >"$f.next.out" 2>"$f.next.err"
  local next_rc=$?
  printf '%s\n' "seed=$FAULT_SEED" "service=$svc" "cm=$cm" "experiment=$exp" "victim=$victim" "action=$action" \
    "phase=$phase" "delay_ms=$delay" "struck=$struck" "client_rc=$rc" "session_ended=$ended" "took_s=$took" \
    "sessions_left=$(echo $left)" "serve_alive=$serve_alive" "next_rc=$next_rc" "case_s=$(since "$t0")" >"$f.fault"
  printf '%-58s struck=%s rc=%-3s took=%5s s next=%s\n' "$name ($exp $cm $phase +${delay}ms)" "$struck" "$rc" \
    "${took:--}" "$next_rc"
}

FSERR=$OUT/faults.server.err
FABMETER_TRACE_PHASES=$TRACE "$ENGINE" serve --bind "$SERVER" --port "$FPORT" --cpu 1 \
  >"$OUT/faults.server.out" 2>"$FSERR" &
FSPID=$!
listening "$OUT/faults.server.out" $FSPID
printf '%s\n' "seed=$FAULT_SEED" "cases=12" >"$OUT/_faults"
for svc in rc uc ud; do
  for victim in client server; do
    for action in kill stop; do
      phases=(connect point)
      fault "fault-$svc-$victim-$action" "$svc" "$victim" "$action" "${phases[RANDOM % 2]}"
    done
  done
done
kill -TERM "$FSPID" 2>/dev/null
reap "$FSPID" >"$OUT/faults.server.rc"
# No engine left anywhere in the guest (sessions, clients, frozen victims).
echo "engines_left=$(pgrep -x fabmeter-engine | tr '\n' ' ')" >>"$OUT/_faults"
