#include "io/run_file.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "config/config.hpp"
#include "io/checkpoint.hpp"
#include "kernel/support/printable.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/trial/platform_table.hpp"
#include "kernel/platform/platform_opencl.hpp"
#include "io/hdf5_file.hpp"
#include "io/output_file.hpp"
#include "kernel/measures/summary.hpp"
#include "kernel/support/version.hpp"

namespace fs = std::filesystem;

namespace rcsim {

namespace {

std::vector<double> row_major(const Eigen::Ref<const Matrix>& m) {
  std::vector<double> out(static_cast<std::size_t>(m.size()));
  Eigen::Map<RowMajorMatrix>(out.data(), m.rows(), m.cols()) = m;
  return out;
}

std::vector<std::int64_t> iota(int n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

// Where the writer finds a trial's large data (spectrum, token snapshots, attention matrices):
// in `r` while they are in memory, in the checkpoint once a flush has freed them
// (Checkpoint::stored; docs/dev/memory.md). Both give the same float64 values.
struct LargeRows {
  const RunResults& r;
  const Checkpoint* checkpoint;  // null: everything in memory (run_to_image)

  // Trial t's values of `which`, its matrices in C order one after the other, into `row`.
  void fill(int t, LargeData which, std::vector<double>& row) const {
    if (checkpoint && checkpoint->stored(t)) {
      row = checkpoint->read_large(r, t, which);
      return;
    }
    const auto ti = static_cast<std::size_t>(t);
    row.clear();
    const auto append = [&](const Matrix& m) {
      const std::size_t at = row.size();
      row.resize(at + static_cast<std::size_t>(m.size()));
      Eigen::Map<RowMajorMatrix>(row.data() + at, m.rows(), m.cols()) = m;
    };
    switch (which) {
      case LargeData::spectrum: append(r.spectrum[ti]); break;
      case LargeData::snapshots: for (const Matrix& m : r.snapshots[ti]) append(m); break;
      case LargeData::attention_matrices: for (const Matrix& m : r.attention_matrices[ti]) append(m); break;
    }
  }
};

// A float64 dataset [trial, ...] written one trial at a time (Dataset::write_rows): the trial's
// matrices in C order, never the whole dataset's copy in memory (docs/dev/memory.md). The values
// are those one write of the concatenation stored.
h5::Dataset write_per_trial(const h5::Group& g, const std::string& name, const std::vector<hsize_t>& shape,
                            const LargeRows& rows, LargeData which) {
  h5::Dataset ds = g.create(name, shape);
  std::vector<double> row;
  hsize_t per_trial = 1;
  for (std::size_t k = 1; k < shape.size(); ++k) per_trial *= shape[k];
  for (hsize_t t = 0; t < shape[0]; ++t) {
    rows.fill(static_cast<int>(t), which, row);
    if (row.size() != per_trial) throw std::logic_error("write_per_trial: trial " + std::to_string(t) + " of " + name +
                                                        " has " + std::to_string(row.size()) + " values");
    ds.write_rows(t, 1, row.data());
  }
  ds.flush();
  return ds;
}

// The coordinates of one group: every group carries its own copy, so that
// xarray.open_dataset(file, group=...) labels its arrays by value (layer 10 is layer 10, whatever
// the schedule), not by position.
struct Coordinates {
  std::vector<std::int64_t> trial, layer, attention_layer;
  std::string schedule;

  void write(const h5::Group& g) const {
    g.write_coordinate("trial", trial, "trial index");
    g.write_coordinate("layer", layer, "layer t (0 = the input X(0)) of each recorded column of the measures")
        .set_attr("schedule", schedule);
    g.write_coordinate("attention_layer", attention_layer,
                       "attention layer t (maps X(t) to X(t+1)) of each recorded column")
        .set_attr("schedule", schedule);
  }
};

// The axes after [trial] of a measure recorded at `layers` layers with `width` values per layer:
// [layer] for a scalar one, [layer, token] (extra_axis) for a per-token one (MeasureShape).
struct MeasureAxes {
  std::string layer_dim;
  const char* extra_axis = nullptr;  // value_axis_name() of the registry, nullptr: scalar
  hsize_t width = 1;
  std::vector<hsize_t> shape(hsize_t layers) const {
    return extra_axis ? std::vector<hsize_t>{layers, width} : std::vector<hsize_t>{layers};
  }
  std::vector<std::string> dims() const {
    return extra_axis ? std::vector<std::string>{layer_dim, extra_axis} : std::vector<std::string>{layer_dim};
  }
};

MeasureAxes axes_of(const MeasureDef& def, int tokens, const std::string& layer_dim) {
  return {layer_dim, value_axis_name(def), static_cast<hsize_t>(values_per_layer(def, tokens))};
}

// The coordinate of a measure's extra axis (token: 0..N-1), written once per group before its first use.
void write_value_axis(const h5::Group& g, const MeasureAxes& axes) {
  if (!axes.extra_axis || g.exists(axes.extra_axis)) return;
  std::vector<std::int64_t> index(static_cast<std::size_t>(axes.width));
  for (std::size_t i = 0; i < index.size(); ++i) index[i] = static_cast<std::int64_t>(i);
  g.write_coordinate(axes.extra_axis, index, "token index i (row i of X, 0-based; the last token is N - 1)");
}

// The statistics over trials of each column of `m` (trials x layers x width), shaped as the axes.
void write_summary(const h5::Group& g, const std::string& name, const Eigen::Ref<const Matrix>& m,
                   const MeasureInfo& info, const MeasureAxes& axes) {
  const ColumnStats s = column_stats(m);
  const std::pair<const char*, const Vector*> parts[] = {
      {"_mean", &s.mean}, {"_median", &s.median}, {"_q10", &s.q10}, {"_q90", &s.q90}};
  write_value_axis(g, axes);
  for (const auto& [suffix, v] : parts) {
    const h5::Dataset ds = g.write(name + suffix, axes.shape(static_cast<hsize_t>(v->size()) / axes.width), v->data());
    ds.set_attr("long_name", std::string(info.long_name) + " (" + (suffix + 1) + " over trials)");
    ds.set_attr("units", info.units);
    ds.set_attr("description", info.description);
    g.label_axes(ds, axes.dims());
  }
}

void write_summary(const h5::Group& g, const std::string& name, const Eigen::Ref<const Matrix>& m,
                   const MeasureInfo& info, const std::string& layer_dim) {
  write_summary(g, name, m, info, MeasureAxes{layer_dim});
}

// A [trial, layer] (or [trial, layer, token]) measure with its attributes and dimension scales:
// column k * width + i of `m` is layer k, value i, so m's rows in C order are the array's.
h5::Dataset write_measure(const h5::Group& g, const MeasureInfo& info, const Eigen::Ref<const Matrix>& m,
                          const MeasureAxes& axes) {
  write_value_axis(g, axes);
  std::vector<hsize_t> shape = axes.shape(static_cast<hsize_t>(m.cols()) / axes.width);
  shape.insert(shape.begin(), static_cast<hsize_t>(m.rows()));
  const std::vector<double> data = row_major(m);
  h5::Dataset ds = g.write(info.name, shape, data.data());
  ds.set_attr("long_name", info.long_name);
  ds.set_attr("units", info.units);
  ds.set_attr("description", info.description);
  std::vector<std::string> dims = axes.dims();
  dims.insert(dims.begin(), "trial");
  g.label_axes(ds, dims);
  return ds;
}

// The measures of `defs` (token or attention measures), each with the extra attributes of its
// registry entry (kernel/measures/measure_registry.hpp).
void write_measures(const h5::Group& metrics, const EngineSetup& s, const std::vector<const MeasureDef*>& defs,
                    const std::vector<Matrix>& values, const std::string& layer_dim) {
  for (std::size_t i = 0; i < defs.size(); ++i) {
    const h5::Dataset ds =
        write_measure(metrics, measure_info(*defs[i], s.config), values[i], axes_of(*defs[i], s.config.model.tokens, layer_dim));
    const MeasureContext context{s.config, s.max_rank, s.max_rank_input};
    for (const MeasureAttribute& a : measure_attributes(*defs[i], context)) {
      if (a.integer)
        ds.set_attr(a.name, a.integer_value);
      else
        ds.set_attr(a.name, a.value);
    }
  }
}

// The flow's time t = dt x layer on the layer axis (docs/science/particles.md), dt = residual.alpha:
// written for the runs that integrate the particle flow (dynamics.integrator = rk4, or the Euler
// step with residual.project = tangent), not for the others (whose files stay as they were).
void write_time(const h5::File& f, const ModelSpec& c, const std::vector<std::int64_t>& layer_ids) {
  if (c.integrator != Integrator::rk4 && c.residual_project != ResidualProject::tangent) return;
  std::vector<double> time;
  for (const std::int64_t t : layer_ids) time.push_back(c.residual_alpha * static_cast<double>(t));
  const h5::Dataset ds = f.write("time", {static_cast<hsize_t>(time.size())}, time.data());
  ds.set_attr("long_name", "time t = dt x layer of the particle flow (dt = residual.alpha) at each recorded layer");
  ds.set_attr("units", "1");
  ds.set_attr("dt", c.residual_alpha);
  ds.set_attr("integrator", c.integrator == Integrator::rk4 ? "rk4" : "euler");
  f.label_axes(ds, {"layer"});
}

// /config and, when the run read files, their digests (attribute input_sha256): the run's
// identity (check_run_file). Without input files there is no attribute, so such files are as before.
void write_config(const h5::File& f, const std::string& config_ini, const InputDigests& inputs) {
  const h5::Dataset config = f.write_string("config", config_ini);
  config.set_attr("long_name", "fully resolved configuration (INI); rcsim run --config reproduces the run");
  if (!inputs.empty()) config.set_attr("input_sha256", digests_text(inputs));
}

}  // namespace

void write_mask_rows(const h5::Group& f, const MaskRows& rows, std::size_t block_bytes) {
  const auto N = static_cast<hsize_t>(rows.lo.size());
  if (!rows.contiguous) throw std::logic_error("write_mask_rows: the mask's rows are not one range each");
  const h5::Dataset ds = f.create_bytes("mask", {N, N});
  // Whole chunks of rows (h5::chunk_shape, as create_bytes chunks it) at a time: none is compressed twice.
  const hsize_t chunk = std::max<hsize_t>(h5::chunk_shape({N, N})[0], 1);
  const hsize_t block = std::max<hsize_t>(1, hsize_t{block_bytes} / std::max<hsize_t>(N, 1) / chunk) * chunk;
  std::vector<std::uint8_t> buffer;
  for (hsize_t first = 0; first < N; first += block) {
    const hsize_t count = std::min(block, N - first);
    buffer.assign(count * N, 0);
    for (hsize_t r = 0; r < count; ++r) {
      const auto i = static_cast<std::size_t>(first + r);
      std::fill_n(buffer.begin() + static_cast<std::ptrdiff_t>(r * N + static_cast<hsize_t>(rows.lo[i])),
                  rows.hi[i] - rows.lo[i], std::uint8_t{1});
    }
    ds.write_rows(first, count, buffer.data());
  }
  ds.flush();
}

namespace {

constexpr std::size_t kMaxCentresAttribute = 4096;
constexpr std::size_t kMaskBlockBytes = std::size_t{1} << 22;  // /mask from the ranges: rows of about 4 MiB at a time

void write_mask(const h5::File& f, const EngineSetup& s) {
  const auto N = static_cast<hsize_t>(s.config.model.tokens);
  if (s.mask.size() > 0) {  // the dense mask (custom, reference platform): one write of a row-major copy
    std::vector<std::uint8_t> m(static_cast<std::size_t>(N * N));
    const auto n = static_cast<Eigen::Index>(N);
    Eigen::Map<Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(m.data(), n, n) = s.mask;
    f.write("mask", {N, N}, m.data());
  } else {  // the ranges (the cpu platform): a block of rows at a time
    write_mask_rows(f, s.rows, kMaskBlockBytes);
  }
  const h5::Dataset ds = f.open_dataset("mask");
  ds.set_attr("long_name", "attention mask: mask[i][j] = 1 iff token i attends to token j");
  ds.set_attr("quasi_strongly_connected", s.graph.quasi_strongly_connected ? 1 : 0);
  ds.set_attr("radius", s.graph.radius);
  // The centres as an attribute while they fit HDF5's 64 KiB attribute limit (4096 x 8 bytes, as
  // every file so far); more (a complete mask with N > 4096 has N) go to the dataset /mask_centres.
  const std::vector<std::int64_t> centres(s.graph.centres.begin(), s.graph.centres.end());
  if (centres.size() <= kMaxCentresAttribute) {
    ds.set_attr("centres", centres);
  } else {
    const h5::Dataset cds = f.write("mask_centres", {static_cast<hsize_t>(centres.size())}, centres.data());
    cds.set_attr("long_name", "centres of the mask's graph (tokens that reach every token), when more than 4096");
  }
  f.label_axes(ds, {"token", "attended_token"});
}

// /metrics: every recorded measure [trial, layer] (from the measure registry) and the spectrum.
void write_metrics(const h5::File& f, const EngineSetup& s, const LargeRows& rows, const Coordinates& coords) {
  const RunResults& r = rows.r;
  const int T = r.trials;
  const std::vector<std::int64_t>& layer_ids = coords.layer;
  const h5::Group metrics = f.create_group("metrics");
  coords.write(metrics);
  write_measures(metrics, s, r.token_defs, r.token, "layer");
  write_measures(metrics, s, r.attention_defs, r.attention, "attention_layer");
  if (!r.spectrum.empty()) {
    const auto m = static_cast<std::size_t>(r.spectrum_size);
    const h5::Dataset ds =
        write_per_trial(metrics, "spectrum", {static_cast<hsize_t>(T), layer_ids.size(), m}, rows, LargeData::spectrum);
    ds.set_attr("long_name", "singular values of X, descending");
    ds.set_attr("units", "same as X");
    std::vector<std::int64_t> sigma_index(m);
    for (std::size_t i = 0; i < m; ++i) sigma_index[i] = static_cast<std::int64_t>(i) + 1;
    metrics.write_coordinate("sigma_index", sigma_index, "i of sigma_i (singular values in descending order)");
    metrics.label_axes(ds, {"trial", "layer", "sigma_index"});
  }
}

void write_diagnostics(const h5::File& f, const RunResults& r, const Coordinates& coords) {
  const h5::Group diag = f.create_group("diagnostics");
  diag.write_coordinate("trial", coords.trial, "trial index");
  auto write_ints = [&](const char* name, const std::vector<int>& v, const char* long_name) {
    const std::vector<std::int64_t> w(v.begin(), v.end());
    const h5::Dataset ds = diag.write(name, {w.size()}, w.data());
    ds.set_attr("long_name", long_name);
    diag.label_axes(ds, {"trial"});
  };
  write_ints("underflow_layer", r.underflow_layer, "first layer where mu < 2.2e-308 (DBL_MIN); -1 = never");
  write_ints("nonfinite_layer", r.nonfinite_layer,
             "first layer with a non-finite token entry; the trial stopped there, later measures NaN; -1 = never");
  write_ints("degenerate_rows_total", r.degenerate_total, "rows without direction in the normalisation, all layers");
}

// /tokens (output.tokens: X(t) at the chosen layers) and /attention (output.attention).
void write_snapshots(const h5::File& f, const EngineSetup& s, const LargeRows& rows, const Coordinates& coords) {
  const RunResults& r = rows.r;
  const ModelSpec& c = s.config;
  const int T = r.trials, N = c.model.tokens, d = c.model.dim;
  if (!c.output.token_layers.empty()) {
    const auto S = c.output.token_layers.size();
    const std::vector<std::int64_t> layers(c.output.token_layers.begin(), c.output.token_layers.end());
    f.write_coordinate("tokens_layer", layers, "layer of each token snapshot");
    const h5::Dataset ds =
        write_per_trial(f, "tokens", {static_cast<hsize_t>(T), S, static_cast<hsize_t>(N), static_cast<hsize_t>(d)},
                        rows, LargeData::snapshots);
    ds.set_attr("long_name", "token matrices X(t) at the layers in /tokens_layer (rows are tokens)");
    ds.set_attr("units", "same as X");
    f.label_axes(ds, {"trial", "tokens_layer", "token", "feature"});
  }

  // Attention matrices (output.attention).
  if (!r.attention_matrices.empty()) {
    const h5::Dataset ds = write_per_trial(
        f, "attention",
        {static_cast<hsize_t>(T), coords.attention_layer.size(), static_cast<hsize_t>(N), static_cast<hsize_t>(N)}, rows,
        LargeData::attention_matrices);
    ds.set_attr("long_name", "head-averaged attention matrix (1/H) sum_h A_h of the layer t -> t+1 (rows: queries)");
    ds.set_attr("units", "1");
    f.label_axes(ds, {"trial", "attention_layer", "token", "attended_token"});
  }
}

// The index of the token measure `name` in r.token (the registry's order).
std::size_t token_column(const RunResults& r, const std::string& name) {
  for (std::size_t i = 0; i < r.token_info.size(); ++i)
    if (r.token_info[i].name == name) return i;
  throw std::logic_error("run results without the token measure " + name);
}

// /summary: each measure's ensemble statistics per layer, log10 mu and the full-rank fraction.
void write_summary_group(const h5::File& f, const EngineSetup& s, const RunResults& r, const Coordinates& coords) {
  const int T = r.trials;
  const std::vector<std::int64_t>& layer_ids = coords.layer;
  const h5::Group g = f.create_group("summary");
  coords.write(g);
  for (std::size_t i = 0; i < r.token_info.size(); ++i)
    write_summary(g, r.token_info[i].name, r.token[i], r.token_info[i], axes_of(*r.token_defs[i], r.tokens, "layer"));
  for (std::size_t i = 0; i < r.attention_info.size(); ++i)
    write_summary(g, r.attention_info[i].name, r.attention[i], r.attention_info[i],
                  axes_of(*r.attention_defs[i], r.tokens, "attention_layer"));
  const Matrix log_mu = r.token[token_column(r, "mu")].unaryExpr([](double x) { return std::log10(x); });
  write_summary(g, "log10_mu", log_mu,
                {"log10_mu", "log10 of mu (-inf where mu = 0)", "1",
                 "log10 of the token similarity mu = ||X - 1 gamma||_F (-inf where mu = 0)"},
                "layer");
  const auto S = static_cast<Eigen::Index>(layer_ids.size());
  Vector frac(S);
  const Matrix& rank = r.token[token_column(r, "rank")];
  for (Eigen::Index k = 0; k < S; ++k) {
    const int full = layer_ids[static_cast<std::size_t>(k)] == 0 ? s.max_rank_input : s.max_rank;
    frac(k) = (rank.col(k).array() >= full).cast<double>().sum() / T;
  }
  const h5::Dataset ds = g.write("full_rank_fraction", {static_cast<hsize_t>(S)}, frac.data());
  ds.set_attr("long_name", "fraction of trials whose rank equals the largest rank the layer allows");
  ds.set_attr("units", "1");
  g.label_axes(ds, {"layer"});
}

// What ran inside a trial: the threads one trial uses (the cpu platform's row blocks; 1 on the
// others) and, on the opencl platform, the device and the batch (docs/reference/file-formats.md).
void write_platform_attrs(const h5::File& f, const EngineSetup& s) {
  f.set_attr("threads_per_trial", s.platform == Platform::cpu ? s.trial_threads : 1);
  if (s.platform != Platform::opencl) return;
  const OpenclDeviceInfo device = opencl_device_info();
  f.set_attr("opencl_device", device.name);
  f.set_attr("opencl_vendor", device.vendor);
  f.set_attr("opencl_driver_version", device.driver_version);
  f.set_attr("opencl_compute_units", device.compute_units);
  f.set_attr("opencl_kernel", device.kernel);
  // The trials whose attention calls are launched together (RCSIM_OPENCL_BATCH, at most the trials);
  // each runs on a host thread of its own, so `threads` holds the same number.
  f.set_attr("opencl_batch", trial_workers(s, 1, s.config.run.trials));
}

void write_run_contents(const h5::File& f, const std::string& config_ini, const EngineSetup& s, const LargeRows& rows,
                        const Provenance& p, const InputDigests& inputs) {
  const RunResults& r = rows.r;
  const ModelSpec& c = s.config;
  const int T = r.trials, L = r.layers, N = c.model.tokens, d = c.model.dim;
  write_header(f, {"rcsim-run", kRunFormatVersion, p.command_line});
  f.set_attr("seed", std::to_string(c.run.seed));  // text: HDF5 attributes have no portable uint64 in h5py/xarray
  f.set_attr("threads", p.threads);
  f.set_attr("platform", to_string(resolved_platform(c)));  // run.platform as resolved (docs/dev/platforms.md)
  write_platform_attrs(f, s);
  f.set_attr("mask_type", to_string(c.mask.type));
  f.set_attr("norm_type", to_string(c.norm.type));
  f.set_attr("tokens", N);
  f.set_attr("dim", d);
  f.set_attr("layers", L);
  f.set_attr("heads", c.model.heads);
  f.set_attr("trials", T);
  f.set_attr("d_qk", c.model.d_qk);
  f.set_attr("max_rank", s.max_rank);
  f.set_attr("max_rank_input", s.max_rank_input);

  write_config(f, config_ini, inputs);

  // Coordinates, as dimension scales: at the root and again in each group (Coordinates).
  const Coordinates coords{iota(T),
                           std::vector<std::int64_t>(r.layer_index.begin(), r.layer_index.end()),
                           std::vector<std::int64_t>(r.attention_layer_index.begin(), r.attention_layer_index.end()),
                           c.output.schedule};
  const std::vector<std::int64_t>& layer_ids = coords.layer;
  coords.write(f);
  write_time(f, c, layer_ids);

  write_mask(f, s);
  write_metrics(f, s, rows, coords);
  write_diagnostics(f, r, coords);
  write_snapshots(f, s, rows, coords);
  write_summary_group(f, s, r, coords);
  mark_complete(f);
}

}  // namespace

void write_run_file(const std::string& path, const std::string& config_ini, const EngineSetup& s, const RunResults& r,
                    const Provenance& p, const InputDigests& inputs, const Checkpoint* checkpoint) {
  // On disk as it is written, not an image in memory (which would add the file's size to the
  // peak memory twice: the image and its copy); each dataset flushed and checked.
  h5::File f = h5::File::create_on_disk(path);
  write_run_contents(f, config_ini, s, LargeRows{r, checkpoint}, p, inputs);
  f.close();  // checked: a file that did not fit is an error, never renamed
}

std::vector<char> run_file_image(const std::string& name, const std::string& config_ini, const EngineSetup& s,
                                 const RunResults& r, const Provenance& p, const InputDigests& inputs) {
  h5::File f = h5::File::create(name);  // the name only labels messages
  write_run_contents(f, config_ini, s, LargeRows{r, nullptr}, p, inputs);
  return f.close_to_image();
}

std::string first_difference(const std::string& ini_a, const std::string& ini_b) {
  std::istringstream a(ini_a), b(ini_b);
  std::string la, lb, section;
  for (;;) {
    const bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) return "";
    if (ga && !la.empty() && la[0] == '[') section = la.substr(1, la.find(']') - 1) + ".";
    if (ga != gb || la != lb) {
      auto key_value = [](const std::string& line) -> std::pair<std::string, std::string> {
        const auto eq = line.find(" = ");
        if (eq == std::string::npos) return {line, ""};
        return {line.substr(0, eq), line.substr(eq + 3)};
      };
      const auto [ka, va] = key_value(ga ? la : "");
      const auto [kb, vb] = key_value(gb ? lb : "");
      // Text from a file (a stored configuration): escaped and cut for the message.
      if (ka == kb) return "key '" + printable(section + ka) + "': " + printable(va) + " -> " + printable(vb);
      return "'" + (ga ? printable(la) : std::string("(end)")) + "' -> '" + (gb ? printable(lb) : std::string("(end)")) + "'";
    }
  }
}

RunFileCheck check_run_file(const std::string& path, const std::string& config_ini, const InputDigests& inputs) {
  RunFileCheck out;
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  try {
    const h5::File f = h5::File::open_read(path);
    if (!f.has_attr("complete") || f.attr_int("complete") != 1) return out;
    // Keys that do not change results (run.threads, output.file) do not count.
    const std::string stored = result_configuration(f.read_string("config")), wanted = result_configuration(config_ini);
    if (stored != wanted) {
      out.state = RunFileState::differs;
      out.difference = first_difference(stored, wanted);
      return out;
    }
    // The same configuration: the same inputs' content too (none recorded = unknown = differs).
    std::string digests;
    try {
      const h5::Dataset config = f.open_dataset("config");
      if (config.has_attr("input_sha256")) digests = config.attr_string("input_sha256");
    } catch (const std::exception& e) {  // a damaged identity is not this run's identity
      out.state = RunFileState::differs;
      out.difference = printable(e.what(), 2 * kEchoLimit);
      return out;
    }
    out.difference = digest_difference(digests, inputs);
    out.state = out.difference.empty() ? RunFileState::matches : RunFileState::differs;
  } catch (const std::exception&) {
  }
  return out;
}

}  // namespace rcsim
