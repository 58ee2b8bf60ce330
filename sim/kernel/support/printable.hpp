// Text from outside (configuration lines and values, file names, HDF5 attributes and datasets)
// made safe to echo in a message on a terminal or log: control characters and invalid UTF-8
// are escaped, and long text is cut. Idempotent on text within the limit (a backslash is kept
// as is), so a message built from escaped values can be passed through it again. Every message that quotes such text goes through it
// (config errors, HDF5 readers, the CLI's final error line as a safety net).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rcsim {

// The default length (in bytes of the input) kept of an echoed value.
constexpr std::size_t kEchoLimit = 200;

// `text` with every byte that is not printable escaped: C0 controls and DEL as \n, \t, \r, \e or
// \xHH; bytes that are not part of well-formed UTF-8 as \xHH (valid
// multi-byte UTF-8, e.g. "é" or "μ", is kept; C1 controls U+0080..U+009F and the bidirectional
// overrides U+202A..U+202E, U+2066..U+2069 are escaped as \u{XXXX}). If `text` is longer than
// `limit` bytes, only its first `limit` bytes (never cutting a UTF-8 character) are kept,
// followed by "... (N bytes)" with N the full length.
std::string printable(std::string_view text, std::size_t limit = kEchoLimit);

}  // namespace rcsim
