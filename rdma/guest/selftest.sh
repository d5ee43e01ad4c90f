#!/usr/bin/env bash
# Smoke test of the Soft-RoCE guest; runs INSIDE the guest:
#
#   rdma/guest/run.sh --share "$PWD/rdma/guest" -- ./selftest.sh   (from the repo root)
#
# Each check is a server on rxe1 / FM_RDMA_ADDR1 and a client on rxe0 /
# FM_RDMA_ADDR0 (or the reverse where the tool picks its device from the
# address), so traffic really crosses the veth pair between the two rxe
# devices. Prints one line per check with the latency seen, then
# "N passed, N failed"; exits non-zero if any check failed.
set -euo pipefail

[[ ${FM_IN_GUEST:-} == 1 ]] || { echo "selftest.sh: run me inside the guest (see run.sh)" >&2; exit 2; }
D0=$FM_RDMA_DEV0 D1=$FM_RDMA_DEV1 A0=$FM_RDMA_ADDR0 A1=$FM_RDMA_ADDR1
T=${SELFTEST_TIMEOUT:-60}   # seconds per side of a check
N=${SELFTEST_ITERS:-1000}   # perftest iterations
LOGDIR=$(mktemp -d)
pass=0 fail=0

# pair NAME 'server cmd' 'client cmd' [awk program summarising client output]
pair() {
  local name=$1 srv=$2 cli=$3 summ=${4:-} spid src=0 crc=0
  timeout "$T" bash -c "$srv" >"$LOGDIR/$name.srv" 2>&1 & spid=$!
  sleep 1   # let the server listen
  timeout "$T" bash -c "$cli" >"$LOGDIR/$name.cli" 2>&1 || crc=$?
  wait "$spid" || src=$?
  if ((crc == 0 && src == 0)); then
    pass=$((pass + 1))
    printf 'PASS %-18s %s\n' "$name" "$( [[ -n $summ ]] && awk "$summ" "$LOGDIR/$name.cli")"
  else
    fail=$((fail + 1))
    printf 'FAIL %-18s client rc=%s server rc=%s\n' "$name" "$crc" "$src"
    sed 's/^/   client| /' "$LOGDIR/$name.cli" | tail -n 15
    sed 's/^/   server| /' "$LOGDIR/$name.srv" | tail -n 15
  fi
}
single() {  # single NAME 'cmd' 'grep -E pattern that must match'
  local name=$1 out
  if out=$(timeout "$T" bash -c "$2" 2>&1) && grep -qE "$3" <<<"$out"; then
    pass=$((pass + 1)); printf 'PASS %-18s\n' "$name"
  else
    fail=$((fail + 1)); printf 'FAIL %-18s\n' "$name"; sed 's/^/   | /' <<<"$out" | tail -n 15
  fi
}

# perftest latency line: "#bytes #iter t_min t_max t_typical t_avg ..."
LAT='/^[ \t]*[0-9]+[ \t]+[0-9]+[ \t]+[0-9.]+[ \t]+[0-9.]+[ \t]+[0-9.]+/ {l=$0} END {split(l,f," "); printf "min %s us, typical %s us, avg %s us, p99 %s us", f[3], f[5], f[6], f[8]}'
# perftest bandwidth line: "#bytes #iter BW_peak BW_avg MsgRate"
BW='/^[ \t]*[0-9]+[ \t]+[0-9]+[ \t]+[0-9.]+[ \t]+[0-9.]+[ \t]+[0-9.]+[ \t]*$/ {l=$0} END {split(l,f," "); printf "%s B msgs: avg %s MB/s, %s Mpps", f[1], f[4], f[5]}'
# fi_pingpong: "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec"
FIPP='/^[0-9]+[kmg]? / {l=$0} END {split(l,f," "); printf "%s B: %s us/xfer", f[1], f[7]}'

single ibv_devices 'ibv_devices' "$D0.*|$D1"
single ibv_devinfo "ibv_devinfo -d $D0 && ibv_devinfo -d $D1" 'PORT_ACTIVE'
pair send_lat_RC  "ib_send_lat -d $D1 -n $N"       "ib_send_lat -d $D0 -n $N $A1"       "$LAT"
pair send_lat_UC  "ib_send_lat -d $D1 -n $N -c UC" "ib_send_lat -d $D0 -n $N -c UC $A1" "$LAT"
pair send_lat_UD  "ib_send_lat -d $D1 -n $N -c UD" "ib_send_lat -d $D0 -n $N -c UD $A1" "$LAT"
pair send_lat_RC_cm "ib_send_lat -d $D1 -n $N -R"  "ib_send_lat -d $D0 -n $N -R $A1"    "$LAT"
pair write_lat_RC "ib_write_lat -d $D1 -n $N"      "ib_write_lat -d $D0 -n $N $A1"      "$LAT"
pair write_lat_UC "ib_write_lat -d $D1 -n $N -c UC" "ib_write_lat -d $D0 -n $N -c UC $A1" "$LAT"
pair read_lat_RC  "ib_read_lat -d $D1 -n $N"       "ib_read_lat -d $D0 -n $N $A1"       "$LAT"
pair write_bw_RC  "ib_write_bw -d $D1 -n $N -s 65536" "ib_write_bw -d $D0 -n $N -s 65536 $A1" "$BW"
pair rping        "rping -s -a $A1 -C 10"          "rping -c -a $A1 -I $A0 -C 10 -v"    '/ping data/ {n++} END {printf "%d pings", n}'
pair ucmatose     "ucmatose -b $A1"                "ucmatose -s $A1 -b $A0"
pair rdma_client  "rdma_server -s $A1"             "rdma_client -s $A1"
single fi_info_verbs "fi_info -p verbs -t FI_EP_MSG" "domain: $D0"
single fi_info_rxm "fi_info -p 'verbs;ofi_rxm' -t FI_EP_RDM" 'FI_PROTO_RXM'
# The verbs MSG server binds the address the hostname resolves to (A0, see
# /etc/hosts), so here the server is on rxe0 and the client on rxe1.
pair fi_pingpong_msg "fi_pingpong -p verbs -e msg -I $N -S 64" "fi_pingpong -p verbs -e msg -I $N -S 64 $A0" "$FIPP"
pair fi_pingpong_rdm "fi_pingpong -p 'verbs;ofi_rxm' -e rdm -I $N -S 64" "fi_pingpong -p 'verbs;ofi_rxm' -e rdm -I $N -S 64 $A0" "$FIPP"
pair fi_pingpong_dgram "fi_pingpong -p verbs -e dgram -d $D1-dgram -I $N -S 64" "fi_pingpong -p verbs -e dgram -d $D0-dgram -I $N -S 64 $A1" "$FIPP"

for d in "$D0" "$D1"; do
  printf 'counters %s: sent_pkts=%s rcvd_pkts=%s\n' "$d" \
    "$(cat /sys/class/infiniband/"$d"/ports/1/hw_counters/sent_pkts)" \
    "$(cat /sys/class/infiniband/"$d"/ports/1/hw_counters/rcvd_pkts)"
done
rm -rf "$LOGDIR"
echo "$pass passed, $fail failed"
((fail == 0))
