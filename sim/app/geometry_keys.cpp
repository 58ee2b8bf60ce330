#include "app/geometry_command.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "geometry/brody.hpp"
#include "geometry/selectability.hpp"
#include "io/isolated.hpp"
#include "kernel/support/errors.hpp"

namespace rcsim {

namespace {

// The keys read from a file, every entry finite: else one error naming the file, the dataset (or the
// run's trial and layer) and the first non-finite entry (key i, component l).
template <class M>
Matrix finite_keys(const M& K, const std::string& where) {
  for (Eigen::Index i = 0; i < K.rows(); ++i)
    for (Eigen::Index l = 0; l < K.cols(); ++l)
      if (!std::isfinite(K(i, l))) {
        std::ostringstream why;
        why << where << " holds the non-finite value " << K(i, l) << " at key " << i << ", component " << l << " (of ["
            << K.rows() << ", " << K.cols() << "]); every entry must be finite";
        throw UsageError(why.str());
      }
  return K;
}

Matrix read_keys(std::map<std::string, std::string>& v, std::string& origin) {
  const std::string source = v["keys.source"];
  if (source == "gaussian") {
    const int n = parse_int_value("keys.count", v["keys.count"], 1);
    const int d = parse_int_value("keys.dim", v["keys.dim"], 1);
    const auto seed = parse_seed_value("keys.seed", v["keys.seed"]);
    const int draw = parse_int_value("keys.draw", v["keys.draw"], 0);
    origin = "gaussian N(0,1), n = " + std::to_string(n) + ", d = " + std::to_string(d) + ", seed " +
             std::to_string(seed) + ", draw " + std::to_string(draw);
    return gaussian_keys(n, d, seed, draw);
  }
  if (source != "file" && source != "run")
    throw UsageError("invalid value '" + source + "' for key 'keys.source': allowed: gaussian | file | run");
  const std::string file = v["keys.file"];
  if (file.empty()) throw UsageError("key 'keys.file': required when keys.source = " + source);
  const h5::File f = h5::File::open_read(file, "keys.file");
  if (source == "file") {
    const std::string ds = v["keys.dataset"];
    if (!f.exists(ds)) throw UsageError("keys.file '" + file + "': no dataset '" + ds + "' (key keys.dataset)");
    const RowMajorMatrix K = f.read_matrix(ds, {-1, -1});
    if (K.rows() < 1 || K.cols() < 1)
      throw UsageError("keys.file '" + file + "': dataset '" + ds +
                       "' is empty (need n >= 1 keys of dimension d >= 1)");
    origin = file + ":/" + ds;
    return finite_keys(K, "keys.file '" + file + "': dataset '" + ds + "'");
  }
  // A run file: /tokens [trial, snapshot, N, d] and /tokens_layer [snapshot].
  if (!f.exists("tokens") || !f.exists("tokens_layer"))
    throw UsageError("keys.file '" + file +
                     "': no /tokens in this run file (run it with output.tokens = final, all or a list of layers)");
  const h5::Array tokens = f.read("tokens");
  const h5::Array layers = f.read("tokens_layer");
  if (tokens.shape.size() != 4)
    throw UsageError("keys.file '" + file + "': /tokens has shape " + h5::shape_string(tokens.shape) +
                     ", expected [trial, snapshot, N, d]");
  const long long T = static_cast<long long>(tokens.shape[0]), S = static_cast<long long>(tokens.shape[1]);
  const long long N = static_cast<long long>(tokens.shape[2]), d = static_cast<long long>(tokens.shape[3]);
  if (T < 1 || S < 1 || N < 1 || d < 1)
    throw UsageError("keys.file '" + file + "': /tokens has shape " + h5::shape_string(tokens.shape) +
                     ", expected at least one trial, snapshot, token and dimension");
  if (layers.shape != std::vector<hsize_t>{static_cast<hsize_t>(S)})
    throw UsageError("keys.file '" + file + "': /tokens_layer has shape " + h5::shape_string(layers.shape) +
                     ", expected [" + std::to_string(S) + "] (one layer per snapshot of /tokens)");
  const int trial = parse_int_value("keys.trial", v["keys.trial"], 0);
  if (trial >= T)
    throw UsageError("invalid value '" + v["keys.trial"] + "' for key 'keys.trial': the run has " + std::to_string(T) +
                     " trials (0 .. " + std::to_string(T - 1) + ")");
  long long snap = S - 1;
  std::string listed;
  for (long long s = 0; s < S; ++s) listed += (s ? ", " : "") + fmt(layers.data[static_cast<std::size_t>(s)]);
  if (v["keys.layer"] != "last") {
    const int layer = parse_int_value("keys.layer", v["keys.layer"], 0);
    snap = -1;
    for (long long s = 0; s < S; ++s)
      if (layers.data[static_cast<std::size_t>(s)] == static_cast<double>(layer)) snap = s;
    if (snap < 0)
      throw UsageError("invalid value '" + v["keys.layer"] +
                       "' for key 'keys.layer': the run file stores tokens at layers " + listed + " only");
  }
  Matrix K(N, d);
  const std::size_t base = static_cast<std::size_t>((trial * S + snap) * N * d);
  for (long long i = 0; i < N; ++i)
    for (long long l = 0; l < d; ++l) K(i, l) = tokens.data[base + static_cast<std::size_t>(i * d + l)];
  origin =
      file + ":/tokens trial " + std::to_string(trial) + " layer " + fmt(layers.data[static_cast<std::size_t>(snap)]);
  return finite_keys(K, "keys.file '" + file + "': " + origin.substr(file.size() + 1));
}

}  // namespace

CommandSpec keys_command() {
  return {"keys",
          "decide for every key whether some query gives it the strictly largest score q.k (an LP per key, GLPK)",
          with_norm({
              {"keys.source", "gaussian",
               "gaussian (i.i.d. N(0,1)) | file (a 2-D dataset [n, d]) | run (tokens of a run file)"},
              {"keys.count", "20", "number of keys n >= 1 (gaussian)"},
              {"keys.dim", "3", "key dimension d >= 1 (gaussian)"},
              {"keys.seed", std::to_string(kDefaultSeed), "seed of the gaussian keys"},
              {"keys.draw", "0", "draw index >= 0: the keys of draw t of cell (n, d) of brody-map"},
              {"keys.file", "", "HDF5 file (source file or run)"},
              {"keys.dataset", "keys", "dataset [n, d] of the file (source file)"},
              {"keys.trial", "0", "trial of the run file (source run)"},
              {"keys.layer", "last", "layer of the run file's /tokens_layer (source run), or last"},
              {"keys.rtol", "1e-9", "relative tolerance of the floating-point decision (docs/user/geometry.md)"},
              {"keys.exact", "true", "re-check every key found unselectable with GLPK's exact (rational) simplex"},
              {"output.file", "", "optional HDF5 output (empty: table on stdout only)"},
          })};
}

int cmd_keys(std::map<std::string, std::string> v, const std::string& command_line) {
  std::string origin;
  if (v["keys.source"] == "file" || v["keys.source"] == "run")  // first in a child: see core/isolated.hpp
    run_isolated([&] {
      auto copy = v;
      std::string ignored;
      (void)read_keys(copy, ignored);
    }, "reading keys.file '" + v["keys.file"] + "'", isolated_time_limit(v["keys.file"]));
  const Matrix K0 = read_keys(v, origin);
  const int n = static_cast<int>(K0.rows()), d = static_cast<int>(K0.cols());
  const double rtol = parse_double_value("keys.rtol", v["keys.rtol"], 0.0, false);
  const Normalization norm = parse_norm(v, d);
  Matrix K = K0;
  normalize_rows(K, norm);
  const bool exact = parse_bool_value("keys.exact", v["keys.exact"]);
  const KeySelectability s = analyse_keys(K, rtol, false, exact);

  const bool scaled = norm.type == NormType::dyt || norm.type == NormType::derf;  // elementwise g f(a y) + b
  std::cout << "keys: " << origin << "; normalisation " << to_string(norm.type)
            << (scaled ? " (alpha " + fmt(norm.alpha) + ")" : std::string()) << "\n";
  std::cout << "  key  selectable       margin  certificate        |k|\n";
  for (int i = 0; i < n; ++i)
    std::cout << std::setw(5) << i << std::setw(12) << (s.selectable[static_cast<std::size_t>(i)] ? "yes" : "no")
              << std::setw(13) << fmt(s.margin(i), 4) << std::setw(13) << fmt(s.certificate(i), 4) << std::setw(11)
              << fmt(K.row(i).stableNorm(), 4) << "\n";
  std::cout << "unselectable: " << s.unselectable_count() << " of " << n << " (fraction "
            << fmt(s.unselectable_fraction()) << ")\n";
  if (s.exact_unresolved > 0)
    spdlog::warn("{} keys: the exact re-check hit its time limit; their floating-point decision stands",
                 s.exact_unresolved);

  const std::string out = v["output.file"];
  if (!out.empty()) {
    write_atomic(out, "rcsim-keys", command_line, [&](const h5::File& f) {
      f.set_attr("source", origin);
      f.set_attr("norm_type", to_string(norm.type));
      f.set_attr("norm_eps", norm.eps);
      if (scaled) f.set_attr("norm_alpha", norm.alpha);  // only where it acts (files of the other maps as before)
      f.set_attr("rtol", rtol);
      f.set_attr("exact", exact ? 1 : 0);
      f.set_attr("exact_unresolved", s.exact_unresolved);
      f.set_attr("count", n);
      f.set_attr("dim", d);
      f.set_attr("unselectable_count", s.unselectable_count());
      f.set_attr("unselectable_fraction", s.unselectable_fraction());
      std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = i;
      const h5::Dataset key = f.write("key", {static_cast<hsize_t>(n)}, idx.data());
      key.make_scale("key");
      auto put = [&](h5::Dataset ds, const std::string& long_name) {
        ds.attach_scale(key, 0);
        describe(ds, long_name);
      };
      put(write_matrix(f, "keys_input", K0), "keys before normalisation (rows)");
      put(write_matrix(f, "keys", K), "keys after normalisation (rows), as analysed");
      put(f.write("selectable", {static_cast<hsize_t>(n)}, s.selectable.data()),
          "1 iff some query gives the key the strictly largest score");
      put(write_vector(f, "margin", s.margin), "LP optimum: L1 distance of the key from the convex hull of the others");
      put(write_vector(f, "certificate", s.certificate), "min_j q.(k_i - k_j) for the LP's query q, |q_l| <= 1");
      put(write_matrix(f, "query", s.query), "the LP's query per key (a witness when selectable)");
    });
    spdlog::info("wrote {}", out);
  }
  return 0;
}

}  // namespace rcsim
