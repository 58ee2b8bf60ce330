// The gradients of one block with respect to its input and every parameter (shapes as
// LayerWeightsT), filled by the operations' adjoints (kernel/ops/*.hpp) and block_backward.
#pragma once

#include <vector>

#include "kernel/support/types.hpp"

namespace rcsim {

// The MLP's weight gradients.
template <class T>
struct MlpGradsT {
  MatrixT<T> d_in, d_out;               // dL/dW_in (d x m), dL/dW_out (m x d)
  RowVectorT<T> d_in_bias, d_out_bias;  // dL/db_in (m), dL/db_out (d); empty without biases
  MatrixT<T> d_gate;                    // dL/dW_gate (d x m, mlp.activation = swiglu); empty without
};
using MlpGrads = MlpGradsT<double>;

// norm gains/biases per slot (NormSlot); with norm.params = config all slots share one N, and
// the gradient w.r.t. that shared gain is the sum over the slots the placement uses.
template <class T>
struct BlockGradsT {
  MatrixT<T> dX;
  std::vector<MatrixT<T>> dq, dk, dv, dout;  // per head; dout (W_O) empty without model.value_dim
  // attention.bias: dL/db_Q, dL/db_K, dL/db_V per head, dL/db_O; empty without attention biases
  std::vector<RowVectorT<T>> dq_bias, dk_bias, dv_bias;
  RowVectorT<T> dout_bias;
  MlpGradsT<T> mlp;                   // empty matrices without an MLP
  RowVectorT<T> dgain[4], dbias[4];   // zero for the slots the placement does not use
};
using BlockGrads = BlockGradsT<double>;

}  // namespace rcsim
