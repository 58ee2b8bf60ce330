// The geometry commands (selectable keys, Brody's heat map and example, the LayerNorm ellipsoid;
// geometry_keys.cpp, geometry_brody_map.cpp, geometry_brody_example.cpp, geometry_ln.cpp) and
// what they share: the declaration of a command (name, summary, keys), the normalisation keys,
// number formatting and the atomic writing of their HDF5 files. Each has its own small set of
// dotted keys, given as --key=value or in an INI file; the command line's table of commands
// (cli/command_table.cpp) lists them.
#pragma once

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "io/hdf5_file.hpp"
#include "io/output_file.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

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

// The four, in the order of `rcsim --help`.
const std::vector<CommandSpec>& geometry_commands();

// Run one of them (a name of geometry_commands()). `keys` are the --key=value arguments,
// `config_file` an optional INI file of the same keys (the command line wins); `command_line` is
// recorded in output files. Throws UsageError (exit 2) for unknown keys and bad values, and for
// an existing output.file that is not a complete file of the command's type (unless `force`).
// brody-map polls `cancel` between draws (interrupted: nothing written, 130).
int run_geometry_command(const std::string& command, const std::vector<std::string>& keys,
                         const std::optional<std::string>& config_file, const std::string& command_line, bool quiet,
                         bool force, const std::atomic<bool>* cancel);

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

// Write an HDF5 file through OutputFile (lock, exclusive temporary, header, checked close, rename).
template <class Body>
void write_atomic(const std::string& out, const std::string& filetype, const std::string& command_line, Body&& body) {
  OutputFile file(out, {"output.file", "output '" + out + "'"});
  file.write_hdf5({filetype, 2, command_line}, body);  // format 2: every axis has a dimension scale
}

// A matrix or vector as a dataset of the group.
h5::Dataset write_matrix(const h5::Group& g, const std::string& name, const Matrix& m);
h5::Dataset write_vector(const h5::Group& g, const std::string& name, const Vector& v);

// The long_name and units attributes of a dataset.
void describe(const h5::Dataset& ds, const std::string& long_name, const std::string& units = "1");

}  // namespace rcsim
