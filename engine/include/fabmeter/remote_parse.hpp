// Checked parsing of what the other end sent over the control channel. The other end
// may be anyone who reached the port, so its text is never trusted: every
// number must be the whole field and in range, and every failure is an
// fm::Error with a one-line reason (never std::invalid_argument and co.).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace fm {

// Decimal digits only (no sign, no spaces, no suffix), at most `max`.
uint64_t parse_remote_u64(std::string_view text, const char* what, uint64_t max = UINT64_MAX);
// A finite decimal number (strtod syntax, no spaces), e.g. a clock reading.
double parse_remote_double(std::string_view text, const char* what);
// The other end's text as it may appear in a one-line message: printable ASCII,
// at most 40 characters, the rest elided.
std::string remote_excerpt(std::string_view text);

}  // namespace fm
