// Strong Renyi centres (Karagodin, Polyanskiy, Rigollet, "Clustering in causal attention masking",
// section 5 and Lemma C.1; kernel/measures/clusters.hpp): hand-worked cases of the strict rule and of the two
// distances, and the expected count of i.i.d. uniform tokens on the circle against the lemma.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "config/config.hpp"
#include "kernel/measures/clusters.hpp"
#include "kernel/measures/measure_registry.hpp"
#include "kernel/model/random.hpp"

using namespace rcsim;

namespace {

Matrix on_circle(const std::vector<double>& angles) {
  Matrix X(static_cast<Eigen::Index>(angles.size()), 2);
  for (std::size_t i = 0; i < angles.size(); ++i)
    X.row(static_cast<Eigen::Index>(i)) << std::cos(angles[i]), std::sin(angles[i]);
  return X;
}

constexpr RenyiDistance kEuclid = RenyiDistance::euclidean;
constexpr RenyiDistance kGeodesic = RenyiDistance::geodesic;

}  // namespace

TEST_CASE("strong Renyi centres worked by hand", "[particles][clusters]") {
  // Angles 0, 0.1, 1.0, 1.05, 3.0 with delta = 0.5 (chords 2 sin(|dtheta| / 2)): 0 is a centre; 0.1
  // is 0.0999 from 0 (no); 1.0 is 0.959 from 0 and 0.783 from 0.1 (yes); 1.05 is 0.05 from 1.0 (no);
  // 3.0 is at least 1.683 from all (yes). Renyi-parking gives 3 as well here; a non-centre blocks a
  // strong centre in the next case.
  const Matrix C = on_circle({0.0, 0.1, 1.0, 1.05, 3.0});
  CHECK(strong_renyi_centres(C, 0.5, kEuclid) == 3);
  CHECK(strong_renyi_centres(C, 0.5, kGeodesic) == 3);
  CHECK(strong_renyi_centres(C, 0.0, kEuclid) == 5);
  CHECK(strong_renyi_centres(C, 2.5, kEuclid) == 1);
  // Every EARLIER token counts, not only the centres: on a line at 0, 0.6, 1.2 with delta 1, 0.6 is
  // not a centre (0.6 from 0) but it blocks 1.2 (0.6 from it): 1 strong centre, 2 Renyi-parking ones.
  Matrix line(3, 1);
  line << 0, 0.6, 1.2;
  CHECK(strong_renyi_centres(line, 1.0, kEuclid) == 1);
  CHECK(renyi_parking_centres(line, 1.0) == 2);
  // Strict: a token at distance exactly delta is not a centre (Renyi-parking's >= makes it one).
  Matrix pair(2, 1);
  pair << 0, 1;
  CHECK(strong_renyi_centres(pair, 1.0, kEuclid) == 1);
  CHECK(renyi_parking_centres(pair, 1.0) == 2);
  CHECK(strong_renyi_centres(pair, 0.999, kEuclid) == 2);
  // Geodesic, exactly at delta: e1 and e2 are at angle acos(0) = pi/2, e1 and -e1 at acos(-1) = pi.
  Matrix square(2, 2), opposite(2, 2);
  square << 1, 0, 0, 1;
  opposite << 1, 0, -1, 0;
  CHECK(strong_renyi_centres(square, M_PI_2, kGeodesic) == 1);
  CHECK(strong_renyi_centres(square, std::nextafter(M_PI_2, 0.0), kGeodesic) == 2);
  CHECK(strong_renyi_centres(opposite, M_PI, kGeodesic) == 1);
  CHECK(strong_renyi_centres(opposite, 3.0, kGeodesic) == 2);
  // The distances differ: angles 0 and 1 are 1 apart on the circle but 2 sin(1/2) = 0.9589 apart in
  // the plane; with delta = 0.98 the second token is a centre only geodesically.
  const Matrix arc = on_circle({0.0, 1.0});
  CHECK(strong_renyi_centres(arc, 0.98, kGeodesic) == 2);
  CHECK(strong_renyi_centres(arc, 0.98, kEuclid) == 1);
  // The geodesic distance is the angle of the directions: scaling a token changes nothing.
  Matrix scaled = arc;
  scaled.row(1) *= 7.0;
  CHECK(strong_renyi_centres(scaled, 0.98, kGeodesic) == 2);
  CHECK(strong_renyi_centres(scaled, 0.98, kEuclid) == 2);  // |7 e_1 - e_0| > 0.98
}

TEST_CASE("strong Renyi centres through the registry and metrics.renyi_distance", "[particles][clusters]") {
  // delta = 4 beta^(-1/2) = 0.98 at beta = (4 / 0.98)^2.
  const Matrix arc = on_circle({0.0, 1.0});
  const double beta = std::pow(4.0 / 0.98, 2);
  const MeasureDef* m = find_measure("strong_renyi_centres");
  REQUIRE(m != nullptr);
  const Config euclid = make_config({{"model.beta", std::to_string(beta)}, {"model.dim", "2"}, {"model.tokens", "2"}});
  const Config geo = make_config({{"model.beta", std::to_string(beta)}, {"model.dim", "2"}, {"model.tokens", "2"},
                                  {"metrics.renyi_distance", "geodesic"}});
  CHECK(m->state(euclid, arc, Vector()) == 1.0);
  CHECK(m->state(geo, arc, Vector()) == 2.0);
  CHECK_THROWS(make_config({{"metrics.renyi_distance", "chord"}}));
}

namespace {

// Mean and standard error of the strong-centre count of `samples` draws of n i.i.d. uniform tokens
// on the circle.
std::pair<double, double> mean_count(int n, double delta, RenyiDistance distance, int samples, std::uint64_t seed) {
  RandomStream rng(seed, 0);
  std::vector<double> angles(static_cast<std::size_t>(n));
  double sum = 0, sum2 = 0;
  for (int s = 0; s < samples; ++s) {
    for (double& a : angles) a = 2.0 * M_PI * rng.uniform();
    const double k = strong_renyi_centres(on_circle(angles), delta, distance);
    sum += k;
    sum2 += k * k;
  }
  const double mean = sum / samples;
  return {mean, std::sqrt((sum2 / samples - mean * mean) / (samples - 1))};
}

// The exact expectation for n tokens: sum_{k<n} (1 - p)^k = (1 - (1 - p)^n) / p, p = mu(B_delta),
// the arc fraction within delta of a point: theta / pi with theta = delta (geodesic) or the angle of
// the chord delta, 2 arcsin(delta / 2) (Euclidean). Lemma C.1 is its limit 1/p (pi/delta geodesic).
double expected_count(int n, double delta, RenyiDistance distance) {
  const double theta = distance == kGeodesic ? delta : 2.0 * std::asin(delta / 2.0);
  const double p = theta / M_PI;
  return (1.0 - std::pow(1.0 - p, n)) / p;
}

}  // namespace

TEST_CASE("strong Renyi centres of uniform tokens on the circle: Lemma C.1's expected count", "[particles][clusters]") {
  const int n = 150, samples = 3000;
  for (const double delta : {0.3, 1.5}) {
    CAPTURE(delta);
    // The lemma's limit pi/delta is the finite-n expectation to 1e-5 here ((1 - delta/pi)^150 < 1e-5).
    CHECK(std::abs(expected_count(n, delta, kGeodesic) - M_PI / delta) < 1e-5 * M_PI / delta);
    for (const RenyiDistance d : {kGeodesic, kEuclid}) {
      const auto [mean, se] = mean_count(n, delta, d, samples, 11);
      const RenyiDistance other = d == kGeodesic ? kEuclid : kGeodesic;
      CAPTURE(d == kGeodesic, mean, se, expected_count(n, delta, d), expected_count(n, delta, other));
      CHECK(std::abs(mean - expected_count(n, delta, d)) < 4.0 * se);
      // at delta = 1.5 the check tells the distances apart (2.094 against 1.852): the other one's
      // expectation is far outside (at 0.3 they differ by 0.4%, below the noise)
      if (delta > 1.0) CHECK(std::abs(mean - expected_count(n, delta, other)) > 6.0 * se);
    }
  }
}
