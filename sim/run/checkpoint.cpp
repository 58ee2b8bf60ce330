#include "run/checkpoint.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "hdf5/hdf5_file.hpp"

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
  const h5::Array a = f.read(name);
  std::vector<Matrix> out;
  const auto n = static_cast<Eigen::Index>(a.shape[1]), d = static_cast<Eigen::Index>(a.shape[2]);
  for (hsize_t k = 0; k < a.shape[0]; ++k) out.push_back(unflatten(a.data.data() + k * a.shape[1] * a.shape[2], n, d));
  return out;
}

}  // namespace

Checkpoint::Checkpoint(std::string path, std::string config_ini, double interval_seconds)
    : path_(std::move(path)), config_(std::move(config_ini)), interval_(interval_seconds),
      last_(std::chrono::steady_clock::now()) {}

std::vector<char> Checkpoint::load(RunResults& r) {
  std::vector<char> done(static_cast<std::size_t>(r.trials), 0);
  std::error_code ec;
  if (!fs::exists(path_, ec)) return done;
  try {
    const h5::File f = h5::File::open_read(path_);
    if (f.attr_string("config") != config_) {
      spdlog::info("{}: checkpoint of another configuration, discarded", path_);
      fs::remove(path_, ec);
      return done;
    }
    int loaded = 0;
    for (int t = 0; t < r.trials; ++t) {
      const std::string g = group_name(t);
      if (!f.exists(g + "/diagnostics")) continue;  // written last: the trial's group is whole
      const auto ti = static_cast<std::size_t>(t);
      unstack_rows(f.read(g + "/token"), r.token, t);
      unstack_rows(f.read(g + "/attention"), r.attention, t);
      if (!r.spectrum.empty()) {
        const h5::Array a = f.read(g + "/spectrum");
        r.spectrum[ti] = unflatten(a.data.data(), static_cast<Eigen::Index>(a.shape[0]), static_cast<Eigen::Index>(a.shape[1]));
      }
      if (!r.snapshots.empty()) r.snapshots[ti] = read_matrices(f, g + "/snapshots");
      if (!r.attention_matrices.empty()) r.attention_matrices[ti] = read_matrices(f, g + "/attention_matrices");
      const h5::Array diag = f.read(g + "/diagnostics");
      r.underflow_layer[ti] = static_cast<int>(diag.data.at(0));
      r.nonfinite_layer[ti] = static_cast<int>(diag.data.at(1));
      r.degenerate_total[ti] = static_cast<int>(diag.data.at(2));
      done[ti] = 1;
      ++loaded;
    }
    if (loaded) spdlog::info("{}: resuming, {} of {} trials already done", path_, loaded, r.trials);
  } catch (const std::exception& e) {
    spdlog::warn("{}: unreadable checkpoint discarded ({})", path_, e.what());
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
  if (pending_.empty()) return;
  std::error_code ec;
  const bool exists = fs::exists(path_, ec);
  const h5::File f = exists ? h5::File::open_readwrite(path_) : h5::File::create(path_);
  if (!exists) {
    f.set_attr("filetype", "rcsim-checkpoint");
    f.set_attr("config", config_);
  }
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
  f.flush();
  pending_.clear();
}

void Checkpoint::remove() {
  std::error_code ec;
  fs::remove(path_, ec);
}

}  // namespace rcsim
