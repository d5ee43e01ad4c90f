#!/usr/bin/env bash
# Boot the Soft-RoCE guest under qemu (TCG), run one shell command line in it
# and exit with that command's exit code.
#
#   rdma/guest/run.sh [options] -- COMMAND...
#
# COMMAND's words are joined with spaces and run by bash in the guest (like
# ssh does), so `run.sh -- 'a & sleep 1; b'` works as written.
#
# Options:
#   --share DIR     share host DIR read-write (9p) at the same path in the
#                   guest; the command starts in $PWD if that is inside DIR,
#                   else in DIR
#   --timeout SEC   kill the VM after SEC seconds (default 600) -> exit 124
#   --guest DIR     guest image dir (default <repo>/build/rdma-guest)
#   --no-build      do not run build.sh first (it is cached, ~1 s when fresh)
#   --log FILE      keep the full console log in FILE
#   -v, --verbose   also stream the boot messages before the command starts
#   --plugin SPEC   load a TCG plugin, qemu's `-plugin SPEC` (rdma/tbcount.c)
#
# FM_QEMU_ACCEL (default tcg,thread=multi), FM_GUEST_SMP (2) and
# FM_GUEST_MEM (2048 MiB) change the machine.
#
# Exit status: COMMAND's, or 124 on timeout, 125 if the guest did not boot or
# never reported an exit code.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
GUEST=$REPO/build/rdma-guest
SHARE="" TIMEOUT=600 BUILD=1 LOG="" VERBOSE=0 PLUGIN=()

die() { echo "run.sh: $*" >&2; exit 125; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

while (($#)); do
  case $1 in
    --share) SHARE=${2:?}; shift 2 ;;
    --timeout) TIMEOUT=${2:?}; shift 2 ;;
    --guest) GUEST=${2:?}; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --log) LOG=${2:?}; shift 2 ;;
    --plugin) PLUGIN=(-plugin "${2:?}"); shift 2 ;;
    -v|--verbose) VERBOSE=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    *) echo "run.sh: unknown option $1" >&2; usage ;;
  esac
done
(($#)) || usage
[[ $TIMEOUT =~ ^[0-9]+$ ]] || die "--timeout wants seconds"

((BUILD)) && "$HERE/build.sh" "$GUEST" >&2
[[ -f $GUEST/vmlinuz && -f $GUEST/initramfs.cpio ]] || die "no guest image in $GUEST (run build.sh)"

# Control dir, shared as 9p tag fmctl: carries the command in, the exit
# code out (more robust than the kernel command line, which is capped at
# 2 KiB and word-split).
CTL=$(mktemp -d /tmp/fmguest-ctl.XXXXXX)
[[ -n $LOG ]] || LOG=$CTL/console.log
cleanup() { rm -rf "$CTL"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

printf '%s\n' "$*" >"$CTL/cmd"
virtfs() {  # qemu splits options on ',', a literal comma is written ',,'
  local p=${1//,/,,}
  echo "local,path=$p,mount_tag=$2,security_model=none,id=$2"
}
QEMU_ARGS=(-virtfs "$(virtfs "$CTL" fmctl)")
if [[ -n $SHARE ]]; then
  [[ -d $SHARE ]] || die "--share $SHARE: not a directory"
  SHARE=$(cd "$SHARE" && pwd -P)
  [[ $SHARE != / ]] || die "--share /: share a project directory, not the whole host"
  [[ $SHARE != *[[:space:]]* ]] || die "--share path must not contain whitespace"
  echo "$SHARE" >"$CTL/share"
  cwd=$(pwd -P)
  [[ $cwd == "$SHARE" || $cwd == "$SHARE"/* ]] || cwd=$SHARE
  echo "$cwd" >"$CTL/cwd"
  QEMU_ARGS+=(-virtfs "$(virtfs "$SHARE" fmshare)")
fi

# /dev/kvm may exist but cannot run a stock kernel on this kind of machine,
# so TCG it is (FM_QEMU_ACCEL=kvm to try otherwise).
QEMU=(qemu-system-x86_64 -accel "${FM_QEMU_ACCEL:-tcg,thread=multi}" -cpu max
      -smp "${FM_GUEST_SMP:-2}" -m "${FM_GUEST_MEM:-2048}"
      -nographic -nic none -no-reboot
      -kernel "$GUEST/vmlinuz" -initrd "$GUEST/initramfs.cpio"
      -append "console=ttyS0 panic=-1 quiet fm.ctl=1"
      "${QEMU_ARGS[@]}" "${PLUGIN[@]}")

# Stream the console: drop CRs and terminal escapes (SeaBIOS), show only the
# command's output unless --verbose, and report the end marker ourselves.
filter() {
  sed -u -e 's/\r$//' -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g' -e 's/\x1bc//g' | tee "$LOG" |
    awk -v v="$VERBOSE" '
      /^=====FMGUEST-BEGIN=====$/ { on = 1; fflush(); next }
      /^=====FMGUEST-END rc=/     { on = 0; fflush(); next }
      on || v { print; fflush() }'
}

start=$SECONDS
set +e
timeout -k 10 "$TIMEOUT" "${QEMU[@]}" </dev/null 2>&1 | filter
qrc=${PIPESTATUS[0]}
set -e
took=$((SECONDS - start))

if [[ -s $CTL/rc ]]; then
  rc=$(cat "$CTL/rc")
elif rc=$(grep -a -m1 -o '^=====FMGUEST-END rc=[0-9]*' "$LOG" 2>/dev/null); then
  rc=${rc##*=}
elif ((qrc == 124 || qrc == 137)); then
  echo "run.sh: guest timed out after ${TIMEOUT}s (console log tail follows)" >&2
  tail -n 20 "$LOG" >&2 || true
  exit 124
else
  echo "run.sh: guest ended (qemu rc=$qrc) without reporting an exit code; console log tail:" >&2
  tail -n 30 "$LOG" >&2 || true
  exit 125
fi
echo "run.sh: guest command exited with $rc (${took}s incl. boot)" >&2
exit "$rc"
