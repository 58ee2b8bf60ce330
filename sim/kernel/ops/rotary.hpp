// Rotary position embedding (Su et al. 2021) as llama2.c applies it to queries and keys: within
// each head of size s, the adjacent pair of components (2j, 2j+1), j = 0 .. s/2 - 1, of the token
// at position p is rotated by the angle p * theta^(-2j / s):
//   (a, b) -> (a cos phi - b sin phi, a sin phi + b cos phi).
// Positions start at 0 (the BOS token). The same rotation for every head.
// The rotation is linear in X, so it is its own tangent; its adjoint (transpose) is the rotation
// by minus the angle, (a, b) -> (a cos phi + b sin phi, -a sin phi + b cos phi).
#pragma once

#include "kernel/support/types.hpp"

namespace rcsim {

// Rotate the rows of X [n, heads * head_size] in place; row i is at position first_position + i.
template <class T>
void apply_rotary(MatrixT<T>& X, int head_size, int first_position, double theta);
// The transpose (= inverse) of apply_rotary: each pair rotated by minus the angle. It is the
// rotation's adjoint; its tangent is apply_rotary itself (the rotation is linear).
template <class T>
void apply_rotary_transpose(MatrixT<T>& X, int head_size, int first_position, double theta);

}  // namespace rcsim
