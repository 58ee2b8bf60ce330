#include "kernel/model/host_arrays.hpp"

#include <cmath>

#include "kernel/support/errors.hpp"

namespace rcsim {

InputArrays input_arrays_from(const ModelSpec& c, std::map<std::string, NdArray> given, const std::string& source) {
  InputArrays in;
  std::string wanted;
  const std::vector<InputRequirement> req = input_requirements(c, in);
  for (const InputRequirement& r : req) wanted += (wanted.empty() ? "" : ", ") + r.dataset;
  if (wanted.empty()) wanted = "none (no key of the configuration is `file`)";
  for (const InputRequirement& r : req) {
    auto it = given.find(r.dataset);
    if (it == given.end())
      throw UsageError(source + ": the configuration needs the array " + r.dataset + " (key '" + r.key +
                       "'), which was not given; it takes: " + wanted);
    check_input_shape(r, source, it->second);
    for (const double x : it->second.data)
      if (!std::isfinite(x)) throw UsageError(source + ": array " + r.dataset + " contains a non-finite value");
    *r.target = std::move(it->second);
    given.erase(it);
  }
  if (!given.empty())
    throw UsageError(source + ": array " + given.begin()->first +
                     " is not used by this configuration (give the key that takes it the type `file`); it takes: " +
                     wanted);
  return in;
}

}  // namespace rcsim
