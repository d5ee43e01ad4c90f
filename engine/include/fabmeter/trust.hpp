// Whether a file may be loaded or run by this process, which is often root
// (docs/security.md): the one rule for transport plugins and peer tools.
// Trusted: the path, resolved (symbolic links followed), is a regular file
// owned by root or this process's effective user and not writable by group
// or others, and so is every directory from it up to / (a sticky one such as
// /tmp excepted: others cannot remove or rename what is ours there); nobody
// else can have written it or can swap it.
#pragma once
#include <string>

namespace fm {

class TrustedFile {
 public:
  explicit TrustedFile(const std::string& path);
  ~TrustedFile();
  TrustedFile(const TrustedFile&) = delete;
  TrustedFile& operator=(const TrustedFile&) = delete;

  // Why the file is refused ("" if trusted), naming the resolved path.
  const std::string& refused() const { return refused_; }
  // The resolved path.
  const std::string& path() const { return path_; }
  // The checked file, open read-only (-1 if refused): load or read it through
  // this descriptor (/proc/self/fd/N), not by path, so it is what was checked.
  int fd() const { return fd_; }
  // The descriptor, no longer closed with this object.
  int release();

 private:
  int fd_ = -1;
  std::string path_;
  std::string refused_;
};

}  // namespace fm
