#include "cli/cli_geometry.hpp"
#include "io/output_file.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "geometry/brody.hpp"
#include "io/isolated.hpp"
#include "config/config.hpp"
#include "kernel/errors.hpp"
#include "io/safe_file.hpp"
#include "io/hdf5_file.hpp"
#include "kernel/printable.hpp"
#include "geometry/layernorm_geometry.hpp"
#include "kernel/normalization.hpp"
#include "io/run_file.hpp"
#include "geometry/selectability.hpp"
#include "kernel/simulation.hpp"
#include "kernel/summary.hpp"
#include "kernel/version.hpp"

namespace rcsim {

namespace {

namespace fs = std::filesystem;

struct CommandSpec {
  std::string name, summary;
  std::vector<KeyDecl> keys;
};

// The normalisation keys of the run vocabulary (config/keys.cpp), declared there once.
std::vector<KeyDecl> with_norm(std::vector<KeyDecl> keys) {
  for (const char* k : {"norm.type", "norm.eps", "norm.gain", "norm.bias"}) keys.push_back(key_decl(k));
  return keys;
}

const std::vector<CommandSpec>& commands() {
  static const std::vector<CommandSpec> specs = {
      {"keys", "decide for every key whether some query gives it the strictly largest score q.k (an LP per key, GLPK)",
       with_norm({
           {"keys.source", "gaussian",
            "gaussian (i.i.d. N(0,1)) | file (a 2-D dataset [n, d]) | run (tokens of a run file)"},
           {"keys.count", "20", "number of keys n >= 1 (gaussian)"},
           {"keys.dim", "3", "key dimension d >= 1 (gaussian)"},
           {"keys.seed", "20240527", "seed of the gaussian keys"},
           {"keys.draw", "0", "draw index >= 0: the keys of draw t of cell (n, d) of brody-map"},
           {"keys.file", "", "HDF5 file (source file or run)"},
           {"keys.dataset", "keys", "dataset [n, d] of the file (source file)"},
           {"keys.trial", "0", "trial of the run file (source run)"},
           {"keys.layer", "last", "layer of the run file's /tokens_layer (source run), or last"},
           {"keys.rtol", "1e-9", "relative tolerance of the floating-point decision (docs/user/geometry.md)"},
           {"keys.exact", "true", "re-check every key found unselectable with GLPK's exact (rational) simplex"},
           {"output.file", "", "optional HDF5 output (empty: table on stdout only)"},
       })},
      {"brody-map",
       "fraction of unselectable keys over n and d (Brody et al. 2023), with and without normalisation",
       {
           {"map.count_min", "3", "smallest number of keys n >= 1"},
           {"map.count_max", "60", "largest number of keys n"},
           {"map.dim_min", "3", "smallest dimension d >= 2"},
           {"map.dim_max", "15", "largest dimension d"},
           {"map.draws", "100", "random key sets per cell, >= 1"},
           {"map.seed", "20240527", "seed (draw t of cell (n, d) = rcsim keys --keys.draw=t)"},
           {"map.norms", "none,layernorm",
            "comma list of normalisations (none | sphere | layernorm | projection | rmsnorm)"},
           key_decl("norm.eps"),
           {"keys.rtol", "1e-9", "relative tolerance of the floating-point decision"},
           {"keys.exact", "false", "re-check unselectable keys with GLPK's exact simplex (slow for norm none)"},
           {"map.threads", "1", "worker threads >= 0 over cells (0 = all cores); the map does not depend on it"},
           {"output.file", "data/brody_map.h5", "HDF5 output"},
       }},
      {"brody-example",
       "attention weights of four keys in the plane against the query angle, projection/scaling on/off",
       {
           {"example.magnitudes", "1,2,3,4", "magnitudes of key 3 (comma list, > 0)"},
           {"example.angles", "360", "number of query angles over [0, 360) degrees, >= 1"},
           {"example.query_norm", "4", "query length s > 0 (inverse temperature)"},
           {"output.file", "data/brody_example.h5", "HDF5 output"},
       }},
      {"ln-geometry",
       "the LayerNorm image: plane normal, principal axes, semi-axes, and a sampling check",
       {
           {"ln.dim", "3", "dimension d >= 2"},
           key_decl("norm.gain"),
           key_decl("norm.bias"),
           {"ln.eps", "1e-1,1e-3,1e-5", "comma list of epsilons >= 0 for the sampling check"},
           {"ln.samples", "100000", "random inputs per epsilon, >= 1"},
           {"ln.input_std", "1", "standard deviation > 0 of the i.i.d. normal inputs"},
           {"ln.seed", "20240527", "seed of the inputs"},
           {"ln.store", "2000", "outputs stored per epsilon in the HDF5 file, >= 0"},
           {"output.file", "", "optional HDF5 output (empty: report on stdout only)"},
       }},
  };
  return specs;
}

const CommandSpec& command_spec(const std::string& name) {
  for (const auto& c : commands())
    if (c.name == name) return c;
  throw UsageError("unknown command '" + name + "'");
}

// --key=value arguments against the command's keys; defaults filled in.
std::map<std::string, std::string> parse_keys(const CommandSpec& spec, const std::vector<std::string>& args) {
  std::map<std::string, std::string> v;
  for (const auto& k : spec.keys) v[k.key] = k.default_value;
  std::map<std::string, std::string> given;  // a key given twice is refused, naming it
  for (const auto& a : args) {
    const auto eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos)
      throw UsageError("rcsim " + spec.name + ": unexpected argument '" + a + "' (keys are given as --key=value)");
    const std::string key = a.substr(2, eq - 2);
    if (!v.count(key)) {
      std::string allowed;
      for (const auto& k : spec.keys) allowed += (allowed.empty() ? "" : ", ") + k.key;
      throw UsageError("rcsim " + spec.name + ": unknown key '" + key + "' (allowed: " + allowed + ")");
    }
    if (const auto [it, fresh] = given.emplace(key, a.substr(eq + 1)); !fresh)
      throw UsageError("rcsim " + spec.name + ": key '" + printable(key) + "' is given twice on the command line (--" +
                       printable(key) + "=" + printable(it->second) + " and " + printable(a) + "); keep one of them");
    v[key] = a.substr(eq + 1);
  }
  return v;
}

NormType parse_norm_type(const std::string& key, const std::string& text) {
  try {
    return make_config({{"norm.type", text}}).norm.type;
  } catch (const UsageError&) {
    bad_value(key, text, "allowed: " + key_decl("norm.type").allowed());
  }
}

// The normalisation of dimension d from the norm.* keys (validated by the run vocabulary).
Normalization parse_norm(std::map<std::string, std::string>& v, int d) {
  const Config c = make_config({{"model.dim", std::to_string(d)},
                                {"norm.type", v["norm.type"]},
                                {"norm.eps", v["norm.eps"]},
                                {"norm.gain", v["norm.gain"]},
                                {"norm.bias", v["norm.bias"]}});
  if (d < 2 && (c.norm.type == NormType::layernorm || c.norm.type == NormType::projection))
    throw UsageError("key 'norm.type': " + to_string(c.norm.type) +
                     " needs dimension d >= 2 (for d = 1 it maps every key to the same point)");
  return Normalization::from_config(c);
}

std::string fmt(double x, int prec = 6) {
  std::ostringstream os;
  os << std::setprecision(prec) << x;
  return os.str();
}

// Write an HDF5 file through OutputFile (lock, exclusive temporary, header, checked close, rename).
template <class Body>
void write_atomic(const std::string& out, const std::string& filetype, const std::string& command_line, Body&& body) {
  OutputFile file(out, {"output.file", "output '" + out + "'"});
  file.write_hdf5({filetype, 2, command_line}, body);  // format 2: every axis has a dimension scale
}

h5::Dataset write_matrix(const h5::Group& g, const std::string& name, const Matrix& m) {
  const RowMajorMatrix r = m;
  return g.write(name, {static_cast<hsize_t>(m.rows()), static_cast<hsize_t>(m.cols())}, r.data());
}

h5::Dataset write_vector(const h5::Group& g, const std::string& name, const Vector& v) {
  return g.write(name, {static_cast<hsize_t>(v.size())}, v.data());
}

void describe(const h5::Dataset& ds, const std::string& long_name, const std::string& units = "1") {
  ds.set_attr("long_name", long_name);
  ds.set_attr("units", units);
}

// ---------------------------------------------------------------------------------------------
// rcsim keys

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
    return K;
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
  return K;
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

  std::cout << "keys: " << origin << "; normalisation " << to_string(norm.type) << "\n";
  std::cout << "  key  selectable       margin  certificate        |k|\n";
  for (int i = 0; i < n; ++i)
    std::cout << std::setw(5) << i << std::setw(12) << (s.selectable[static_cast<std::size_t>(i)] ? "yes" : "no")
              << std::setw(13) << fmt(s.margin(i), 4) << std::setw(13) << fmt(s.certificate(i), 4) << std::setw(11)
              << fmt(K.row(i).norm(), 4) << "\n";
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

// ---------------------------------------------------------------------------------------------
// rcsim brody-map

std::vector<NormType> parse_norm_list(const std::string& key, const std::string& text) {
  std::vector<NormType> out;
  std::string t = text;
  std::replace(t.begin(), t.end(), ',', ' ');
  std::istringstream is(t);
  std::string tok;
  while (is >> tok) {
    const NormType n = parse_norm_type(key, tok);
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw UsageError("invalid value '" + text + "' for key '" + key + "': " + tok + " is listed twice");
    out.push_back(n);
  }
  if (out.empty())
    throw UsageError("invalid value '" + text + "' for key '" + key + "': expected a comma list of normalisations");
  return out;
}

int cmd_brody_map(std::map<std::string, std::string> v, const std::string& command_line, bool quiet,
                  const std::atomic<bool>* cancel) {
  BrodyMapSpec spec;
  spec.count_min = parse_int_value("map.count_min", v["map.count_min"], 1);
  spec.count_max = parse_int_value("map.count_max", v["map.count_max"], spec.count_min);
  spec.dim_min = parse_int_value("map.dim_min", v["map.dim_min"], 2);
  spec.dim_max = parse_int_value("map.dim_max", v["map.dim_max"], spec.dim_min);
  spec.draws = parse_int_value("map.draws", v["map.draws"], 1);
  spec.seed = parse_seed_value("map.seed", v["map.seed"]);
  spec.norms = parse_norm_list("map.norms", v["map.norms"]);
  spec.eps = parse_double_value("norm.eps", v["norm.eps"], 0.0, false);
  spec.rtol = parse_double_value("keys.rtol", v["keys.rtol"], 0.0, false);
  spec.exact = parse_bool_value("keys.exact", v["keys.exact"]);
  spec.threads = parse_int_value("map.threads", v["map.threads"], 0);
  const std::string out = v["output.file"];
  if (out.empty()) throw UsageError("invalid value '' for key 'output.file': expected a file name");

  int last_pct = -1;
  const BrodyMap m = brody_map(spec, cancel, [&](int done, int total) {
    const int pct = 100 * done / total;
    if (!quiet && pct / 10 != last_pct / 10) spdlog::info("brody-map: {} of {} cells", done, total);
    last_pct = pct;
  });

  // Summary on stdout: per normalisation, the extremes of the two maps.
  std::cout << "brody-map: n = " << spec.count_min << ".." << spec.count_max << ", d = " << spec.dim_min << ".."
            << spec.dim_max << ", " << spec.draws << " draws per cell" << (spec.exact ? ", exact re-check" : "") << ", "
            << fmt(m.seconds, 3) << " s\n";
  for (std::size_t k = 0; k < spec.norms.size(); ++k) {
    const Matrix& U = m.unselectable_fraction[k];
    const Matrix& A = m.any_unselectable_fraction[k];
    std::cout << "  " << std::setw(10) << to_string(spec.norms[k]) << ": unselectable fraction mean "
              << fmt(U.mean(), 4) << ", max " << fmt(U.maxCoeff(), 4) << "; draws with >= 1 unselectable: mean "
              << fmt(A.mean(), 4) << ", max " << fmt(A.maxCoeff(), 4)
              << (spec.exact ? "; exact re-checks timed out: " + std::to_string(m.exact_unresolved[k]) : std::string())
              << "\n";
  }
  write_atomic(out, "rcsim-brody-map", command_line, [&](const h5::File& f) {
    f.set_attr("draws", spec.draws);
    f.set_attr("seed", std::to_string(spec.seed));
    f.set_attr("norm_eps", spec.eps);
    f.set_attr("rtol", spec.rtol);
    f.set_attr("exact", spec.exact ? 1 : 0);
    f.set_attr("elapsed_seconds", m.seconds);
    std::string names;
    for (auto nt : spec.norms) names += (names.empty() ? "" : ",") + to_string(nt);
    f.set_attr("norms", names);
    std::vector<std::int64_t> counts(m.counts.begin(), m.counts.end()), dims(m.dims.begin(), m.dims.end());
    // The coordinates, at the root and in each group (xarray.open_dataset(file, group=...)).
    auto coordinates = [&](const h5::Group& g) {
      g.write_coordinate("count", counts, "number of keys n");
      g.write_coordinate("dim", dims, "key dimension d");
    };
    coordinates(f);
    for (std::size_t k = 0; k < spec.norms.size(); ++k) {
      const h5::Group g = f.create_group(to_string(spec.norms[k]));
      coordinates(g);
      auto put = [&](const std::string& name, const Matrix& M, const std::string& long_name) {
        const h5::Dataset d = write_matrix(g, name, M);
        describe(d, long_name);
        g.label_axes(d, {"dim", "count"});
      };
      put("unselectable_fraction", m.unselectable_fraction[k], "mean over draws of the fraction of unselectable keys");
      put("any_unselectable_fraction", m.any_unselectable_fraction[k],
          "fraction of draws with at least one unselectable key");
      put("max_unselectable", m.max_unselectable[k], "largest number of unselectable keys in one draw");
      g.set_attr("exact_unresolved", static_cast<std::int64_t>(m.exact_unresolved[k]));
    }
  });
  spdlog::info("wrote {}", out);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// rcsim brody-example

int cmd_brody_example(std::map<std::string, std::string> v, const std::string& command_line) {
  BrodyExampleSpec spec;
  spec.magnitudes = parse_number_list_value("example.magnitudes", v["example.magnitudes"]);
  for (double mg : spec.magnitudes)
    if (!(mg > 0))
      throw UsageError("invalid value '" + v["example.magnitudes"] +
                       "' for key 'example.magnitudes': every magnitude must be > 0");
  spec.angles = parse_int_value("example.angles", v["example.angles"], 1);
  spec.query_norm = parse_double_value("example.query_norm", v["example.query_norm"], 0.0, true);
  const std::string out = v["output.file"];
  if (out.empty()) throw UsageError("invalid value '' for key 'output.file': expected a file name");
  const BrodyExample ex = brody_example(spec);

  const char* names[2][2] = {{"none", "scaling"}, {"projection", "projection+scaling"}};
  std::cout << "brody-example: unselectable keys (numbered 1..4; key 3 has magnitude m) for queries in the plane\n";
  std::cout << "  magnitude";
  for (int p = 0; p < 2; ++p)
    for (int s = 0; s < 2; ++s) std::cout << std::setw(20) << names[p][s];
  std::cout << "\n";
  for (std::size_t k = 0; k < spec.magnitudes.size(); ++k) {
    std::cout << std::setw(11) << fmt(spec.magnitudes[k], 3);
    for (int p = 0; p < 2; ++p)
      for (int s = 0; s < 2; ++s) {
        std::string u;
        for (int j = 0; j < 4; ++j)
          if (!ex.selectable[p][s][k][static_cast<std::size_t>(j)]) u += (u.empty() ? "" : ",") + std::to_string(j + 1);
        std::cout << std::setw(20) << (u.empty() ? "-" : u);
      }
    std::cout << "\n";
  }

  write_atomic(out, "rcsim-brody-example", command_line, [&](const h5::File& f) {
    f.set_attr("query_norm", spec.query_norm);
    const h5::Dataset th = f.write("theta", ex.theta_degrees);
    th.make_scale("theta");
    describe(th, "query angle in the plane orthogonal to 1 (from e1 = (1,-1,0)/sqrt 2 towards e2 = (1,1,-2)/sqrt 6)",
             "degree");
    const h5::Dataset mg = f.write("magnitude", spec.magnitudes);
    mg.make_scale("magnitude");
    describe(mg, "magnitude of key 3");
    describe(write_matrix(f, "base_keys", ex.base_keys), "the four keys in R^3 at magnitude 1 (rows)");
    const std::size_t M = spec.magnitudes.size(), A = ex.theta_degrees.size();
    std::vector<double> w(2 * 2 * M * A * 4), pk(2 * 2 * M * 4 * 2);
    std::vector<std::uint8_t> sel(2 * 2 * M * 4);
    for (std::size_t p = 0; p < 2; ++p)
      for (std::size_t s = 0; s < 2; ++s)
        for (std::size_t k = 0; k < M; ++k) {
          const std::size_t pskey = (p * 2 + s) * M + k;
          for (std::size_t a = 0; a < A; ++a)
            for (std::size_t j = 0; j < 4; ++j)
              w[(pskey * A + a) * 4 + j] =
                  ex.weights[p][s][k](static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(j));
          for (std::size_t j = 0; j < 4; ++j) {
            sel[pskey * 4 + j] = ex.selectable[p][s][k][j];
            for (std::size_t c = 0; c < 2; ++c)
              pk[(pskey * 4 + j) * 2 + c] =
                  ex.plane_keys[p][s][k](static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(c));
          }
        }
    const h5::Dataset wd = f.write("weights", {2, 2, M, A, 4}, w.data());
    describe(wd, "attention weight of each key [projection, scaling, magnitude, theta, key]");
    wd.attach_scale(mg, 2);
    wd.attach_scale(th, 3);
    describe(f.write("plane_keys", {2, 2, M, 4, 2}, pk.data()),
             "normalised keys in plane coordinates (e1, e2) [projection, scaling, magnitude, key, coordinate]");
    describe(f.write("selectable", {2, 2, M, 4}, sel.data()),
             "1 iff some query in the plane gives the key the largest score [projection, scaling, magnitude, key]");
  });
  spdlog::info("wrote {}", out);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// rcsim ln-geometry

const std::vector<double> kQuantiles = {0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0};

int cmd_ln_geometry(std::map<std::string, std::string> v, const std::string& command_line) {
  const int d = parse_int_value("ln.dim", v["ln.dim"], 1);
  if (d < 2)
    throw UsageError("invalid value '" + v["ln.dim"] +
                     "' for key 'ln.dim': expected d >= 2 (for d = 1 LayerNorm maps every input to the bias)");
  const Config c =
      make_config({{"model.dim", std::to_string(d)}, {"norm.gain", v["norm.gain"]}, {"norm.bias", v["norm.bias"]}});
  const Normalization base(NormType::layernorm, d, 0.0, c.norm.gain, c.norm.bias);
  const LayerNormEllipsoid e = layernorm_ellipsoid(base.gain);
  const std::vector<double> eps = parse_number_list_value("ln.eps", v["ln.eps"]);
  for (double x : eps)
    if (!(x >= 0)) throw UsageError("invalid value '" + v["ln.eps"] + "' for key 'ln.eps': every epsilon must be >= 0");
  const int samples = parse_int_value("ln.samples", v["ln.samples"], 1);
  const double input_std = parse_double_value("ln.input_std", v["ln.input_std"], 0.0, true);
  const auto seed = parse_seed_value("ln.seed", v["ln.seed"]);
  const int store = parse_int_value("ln.store", v["ln.store"], 0);

  std::cout << "LayerNorm image, d = " << d << "\n  gain:";
  for (int n = 0; n < d; ++n) std::cout << " " << fmt(base.gain(n));
  std::cout << "\n  bias:";
  for (int n = 0; n < d; ++n) std::cout << " " << fmt(base.bias(n));
  std::cout << "\n  plane normal (alpha/|alpha|, alpha_n = 1/g_n):";
  for (int n = 0; n < d; ++n) std::cout << " " << fmt(e.normal(n));
  std::cout << "\n  eigenvalue of P2 G^-2 P2 along alpha: " << fmt(e.zero_eigenvalue, 3) << " (0 up to rounding)\n";
  std::cout << "  principal axes (semi-axis sqrt(d/lambda); eigenvalue lambda; unit axis):\n";
  for (int k = 0; k < d - 1; ++k) {
    std::cout << "    " << std::setw(10) << fmt(e.semi_axes(k)) << "  " << std::setw(10) << fmt(e.axis_eigenvalues(k))
              << "  (";
    for (int n = 0; n < d; ++n) std::cout << (n ? " " : "") << fmt(e.axes(n, k) + 0.0, 5);  // no "-0"
    std::cout << ")\n";
  }
  std::cout << "sampling check: " << samples << " inputs N(0, " << fmt(input_std) << "^2) per eps; normalised radius\n"
            << "rho = sqrt((y-b)^T G^-2 (y-b) / d) (1 = on the ellipsoid surface)\n";
  std::cout << "         eps  max |plane dist|   max rho       q01       q10    median       q90   frac rho>0.99\n";
  std::vector<LayerNormSample> runs;
  for (double x : eps) {
    runs.push_back(sample_layernorm(e, base.gain, base.bias, x, samples, seed, input_std, store));
    const LayerNormSample& s = runs.back();
    const std::vector<double> r(s.radius.data(), s.radius.data() + s.radius.size());
    const double above = static_cast<double>((s.radius.array() > 0.99).count()) / samples;
    std::cout << std::setw(12) << fmt(x, 3) << std::setw(17) << fmt(s.plane_distance.maxCoeff(), 3) << std::setw(10)
              << fmt(s.radius.maxCoeff(), 6) << std::setw(10) << fmt(quantile(r, 0.01), 4) << std::setw(10)
              << fmt(quantile(r, 0.1), 4) << std::setw(10) << fmt(quantile(r, 0.5), 6) << std::setw(10)
              << fmt(quantile(r, 0.9), 6) << std::setw(16) << fmt(above, 4) << "\n";
  }

  const std::string out = v["output.file"];
  if (!out.empty()) {
    write_atomic(out, "rcsim-ln-geometry", command_line, [&](const h5::File& f) {
      f.set_attr("dim", d);
      f.set_attr("samples", samples);
      f.set_attr("input_std", input_std);
      f.set_attr("seed", std::to_string(seed));
      describe(write_vector(f, "gain", base.gain.transpose()), "LayerNorm gain g");
      describe(write_vector(f, "bias", base.bias.transpose()), "LayerNorm bias b");
      describe(write_vector(f, "normal", e.normal), "unit normal alpha/|alpha| of the image plane (alpha_n = 1/g_n)");
      describe(write_vector(f, "eigenvalues", e.eigenvalues), "all eigenvalues of P2 G^-2 P2, ascending");
      describe(write_matrix(f, "axes", e.axes), "principal axes (columns), by decreasing semi-axis [d, d-1]");
      describe(write_vector(f, "semi_axes", e.semi_axes), "semi-axis lengths sqrt(d/lambda), descending");
      const h5::Dataset es = f.write("eps", eps);
      es.make_scale("eps");
      describe(es, "LayerNorm epsilon");
      const h5::Dataset qs = f.write("quantile", kQuantiles);
      qs.make_scale("quantile");
      describe(qs, "probability of the quantile");
      Matrix rq(static_cast<Eigen::Index>(eps.size()), static_cast<Eigen::Index>(kQuantiles.size()));
      Vector pmax(static_cast<Eigen::Index>(eps.size()));
      const Eigen::Index P = runs.empty() ? 0 : runs.front().points.rows();
      std::vector<double> pts;
      for (std::size_t k = 0; k < runs.size(); ++k) {
        const std::vector<double> r(runs[k].radius.data(), runs[k].radius.data() + runs[k].radius.size());
        for (std::size_t q = 0; q < kQuantiles.size(); ++q)
          rq(static_cast<Eigen::Index>(k), static_cast<Eigen::Index>(q)) = quantile(r, kQuantiles[q]);
        pmax(static_cast<Eigen::Index>(k)) = runs[k].plane_distance.maxCoeff();
        const RowMajorMatrix pr = runs[k].points;
        pts.insert(pts.end(), pr.data(), pr.data() + pr.size());
      }
      const h5::Dataset rqd = write_matrix(f, "radius_quantiles", rq);
      describe(rqd, "quantiles of the normalised radius rho over the samples [eps, quantile]");
      rqd.attach_scale(es, 0);
      rqd.attach_scale(qs, 1);
      const h5::Dataset pd = write_vector(f, "plane_distance_max", pmax);
      describe(pd, "largest |normal.(y - b)| over the samples");
      pd.attach_scale(es, 0);
      const h5::Dataset pt =
          f.write("points", {eps.size(), static_cast<hsize_t>(P), static_cast<hsize_t>(d)}, pts.data());
      describe(pt, "the first ln.store LayerNorm outputs per eps [eps, sample, d]");
      pt.attach_scale(es, 0);
    });
    spdlog::info("wrote {}", out);
  }
  return 0;
}

}  // namespace

bool is_geometry_command(const std::string& command) {
  return std::any_of(commands().begin(), commands().end(), [&](const CommandSpec& c) { return c.name == command; });
}

int run_geometry_command(const std::string& command, const std::vector<std::string>& keys,
                         const std::string& command_line, bool quiet, bool force, const std::atomic<bool>* cancel) {
  const CommandSpec& spec = command_spec(command);
  auto v = parse_keys(spec, keys);
  // Before computing: never replace a foreign file (or anything not a regular file).
  if (!v["output.file"].empty()) h5::check_replaceable(v["output.file"], "output.file", "rcsim-" + command, force);
  if (command == "keys") return cmd_keys(std::move(v), command_line);
  if (command == "brody-map") {
    try {
      return cmd_brody_map(std::move(v), command_line, quiet, cancel);
    } catch (const Interrupted&) {
      std::cerr << "rcsim: brody-map interrupted; nothing written (rerun the command)\n";
      return 130;
    }
  }
  if (command == "brody-example") return cmd_brody_example(std::move(v), command_line);
  return cmd_ln_geometry(std::move(v), command_line);
}

std::string geometry_help_text() {
  std::ostringstream os;
  os << "\ngeometry commands (docs/user/geometry.md), each with its own keys:\n";
  for (const auto& c : commands()) {
    os << "  rcsim " << c.name << " [--key=value ...]\n      " << c.summary << "\n";
    os << keys_help_plain(c.keys);
  }
  return os.str();
}

std::string geometry_command_help(const std::string& name) {
  const CommandSpec& c = command_spec(name);
  std::ostringstream os;
  os << "usage: rcsim " << c.name << " [--key=value ...] [--force] [--quiet]\n\n  " << c.summary
     << " (docs/user/geometry.md)\n\nkeys (default; meaning):\n";
  os << keys_help_plain(c.keys);
  return os.str();
}

std::string geometry_command_summaries() {
  std::ostringstream os;
  for (const auto& c : commands()) {
    std::string summary = c.summary;
    if (summary.size() > 66) summary = summary.substr(0, summary.rfind(' ', 63)) + " ...";
    os << "  " << c.name << std::string(c.name.size() < 14 ? 14 - c.name.size() : 1, ' ') << summary << "\n";
  }
  return os.str();
}

}  // namespace rcsim
