#include "io/inputs.hpp"
#include "app/equilibria.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <tuple>
#include <map>

#include "kernel/support/errors.hpp"
#include "io/hdf5_file.hpp"
#include "kernel/measures/metrics.hpp"
#include "kernel/model/random.hpp"
#include "io/run_file.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/support/version.hpp"

namespace rcsim {

void validate(const EquilibriumOptions& o) {
  auto need = [](bool ok, const std::string& option, double v, const char* allowed) {
    if (ok) return;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v);
    throw UsageError(option + "=" + buf + ": must be " + allowed);
  };
  need(o.tol > 0, "--tol", o.tol, "> 0");
  need(o.perturbation > 0 && o.perturbation < 1, "--perturbation", o.perturbation, "in (0, 1)");
  need(o.probes >= 1, "--probes", o.probes, ">= 1");
  need(o.match_tol > 0 && o.match_tol < 1, "--match-tol", o.match_tol, "in (0, 1)");
  need(o.rank_rtol > 0 && o.rank_rtol < 1, "--rank-rtol", o.rank_rtol, "in (0, 1)");
}

std::string to_string(TokenClass c) {
  switch (c) {
    case TokenClass::identical:
      return "identical";
    case TokenClass::antipodal:
      return "antipodal";
    case TokenClass::distinct:
      return "distinct";
  }
  return "?";
}

StateClass classify_state(const Eigen::Ref<const Matrix>& X, double match_tol, double rank_rtol) {
  StateClass s;
  s.rank = numerical_rank(singular_values(X), rank_rtol, 0.0);
  const Eigen::Index n = X.rows();
  double scale = 0;
  for (Eigen::Index i = 0; i < n; ++i) scale = std::max(scale, X.row(i).norm());
  const double tol = match_tol * std::max(scale, 1e-300);
  std::vector<int> cluster(static_cast<std::size_t>(n), -1);
  bool all_same = true, all_pm = true;
  for (Eigen::Index i = 0; i < n; ++i) {
    const double same = (X.row(i) - X.row(0)).norm(), opposite = (X.row(i) + X.row(0)).norm();
    all_same = all_same && same < tol;
    all_pm = all_pm && (same < tol || opposite < tol);
    if (cluster[static_cast<std::size_t>(i)] >= 0) continue;
    cluster[static_cast<std::size_t>(i)] = s.clusters;
    for (Eigen::Index j = i + 1; j < n; ++j)
      if ((X.row(j) - X.row(i)).norm() < tol) cluster[static_cast<std::size_t>(j)] = s.clusters;
    ++s.clusters;
  }
  s.tokens = all_same ? TokenClass::identical : all_pm ? TokenClass::antipodal : TokenClass::distinct;
  return s;
}

namespace {
void require_fixed(const WeightSpec& w, const char* key) {
  if (w.type != WeightType::fixed && w.type != WeightType::zero && w.type != WeightType::identity &&
      w.type != WeightType::file)
    throw UsageError(std::string("key '") + key + "' = " + to_string(w.type) +
                     ": rcsim equilibria needs fixed weights (fixed, zero, identity or file)");
}

// The map is one layer iterated: an array of weights.file with a layer axis ([L, ...]) would be
// read at layer 0 only, so it is refused, naming the shape the map needs.
void require_one_layer(const ModelSpec& c, InputArrays& files) {
  for (const InputRequirement& r : input_requirements(c, files))
    if (std::string(r.key) == "weights.file" && *r.target && (*r.target)->shape != r.shapes.front())
      throw UsageError("key 'weights.file' ('" + c.weights.file + "'): dataset /" + r.dataset + " has shape " +
                       shape_string((*r.target)->shape) + " with a layer axis; rcsim equilibria iterates one layer " +
                       "with fixed weights: give " + shape_string(r.shapes.front()));
}
}  // namespace

FixedLayerMap::FixedLayerMap(const Config& c)
    : c_(c), ws_(c.model.tokens, c.model.dim, c.model.key_dim), next_(c.model.tokens, c.model.dim) {
  require_fixed(c.weights.q, "weights.q");
  require_fixed(c.weights.k, "weights.k");
  require_fixed(c.weights.v, "weights.v");
  if (c.model.value_dim > 0) require_fixed(c.weights.o, "weights.o");
  if (c.weights.qk != BilinearType::none && c.weights.qk != BilinearType::identity)
    throw UsageError("key 'weights.qk' = " + to_string(c.weights.qk) +
                     ": rcsim equilibria needs fixed weights (none or identity)");
  mask_ = load_mask(c_);
  norm_ = Normalization::from_config(c_);
  files_ = load_inputs(c_);  // before the weights are drawn: weights of type file are read from it
  require_one_layer(c_, files_);
  WeightSampler sampler(c_, files_);
  RandomStream unused(0, 0);
  w_ = sampler.layer(0, unused);
  params_ = layer_params(c_, &mask_, &norm_);
}

void FixedLayerMap::apply(const Eigen::Ref<const Matrix>& X, Matrix& out) { attention_layer(X, w_, params_, ws_, out); }

double FixedLayerMap::iterate(Matrix& X, double tol, int max_layers, int& layers) {
  double residual = std::numeric_limits<double>::infinity();
  layers = 0;
  while (layers < max_layers) {
    apply(X, next_);
    ++layers;
    residual = (next_ - X).norm();
    X.swap(next_);
    if (!(residual >= tol)) break;  // converged (or NaN: stop and report it)
  }
  return residual;
}

EquilibriumSearch find_equilibria(const Config& c, const EquilibriumOptions& o, const std::atomic<bool>* cancel) {
  validate(o);
  FixedLayerMap map(c);
  const InputArrays& files = map.inputs();
  EquilibriumSearch s;
  const int S = c.run.trials;
  auto same = [&](const Matrix& a, const Matrix& b) { return (a - b).norm() < o.match_tol * std::max(1.0, b.norm()); };
  for (int k = 0; k < S; ++k) {
    if (cancel && cancel->load()) throw Interrupted();
    RandomStream rng(c.run.seed, static_cast<std::uint64_t>(k));
    EndState e;
    e.start = initial_tokens(c, files, k, rng);
    e.end = e.start;
    map.iterate(e.end, o.tol, c.model.layers, e.layers);
    Matrix next;
    map.apply(e.end, next);
    e.residual = (next - e.end).norm();
    e.converged = std::isfinite(e.residual) && e.residual < o.tol;
    e.cls = classify_state(e.end, o.match_tol, o.rank_rtol);
    if (e.converged) {
      for (std::size_t q = 0; q < s.equilibria.size() && e.equilibrium < 0; ++q)
        if (same(e.end, s.equilibria[q].X)) e.equilibrium = static_cast<int>(q);
      if (e.equilibrium < 0) {
        Equilibrium eq;
        eq.X = e.end;
        eq.cls = e.cls;
        eq.residual = e.residual;
        s.equilibria.push_back(eq);
        e.equilibrium = static_cast<int>(s.equilibria.size()) - 1;
      }
      ++s.equilibria[static_cast<std::size_t>(e.equilibrium)].count;
    } else {
      ++s.unconverged;
    }
    s.starts.push_back(std::move(e));
  }
  // Stability: perturb each equilibrium and iterate again.
  for (std::size_t q = 0; q < s.equilibria.size(); ++q) {
    Equilibrium& eq = s.equilibria[q];
    eq.basin_fraction = static_cast<double>(eq.count) / S;
    const double scale = std::max(eq.X.norm(), 1e-300);
    eq.stable = true;
    for (int p = 0; p < o.probes; ++p) {
      RandomStream rng(c.run.seed, static_cast<std::uint64_t>(q * 1000 + static_cast<std::size_t>(p)),
                       kPerturbationStream);
      Matrix G(eq.X.rows(), eq.X.cols());
      rng.fill_normal(G);
      Matrix X = eq.X + (o.perturbation * scale / G.norm()) * G;
      int layers = 0;
      map.iterate(X, o.tol, c.model.layers, layers);
      const double dist = (X - eq.X).norm() / scale;
      eq.probe_distance = std::max(eq.probe_distance, std::isfinite(dist) ? dist : 1e300);
      if (!(dist <= std::sqrt(o.perturbation))) eq.stable = false;
    }
  }
  return s;
}

namespace {
std::vector<double> stack(const std::vector<Matrix>& ms) {
  std::vector<double> out;
  for (const Matrix& m : ms) {
    const RowMajorMatrix r = m;
    out.insert(out.end(), r.data(), r.data() + r.size());
  }
  return out;
}

// Columns of the file: an integer or a double per item, and a 1-D dataset along `dim`.
template <class Items, class Get>
std::vector<std::int64_t> ints(const Items& items, Get get) {
  std::vector<std::int64_t> v;
  for (const auto& x : items) v.push_back(static_cast<std::int64_t>(get(x)));
  return v;
}
template <class Items, class Get>
std::vector<double> doubles(const Items& items, Get get) {
  std::vector<double> v;
  for (const auto& x : items) v.push_back(get(x));
  return v;
}
template <class Values>
void put(const h5::Group& g, const std::string& name, const Values& v, const std::string& dim,
         const std::string& long_name) {
  const h5::Dataset ds = g.write(name, {static_cast<hsize_t>(v.size())}, v.data());
  ds.set_attr("long_name", long_name);
  g.label_axes(ds, {dim});
}

// The group /equilibria: the distinct equilibria with their classes, stability and basins.
void write_distinct_equilibria(const h5::File& f, const EquilibriumSearch& s, const std::vector<std::int64_t>& kid,
                               hsize_t N, hsize_t d) {
  const auto K = static_cast<hsize_t>(s.equilibria.size());
  const h5::Group g = f.create_group("equilibria");
  g.write_coordinate("equilibrium_index", kid, "distinct equilibrium index");
  std::vector<Matrix> xs;
  for (const auto& e : s.equilibria) xs.push_back(e.X);
  const auto xdata = stack(xs);
  const h5::Dataset dx = g.write("X", {K, N, d}, xdata.data());
  dx.set_attr("long_name", "distinct equilibria (first end state reaching each)");
  g.label_axes(dx, {"equilibrium_index", "token", "feature"});
  const auto& eq = s.equilibria;
  put(g, "rank", ints(eq, [](const Equilibrium& e) { return e.cls.rank; }), "equilibrium_index", "numerical rank");
  put(g, "token_class", ints(eq, [](const Equilibrium& e) { return static_cast<int>(e.cls.tokens); }), "equilibrium_index",
      "0 identical, 1 antipodal, 2 distinct tokens");
  put(g, "clusters", ints(eq, [](const Equilibrium& e) { return e.cls.clusters; }), "equilibrium_index", "groups of identical tokens");
  put(g, "residual", doubles(eq, [](const Equilibrium& e) { return e.residual; }), "equilibrium_index", "||layer(X) - X||_F");
  put(g, "stable", ints(eq, [](const Equilibrium& e) { return e.stable ? 1 : 0; }), "equilibrium_index",
      "1 if every perturbation probe ended within sqrt(perturbation) (relative) of X");
  put(g, "probe_distance", doubles(eq, [](const Equilibrium& e) { return e.probe_distance; }), "equilibrium_index",
      "largest relative distance of a probe's end state from X");
  put(g, "count", ints(eq, [](const Equilibrium& e) { return e.count; }), "equilibrium_index", "starts ending here");
  put(g, "basin_fraction", doubles(eq, [](const Equilibrium& e) { return e.basin_fraction; }), "equilibrium_index",
      "fraction of starts ending here");
}

}  // namespace

void write_equilibria_file(OutputFile& file, const Config& c, const EquilibriumOptions& o,
                           const EquilibriumSearch& s, const std::string& command_line,
                           const InputDigests& inputs) {
  const auto S = static_cast<hsize_t>(s.starts.size()), K = static_cast<hsize_t>(s.equilibria.size()),
             N = static_cast<hsize_t>(c.model.tokens), d = static_cast<hsize_t>(c.model.dim);
  // Format 2: each group carries its own coordinates.
  file.write_hdf5({"rcsim-equilibria", 2, command_line}, [&](const h5::File& f) {
  f.set_attr("seed", std::to_string(c.run.seed));
  f.set_attr("mask_type", to_string(c.mask.type));
  f.set_attr("norm_type", to_string(c.norm.type));
  f.set_attr("tokens", c.model.tokens);
  f.set_attr("dim", c.model.dim);
  f.set_attr("max_layers", c.model.layers);
  f.set_attr("tol", o.tol);
  f.set_attr("perturbation", o.perturbation);
  f.set_attr("probes", o.probes);
  f.set_attr("match_tol", o.match_tol);
  f.set_attr("rank_rtol", o.rank_rtol);
  f.set_attr("unconverged", s.unconverged);
  f.set_attr("token_classes", "0 = identical, 1 = antipodal (all tokens +-one vector), 2 = distinct");
  {
    const h5::Dataset config = f.write_string("config", c.to_ini());
    config.set_attr("long_name", "fully resolved configuration (INI)");
    if (!inputs.empty()) config.set_attr("input_sha256", digests_text(inputs));  // identity, as in run files
  }

  std::vector<std::int64_t> ids(S), kid(K);
  for (hsize_t i = 0; i < S; ++i) ids[i] = static_cast<std::int64_t>(i);
  for (hsize_t i = 0; i < K; ++i) kid[i] = static_cast<std::int64_t>(i);
  // Coordinates; the group /equilibria carries its own (xarray.open_dataset(file, group=...)).
  f.write_coordinate("start", ids, "starting point (trial) index");
  f.write_coordinate("equilibrium_index", kid, "distinct equilibrium index");

  {
    std::vector<Matrix> st, en;
    for (const auto& e : s.starts) {
      st.push_back(e.start);
      en.push_back(e.end);
    }
    const auto a = stack(st), b = stack(en);
    const h5::Dataset ds0 = f.write("start_states", {S, N, d}, a.data());
    ds0.set_attr("long_name", "X(0) of each start");
    f.label_axes(ds0, {"start", "token", "feature"});
    const h5::Dataset ds1 = f.write("end_states", {S, N, d}, b.data());
    ds1.set_attr("long_name", "X at the end of the iteration");
    f.label_axes(ds1, {"start", "token", "feature"});
  }
  const auto& st = s.starts;
  put(f, "residual", doubles(st, [](const EndState& e) { return e.residual; }), "start",
      "fixed-point residual ||layer(X) - X||_F at the end state");
  put(f, "layers_used", ints(st, [](const EndState& e) { return e.layers; }), "start", "layers iterated");
  put(f, "converged", ints(st, [](const EndState& e) { return e.converged ? 1 : 0; }), "start",
      "1 if residual < tol within max_layers");
  put(f, "rank", ints(st, [](const EndState& e) { return e.cls.rank; }), "start", "numerical rank of the end state");
  put(f, "token_class", ints(st, [](const EndState& e) { return static_cast<int>(e.cls.tokens); }), "start",
      "0 identical, 1 antipodal, 2 distinct tokens");
  put(f, "clusters", ints(st, [](const EndState& e) { return e.cls.clusters; }), "start", "groups of identical tokens");
  put(f, "equilibrium", ints(st, [](const EndState& e) { return e.equilibrium; }), "start",
      "index of the equilibrium reached (-1: not converged)");

  write_distinct_equilibria(f, s, kid, N, d);
  });
}

std::string equilibria_table(const EquilibriumSearch& s, bool verbose) {
  std::ostringstream os;
  os << s.starts.size() << " starts, " << s.equilibria.size() << " distinct equilibria, " << s.unconverged
     << " not converged\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %3s %5s %10s %8s %7s %9s %10s  %s\n", "#", "rank", "tokens", "clusters", "stable",
                "basin", "residual", "X (rows)");
  os << line;
  for (std::size_t q = 0; q < s.equilibria.size(); ++q) {
    if (!verbose && q == kTableRows) {
      os << "  ... " << s.equilibria.size() - kTableRows << " more rows (--verbose prints them; all in the output file)\n";
      break;
    }
    const Equilibrium& e = s.equilibria[q];
    std::ostringstream rows;
    for (Eigen::Index i = 0; i < e.X.rows() && e.X.size() <= 32; ++i) {
      rows << (i ? "; " : "");
      for (Eigen::Index j = 0; j < e.X.cols(); ++j) {
        char b[32];
        std::snprintf(b, sizeof b, "%s%.4f", j ? " " : "", std::abs(e.X(i, j)) < 5e-5 ? 0.0 : e.X(i, j));
        rows << b;
      }
    }
    std::snprintf(line, sizeof line, "  %3zu %5d %10s %8d %7s %8.1f%% %10.2e  ", q, e.cls.rank,
                  to_string(e.cls.tokens).c_str(), e.cls.clusters, e.stable ? "yes" : "no", 100 * e.basin_fraction,
                  e.residual);
    os << line << rows.str() << "\n";
  }
  os << equilibria_summary(s);
  return os.str();
}

std::string equilibria_summary(const EquilibriumSearch& s) {
  // Per (rank, token class, stability): distinct equilibria, end states, basin fraction.
  struct Group {
    int equilibria = 0, states = 0;
    double basin = 0;
  };
  std::map<std::tuple<int, int, bool>, Group> groups;
  for (const Equilibrium& e : s.equilibria) {
    Group& g = groups[{e.cls.rank, static_cast<int>(e.cls.tokens), e.stable}];
    ++g.equilibria;
    g.states += e.count;
    g.basin += e.basin_fraction;
  }
  std::ostringstream os;
  char line[256];
  os << "summary: " << s.equilibria.size() << " distinct equilibria from " << s.starts.size() << " starts\n";
  std::snprintf(line, sizeof line, "  %5s %10s %7s %11s %11s %9s\n", "rank", "tokens", "stable", "equilibria",
                "end states", "basin");
  os << line;
  for (const auto& [key, g] : groups) {
    std::snprintf(line, sizeof line, "  %5d %10s %7s %11d %11d %8.1f%%\n", std::get<0>(key),
                  to_string(static_cast<TokenClass>(std::get<1>(key))).c_str(), std::get<2>(key) ? "yes" : "no",
                  g.equilibria, g.states, 100 * g.basin);
    os << line;
  }
  if (s.unconverged > 0 && !s.starts.empty()) {
    std::snprintf(line, sizeof line, "  %5s %10s %7s %11s %11d %8.1f%%\n", "-", "unconverged", "-", "-", s.unconverged,
                  100.0 * s.unconverged / static_cast<double>(s.starts.size()));
    os << line;
  }
  return os.str();
}

}  // namespace rcsim
