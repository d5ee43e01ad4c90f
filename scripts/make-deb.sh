#!/usr/bin/env bash
# make deb: build/fabmeter_VERSION_ARCH.deb from the engine's install tree
# (cmake --install, prefix /usr: /usr/bin/fabmeter-engine, the transport
# plugins in /usr/lib/fabmeter/, the suites in /usr/share/fabmeter/suites/,
# the monitoring kit contrib/ in /usr/share/fabmeter/contrib/)
# and the Python package (/usr/lib/python3/dist-packages/fabmeter,
# /usr/bin/fabmeter). Depends: what the engine and the CLI need (from
# dpkg-shlibdeps, plus python3 and python3-numpy); the transport plugins'
# libraries are Recommends (a node without them runs the other transports);
# matplotlib (the report) is Suggests. Then lintian, whose errors fail it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ENGINE_BUILD:-build/engine}
OUT=build/deb
VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' python/fabmeter/__init__.py)
ARCH=$(dpkg --print-architecture)
ROOT=$OUT/root
DEB=build/fabmeter_${VERSION}_${ARCH}.deb
umask 022
rm -rf "$OUT" "$DEB"
mkdir -p "$ROOT/DEBIAN"

DESTDIR="$PWD/$ROOT" cmake --install "$BUILD" --prefix /usr --strip >/dev/null
PY_DIR=$ROOT/usr/lib/python3/dist-packages
mkdir -p "$PY_DIR"
cp -r python/fabmeter "$PY_DIR/"
find "$PY_DIR" -name __pycache__ -prune -exec rm -rf {} +
find "$PY_DIR" -type f -exec chmod 0644 {} +
cat > "$ROOT/usr/bin/fabmeter" <<'PY'
#!/usr/bin/python3
import sys

from fabmeter.cli import main

sys.exit(main())
PY
chmod 0755 "$ROOT/usr/bin/fabmeter"

DOC=$ROOT/usr/share/doc/fabmeter
mkdir -p "$DOC"
# The monitoring kit to start from (docs/monitoring.md): Prometheus scrape config and rules, the Grafana
# dashboard, systemd units for serve and watch; copied and edited, never active as installed.
cp -r contrib "$ROOT/usr/share/fabmeter/contrib"
find "$ROOT/usr/share/fabmeter/contrib" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
# The repository states no license yet: the copyright file says so rather
# than invent one (to be replaced by the project's licence when it has one).
cat > "$DOC/copyright" <<'TXT'
fabmeter: message latency and bandwidth over real transports.

Copyright (C) the fabmeter authors.

The fabmeter repository this package was built from states no licence; the
terms of use are those set by its authors.
TXT
DATE=$(date -R -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")
printf 'fabmeter (%s) unstable; urgency=medium\n\n  * Built from the fabmeter repository.\n\n -- fabmeter maintainers <fabmeter@users.noreply.github.com>  %s\n' \
  "$VERSION" "$DATE" | gzip -9n > "$DOC/changelog.gz"

# Depends from the engine's ELF needs; Recommends from the plugins'.
SHLIB=$OUT/shlibdeps
mkdir -p "$SHLIB/debian"
printf 'Source: fabmeter\n\nPackage: fabmeter\nArchitecture: any\n' > "$SHLIB/debian/control"
shlibs() { (cd "$SHLIB" && dpkg-shlibdeps -O "$@" 2>/dev/null | sed -n 's/^shlibs:Depends=//p'); }
DEPENDS=$(shlibs "$PWD/$ROOT/usr/bin/fabmeter-engine")
RECOMMENDS=""
plugins=("$ROOT"/usr/lib/fabmeter/*.so)
if [ -e "${plugins[0]}" ]; then
  RECOMMENDS=$(shlibs -xlibc6 -xlibgcc-s1 -xlibstdc++6 "${plugins[@]/#/$PWD/}")
fi
INSTALLED=$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
{
  echo "Package: fabmeter"
  echo "Version: $VERSION"
  echo "Architecture: $ARCH"
  echo "Maintainer: fabmeter maintainers <fabmeter@users.noreply.github.com>"
  echo "Installed-Size: $INSTALLED"
  echo "Depends: $DEPENDS, python3 (>= 3.11), python3-numpy"
  [ -n "$RECOMMENDS" ] && echo "Recommends: $RECOMMENDS"
  echo "Suggests: python3-matplotlib"
  echo "Section: net"
  echo "Priority: optional"
  echo "Homepage: https://github.com/fabmeter/fabmeter"
  echo "Description: message latency and bandwidth over real transports"
  echo " fabmeter measures one-way and round-trip latency, bandwidth, real-time"
  echo " streams and tail latency under load over shared memory, TCP, UDP and,"
  echo " through plugins loaded when first used, RDMA verbs, libfabric, ZeroMQ,"
  echo " nng and nanomsg; on one host or between many."
} > "$ROOT/DEBIAN/control"
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
  > "$ROOT/DEBIAN/md5sums"
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null
echo "make-deb: $DEB"
if command -v lintian >/dev/null 2>&1; then
  lintian --fail-on error "$DEB"
else
  echo "make-deb: lintian not installed (apt-get install lintian): not checked" >&2
fi
