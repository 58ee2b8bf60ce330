// The HDF5 layer's attributes (io/hdf5_file.hpp: Object::set_attr, has_attr, attr_*): written
// replacing an attribute of the same name, read with their type and shape checked.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/checked_read.hpp"
#include "io/hdf5_errors.hpp"
#include "io/hdf5_file.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim::h5 {

namespace {
void write_attr(hid_t obj, const std::string& path, const std::string& name, hid_t type,
                const std::vector<hsize_t>& shape, const void* data) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle space = make_space(shape);
  Handle attr(check(H5Acreate2(obj, name.c_str(), type, space.id(), H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute '" + name + "' on " + path),
              H5Aclose);
  check(H5Awrite(attr.id(), type, data), "", "cannot write attribute '" + name + "' on " + path);
}
}  // namespace

void Object::set_attr(const std::string& name, const std::string& value) const {
  Handle t = utf8_string_type();
  const char* p = value.c_str();
  write_attr(id(), path_, name, t.id(), {}, &p);
}

void Object::set_attr(const std::string& name, double value) const {
  write_attr(id(), path_, name, H5T_NATIVE_DOUBLE, {}, &value);
}

void Object::set_attr(const std::string& name, std::int64_t value) const {
  write_attr(id(), path_, name, H5T_NATIVE_INT64, {}, &value);
}

void Object::set_attr(const std::string& name, const std::vector<std::int64_t>& values) const {
  static const std::int64_t none = 0;  // HDF5 refuses a null buffer even for zero elements
  write_attr(id(), path_, name, H5T_NATIVE_INT64, {values.size()}, values.empty() ? &none : values.data());
}

bool Object::has_attr(const std::string& name) const { return H5Aexists(id(), name.c_str()) > 0; }

std::string Object::attr_string(const std::string& name) const {
  Handle attr = open_scalar_attr(id(), path_, name, Expect::string);
  Handle ftype(H5Aget_type(attr.id()), H5Tclose);
  if (H5Tis_variable_str(ftype.id()) > 0) {
    Handle t = utf8_string_type();
    H5Tset_cset(t.id(), H5Tget_cset(ftype.id()));  // ASCII or UTF-8 as stored: HDF5 converts neither into the other
    char* p = nullptr;
    check(H5Aread(attr.id(), t.id(), &p), "", "cannot read attribute '" + name + "' on " + path_);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const std::size_t size = H5Tget_size(ftype.id());
  std::string s(size, '\0');
  check(H5Aread(attr.id(), ftype.id(), s.data()), "", "cannot read attribute '" + name + "' on " + path_);
  return s.substr(0, s.find('\0'));
}

std::int64_t Object::attr_int(const std::string& name) const {
  Handle attr = open_scalar_attr(id(), path_, name, Expect::integer);
  std::int64_t v = 0;
  check(H5Aread(attr.id(), H5T_NATIVE_INT64, &v), "", "cannot read attribute '" + name + "' on " + path_);
  return v;
}

double Object::attr_double(const std::string& name) const {
  Handle attr = open_scalar_attr(id(), path_, name, Expect::number);
  double v = 0;
  check(H5Aread(attr.id(), H5T_NATIVE_DOUBLE, &v), "", "cannot read attribute '" + name + "' on " + path_);
  return v;
}

}  // namespace rcsim::h5
