// Cluster measures of the interacting-particle literature (peer measures, docs/science/peers.md), on
// the cosine similarities c_ij = <x_i, x_j> / (||x_i|| ||x_j||) of the tokens (= <x_i, x_j> for
// unit tokens, the peers' setting).
#pragma once

#include "kernel/types.hpp"

namespace rcsim {

// Fraction of ordered pairs i != j with c_ij > threshold (Geshkovski et al.'s "pair density"
// with threshold 0.999). A zero token is similar to no token. NaN for N < 2.
double pair_density(const Eigen::Ref<const Matrix>& X, double threshold);

// Number of connected components of the graph on the tokens with an edge i - j iff c_ij > tau
// (union-find). A zero token is a component of its own.
int cluster_count(const Eigen::Ref<const Matrix>& X, double tau);

}  // namespace rcsim
