#include "io/checkpoint.hpp"

#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "kernel/printable.hpp"
#include "kernel/errors.hpp"
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
  for (const Matrix& m : ms)
    for (Eigen::Index j = 0; j < m.cols(); ++j) out.push_back(m(trial, j));
  return out;
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

Matrix unflatten(const double* p, Eigen::Index rows, Eigen::Index cols) {
  return Eigen::Map<const RowMajorMatrix>(p, rows, cols);
}

// A list of equally sized matrices as one dataset [count, rows, cols], and back.
void write_matrices(const h5::Group& g, const std::string& name, const std::vector<Matrix>& list) {
  std::vector<double> data;
  for (const Matrix& X : list) {
    const auto v = flatten(X);
    data.insert(data.end(), v.begin(), v.end());
  }
  const hsize_t n = list.empty() ? 0 : static_cast<hsize_t>(list[0].rows());
  const hsize_t d = list.empty() ? 0 : static_cast<hsize_t>(list[0].cols());
  g.write(name, {list.size(), n, d}, data.data());
}

std::vector<Matrix> read_matrices(const h5::File& f, const std::string& name) {
  const h5::Array a = h5::read_shaped(f, name, {-1, -1, -1});
  std::vector<Matrix> out;
  const auto n = static_cast<Eigen::Index>(a.shape[1]), d = static_cast<Eigen::Index>(a.shape[2]);
  for (hsize_t k = 0; k < a.shape[0]; ++k) out.push_back(unflatten(a.data.data() + k * a.shape[1] * a.shape[2], n, d));
  return out;
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

Checkpoint::Checkpoint(std::string path, std::string config_ini, InputDigests inputs, double interval_seconds)
    : path_(std::move(path)), config_(result_configuration(config_ini)), hash_(text_hash(config_)),
      inputs_(std::move(inputs)), interval_(interval_seconds), last_(std::chrono::steady_clock::now()) {}

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
      const auto cols = [](const std::vector<Matrix>& ms) { return ms.empty() ? 0LL : static_cast<long long>(ms[0].cols()); };
      unstack_rows(h5::read_shaped(f, g + "/token", {static_cast<long long>(r.token.size()), cols(r.token)}), r.token, t);
      unstack_rows(h5::read_shaped(f, g + "/attention", {static_cast<long long>(r.attention.size()), cols(r.attention)}),
                   r.attention, t);
      if (!r.spectrum.empty()) {
        const h5::Array a = h5::read_shaped(f, g + "/spectrum", {static_cast<long long>(r.layer_index.size()), r.spectrum_size});
        r.spectrum[ti] = unflatten(a.data.data(), static_cast<Eigen::Index>(a.shape[0]), static_cast<Eigen::Index>(a.shape[1]));
      }
      if (!r.snapshots.empty()) r.snapshots[ti] = read_matrices(f, g + "/snapshots");
      if (!r.attention_matrices.empty()) r.attention_matrices[ti] = read_matrices(f, g + "/attention_matrices");
      const h5::Array diag = h5::read_shaped(f, g + "/diagnostics", {3});
      r.underflow_layer[ti] = static_cast<int>(diag.data.at(0));
      r.nonfinite_layer[ti] = static_cast<int>(diag.data.at(1));
      r.degenerate_total[ti] = static_cast<int>(diag.data.at(2));
      done[ti] = 1;
      ++loaded;
    }
    if (loaded) spdlog::info("{}: resuming, {} of {} trials already done", path_, loaded, r.trials);
  } catch (const std::exception& e) {
    spdlog::warn("{}: unreadable checkpoint discarded ({})", path_, printable(e.what(), 4 * kEchoLimit));
    std::fill(done.begin(), done.end(), 0);
    fs::remove(path_, ec);
  }
  return done;
}

void Checkpoint::completed(const RunResults& r, int trial) {
  pending_.push_back(trial);
  if (std::chrono::duration<double>(std::chrono::steady_clock::now() - last_).count() >= interval_) flush(r);
}

void Checkpoint::flush(const RunResults& r) {
  last_ = std::chrono::steady_clock::now();
  if (pending_.empty() || broken_) return;
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
  pending_.clear();
}

void Checkpoint::write_pending(const h5::File& f, const RunResults& r) const {
  for (const int t : pending_) {
    const std::string name = group_name(t);
    if (f.exists(name)) continue;
    const auto ti = static_cast<std::size_t>(t);
    const h5::Group g = f.create_group(name);
    const auto tok = stack_rows(r.token, t), att = stack_rows(r.attention, t);
    g.write("token", {r.token.size(), tok.size() / r.token.size()}, tok.data());
    g.write("attention", {r.attention.size(), att.size() / std::max<std::size_t>(r.attention.size(), 1)}, att.data());
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
  std::error_code ec;
  fs::remove(path_, ec);
}

}  // namespace rcsim
