// Cluster measures of the interacting-particle literature (peer measures, docs/science/peers.md), on
// the cosine similarities c_ij = <x_i, x_j> / (||x_i|| ||x_j||) of the tokens (= <x_i, x_j> for
// unit tokens, the peers' setting).
#pragma once

#include <vector>

#include "kernel/model/model_spec.hpp"  // RenyiDistance
#include "kernel/support/types.hpp"

namespace rcsim {

// Fraction of ordered pairs i != j with c_ij > threshold (Geshkovski et al.'s "pair density"
// with threshold 0.999). A zero token is similar to no token. NaN for N < 2.
double pair_density(const Eigen::Ref<const Matrix>& X, double threshold);

// Number of connected components of the graph on the tokens with an edge i - j iff c_ij > tau
// (union-find). A zero token is a component of its own.
int cluster_count(const Eigen::Ref<const Matrix>& X, double tau);

// The size of the largest of those components divided by N (cluster sizes, issue 24): 1 when every
// token is in one cluster, 1/N when none are similar. NaN for N = 0.
double largest_cluster_fraction(const Eigen::Ref<const Matrix>& X, double tau);

// The clusters themselves (issue 24: centres and sizes): the components cluster_count counts, with
// a label per token (0, ..., k-1 in the order of each cluster's first token), the number of tokens
// of each, and each centre: the mean of its tokens' unit vectors x_i / ||x_i||, normalised to
// length 1 (a point of the sphere; zero for the cluster of a zero token, or where they cancel).
struct ClusterPartition {
  std::vector<int> label;  // N
  std::vector<int> size;   // k
  Matrix centre;           // k x d
};
ClusterPartition cluster_partition(const Eigen::Ref<const Matrix>& X, double tau);

// Renyi-parking centres (Karagodin et al., causal mask; the definition of SCIENCE.md section 6,
// from a secondary source): the tokens taken in causal order 0, 1, ..., N-1, each becoming a centre
// when its Euclidean distance to every centre so far is at least delta. Returns the number of
// centres (token 0 is always one); delta <= 0 makes every token a centre.
int renyi_parking_centres(const Eigen::Ref<const Matrix>& X, double delta);

// Strong Renyi centres (Karagodin, Polyanskiy, Rigollet, "Clustering in causal attention masking",
// section 5 and appendix C): token k is a strong centre when its distance to EVERY earlier token
// i < k (centre or not) is strictly greater than delta; the distance (metrics.renyi_distance) is
// Euclidean ||x_k - x_i||, or geodesic: the angle arccos(c_ki) in [0, pi] between the tokens'
// directions, their distance on the unit sphere (a zero token is at angle pi from every token). Returns their number (token 0 always is one).
// For N i.i.d. tokens of a law mu their expected number is sum_k (1 - p)^k, p = mu(B_delta), which
// tends to 1/p (Lemma C.1): pi/delta on the circle with the geodesic distance.
int strong_renyi_centres(const Eigen::Ref<const Matrix>& X, double delta, RenyiDistance distance);

}  // namespace rcsim
