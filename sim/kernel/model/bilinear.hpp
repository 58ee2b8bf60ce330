// Random bilinear forms and value matrices drawn directly (peer dynamics, docs/science/peers.md): the
// attention logit <x_i W_Q, x_j W_K> = x_i B x_j^T with B = W_Q W_K^T d x d, as in the
// interacting-particle codes that draw B rather than W_Q and W_K.
#pragma once

#include "kernel/model/model_spec.hpp"
#include "kernel/model/random.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// B (d x d) of `type` from `rng`, G, G1, G2 d x d with i.i.d. N(0, 1) entries drawn in that order
// (row by row, the order of RandomStream::fill_normal):
//   gaussian_product: G1 G2 / sqrt(d)
//   symmetric:        (G + G^T) / sqrt(2)        (off-diagonal entries N(0, 1), diagonal N(0, 2))
//   goe:              (G + G^T) / sqrt(2 d)      (Gaussian orthogonal ensemble, semicircle on [-2, 2])
//   wigner:           the upper triangle of G (diagonal included) mirrored: every entry N(0, 1)
//   identity:         I (no draw)
// `type` must not be none.
void draw_bilinear(BilinearType type, int d, RandomStream& rng, Matrix& B);

// Wishart value matrix G G^T / sqrt(d), G d x d with i.i.d. N(0, 1) entries.
void draw_wishart(int d, RandomStream& rng, Matrix& V);

}  // namespace rcsim
