// The HDF5 run file: one file per run (layout in README.md, "HDF5 layout").
#pragma once

#include <string>
#include <vector>

#include "io/input_digest.hpp"
#include "kernel/trial/simulation.hpp"

namespace rcsim {

constexpr int kRunFormatVersion = 2;  // 2: each group carries its own coordinates; every axis has one

struct Provenance {
  std::string command_line;
  int threads = 1;
};

class Checkpoint;  // io/checkpoint.hpp
namespace h5 {
class Group;  // io/hdf5_file.hpp
}

// Dataset /mask [N, N] of `g` (uint8, mask[i][j] = 1 iff token i attends to token j) from the row
// ranges (rows.contiguous), `block_bytes` of rows at a time (whole chunks): the values one write of
// the dense matrix stores, without its N x N copy. write_run_file's for a setup without the dense
// mask (the cpu platform's, EngineSetup::mask empty); it adds the attributes.
void write_mask_rows(const h5::Group& g, const MaskRows& rows, std::size_t block_bytes);

// Write the whole run to `path` (the caller writes to a temporary name and renames); `config_ini`
// is the resolved configuration stored as /config (Config::to_ini()); `inputs` the digests of the
// files the run read, stored as attribute `input_sha256` of /config (none when it read no file).
// The large data (spectrum, token snapshots, attention matrices) of the trials `checkpoint` has
// freed (Checkpoint::stored) are read from it, one trial at a time; the others from `r`.
void write_run_file(const std::string& path, const std::string& config_ini, const EngineSetup& s, const RunResults& r,
                    const Provenance& p, const InputDigests& inputs, const Checkpoint* checkpoint = nullptr);
// The same file as the bytes of an HDF5 file image (nothing touches the disk; `name` labels messages).
std::vector<char> run_file_image(const std::string& name, const std::string& config_ini, const EngineSetup& s,
                                 const RunResults& r, const Provenance& p, const InputDigests& inputs);

// What is at an output path: nothing (or an unreadable/incomplete file, recomputed), a complete
// run file of this configuration, or a complete run file of another configuration. The identity
// compared is the result-relevant configuration and the content of the input files: `inputs`
// (input_digests) against the file's `input_sha256`. A file without `input_sha256` (written
// before rcsim recorded it) matches only a run that reads no input file; for a run that reads
// one, its inputs' content is unknown and it counts as another configuration.
enum class RunFileState { absent, matches, differs };
struct RunFileCheck {
  RunFileState state = RunFileState::absent;
  std::string difference;  // for `differs`: the first differing line, "KEY: FILE_VALUE -> NEW_VALUE",
                           // or the input whose content differs (digest_difference)
};
RunFileCheck check_run_file(const std::string& path, const std::string& config_ini, const InputDigests& inputs);

// The first line where two INI texts differ, as "key: a -> b" ("" if equal).
std::string first_difference(const std::string& ini_a, const std::string& ini_b);


}  // namespace rcsim
