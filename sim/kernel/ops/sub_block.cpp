#include "kernel/ops/sub_block.hpp"

#include "kernel/ops/normalization.hpp"

namespace rcsim {

namespace {
template <class T>
const Normalization& norm_at(const LayerWeightsT<T>& w, const BlockParams& p, int slot) {
  return w.norms_from_file ? w.norms[slot] : *p.layer.norm;
}
}  // namespace

template <class T>
SubBlockSpec<T> attention_sub_block(const LayerWeightsT<T>& w, const BlockParams& p) {
  return {p.position, static_cast<T>(p.layer.alpha), static_cast<T>(p.layer.skip), static_cast<T>(p.layer.norm_scale),
          norm_at(w, p, kNormAttn), norm_at(w, p, kNormAttnOut), kNormAttn, kNormAttnOut};
}
template <class T>
SubBlockSpec<T> mlp_sub_block(const LayerWeightsT<T>& w, const BlockParams& p) {
  return {p.position, static_cast<T>(mlp_alpha_of(p)), static_cast<T>(mlp_skip_of(p)),
          static_cast<T>(p.layer.norm_scale), norm_at(w, p, kNormMlp), norm_at(w, p, kNormMlpOut), kNormMlp,
          kNormMlpOut};
}

template <class T>
MatrixT<T> sub_block_backward(const SubBlockSpec<T>& b, const SubBlockCacheT<T>& c, const MatrixT<T>& X,
                              const MatrixT<T>& dOut, const BranchMap<T>& dF, BlockGradsT<T>& g) {
  const T a = b.a, s = b.s;
  switch (b.pos) {
    case NormPosition::post: {
      const MatrixT<T> dZ = norm_backward<T>(c.Z, dOut, b.n, g.dgain[b.main], g.dbias[b.main]);
      if (a == T(0)) return dF(X, dZ);
      return s * dZ + dF(X, a * dZ);
    }
    case NormPosition::pre: {
      MatrixT<T> dXn = dF(c.Xn, a != T(0) ? MatrixT<T>(a * dOut) : dOut);
      if (b.c != T(1)) dXn *= b.c;  // d(c N(X)) = c dN
      MatrixT<T> dX = norm_backward<T>(X, dXn, b.n, g.dgain[b.main], g.dbias[b.main]);
      if (a != T(0)) dX += s * dOut;
      return dX;
    }
    case NormPosition::peri: {
      const MatrixT<T> dY =
          norm_backward<T>(c.Y, a != T(0) ? MatrixT<T>(a * dOut) : dOut, b.n_out, g.dgain[b.out], g.dbias[b.out]);
      MatrixT<T> dXn = dF(c.Xn, dY);
      if (b.c != T(1)) dXn *= b.c;
      MatrixT<T> dX = norm_backward<T>(X, dXn, b.n, g.dgain[b.main], g.dbias[b.main]);
      if (a != T(0)) dX += s * dOut;
      return dX;
    }
    case NormPosition::ngpt: {  // Z = (1 - a) X + a N_out(Y)
      const MatrixT<T> dZ = norm_backward<T>(c.Z, dOut, b.n, g.dgain[b.main], g.dbias[b.main]);
      const MatrixT<T> dY = norm_backward<T>(c.Y, a * dZ, b.n_out, g.dgain[b.out], g.dbias[b.out]);
      return (T(1) - a) * dZ + dF(X, dY);
    }
  }
  return dOut;
}

template <class T>
MatrixT<T> sub_block_jvp(const SubBlockSpec<T>& b, const SubBlockCacheT<T>& c, const MatrixT<T>& X,
                         const MatrixT<T>& dX, const BranchMap<T>& dF) {
  const T a = b.a, s = b.s;
  switch (b.pos) {
    case NormPosition::post: {
      const MatrixT<T> dY = dF(X, dX);
      const MatrixT<T> dZ = a != T(0) ? MatrixT<T>(s * dX + a * dY) : dY;
      return norm_jvp<T>(c.Z, dZ, b.n);
    }
    case NormPosition::pre:
    case NormPosition::peri: {
      MatrixT<T> dXn = norm_jvp<T>(X, dX, b.n);
      if (b.c != T(1)) dXn *= b.c;
      MatrixT<T> dY = dF(c.Xn, dXn);
      if (b.pos == NormPosition::peri) dY = norm_jvp<T>(c.Y, dY, b.n_out);
      return a != T(0) ? MatrixT<T>(s * dX + a * dY) : dY;
    }
    case NormPosition::ngpt: {
      const MatrixT<T> dYn = norm_jvp<T>(c.Y, dF(X, dX), b.n_out);
      return norm_jvp<T>(c.Z, MatrixT<T>((T(1) - a) * dX + a * dYn), b.n);
    }
  }
  return dX;
}

#define RCSIM_SUB_BLOCK_OPS(T)                                                                                     \
  template SubBlockSpec<T> attention_sub_block<T>(const LayerWeightsT<T>&, const BlockParams&);                   \
  template SubBlockSpec<T> mlp_sub_block<T>(const LayerWeightsT<T>&, const BlockParams&);                         \
  template MatrixT<T> sub_block_backward<T>(const SubBlockSpec<T>&, const SubBlockCacheT<T>&, const MatrixT<T>&,  \
                                            const MatrixT<T>&, const BranchMap<T>&, BlockGradsT<T>&);             \
  template MatrixT<T> sub_block_jvp<T>(const SubBlockSpec<T>&, const SubBlockCacheT<T>&, const MatrixT<T>&,       \
                                       const MatrixT<T>&, const BranchMap<T>&);
RCSIM_SUB_BLOCK_OPS(double)
RCSIM_SUB_BLOCK_OPS(float)
#undef RCSIM_SUB_BLOCK_OPS

}  // namespace rcsim
