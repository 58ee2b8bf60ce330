// The value parsers of the configuration vocabulary: text -> number, integer, bool, list,
// inline matrix. Each throws UsageError naming the key and what is allowed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernel/support/types.hpp"

namespace rcsim {

std::string trim(const std::string& s);
// A double as the stored configuration writes it (17 significant digits).
std::string fmt_double(double x);

// "invalid value 'V' for key 'K': ALLOWED" as a UsageError.
[[noreturn]] void bad_value(const std::string& key, const std::string& value, const std::string& allowed);

// A finite number, or a fraction a/b of two (d_QK = 1/64 as in the paper).
double parse_double(const std::string& key, const std::string& text);
long long parse_integer(const std::string& key, const std::string& text);
int parse_int_value(const std::string& key, const std::string& text, int min);
double parse_double_value(const std::string& key, const std::string& text, double min, bool strict);
std::uint64_t parse_seed_value(const std::string& key, const std::string& text);
// Numbers separated by commas and/or white space (at least one).
std::vector<double> parse_number_list_value(const std::string& key, const std::string& text);
bool parse_bool_value(const std::string& key, const std::string& text);
// Comma-separated items, trimmed, empty items dropped.
std::vector<std::string> split_list(const std::string& text);

// Parse an inline matrix "a b c; d e f" (rows separated by ';', entries by spaces or commas).
Matrix parse_inline_matrix(const std::string& key, const std::string& text);

}  // namespace rcsim
