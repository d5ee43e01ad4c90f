#!/usr/bin/env bash
# fabtests, libfabric's own benchmarks (fi_msg_bw, fi_rma_bw), for the ofi
# bandwidth rows of make test-rdma's comparison. Debian packages only
# fi_info, fi_pingpong and fi_strerror of libfabric; the upstream tarball in
# the libfabric source package of a newer Debian release (FT_SUITE, default
# trixie) carries fabtests. This fetches that tarball through apt's signed
# source index (a private apt state, the host's own Debian mirror), checks its
# SHA-256, and builds that libfabric (verbs, rxm and tcp providers) and its
# fabtests into OUTDIR:
#
#   OUTDIR/lib/libfabric.so.1   the library both sides of an ofi bw row load
#   OUTDIR/bin/fi_msg_bw, fi_rma_bw, fi_pingpong
#   OUTDIR/version              "libfabric X.Y.Z (Debian SUITE source)"
#
#   rdma/fabtests.sh [OUTDIR]        (default: <repo>/build/fabtests)
#
# Cached: skipped when OUTDIR/stamp matches this script and the source's
# version. About a minute the first time (autotools, two builds).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
OUT=${1:-$REPO/build/fabtests}
SUITE=${FT_SUITE:-trixie}
TOOLS=(fi_msg_bw fi_rma_bw)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$OUT/work
# shellcheck source=guest/mirror.sh
source "$HERE/guest/mirror.sh"

log() { printf '[fabtests] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

need=()
for pair in autoreconf:autoconf automake:automake libtoolize:libtool make:make gcc:gcc curl:curl \
            xz:xz-utils pkg-config:pkg-config; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
for hdr in infiniband/verbs.h:libibverbs-dev rdma/rdma_cma.h:librdmacm-dev; do
  [[ -e /usr/include/${hdr%%:*} ]] || need+=("${hdr#*:}")
done
if ((${#need[@]})); then
  log "installing build tools: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; } ||
    die "could not install ${need[*]}"
fi

# The source index of SUITE in a private apt state: the host's apt
# configuration is left as it is.
mirror=$(find_mirror)
APT=(-o Dir::Etc::sourcelist="$WORK/apt/sources.list" -o Dir::Etc::sourceparts=/dev/null
     -o Dir::State::Lists="$WORK/apt/lists" -o Dir::Cache="$WORK/apt/cache")
mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/cache"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $SUITE main" >"$WORK/apt/sources.list"
apt-get "${APT[@]}" update -qq >"$WORK/apt/update.log" 2>&1 || die "apt could not read $SUITE's source index ($WORK/apt/update.log)"
src=$(apt-cache "${APT[@]}" showsrc libfabric 2>/dev/null) || die "no libfabric source package in $SUITE"
# showsrc lists every version it knows, newest first: the first record's.
src=$(awk 'BEGIN {RS = ""} NR == 1' <<<"$src")
version=$(awk '/^Version:/ {print $2; exit}' <<<"$src")
dir=$(awk '/^Directory:/ {print $2; exit}' <<<"$src")
read -r sha size tarball < <(awk '/^Checksums-Sha256:/ {on = 1; next} /^[^ ]/ {on = 0}
                                   on && $3 ~ /\.orig\.tar\./ {print $1, $2, $3; exit}' <<<"$src")
[[ -n ${version:-} && -n ${dir:-} && -n ${tarball:-} ]] || die "cannot read libfabric's source record in $SUITE"
upstream=${version%-*}
upstream=${upstream#*:}

stamp=$(printf '%s\n' "$version" "$sha" "$(sha256sum "$0")" | sha256sum | cut -c1-16)
if [[ -f $OUT/stamp && $(cat "$OUT/stamp") == "$stamp" ]]; then
  log "up to date: $(cat "$OUT/version")"
  exit 0
fi
rm -f "$OUT/stamp"

if [[ ! -f $WORK/$tarball ]] || ! echo "$sha  $WORK/$tarball" | sha256sum -c --quiet - 2>/dev/null; then
  log "fetching $tarball ($((size / 1024)) KiB) from $SUITE's pool"
  curl -fsS --retry 2 -m 300 -o "$WORK/$tarball.part" "$mirror/$dir/$tarball" || die "download of $dir/$tarball failed"
  echo "$sha  $WORK/$tarball.part" | sha256sum -c --quiet - || die "$tarball does not match its SHA-256 in the signed index"
  mv "$WORK/$tarball.part" "$WORK/$tarball"
fi

rm -rf "$WORK/src"
mkdir -p "$WORK/src"
tar -xf "$WORK/$tarball" -C "$WORK/src" --strip-components=1
[[ -d $WORK/src/fabtests ]] || die "$tarball has no fabtests/"

log "building libfabric $upstream (verbs, rxm, tcp) into $OUT"
cd "$WORK/src"
{ ./autogen.sh &&
  ./configure --prefix="$OUT" --disable-static --enable-only --enable-verbs=yes --enable-rxm=yes --enable-tcp=yes &&
  make -j"$(nproc)" && make install; } >"$WORK/libfabric.log" 2>&1 || die "libfabric's build failed ($WORK/libfabric.log)"

log "building fabtests ${TOOLS[*]}"
cd "$WORK/src/fabtests"
{ ./autogen.sh && ./configure --prefix="$OUT" --with-libfabric="$OUT" &&
  make -j"$(nproc)" "${TOOLS[@]/#/benchmarks/}"; } >"$WORK/fabtests.log" 2>&1 || die "fabtests' build failed ($WORK/fabtests.log)"
for t in "${TOOLS[@]}"; do install -m 755 "benchmarks/$t" "$OUT/bin/$t"; done

echo "libfabric $upstream (Debian $SUITE source $version)" >"$OUT/version"
echo "$stamp" >"$OUT/stamp"
log "ready: $(cat "$OUT/version"), $(cd "$OUT/bin" && echo fi_*)"
