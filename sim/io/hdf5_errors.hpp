// What the HDF5 layer's files share (io/hdf5_file.cpp, hdf5_files.cpp, hdf5_attributes.cpp): its checks: every call of the HDF5 C API
// is checked, and a failure becomes a RuntimeError naming what failed and HDF5's own message.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "io/hdf5_file.hpp"

namespace rcsim::h5 {

// The innermost message of the current HDF5 error stack (cleared), or the OS error of a failed
// write (a full disk is named as such).
std::string hdf5_message();
// RuntimeError: `what` and HDF5's message.
[[noreturn]] void fail(const std::string& what);
// `id` if valid, else fail(what).
hid_t check(hid_t id, const std::string& what);
// fail(what) if `status` < 0 (the middle argument only tells this overload apart).
void check(herr_t status, const char*, const std::string& what);
// A dataspace of `shape` (scalar when empty).
Handle make_space(const std::vector<hsize_t>& shape);
// Variable-length UTF-8 strings.
Handle utf8_string_type();

}  // namespace rcsim::h5
