#include "app/geometry_command.hpp"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "config/key_sources.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/trial/simulation.hpp"  // Interrupted

namespace rcsim {

const std::vector<CommandSpec>& geometry_commands() {
  static const std::vector<CommandSpec> specs = {keys_command(), brody_map_command(), brody_example_command(),
                                                 ln_geometry_command()};
  return specs;
}

int run_geometry_command(const std::string& command, const std::vector<std::string>& keys,
                         const std::optional<std::string>& config_file, const std::string& command_line, bool quiet,
                         bool force, const std::atomic<bool>* cancel) {
  const auto& specs = geometry_commands();
  const auto spec = std::find_if(specs.begin(), specs.end(), [&](const CommandSpec& c) { return c.name == command; });
  if (spec == specs.end()) throw std::logic_error("run_geometry_command: no geometry command '" + command + "'");
  auto v = parse_command_options(command, spec->keys, keys, config_file);
  // Before computing: never replace a foreign file (or anything not a regular file).
  if (!v["output.file"].empty()) h5::check_replaceable(v["output.file"], "output.file", "rcsim-" + command, force);
  if (command == "keys") return cmd_keys(std::move(v), command_line);
  if (command == "brody-map") {
    try {
      return cmd_brody_map(std::move(v), command_line, quiet, cancel);
    } catch (const Interrupted&) {
      std::cerr << "rcsim: brody-map interrupted; nothing written (rerun the command)\n";
      return 130;
    }
  }
  if (command == "brody-example") return cmd_brody_example(std::move(v), command_line);
  return cmd_ln_geometry(std::move(v), command_line);
}

std::vector<KeyDecl> with_norm(std::vector<KeyDecl> keys) {
  for (const char* k : {"norm.type", "norm.eps", "norm.alpha", "norm.gain", "norm.bias"}) keys.push_back(key_decl(k));
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
                                {"norm.alpha", v["norm.alpha"]},
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
