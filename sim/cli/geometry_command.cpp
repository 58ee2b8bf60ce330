#include "cli/geometry_command.hpp"

#include <iomanip>
#include <sstream>

#include "kernel/errors.hpp"

namespace rcsim {

std::vector<KeyDecl> with_norm(std::vector<KeyDecl> keys) {
  for (const char* k : {"norm.type", "norm.eps", "norm.gain", "norm.bias"}) keys.push_back(key_decl(k));
  return keys;
}

NormType parse_norm_type(const std::string& key, const std::string& text) {
  try {
    return make_config({{"norm.type", text}}).norm.type;
  } catch (const UsageError&) {
    bad_value(key, text, "allowed: " + key_decl("norm.type").allowed());
  }
}

Normalization parse_norm(std::map<std::string, std::string>& v, int d) {
  const Config c = make_config({{"model.dim", std::to_string(d)},
                                {"norm.type", v["norm.type"]},
                                {"norm.eps", v["norm.eps"]},
                                {"norm.gain", v["norm.gain"]},
                                {"norm.bias", v["norm.bias"]}});
  if (d < 2 && (c.norm.type == NormType::layernorm || c.norm.type == NormType::projection))
    throw UsageError("key 'norm.type': " + to_string(c.norm.type) +
                     " needs dimension d >= 2 (for d = 1 it maps every key to the same point)");
  return Normalization::from_config(c);
}

std::string fmt(double x, int prec) {
  std::ostringstream os;
  os << std::setprecision(prec) << x;
  return os.str();
}

h5::Dataset write_matrix(const h5::Group& g, const std::string& name, const Matrix& m) {
  const RowMajorMatrix r = m;
  return g.write(name, {static_cast<hsize_t>(m.rows()), static_cast<hsize_t>(m.cols())}, r.data());
}

h5::Dataset write_vector(const h5::Group& g, const std::string& name, const Vector& v) {
  return g.write(name, {static_cast<hsize_t>(v.size())}, v.data());
}

void describe(const h5::Dataset& ds, const std::string& long_name, const std::string& units) {
  ds.set_attr("long_name", long_name);
  ds.set_attr("units", units);
}

}  // namespace rcsim
