#include "config/values.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string fmt_double(double x) {
  std::ostringstream os;
  os.precision(17);
  os << x;
  return os.str();
}

void bad_value(const std::string& key, const std::string& value, const std::string& allowed) {
  throw UsageError("invalid value '" + printable(value) + "' for key '" + printable(key) + "': " + allowed);
}

double parse_double(const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) bad_value(key, text, "expected a number");
  // A fraction a/b of two numbers (d_QK = 1/64 as in the paper) is accepted too.
  const auto slash = t.find('/');
  if (slash != std::string::npos) {
    const std::string what = "expected a finite number or a fraction a/b";
    if (t.find('/', slash + 1) != std::string::npos) bad_value(key, text, what);
    auto part = [&](const std::string& p) {
      char* end = nullptr;
      errno = 0;
      const double x = std::strtod(p.c_str(), &end);
      if (p.empty() || end != p.c_str() + p.size() || !std::isfinite(x) || errno == ERANGE) bad_value(key, text, what);
      return x;
    };
    const double num = part(trim(t.substr(0, slash))), den = part(trim(t.substr(slash + 1)));
    const double x = num / den;
    if (den == 0 || !std::isfinite(x)) bad_value(key, text, what + " with a nonzero denominator");
    return x;
  }
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(x) || errno == ERANGE)
    bad_value(key, text, "expected a finite number");
  return x;
}


long long parse_integer(const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) bad_value(key, text, "expected an integer");
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(t.c_str(), &end, 10);
  if (end != t.c_str() + t.size() || errno == ERANGE) bad_value(key, text, "expected an integer");
  return x;
}

int parse_int_value(const std::string& key, const std::string& text, int min) {
  const long long x = parse_integer(key, text);
  if (x < min || x > std::numeric_limits<int>::max())
    bad_value(key, text, "expected an integer >= " + std::to_string(min));
  return static_cast<int>(x);
}

double parse_double_value(const std::string& key, const std::string& text, double min,
                        bool strict) {
  const double x = parse_double(key, text);
  if (strict ? !(x > min) : !(x >= min))
    bad_value(key, text, std::string("expected a number ") + (strict ? "> " : ">= ") + fmt_double(min));
  return x;
}

bool parse_bool_value(const std::string& key, const std::string& text) {
  std::string t = trim(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  bad_value(key, text, "expected true or false");
}


std::vector<double> parse_number_list_value(const std::string& key, const std::string& text) {
  std::string t = text;
  std::replace(t.begin(), t.end(), ',', ' ');
  std::istringstream is(t);
  std::vector<double> out;
  std::string tok;
  while (is >> tok) out.push_back(parse_double(key, tok));
  if (out.empty()) bad_value(key, text, "expected one or more numbers");
  return out;
}


std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream is(text);
  while (std::getline(is, item, ',')) {
    item = trim(item);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}


Matrix parse_inline_matrix(const std::string& key, const std::string& text) {
  std::vector<std::vector<double>> rows;
  std::string row;
  std::istringstream is(text);
  while (std::getline(is, row, ';')) {
    if (trim(row).empty()) continue;
    std::string r = row;
    std::replace(r.begin(), r.end(), ',', ' ');
    std::istringstream rs(r);
    std::vector<double> values;
    std::string tok;
    while (rs >> tok) {
      char* end = nullptr;
      const double x = std::strtod(tok.c_str(), &end);
      if (end != tok.c_str() + tok.size() || !std::isfinite(x))
        throw UsageError("key '" + key + "': '" + tok +
                         "' is not a finite number (inline matrix rows are separated by ';', "
                         "entries by spaces, e.g. '0.5 1; 0 1')");
      values.push_back(x);
    }
    rows.push_back(std::move(values));
  }
  if (rows.empty()) throw UsageError("key '" + key + "': empty inline matrix");
  const std::size_t cols = rows.front().size();
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].size() != cols)
      throw UsageError("key '" + key + "': row " + std::to_string(i) + " of the inline matrix has " +
                       std::to_string(rows[i].size()) + " entries, row 0 has " +
                       std::to_string(cols));
  Matrix m(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(cols));
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = 0; j < cols; ++j)
      m(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = rows[i][j];
  return m;
}


std::uint64_t parse_seed_value(const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  char* end = nullptr;
  errno = 0;
  const unsigned long long s = std::strtoull(t.c_str(), &end, 10);
  if (t.empty() || t[0] == '-' || end != t.c_str() + t.size() || errno == ERANGE)
    bad_value(key, text, "expected an unsigned 64-bit integer");
  return s;
}

}  // namespace rcsim
