#include "fabmeter/trust.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fm {
namespace {

// Why a file or directory someone else could have written is refused; "".
// A sticky directory of root's (or ours) that others may write, such as
// /tmp, is no way in: others may add names there but neither remove nor
// rename ours, and what lies below is checked in turn.
std::string untrusted(const struct stat& st, const std::string& what) {
  if (st.st_uid != 0 && st.st_uid != geteuid())
    return what + " is owned by uid " + std::to_string(st.st_uid) + ", neither root nor this user";
  const bool sticky_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_dir) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return what + " is writable by " + (st.st_mode & S_IWOTH ? "others" : "its group") + " (mode " + mode + ")";
  }
  return "";
}

}  // namespace

TrustedFile::TrustedFile(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (!real) {
    refused_ = path + ": " + std::strerror(errno);
    return;
  }
  path_ = real;
  std::free(real);
  // The resolved path is walked from /, each step opened at the directory just
  // checked without following a link: what is checked is what gets opened.
  int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct stat st {};
  if (dir < 0 || fstat(dir, &st) != 0) {
    refused_ = std::string("/: ") + std::strerror(errno);
    if (dir >= 0) close(dir);
    return;
  }
  if (refused_ = untrusted(st, "directory /"); !refused_.empty()) {
    close(dir);
    return;
  }
  for (size_t at = 1;;) {
    const size_t slash = path_.find('/', at);
    const bool last = slash == std::string::npos;
    const std::string here = path_.substr(0, slash);
    // O_NONBLOCK: a FIFO put in the file's place must not hang the open.
    const int flags = last ? O_RDONLY | O_NONBLOCK : O_PATH | O_DIRECTORY;
    const int fd = openat(dir, path_.substr(at, slash - at).c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
    close(dir);
    if (fd < 0) {
      refused_ = here + ": " + (errno == ELOOP ? "replaced by a symbolic link while checked" : std::strerror(errno));
      return;
    }
    if (fstat(fd, &st) != 0) {
      refused_ = here + ": " + std::strerror(errno);
    } else if (last && !S_ISREG(st.st_mode)) {
      refused_ = here + " is not a regular file";
    } else {
      refused_ = untrusted(st, last ? here : "directory " + here);
    }
    if (!refused_.empty()) {
      close(fd);
      return;
    }
    if (last) {
      fd_ = fd;
      return;
    }
    dir = fd;
    at = slash + 1;
  }
}

TrustedFile::~TrustedFile() {
  if (fd_ >= 0) close(fd_);
}

int TrustedFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

}  // namespace fm
