// What the geometry commands (cmd_keys.cpp, cmd_brody_map.cpp, cmd_brody_example.cpp,
// cmd_ln_geometry.cpp) share: the declaration of a command (name, summary, keys), the
// normalisation keys, number formatting and the atomic writing of their HDF5 files.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "io/hdf5_file.hpp"
#include "io/provenance.hpp"
#include "io/safe_file.hpp"
#include "kernel/normalization.hpp"
#include "kernel/types.hpp"

namespace rcsim {

namespace fs = std::filesystem;

// A geometry command: its name, one-line summary and keys (each a KeyDecl).
struct CommandSpec {
  std::string name, summary;
  std::vector<KeyDecl> keys;
};

// The declarations of the four commands, each in its own file.
CommandSpec keys_command();
CommandSpec brody_map_command();
CommandSpec brody_example_command();
CommandSpec ln_geometry_command();

// The commands themselves: `v` holds every key of the command (defaults filled in).
int cmd_keys(std::map<std::string, std::string> v, const std::string& command_line);
int cmd_brody_map(std::map<std::string, std::string> v, const std::string& command_line, bool quiet,
                  const std::atomic<bool>* cancel);
int cmd_brody_example(std::map<std::string, std::string> v, const std::string& command_line);
int cmd_ln_geometry(std::map<std::string, std::string> v, const std::string& command_line);

// The normalisation keys of the run vocabulary (config/keys.cpp), declared there once.
std::vector<KeyDecl> with_norm(std::vector<KeyDecl> keys);

// A norm.type value, validated by the run vocabulary (the error names `key`).
NormType parse_norm_type(const std::string& key, const std::string& text);

// The normalisation of dimension d from the norm.* keys (validated by the run vocabulary).
Normalization parse_norm(std::map<std::string, std::string>& v, int d);

// x with `prec` significant digits.
std::string fmt(double x, int prec = 6);

// Write an HDF5 file atomically (NAME.tmp, renamed when complete) with the provenance header.
template <class Body>
void write_atomic(const std::string& out, const std::string& filetype, const std::string& command_line, Body&& body) {
  const fs::path parent = fs::path(out).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  require_regular_or_absent(out, "output.file");
  const std::string tmp = create_temporary(out);
  try {
    {
      h5::File f = h5::File::create(tmp);
      f.set_attr("filetype", filetype);
      f.set_attr("format_version", 2);  // 2: every axis has a dimension scale
      write_provenance(f);
      f.set_attr("command_line", command_line);
      body(f);
      f.label_unlabelled_axes();
      f.set_attr("complete", 1);
      f.close();  // checked before the rename
    }
    replace_with(tmp, out);
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
}

// A matrix or vector as a dataset of the group.
h5::Dataset write_matrix(const h5::Group& g, const std::string& name, const Matrix& m);
h5::Dataset write_vector(const h5::Group& g, const std::string& name, const Vector& v);

// The long_name and units attributes of a dataset.
void describe(const h5::Dataset& ds, const std::string& long_name, const std::string& units = "1");

}  // namespace rcsim
