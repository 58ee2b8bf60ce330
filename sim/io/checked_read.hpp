// One checked reader for everything rcsim reads from an HDF5 file (issue 22): before a value is
// read, the stored type class, rank and shape are compared with what rcsim expects, and a
// mismatch is a UsageError naming the file, the object and what was expected, e.g.
//   "run.h5:/: attribute 'complete' is a 1-D array [2] of integers, expected a scalar integer".
// Reading an array attribute into one scalar (what H5Aread does without this check) overruns the
// buffer; every attribute and dataset read goes through here instead.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "io/hdf5_file.hpp"

namespace rcsim::h5 {

// What a value must be.
enum class Expect { string, integer, number };

// "a scalar string", "a 1-D array [3] of floats", "an empty (null) value", for messages.
std::string describe_stored(hid_t type, hid_t space);

// Open attribute `name` of object `obj` (`path` names it for messages) and check that it is a
// scalar of kind `want` (number accepts integers and floats; string accepts fixed-length and
// variable-length strings). Throws UsageError otherwise (also if the attribute is missing).
Handle open_scalar_attr(hid_t obj, const std::string& path, const std::string& name, Expect want);

// Check a dataset that is about to be read: its type class (`want`) and, if `scalar`, that it
// holds exactly one value. Throws UsageError naming `path` and what was expected.
void require_dataset_kind(hid_t dataset, const std::string& path, Expect want, bool scalar);

// Read dataset `name` of `g` as numbers and check its shape: `expected` gives the extent of each
// axis, entries < 0 accept any extent. Throws UsageError "FILE:/NAME has shape [..], expected [..]".
Array read_shaped(const Group& g, const std::string& name, const std::vector<long long>& expected);

// A sweep point path read from `index`: relative and without any '..' component (it must stay
// inside the sweep directory). Throws UsageError naming the index and the path otherwise.
void require_inside_directory(const std::string& relative, const std::string& index);

}  // namespace rcsim::h5
