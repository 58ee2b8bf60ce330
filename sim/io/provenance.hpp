// The provenance every file rcsim writes carries at its root (or its group): which rcsim, built
// how, and when.
#pragma once

#include <string>

#include "io/hdf5_file.hpp"

namespace rcsim {

// The current UTC time as ISO 8601.
std::string utc_now();

// The libhdf5 this process runs with, e.g. "1.10.8".
std::string hdf5_version();

// Attributes rcsim_version, git_sha, source_tree (clean | modified | unknown), compiler,
// build_type, instruction_set, hdf5_version, and `time_attr` (created_utc, or updated_utc for a
// file rewritten in place) = utc_now().
void write_provenance(const h5::Object& o, const char* time_attr = "created_utc");

}  // namespace rcsim
