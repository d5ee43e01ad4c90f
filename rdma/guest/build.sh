#!/usr/bin/env bash
# Build a small qemu guest (Debian kernel + Debian bookworm initramfs) that runs
# Soft-RoCE (rdma_rxe), so real ibverbs / rdma_cm / libfabric-verbs programs and
# perftest can run on a machine without RDMA hardware.
#
#   rdma/guest/build.sh [OUTDIR]        (default: <repo>/build/rdma-guest)
#
# Produces OUTDIR/vmlinuz and OUTDIR/initramfs.cpio. Cached: the build is
# skipped when OUTDIR/stamp matches the hash of this script, init.sh, rxe-pair.sh, the
# package list, the kernel package version and the mirror. The debootstrap
# root filesystem and the unpacked kernel are cached separately under
# OUTDIR/work, so editing init.sh only repacks the cpio (a few seconds).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${1:-$REPO/build/rdma-guest}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$OUT/work

SUITE=bookworm
# Guest packages. The runtime libraries at the end are what fabmeter's own
# binaries (built on the Debian 12 host, run from the 9p share) link against;
# nftables (with nf_tables, nft_numgen below) drops packets for the loss cases.
PACKAGES=(
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest qperf
  libfabric-bin libfabric1 iproute2 kmod procps
  libstdc++6 libzmq5 libnng1 libnanomsg5
  nftables
  python3   # fabmeter's Python side (suites, report) with the host venv's packages: PYTHONPATH
)
# Kernel modules wanted in the guest; their dependencies are added from
# modules.dep. crc32 crypto drivers are requested by name (crypto_alloc_shash
# "crc32") by rdma_rxe, so no modules.dep edge pulls them in.
MODULES=(
  rdma_rxe ib_core ib_uverbs ib_umad ib_cm iw_cm rdma_cm rdma_ucm configfs
  veth dummy udp_tunnel ip6_udp_tunnel
  crc32_generic crc32_pclmul crc32c_generic crc32c_intel libcrc32c
  9p 9pnet 9pnet_virtio virtio virtio_ring virtio_pci netfs fscache
  nf_tables nft_numgen sch_netem
)

log() { printf '[rdma-guest build] %s\n' "$*" >&2; }

# Install host tools only when missing (the build machine is plain Debian 12).
ensure_host_tools() {
  local need=() pair
  for pair in qemu-system-x86_64:qemu-system-x86 debootstrap:debootstrap \
              cpio:cpio depmod:kmod dpkg-deb:dpkg xz:xz-utils zstd:zstd; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
  done
  # debootstrap validates the Release signature with this keyring.
  [[ -e /usr/share/keyrings/debian-archive-keyring.gpg ]] || need+=(debian-archive-keyring)
  ((${#need[@]})) || return 0
  log "installing host tools: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
}

# find_mirror: the Debian mirror this host is configured with.
source "$HERE/mirror.sh"

# The generic (not -cloud: that flavour lacks RDMA_RXE) kernel that
# linux-image-amd64 currently points at; KERNEL_PKG=... overrides.
find_kernel_pkg() {
  if [[ -n ${KERNEL_PKG:-} ]]; then echo "$KERNEL_PKG"; return; fi
  local pkg
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  if [[ -z $pkg ]]; then
    apt-get update -qq >/dev/null
    pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  fi
  [[ $pkg == linux-image-*-amd64 && $pkg != *cloud* && $pkg != *-rt-* ]] ||
    { log "cannot determine kernel package (got '$pkg')"; exit 1; }
  echo "$pkg"
}

build_rootfs() {
  local dst=$1 mirror=$2 tmp=$1.tmp
  rm -rf "$tmp"
  log "debootstrap $SUITE minbase from $mirror (about a minute on a fast mirror)"
  debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
    "$SUITE" "$tmp" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -30 "$WORK/debootstrap.log" >&2; log "debootstrap failed (log: $WORK/debootstrap.log)"; exit 1; }
  # Trim what a non-interactive guest never reads.
  rm -rf "$tmp"/usr/share/{doc,man,info,locale,lintian,linda,bug,bash-completion} \
         "$tmp"/var/cache/apt/* "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/debconf/*-old \
         "$tmp"/var/log/* "$tmp"/usr/lib/udev/hwdb.d "$tmp"/usr/lib/udev/hwdb.bin "$tmp"/etc/udev/hwdb.bin
  mkdir -p "$tmp"/usr/share/locale
  mv "$tmp" "$dst"
}

build_kernel() {
  local pkg=$1 dst=$2 tmp=$2.tmp
  rm -rf "$tmp"; mkdir -p "$tmp/deb"
  log "fetching $pkg"
  (cd "$tmp/deb" && apt-get download "$pkg" >/dev/null 2>&1) ||
    { apt-get update -qq >/dev/null; (cd "$tmp/deb" && apt-get download "$pkg" >/dev/null); }
  dpkg-deb -x "$tmp"/deb/*.deb "$tmp/x"
  local kver
  kver=$(basename "$(ls -d "$tmp"/x/lib/modules/*)")
  depmod -b "$tmp/x" "$kver"
  local mroot=$tmp/x/lib/modules/$kver
  # Closure of MODULES over modules.dep (paths relative to $mroot).
  local -A want=()
  local m path dep
  for m in "${MODULES[@]}"; do
    path=$(modinfo -b "$tmp/x" -k "$kver" -n "$m" 2>/dev/null) ||
      { log "module $m not found in $pkg"; exit 1; }
    [[ $path == /* ]] || continue   # "(builtin)"
    path=${path#"$mroot"/}
    want[$path]=1
    for dep in $(awk -F': ' -v p="$path" '$1==p {print $2}' "$mroot/modules.dep"); do
      want[$dep]=1
    done
  done
  mkdir -p "$tmp/out/lib/modules/$kver"
  cp "$tmp"/x/boot/vmlinuz-* "$tmp/out/vmlinuz"
  cp "$mroot"/modules.{order,builtin,builtin.modinfo} "$tmp/out/lib/modules/$kver/"
  # Debian's 6.1 modules are plain .ko; should a later kernel compress them,
  # store them decompressed so the guest's kmod needs no decompressor.
  local dst_path
  for path in "${!want[@]}"; do
    dst_path=$tmp/out/lib/modules/$kver/${path%.ko*}.ko
    mkdir -p "$(dirname "$dst_path")"
    case $path in
      *.ko.xz)  xz -dc "$mroot/$path" >"$dst_path" ;;
      *.ko.zst) zstd -qdc "$mroot/$path" >"$dst_path" ;;
      *.ko.gz)  gzip -dc "$mroot/$path" >"$dst_path" ;;
      *)        cp "$mroot/$path" "$dst_path" ;;
    esac
  done
  # Guest-side module index, so modprobe and the kernel's request_module work.
  depmod -b "$tmp/out" "$kver"
  echo "$kver" >"$tmp/out/kver"
  rm -rf "$dst"; mv "$tmp/out" "$dst"; rm -rf "$tmp"
  log "kernel $kver: ${#want[@]} modules"
}

main() {
  # run.sh calls this before every boot: serialise concurrent callers.
  exec 9>"$OUT/.lock"
  flock 9
  ensure_host_tools
  mkdir -p "$WORK"
  local mirror kpkg kpkgver
  mirror=$(find_mirror)
  kpkg=$(find_kernel_pkg)
  kpkgver=$(apt-cache policy "$kpkg" | awk '/Candidate:/ {print $2}')

  # Per-stage input hashes: the stage's own function text counts, so a change
  # to how a stage is built invalidates just that stage.
  local h_root h_kern h_all
  h_root=$(printf '%s\n' "$SUITE" "$mirror" "${PACKAGES[@]}" "$(declare -f build_rootfs)" | sha256sum | cut -c1-16)
  h_kern=$(printf '%s\n' "$kpkg" "$kpkgver" "${MODULES[@]}" "$(declare -f build_kernel)" | sha256sum | cut -c1-16)
  h_all=$(cat "$HERE/build.sh" "$HERE/init.sh" "$HERE/rxe-pair.sh" | sha256sum | cut -c1-16)
  h_all="$h_root-$h_kern-$h_all"

  if [[ -f $OUT/stamp && $(cat "$OUT/stamp") == "$h_all" && -f $OUT/vmlinuz && -f $OUT/initramfs.cpio ]]; then
    log "up to date ($OUT, $kpkg $kpkgver)"
    return 0
  fi
  rm -f "$OUT/stamp"

  if [[ ! -f $WORK/rootfs.stamp || $(cat "$WORK/rootfs.stamp") != "$h_root" ]]; then
    rm -f "$WORK/rootfs.stamp"; rm -rf "$WORK/rootfs"
    build_rootfs "$WORK/rootfs" "$mirror"
    echo "$h_root" >"$WORK/rootfs.stamp"
  fi
  if [[ ! -f $WORK/kernel.stamp || $(cat "$WORK/kernel.stamp") != "$h_kern" ]]; then
    rm -f "$WORK/kernel.stamp"
    build_kernel "$kpkg" "$WORK/kernel"
    echo "$h_kern" >"$WORK/kernel.stamp"
  fi

  # Assemble: rootfs + modules + /init + guest config, packed as one
  # uncompressed newc cpio (the kernel unpacks it fastest; ~0.5 s for 120 MB).
  log "assembling initramfs"
  local stage=$WORK/stage kver
  kver=$(cat "$WORK/kernel/kver")
  rm -rf "$stage"
  cp -a "$WORK/rootfs" "$stage"
  rm -rf "$stage/lib/modules" "$stage/usr/lib/modules"
  mkdir -p "$stage/usr/lib/modules"
  cp -a "$WORK/kernel/lib/modules/$kver" "$stage/usr/lib/modules/"
  install -m 0755 "$HERE/init.sh" "$stage/init"
  install -m 0644 "$HERE/rxe-pair.sh" "$stage/rxe-pair.sh"
  echo fmguest >"$stage/etc/hostname"
  # libfabric's verbs provider resolves the hostname; it must map to an
  # address on an rxe netdev (see init.sh for the wiring).
  cat >"$stage/etc/hosts" <<'EOF'
127.0.0.1	localhost
10.77.0.1	fmguest fmguest-rxe0
10.77.0.2	fmguest-rxe1
EOF
  mkdir -p "$stage"/{proc,sys,dev,tmp,run,mnt}
  (cd "$stage" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) >"$OUT/initramfs.cpio.tmp"
  mv "$OUT/initramfs.cpio.tmp" "$OUT/initramfs.cpio"
  cp "$WORK/kernel/vmlinuz" "$OUT/vmlinuz"
  rm -rf "$stage"
  echo "$kpkg $kpkgver ($kver)" >"$OUT/kernel-version"
  echo "$h_all" >"$OUT/stamp"
  log "done: $OUT/vmlinuz $OUT/initramfs.cpio ($(du -h "$OUT/initramfs.cpio" | cut -f1), kernel $kver)"
}

main "$@"
