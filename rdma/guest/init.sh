#!/bin/bash
# /init (PID 1) of the fabmeter Soft-RoCE guest; built into the initramfs by
# build.sh. Mounts the basics, loads the RDMA modules, wires two rxe devices
# over a veth pair, mounts the host shares, runs one command, prints an end
# marker with its exit code and powers the VM off.
#
# Kernel command line parameters read here:
#   fm.ctl=1        mount 9p tag "fmctl" (run.sh's control dir) at /run/fmctl;
#                   it holds: cmd (shell script to run), share (path of the
#                   host dir shared as tag "fmshare", mounted at that same
#                   path), cwd (directory to start the command in); the exit
#                   code is written back to rc.
#   fm.cmd=BASE64   command line to run when there is no control dir.
#   fm.shell=1      no command given: run an interactive shell on the console.
#   fm.debug=1      trace this script (set -x with timestamps).
set -uo pipefail   # no -e: PID 1 must always reach the end marker and poweroff

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=${TERM:-dumb} LANG=C.UTF-8

BEGIN_MARK='=====FMGUEST-BEGIN====='
END_MARK='=====FMGUEST-END rc='

msg() { echo "[fmguest] $*"; }

poweroff_now() {
  sync
  echo o >/proc/sysrq-trigger
  sleep 30   # poweroff is asynchronous; never let PID 1 exit (that panics)
  exit 1
}

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs shm /dev/shm
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
echo 1 >/proc/sys/kernel/sysrq
exec </dev/null          # nothing types on ttyS0; never block on stdin
hostname "$(cat /etc/hostname)"
ip link set lo up
ulimit -l unlimited      # verbs memory registration pins pages

cmdline=$(cat /proc/cmdline)
param() { local a; for a in $cmdline; do [[ $a == "$1="* ]] && { echo "${a#*=}"; return 0; }; done; return 1; }
# fm.debug=1: trace /init with timestamps (to see where boot time goes).
[[ $(param fm.debug) == 1 ]] && { PS4='+ $EPOCHREALTIME '; set -x; }

# --- modules -------------------------------------------------------------
# One modprobe call: every process start costs ~0.1 s under TCG.
modprobe -a configfs virtio_pci 9pnet_virtio 9p veth crc32_pclmul crc32_generic \
  ib_core ib_uverbs ib_umad ib_cm iw_cm rdma_cm rdma_ucm rdma_rxe ||
  msg "warning: some modules failed to load"
mount -t configfs configfs /sys/kernel/config 2>/dev/null

# --- RDMA wiring ------------------------------------------------------------
# One network namespace, veth pair veth0 (10.77.0.1) <-> veth1 (10.77.0.2),
# rxe0 on veth0 and rxe1 on veth1: pair 0 of rxe-pair.sh, which says how.
source /rxe-pair.sh
setup_rdma() {
  # Accept packets whose source is a local address (they are, here) and no
  # reverse-path filter; "all" is OR-ed / max-ed with each device's value.
  sysctl -qw net.ipv4.conf.all.accept_local=1 net.ipv4.conf.all.rp_filter=0 \
             net.ipv4.conf.default.rp_filter=0 || return 1
  rxe_pair 0 || return 1
  # The default local rule, moved behind the pairs' (rxe-pair.sh).
  ip -batch - <<EOF || return 1
rule add pref 50 lookup local
rule del pref 0 lookup local
EOF
}
if setup_rdma; then
  export FM_RDMA_OK=1
else
  export FM_RDMA_OK=0
  msg "warning: RDMA setup failed"
fi
export FM_RDMA_DEV0=$(rxe_dev 0 0) FM_RDMA_DEV1=$(rxe_dev 0 1) FM_RDMA_ADDR0=$(rxe_addr 0 0) FM_RDMA_ADDR1=$(rxe_addr 0 1)
export FM_RDMA_NETDEV0=veth0 FM_RDMA_NETDEV1=veth1
export FM_RDMA_NETNS=""   # both ends live in the initial namespace
export FM_RDMA_GID_INDEX=1  # index 0 is the fe80:: default GID; 1 is the IPv4 one
export FI_UNIVERSE_SIZE=64  # libfabric verbs;ofi_rxm needs it for FI_EP_RDM
export FM_IN_GUEST=1

# --- host shares and the command -------------------------------------------
cmdfile=/tmp/fm-cmd
ctl=""
if [[ $(param fm.ctl) == 1 ]]; then
  mkdir -p /run/fmctl
  if mount -t 9p -o trans=virtio,version=9p2000.L fmctl /run/fmctl; then
    ctl=/run/fmctl
  else
    msg "error: cannot mount control share"
  fi
fi
if [[ -n $ctl && -s $ctl/share ]]; then
  share=$(cat "$ctl/share")
  mkdir -p "$share"
  # cache=mmap: binaries built on the host run from here; no stale reads.
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=mmap fmshare "$share" ||
    msg "error: cannot mount host share at $share"
fi

cwd=/
if [[ -n $ctl && -f $ctl/cmd ]]; then
  cp "$ctl/cmd" "$cmdfile"
  [[ -s $ctl/cwd && -d $(cat "$ctl/cwd") ]] && cwd=$(cat "$ctl/cwd")
elif b64=$(param fm.cmd); then
  echo "$b64" | base64 -d >"$cmdfile"
elif [[ $(param fm.shell) == 1 ]]; then
  exec </dev/console
  echo 'exec setsid -w -c bash -i' >"$cmdfile"  # own session: job control works
else
  echo 'echo "no command given (fm.ctl / fm.cmd)"; exit 2' >"$cmdfile"
fi

echo "$BEGIN_MARK"
(cd "$cwd" && exec bash "$cmdfile")
rc=$?
sync
[[ -n $ctl ]] && echo "$rc" >"$ctl/rc"
echo "${END_MARK}${rc}====="
poweroff_now
