// The server's places on disk: its own data and ipc roots, each session's
// directories in them, and what a killed server or session left behind.
#pragma once
#include <sys/types.h>

#include <string>

#include "fabmeter/session.hpp"

namespace fm {

// Removes a directory the server made and the files it made in it (no
// subdirectories are ever made there). Absent is fine.
void remove_own_dir(const std::string& dir);

// A session's data directory (a file sink writes there) and ipc directory.
std::string session_data_dir(const ServerOptions& o, pid_t pid);
std::string session_ipc_dir(const ServerOptions& o, pid_t pid);

// What a session child leaves if it is killed: its directories and shared
// memory segments ("/fabmeter-PID-N", made by its shm transport; only ours).
void clean_after(const ServerOptions& o, pid_t pid);

// The server's own places: --data-dir (made if missing), else a private
// temporary one, removed at exit if empty; and the ipc root, always private.
// Dead servers' private directories are removed first. Sets o.data_dir and
// o.ipc_root.
class ServerDirs {
 public:
  explicit ServerDirs(ServerOptions& o);
  ~ServerDirs();
  ServerDirs(const ServerDirs&) = delete;

 private:
  std::string own_data_, ipc_root_;
};

}  // namespace fm
