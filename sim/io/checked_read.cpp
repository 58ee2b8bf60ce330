#include "io/checked_read.hpp"

#include <filesystem>

#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"
#include "io/safe_file.hpp"

namespace rcsim::h5 {

namespace {

const char* expected_text(Expect want) {
  switch (want) {
    case Expect::string: return "string";
    case Expect::integer: return "integer";
    case Expect::number: return "number";
  }
  return "value";
}

bool class_fits(H5T_class_t cls, Expect want) {
  switch (want) {
    case Expect::string: return cls == H5T_STRING;
    case Expect::integer: return cls == H5T_INTEGER;
    case Expect::number: return cls == H5T_INTEGER || cls == H5T_FLOAT || cls == H5T_ENUM;  // enum: bool (h5py)
  }
  return false;
}

std::string class_text(H5T_class_t cls, bool plural) {
  const char* s = "values of another type";
  switch (cls) {
    case H5T_STRING: s = plural ? "strings" : "string"; break;
    case H5T_INTEGER: s = plural ? "integers" : "integer"; break;
    case H5T_FLOAT: s = plural ? "floats" : "float"; break;
    case H5T_COMPOUND: s = plural ? "compound values" : "compound value"; break;
    case H5T_ENUM: s = plural ? "enum values" : "enum value"; break;
    case H5T_ARRAY: s = plural ? "array-typed values" : "array-typed value"; break;
    case H5T_VLEN: s = plural ? "variable-length sequences" : "variable-length sequence"; break;
    case H5T_REFERENCE: s = plural ? "references" : "reference"; break;
    case H5T_OPAQUE: s = plural ? "opaque values" : "opaque value"; break;
    case H5T_BITFIELD: s = plural ? "bitfields" : "bitfield"; break;
    default: break;
  }
  return s;
}

}  // namespace

std::string describe_stored(hid_t type, hid_t space) {
  const H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
  const H5S_class_t scls = space >= 0 ? H5Sget_simple_extent_type(space) : H5S_NO_CLASS;
  if (scls == H5S_NULL) return "an empty (null) " + class_text(cls, false);
  if (scls == H5S_SCALAR) return "a scalar " + class_text(cls, false);
  const int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
  if (rank < 0) return "unreadable (corrupted?)";
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return "a " + std::to_string(rank) + "-D array " + shape_string(dims) + " of " + class_text(cls, true);
}

Handle open_scalar_attr(hid_t obj, const std::string& path, const std::string& name, Expect want) {
  const std::string what = printable(path) + ": attribute '" + printable(name) + "'";
  if (H5Aexists(obj, name.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw UsageError(what + " is missing, expected a scalar " + expected_text(want));
  }
  Handle attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (attr.id() < 0) {
    H5Eclear2(H5E_DEFAULT);
    throw UsageError(what + " cannot be opened (corrupted file?)");
  }
  Handle type(H5Aget_type(attr.id()), H5Tclose);
  Handle space(H5Aget_space(attr.id()), H5Sclose);
  const bool scalar = space.id() >= 0 && H5Sget_simple_extent_type(space.id()) == H5S_SCALAR;
  if (type.id() < 0 || space.id() < 0 || !scalar || !class_fits(H5Tget_class(type.id()), want)) {
    const std::string stored = describe_stored(type.id(), space.id());
    H5Eclear2(H5E_DEFAULT);
    throw UsageError(what + " is " + stored + ", expected a scalar " + expected_text(want));
  }
  return attr;
}

void require_dataset_kind(hid_t dataset, const std::string& path, Expect want, bool scalar) {
  Handle type(H5Dget_type(dataset), H5Tclose);
  Handle space(H5Dget_space(dataset), H5Sclose);
  bool ok = type.id() >= 0 && space.id() >= 0 && class_fits(H5Tget_class(type.id()), want) &&
            H5Sget_simple_extent_type(space.id()) != H5S_NULL;
  if (ok && scalar) ok = H5Sget_simple_extent_npoints(space.id()) == 1;
  if (ok && want == Expect::string) ok = H5Tis_variable_str(type.id()) > 0;  // what rcsim writes
  if (!ok) {
    const std::string stored = describe_stored(type.id(), space.id());
    H5Eclear2(H5E_DEFAULT);
    const std::string expected = want == Expect::string
                                     ? (scalar ? "a single variable-length string" : "a list of variable-length strings")
                                     : (scalar ? std::string("a single ") + expected_text(want)
                                               : std::string("an array of numbers"));
    throw UsageError(printable(path) + " is " + stored + ", expected " + expected);
  }
}

Array read_shaped(const Group& g, const std::string& name, const std::vector<long long>& expected) {
  Array a = g.read(name);
  bool ok = a.shape.size() == expected.size();
  for (std::size_t i = 0; ok && i < expected.size(); ++i)
    ok = expected[i] < 0 || a.shape[i] == static_cast<hsize_t>(expected[i]);
  if (!ok) {
    std::string want = "[";
    for (std::size_t i = 0; i < expected.size(); ++i)
      want += (i ? ", " : "") + (expected[i] < 0 ? std::string("any") : std::to_string(expected[i]));
    throw UsageError(printable(g.path() + name) + " has shape " + shape_string(a.shape) + ", expected " + want + "]");
  }
  return a;
}

void require_inside_directory(const std::string& relative, const std::string& index) {
  const std::filesystem::path p(relative);
  bool ok = !relative.empty() && !p.is_absolute() && relative.find('\0') == std::string::npos;
  for (const auto& part : p)
    if (part == "..") ok = false;
  if (!ok)
    throw UsageError("sweep index '" + printable(index) + "': point path '" + printable(relative) +
                     "' leaves the sweep directory; expected a relative path without '..' components");
}

namespace {
// For stale-temporary clean-up (core/safe_file.hpp): an HDF5 file whose root attribute filetype
// is one of rcsim's ("rcsim-..."), read through the checked reader.
bool is_rcsim_hdf5(const std::string& path) {
  try {
    if (H5Fis_hdf5(path.c_str()) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    const File f = File::open_read(path);
    return f.has_attr("filetype") && f.attr_string("filetype").rfind("rcsim-", 0) == 0;
  } catch (const std::exception&) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
}
[[maybe_unused]] const bool registered = (set_rcsim_file_test(&is_rcsim_hdf5), true);
}  // namespace

}  // namespace rcsim::h5
