#!/bin/sh
# The session (src/session/: the client's, one server session, the serve
# daemon, admission, relay, tool server, server directories, the registry)
# runs every transport through the transport table (session/registry.hpp)
# and the transport contract (fabmeter/transport.hpp): what a transport needs
# of a session is a hook in its entry (server_claim, queued_bytes). Fails if
# a file there includes a header under transport/.
set -eu
src=$1
files=$(find "$src/src/session" -name '*.[ch]pp')
[ -n "$files" ] || { echo "no session files under $src/src/session"; exit 2; }
# shellcheck disable=SC2086
if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^">]*/)?transport/' $files; then
  echo "a session file includes a transport's header (above): give the transport a hook in its table entry"
  exit 1
fi
