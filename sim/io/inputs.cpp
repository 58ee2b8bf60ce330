#include "io/inputs.hpp"

#include "io/hdf5_file.hpp"

namespace rcsim {

InputArrays load_inputs(const ModelSpec& c) {
  InputArrays in;
  for (const InputRequirement& r : input_requirements(c, in)) {
    const std::string& source = std::string(r.key) == "init.file" ? c.init.file : c.weights.file;
    const h5::File f = h5::File::open_read(source, r.key);
    NdArray a = f.read(r.dataset);
    check_input_shape(r, source, a);
    check_input_finite(r, source, a);
    *r.target = std::move(a);
  }
  return in;
}

MaskMatrix load_mask(const ModelSpec& c) {
  if (c.mask.type != MaskType::custom) return make_mask(c);
  const int n = c.model.tokens;
  const h5::File file = h5::File::open_read(c.mask.file, "mask.file");
  const RowMajorMatrix a = file.read_matrix("mask", {n, n});
  const MaskMatrix m = (a.array() != 0.0).cast<std::uint8_t>();
  return make_mask(c, &m);
}

EngineSetup prepare(const ModelSpec& c) {
  // A built-in mask is made by prepare from its ranges (as N x N only where the run needs it).
  const MaskMatrix custom = c.mask.type == MaskType::custom ? load_mask(c) : MaskMatrix();
  return prepare(c, &custom, load_inputs(c));
}

}  // namespace rcsim
