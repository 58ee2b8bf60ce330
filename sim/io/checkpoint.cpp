#include "io/checkpoint.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <cstdio>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <filesystem>
#include <sstream>

#include "kernel/support/printable.hpp"
#include "kernel/support/errors.hpp"
#include "io/output_file.hpp"
#include "io/safe_file.hpp"
#include "io/hdf5_file.hpp"
#include "io/run_file.hpp"
#include "io/checked_read.hpp"

namespace fs = std::filesystem;

namespace rcsim {

namespace {

std::string group_name(int trial) { return "trial_" + std::to_string(trial); }

// Row `trial` of each matrix, stacked: [count, cols].
std::vector<double> stack_rows(const std::vector<Matrix>& ms, int trial) {
  std::vector<double> out;
  std::size_t n = 0;
  for (const Matrix& m : ms) n += static_cast<std::size_t>(m.cols());
  out.reserve(n);  // its size exactly (grown by doubling it reached up to 2x: docs/dev/memory.md)
  for (const Matrix& m : ms)
    for (Eigen::Index j = 0; j < m.cols(); ++j) out.push_back(m(trial, j));
  return out;
}

// The shape of the stacked rows of `ms` recorded at `layers` layers: [rows, layers], one row per
// value of each layer (a scalar measure gives one row, a per-token one N: MeasureShape), so
// [count, layers] when every measure is scalar.
std::vector<hsize_t> stacked_shape(const std::vector<Matrix>& ms, std::size_t layers) {
  std::size_t values = 0;
  for (const Matrix& m : ms) values += static_cast<std::size_t>(m.cols());
  return {layers ? values / layers : ms.size(), layers};
}

void unstack_rows(const h5::Array& a, std::vector<Matrix>& ms, int trial) {
  std::size_t k = 0;
  for (Matrix& m : ms)
    for (Eigen::Index j = 0; j < m.cols(); ++j) m(trial, j) = a.data.at(k++);
}

std::vector<double> flatten(const Matrix& m) {
  std::vector<double> out(static_cast<std::size_t>(m.size()));
  Eigen::Map<RowMajorMatrix>(out.data(), m.rows(), m.cols()) = m;
  return out;
}

// A list of equally sized matrices as one dataset [count, rows, cols], and back.
void write_matrices(const h5::Group& g, const std::string& name, const std::vector<Matrix>& list) {
  std::vector<double> data;
  std::size_t total = 0;
  for (const Matrix& X : list) total += static_cast<std::size_t>(X.size());
  data.reserve(total);  // one trial's copy, not up to twice that (docs/dev/memory.md)
  for (const Matrix& X : list) {
    const std::size_t at = data.size();
    data.resize(at + static_cast<std::size_t>(X.size()));
    Eigen::Map<RowMajorMatrix>(data.data() + at, X.rows(), X.cols()) = X;
  }
  const hsize_t n = list.empty() ? 0 : static_cast<hsize_t>(list[0].rows());
  const hsize_t d = list.empty() ? 0 : static_cast<hsize_t>(list[0].cols());
  g.write(name, {list.size(), n, d}, data.data());
}

const char* large_name(LargeData which) {
  switch (which) {
    case LargeData::spectrum: return "spectrum";
    case LargeData::snapshots: return "snapshots";
    case LargeData::attention_matrices: return "attention_matrices";
  }
  return "";
}

// The shape a trial's large dataset must have in a checkpoint of `r`'s run.
std::vector<long long> large_shape(const RunResults& r, LargeData which) {
  switch (which) {
    case LargeData::spectrum: return {static_cast<long long>(r.layer_index.size()), r.spectrum_size};
    case LargeData::snapshots: return {r.snapshot_layers, r.tokens, r.dim};
    case LargeData::attention_matrices:
      return {static_cast<long long>(r.attention_layer_index.size()), r.tokens, r.tokens};
  }
  return {};
}

// The large data the run records (those of `r` that are allocated).
std::vector<LargeData> recorded_large(const RunResults& r) {
  std::vector<LargeData> out;
  if (!r.spectrum.empty()) out.push_back(LargeData::spectrum);
  if (!r.snapshots.empty()) out.push_back(LargeData::snapshots);
  if (!r.attention_matrices.empty()) out.push_back(LargeData::attention_matrices);
  return out;
}

// Bytes of trial t's large data in memory.
double large_bytes(const RunResults& r, std::size_t t) {
  double values = 0;
  if (!r.spectrum.empty()) values += static_cast<double>(r.spectrum[t].size());
  for (const auto* list : {&r.snapshots, &r.attention_matrices})
    if (!list->empty())
      for (const Matrix& m : (*list)[t]) values += static_cast<double>(m.size());
  return 8.0 * values;
}

// Entry k of a trial's /diagnostics: a whole number from lo to hi. A NaN, a fraction or a layer
// out of range (a damaged or hostile checkpoint) is refused: cast to int it would be undefined, and
// resumed as the layer where the trial underflowed or turned non-finite.
int diagnostic(const h5::Array& diag, std::size_t k, const std::string& where, const char* name, double lo, double hi) {
  const double v = diag.data.at(k);
  if (!(v >= lo && v <= hi && v == std::floor(v)))
    throw UsageError(fmt::format("{}: entry {} ({}) is {}, expected a whole number from {} to {}", where, k, name, v, lo,
                                 hi));
  return static_cast<int>(v);
}

}  // namespace

std::string result_configuration(const std::string& config_ini) {
  std::istringstream in(config_ini);
  std::string line, section, out;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '[') section = line.substr(1, line.find(']') - 1);
    const std::string key = line.substr(0, line.find(" = "));
    if ((section == "run" && key == "threads") || (section == "output" && key == "file")) continue;
    out += line + "\n";
  }
  return out;
}

std::string text_hash(const std::string& text) {
  std::uint64_t h = 14695981039346656037ULL;  // FNV-1a offset basis
  for (const unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ULL;  // FNV prime
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Checkpoint::Checkpoint(std::string path, std::string config_ini, InputDigests inputs, double interval_seconds,
                       double cap_bytes)
    : path_(std::move(path)), config_(result_configuration(config_ini)), hash_(text_hash(config_)),
      inputs_(std::move(inputs)), interval_(interval_seconds), cap_(cap_bytes), last_(std::chrono::steady_clock::now()) {}

std::vector<char> Checkpoint::load(RunResults& r) {
  std::vector<char> done(static_cast<std::size_t>(r.trials), 0);
  std::error_code ec;
  if (!fs::exists(path_, ec)) return done;
  try {
    const h5::File f = h5::File::open_read(path_);
    const std::string stored_hash = f.has_attr("config_hash") ? f.attr_string("config_hash") : "none";
    if (stored_hash != hash_) {
      const std::string stored = f.has_attr("config") ? f.attr_string("config") : "";
      const std::string diff = first_difference(stored, config_);
      spdlog::warn("{}: checkpoint of another configuration ({}), discarded", path_,
                   diff.empty() ? "configuration hash " + printable(stored_hash) + " != " + hash_ : diff);
      fs::remove(path_, ec);
      return done;
    }
    // The same configuration, but trials of other inputs' content are never mixed with this run's.
    const std::string stored_inputs = f.has_attr("input_sha256") ? f.attr_string("input_sha256") : "";
    const std::string inputs_differ = digest_difference(stored_inputs, inputs_);
    if (!inputs_differ.empty()) {
      spdlog::warn("{}: checkpoint of other input files ({}), discarded", path_, inputs_differ);
      fs::remove(path_, ec);
      return done;
    }
    int loaded = 0;
    for (int t = 0; t < r.trials; ++t) {
      const std::string g = group_name(t);
      if (!f.exists(g + "/diagnostics")) continue;  // written last: the trial's group is whole
      const auto ti = static_cast<std::size_t>(t);
      // Every array's shape checked against this run's before use (a hostile or damaged checkpoint).
      const auto shape = [](const std::vector<Matrix>& ms, std::size_t layers) {
        const std::vector<hsize_t> s = stacked_shape(ms, layers);
        return std::vector<long long>{static_cast<long long>(s[0]), static_cast<long long>(s[1])};
      };
      unstack_rows(h5::read_shaped(f, g + "/token", shape(r.token, r.layer_index.size())), r.token, t);
      unstack_rows(h5::read_shaped(f, g + "/attention", shape(r.attention, r.attention_layer_index.size())),
                   r.attention, t);
      // The large data stay in the file (the run file's writer reads them from there): each read
      // once here, one trial at a time, so that a damaged one discards the checkpoint now, and
      // not kept (docs/dev/memory.md).
      for (const LargeData which : recorded_large(r)) h5::read_shaped(f, g + "/" + large_name(which), large_shape(r, which));
      const h5::Array diag = h5::read_shaped(f, g + "/diagnostics", {3});
      const std::string where = path_ + ":/" + g + "/diagnostics";
      const double L = r.layers;
      r.underflow_layer[ti] = diagnostic(diag, 0, where, "underflow layer, -1: none", -1, L);
      r.nonfinite_layer[ti] = diagnostic(diag, 1, where, "non-finite layer, -1: none", -1, L);
      r.degenerate_total[ti] = diagnostic(diag, 2, where, "degenerate rows", 0, std::numeric_limits<int>::max());
      done[ti] = 1;
      ++loaded;
    }
    if (loaded) spdlog::info("{}: resuming, {} of {} trials already done", path_, loaded, r.trials);
  } catch (const std::exception& e) {
    spdlog::warn("{}: unreadable checkpoint discarded ({})", path_, printable(e.what(), 4 * kEchoLimit));
    std::fill(done.begin(), done.end(), 0);
    fs::remove(path_, ec);
  }
  stored_ = done;  // the loaded trials' large data are in the file only
  return done;
}

bool Checkpoint::stored(int trial) const {
  return trial >= 0 && static_cast<std::size_t>(trial) < stored_.size() && stored_[static_cast<std::size_t>(trial)];
}

bool Checkpoint::written() const { return std::find(stored_.begin(), stored_.end(), 1) != stored_.end(); }

std::vector<double> Checkpoint::read_large(const RunResults& r, int trial, LargeData which) const {
  if (!stored(trial)) throw std::logic_error("Checkpoint::read_large: trial " + std::to_string(trial) + " is not stored");
  if (!reader_) reader_.emplace(h5::File::open_read(path_));
  return h5::read_shaped(*reader_, group_name(trial) + "/" + large_name(which), large_shape(r, which)).data;
}

void Checkpoint::completed(RunResults& r, int trial) {
  pending_.push_back(trial);
  pending_bytes_ += large_bytes(r, static_cast<std::size_t>(trial));
  if (pending_bytes_ > cap_ ||
      std::chrono::duration<double>(std::chrono::steady_clock::now() - last_).count() >= interval_)
    flush(r);
}

void Checkpoint::flush(RunResults& r) {
  last_ = std::chrono::steady_clock::now();
  if (pending_.empty() || broken_) return;
  reader_.reset();  // the file is replaced below
  try {
    std::error_code ec;
    // The whole checkpoint is rewritten to an exclusive temporary and renamed: a failed write
    // leaves the previous checkpoint as it was, never an unreadable one. The run holds the
    // output's lock, which covers its checkpoint.
    OutputFile file(path_, {});
    // On disk (a copy of the previous checkpoint, then the new trials), not an image in memory.
    h5::File f = fs::exists(path_, ec) ? h5::File::open_copy_on_disk(path_, file.temporary())
                                       : h5::File::create_on_disk(file.temporary());
    if (!f.has_attr("config_hash")) {
      f.set_attr("filetype", "rcsim-checkpoint");
      f.set_attr("config", config_);
      f.set_attr("config_hash", hash_);
      if (!inputs_.empty()) f.set_attr("input_sha256", digests_text(inputs_));
    }
    write_pending(f, r);
    f.close();
    file.publish();
  } catch (const std::exception& e) {
    broken_ = true;
    throw RuntimeError("cannot write the checkpoint '" + path_ + "' (" + e.what() +
                       "); the run stops, the previous checkpoint is kept (free space, then rerun)");
  }
  free_pending(r);
  pending_.clear();
  pending_bytes_ = 0;
}

// The pending trials are in the published checkpoint: their large data leave memory (the
// vectors' storage too). Called under the run's lock (RunControl::on_trial_done): no worker
// touches a completed trial's entries.
void Checkpoint::free_pending(RunResults& r) {
  stored_.resize(static_cast<std::size_t>(r.trials), 0);
  for (const int t : pending_) {
    const auto ti = static_cast<std::size_t>(t);
    if (!r.spectrum.empty()) r.spectrum[ti] = Matrix();
    if (!r.snapshots.empty()) std::vector<Matrix>().swap(r.snapshots[ti]);
    if (!r.attention_matrices.empty()) std::vector<Matrix>().swap(r.attention_matrices[ti]);
    stored_[ti] = 1;
  }
#ifdef __GLIBC__
  // The freed matrices were allocated by the worker threads, each in its own malloc arena; glibc
  // returns an arena's free pages to the system only from its top, so without this each arena
  // keeps its own high-water mark of pending trials (measured: +20 MB over the cap at two
  // threads). malloc_trim releases the free pages inside every arena (docs/dev/memory.md).
  malloc_trim(0);
#endif
}

void Checkpoint::write_pending(const h5::File& f, const RunResults& r) const {
  for (const int t : pending_) {
    const std::string name = group_name(t);
    // A pending trial was computed by this run: a group of that name is a partial one of the
    // checkpoint loaded (no diagnostics, so not resumed), replaced, since the run file will read
    // this trial's large data from here once they are freed.
    if (f.exists(name)) f.remove(name);
    const auto ti = static_cast<std::size_t>(t);
    const h5::Group g = f.create_group(name);
    const auto tok = stack_rows(r.token, t), att = stack_rows(r.attention, t);
    g.write("token", stacked_shape(r.token, r.layer_index.size()), tok.data());
    g.write("attention", stacked_shape(r.attention, r.attention_layer_index.size()), att.data());
    if (!r.spectrum.empty()) {
      const auto sp = flatten(r.spectrum[ti]);
      g.write("spectrum", {static_cast<hsize_t>(r.spectrum[ti].rows()), static_cast<hsize_t>(r.spectrum[ti].cols())}, sp.data());
    }
    if (!r.snapshots.empty()) write_matrices(g, "snapshots", r.snapshots[ti]);
    if (!r.attention_matrices.empty()) write_matrices(g, "attention_matrices", r.attention_matrices[ti]);
    const std::vector<double> diag = {static_cast<double>(r.underflow_layer[ti]), static_cast<double>(r.nonfinite_layer[ti]),
                                      static_cast<double>(r.degenerate_total[ti])};
    g.write("diagnostics", diag);  // last: marks the trial as whole
  }
}

void Checkpoint::remove() {
  reader_.reset();
  std::error_code ec;
  fs::remove(path_, ec);
}

}  // namespace rcsim
