// Result output: a tiny JSON object builder for the engine's JSON Lines, and
// a .npy writer so numpy/pandas read raw samples without a custom parser.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace fm {

class JsonObj {
 public:
  JsonObj& add(std::string_view key, double v);
  JsonObj& add(std::string_view key, uint64_t v);
  JsonObj& add(std::string_view key, int64_t v);
  JsonObj& add(std::string_view key, int v) { return add(key, static_cast<int64_t>(v)); }
  JsonObj& add(std::string_view key, unsigned v) { return add(key, static_cast<uint64_t>(v)); }
  JsonObj& add(std::string_view key, bool v);
  JsonObj& add(std::string_view key, const char* v) { return add(key, std::string_view(v)); }
  JsonObj& add(std::string_view key, std::string_view v);
  JsonObj& add(std::string_view key, const std::string& v) { return add(key, std::string_view(v)); }
  JsonObj& add(std::string_view key, const JsonObj& v);
  JsonObj& add_raw(std::string_view key, std::string_view json);  // already-serialised value
  std::string str() const { return "{" + body_ + "}"; }
  bool empty() const { return body_.empty(); }

 private:
  void key(std::string_view k);
  std::string body_;
};

std::string json_quote(std::string_view s);

// A file that appears whole or not at all: written to a temporary file of
// our own beside `path` (mkstemp: a link planted there is never written
// through), renamed over `path` by commit(), removed if never committed. Its
// mode is what open() would give under the umask.
class ReplacingFile {
 public:
  explicit ReplacingFile(const std::string& path);
  ~ReplacingFile();
  ReplacingFile(const ReplacingFile&) = delete;
  ReplacingFile& operator=(const ReplacingFile&) = delete;
  bool write(const void* data, size_t n);  // all of it; false on error (errno says why)
  void commit();                            // closes and renames; throws (runtime) on failure
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// Writes a 1-D little-endian float64 array as NPY v1.0 (a ReplacingFile).
void write_npy_f64(const std::string& path, const double* data, size_t n);

// One JSON line on stdout, flushed (the orchestrator reads it as it comes).
void emit_line(const JsonObj& o);

}  // namespace fm
