#include "app/geometry_command.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "geometry/layernorm_geometry.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/measures/summary.hpp"

namespace rcsim {

namespace {

const std::vector<double> kQuantiles = {0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0};

}  // namespace

CommandSpec ln_geometry_command() {
  return {"ln-geometry",
          "the LayerNorm image: plane normal, principal axes, semi-axes, and a sampling check",
          {
              {"ln.dim", "3", "dimension d >= 2"},
              key_decl("norm.gain"),
              key_decl("norm.bias"),
              {"ln.eps", "1e-1,1e-3,1e-5", "comma list of epsilons >= 0 for the sampling check"},
              {"ln.samples", "100000", "random inputs per epsilon, >= 1"},
              {"ln.input_std", "1", "standard deviation > 0 of the i.i.d. normal inputs"},
              {"ln.seed", std::to_string(kDefaultSeed), "seed of the inputs"},
              {"ln.store", "2000", "outputs stored per epsilon in the HDF5 file, >= 0"},
              {"output.file", "", "optional HDF5 output (empty: report on stdout only)"},
          }};
}

namespace {

// What `rcsim ln-geometry` computed, for its file.
struct LnResult {
  int d, samples;
  double input_std;
  std::uint64_t seed;
  const Normalization& base;
  const LayerNormEllipsoid& e;
  const std::vector<double>& eps;
  const std::vector<LayerNormSample>& runs;
};

// The HDF5 file of rcsim ln-geometry (written atomically).
void write_ln_file(const std::string& out, const std::string& command_line, const LnResult& res) {
  const int d = res.d;
  const Normalization& base = res.base;
  const LayerNormEllipsoid& e = res.e;
  const std::vector<double>& eps = res.eps;
  const std::vector<LayerNormSample>& runs = res.runs;
  write_atomic(out, "rcsim-ln-geometry", command_line, [&](const h5::File& f) {
    f.set_attr("dim", d);
    f.set_attr("samples", res.samples);
    f.set_attr("input_std", res.input_std);
    f.set_attr("seed", std::to_string(res.seed));
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
}

}  // namespace

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
    write_ln_file(out, command_line, {d, samples, input_std, seed, base, e, eps, runs});
    spdlog::info("wrote {}", out);
  }
  return 0;
}

}  // namespace rcsim
