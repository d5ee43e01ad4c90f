# Sourced by rdma/guest/build.sh and rdma/fabtests.sh.
# The Debian mirror this host is configured with (deb822 .sources or
# one-line sources.list); MIRROR=... overrides.
find_mirror() {
  if [[ -n ${MIRROR:-} ]]; then echo "$MIRROR"; return; fi
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    uri=$(awk '/^URIs:/ {print $2} ' "$f" | grep -v -- '-security' | grep -m1 debian || true)
    [[ -n $uri ]] && { echo "$uri"; return; }
  done
  uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk '$1=="deb" && $0 ~ /bookworm/ && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' || true)
  echo "${uri:-http://deb.debian.org/debian}"
}
