#include "app/geometry_command.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "geometry/brody.hpp"
#include "kernel/support/errors.hpp"

namespace rcsim {

CommandSpec brody_example_command() {
  return {"brody-example",
          "attention weights of four keys in the plane against the query angle, projection/scaling on/off",
          {
              {"example.magnitudes", "1,2,3,4", "magnitudes of key 3 (comma list, > 0)"},
              {"example.angles", "360", "number of query angles over [0, 360) degrees, >= 1"},
              {"example.query_norm", "4", "query length s > 0 (inverse temperature)"},
              {"output.file", "data/brody_example.h5", "HDF5 output"},
          }};
}

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

}  // namespace rcsim
