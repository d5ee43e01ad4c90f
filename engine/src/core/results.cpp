#include "fabmeter/results.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "fabmeter/error.hpp"

namespace fm {

std::string json_quote(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += c;
        }
    }
  }
  return o + "\"";
}

void JsonObj::key(std::string_view k) {
  if (!body_.empty()) body_ += ", ";
  body_ += json_quote(k) + ": ";
}

JsonObj& JsonObj::add(std::string_view k, double v) {
  key(k);
  if (!std::isfinite(v)) {
    body_ += "null";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.10g", v);
    body_ += buf;
  }
  return *this;
}
JsonObj& JsonObj::add(std::string_view k, uint64_t v) { key(k); body_ += std::to_string(v); return *this; }
JsonObj& JsonObj::add(std::string_view k, int64_t v) { key(k); body_ += std::to_string(v); return *this; }
JsonObj& JsonObj::add(std::string_view k, bool v) { key(k); body_ += v ? "true" : "false"; return *this; }
JsonObj& JsonObj::add(std::string_view k, std::string_view v) { key(k); body_ += json_quote(v); return *this; }
JsonObj& JsonObj::add(std::string_view k, const JsonObj& v) { key(k); body_ += v.str(); return *this; }
JsonObj& JsonObj::add_raw(std::string_view k, std::string_view json) { key(k); body_ += json; return *this; }

ReplacingFile::ReplacingFile(const std::string& path) : path_(path), tmp_(path + ".XXXXXX") {
  fd_ = ::mkstemp(tmp_.data());
  if (fd_ < 0) sys_error("cannot create a temporary file beside " + path);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
}

ReplacingFile::~ReplacingFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

bool ReplacingFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n) {
    const ssize_t k = ::write(fd_, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

void ReplacingFile::commit() {
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    errno = err;
    sys_error("cannot write " + path_);
  }
}

void write_npy_f64(const std::string& path, const double* data, size_t n) {
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }";
  // magic(6) + version(2) + header length(2) + header, padded with spaces to a
  // multiple of 64 and ended by '\n', as the NPY format asks.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  const uint16_t hlen = static_cast<uint16_t>(header.size());
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  ReplacingFile f(path);  // no truncated array for a reader to trust
  if (!f.write(magic, 8) || !f.write(&hlen, 2) || !f.write(header.data(), header.size()) ||
      !f.write(data, n * sizeof(double)))
    sys_error("cannot write " + path);
  f.commit();
}

void emit_line(const JsonObj& o) {
  std::string s = o.str() + "\n";
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

}  // namespace fm
