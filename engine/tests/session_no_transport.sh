#!/bin/sh
# The session (the client's, one server session, the serve daemon, what both
# roles check, the server's directories) runs every transport through the
# transport table (experiment/registry.hpp) and the transport contract
# (fabmeter/transport.hpp): what a transport needs of a session is a hook in
# its entry (server_claim, queued_bytes). Fails if a session file includes a
# header under transport/.
set -eu
src=$1
files=
for f in client.cpp server_session.cpp server_session.hpp serve.cpp session_common.cpp session_common.hpp \
         server_dirs.cpp server_dirs.hpp; do
  [ -f "$src/src/experiment/$f" ] || { echo "no session file $src/src/experiment/$f"; exit 2; }
  files="$files $src/src/experiment/$f"
done
# shellcheck disable=SC2086
if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^">]*/)?transport/' $files; then
  echo "a session file includes a transport's header (above): give the transport a hook in its table entry"
  exit 1
fi
