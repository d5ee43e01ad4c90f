#include "fabmeter/remote_parse.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "fabmeter/error.hpp"

namespace fm {

std::string remote_excerpt(std::string_view text) {
  constexpr size_t kShow = 40;
  std::string s;
  for (size_t i = 0; i < text.size() && i < kShow; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    s += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  }
  if (text.size() > kShow) s += "...(" + std::to_string(text.size()) + " bytes)";
  return s;
}

uint64_t parse_remote_u64(std::string_view text, const char* what, uint64_t max) {
  uint64_t x = 0;
  // from_chars accepts no sign, spaces or prefix for unsigned types; the
  // leading-digit check also refuses an empty field.
  const bool digit = !text.empty() && text[0] >= '0' && text[0] <= '9';
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (!digit || ec == std::errc::invalid_argument || ptr != text.data() + text.size())
    runtime_error(std::string("malformed ") + what + " from the other end: '" + remote_excerpt(text) + "'");
  if (ec == std::errc::result_out_of_range || x > max)
    runtime_error(std::string(what) + " from the other end is out of range (at most " + std::to_string(max) + "): '" +
                  remote_excerpt(text) + "'");
  return x;
}

double parse_remote_double(std::string_view text, const char* what) {
  // strtod needs a terminated string; a number is short, anything long is malformed.
  if (text.empty() || text.size() > 64 || std::string_view("0123456789+-.").find(text[0]) == std::string_view::npos)
    runtime_error(std::string("malformed ") + what + " from the other end: '" + remote_excerpt(text) + "'");
  std::string s(text);
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(x))
    runtime_error(std::string("malformed ") + what + " from the other end: '" + remote_excerpt(text) + "'");
  return x;
}

}  // namespace fm
