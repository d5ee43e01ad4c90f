#!/usr/bin/env bash
# Installs only what is missing: the Debian packages the build and tests need
# (checked one by one with dpkg -s; apt-get update only if one is missing)
# and the project-local Python environment .venv (numpy, matplotlib, pytest,
# prometheus-client for `fabmeter watch`, fabmeter itself as an editable
# install: pip fetches scikit-build-core, the build backend, from PyPI; an
# editable install builds no engine, the CLI uses build/engine). Safe to run
# again: it then does nothing. --test (make test): also what only the tests
# use; --fuzz (make fuzz): also clang.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.fabmeter-deps   # hash of pyproject.toml at the last pip install

# Build: compiler, CMake, GoogleTest. Transports: the real libraries (each
# is compiled in when found). Peers: the established tools fabmeter compares
# itself with (libopenmpi-dev: fabmeter-mpibench, the MPI layer's, is built
# where Open MPI's development files are found). Report: Chromium for the
# browser test of the HTML report.
# libssl-dev: libcrypto for the control channel's HMAC-SHA-256 authentication;
# nlohmann-json3-dev: the parser of what a peer sends as JSON.
pkgs=(cmake ninja-build g++ libgtest-dev iproute2 make pkg-config libssl-dev nlohmann-json3-dev
      libzmq3-dev libnng-dev libnanomsg-dev libfabric-dev libfabric-bin libibverbs-dev librdmacm-dev
      sockperf qperf iperf3 ucx-utils libopenmpi-dev
      chromium)
# ccache: the engine is compiled several times over (build/engine, the wheel's
# build/wheel, the sanitizer and fuzz builds): what one build compiled, the
# next one of the same flags takes from the cache (Makefile).
pkgs+=(ccache)
# zlib1g-dev: the latency histogram's HdrHistogram V2 encoding is zlib-compressed.
pkgs+=(zlib1g-dev)
# Loss tests: nftables drops packets at random between namespaces and counts them.
pkgs+=(nftables)
# Delay tests: fabmeter-delay-line holds packets on a netfilter queue that an
# iptables NFQUEUE rule feeds (nftables' own `queue` needs CONFIG_NFT_QUEUE,
# which not every kernel has; iptables' target works through nft_compat).
pkgs+=(libnetfilter-queue-dev iptables)
# Mesh tests: Open MPI's mpirun launches `fabmeter mesh` (its rank from the
# environment; the engine links no MPI library).
pkgs+=(openmpi-bin)
# ... and `--launch ssh` starts the ranks over ssh: the client, and dropbear as
# the namespaces' ssh server in the tests (a binary only: it starts no
# service at install, unlike openssh-server).
pkgs+=(openssh-client dropbear-bin)
# make deb: dpkg-shlibdeps (dpkg-dev) for its Depends, lintian to check it.
pkgs+=(dpkg-dev lintian)
# --fuzz (make fuzz): clang and its libFuzzer/sanitizer runtimes, only then.
# --test (make test): Prometheus (large, so only then), which tests/test_watch.py
# runs as its own process to scrape `fabmeter watch`, and its promtool, which
# tests/test_contrib.py checks contrib/prometheus/ with.
# universal-ctags: where each function ends, for tests/test_layout.py's size rule.
no_service=(prometheus)
for arg in "$@"; do
  case "$arg" in
    --fuzz) pkgs+=(clang-14 libclang-rt-14-dev) ;;
    --test) pkgs+=(prometheus universal-ctags) ;;
    *) echo "install-deps: unknown option $arg (--test, --fuzz)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# A venv needs a Python with venv and ensurepip: pyenv's has both; Debian's
# python3 needs python3-venv for ensurepip.
if [ ! -x "$VENV/bin/python" ]; then
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    missing+=(python3 python3-venv)
    PYTHON=/usr/bin/python3
  elif ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=(python3-venv)
  fi
fi

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # A package of no_service would start a system service at install where init
  # scripts run: a policy-rc.d that forbids it is in place during the install (if
  # the machine has none), and the service is left disabled; only the binary is used.
  policy=/usr/sbin/policy-rc.d
  services=()
  for p in "${no_service[@]}"; do
    if [[ " ${missing[*]} " == *" $p "* ]]; then services+=("$p"); fi
  done
  made_policy=""
  if [ "${#services[@]}" -gt 0 ] && [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    made_policy=1
  fi
  status=0
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null || status=$?
  if [ -n "$made_policy" ]; then
    $SUDO rm -f "$policy"
    for p in "${services[@]}"; do
      $SUDO update-rc.d "$p" disable >/dev/null 2>&1 || true
      if [ -d /run/systemd/system ]; then $SUDO systemctl disable --quiet "$p" 2>/dev/null || true; fi
    done
  fi
  [ "$status" -eq 0 ] || exit "$status"
fi

# A venv whose interpreter no longer runs (its base Python went away) is rebuilt.
if [ -e "$VENV" ] && ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  echo "install-deps: $VENV is broken, recreating it"
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "install-deps: creating $VENV with $("$PYTHON" --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
  rm -f "$STAMP"
fi

want=$(sha256sum pyproject.toml | cut -d' ' -f1)
have=$(cat "$STAMP" 2>/dev/null || true)
if [ "$want" != "$have" ] || ! "$VENV/bin/python" -c 'import numpy, pytest, fabmeter, prometheus_client, hdrh' >/dev/null 2>&1; then
  echo "install-deps: installing Python packages into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]' </dev/null
  echo "$want" > "$STAMP"
fi
