#include "kernel/measures/clusters.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace rcsim {

namespace {

// Cosine similarities; rows of zero norm give 0 (below any threshold in (0, 1]) and -2 on the
// diagonal so that they are never similar to anything.
Matrix cosines(const Eigen::Ref<const Matrix>& X) {
  Vector norms = X.rowwise().norm();
  Matrix U = X;
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    if (norms(i) > 0.0) U.row(i) /= norms(i);
  Matrix C = U * U.transpose();
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    if (!(norms(i) > 0.0)) {
      C.row(i).setConstant(-2.0);
      C.col(i).setConstant(-2.0);
    }
  return C;
}

int find(std::vector<int>& parent, int i) {
  while (parent[static_cast<std::size_t>(i)] != i) {
    parent[static_cast<std::size_t>(i)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(i)])];
    i = parent[static_cast<std::size_t>(i)];
  }
  return i;
}

}  // namespace

double pair_density(const Eigen::Ref<const Matrix>& X, double threshold) {
  const Eigen::Index n = X.rows();
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  const Matrix C = cosines(X);
  double count = 0;
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < n; ++j)
      if (i != j && C(i, j) > threshold) ++count;
  return count / (static_cast<double>(n) * static_cast<double>(n - 1));
}

namespace {

// The component root of every token of the graph c_ij > tau (union-find).
std::vector<int> components(const Eigen::Ref<const Matrix>& X, double tau) {
  const int n = static_cast<int>(X.rows());
  const Matrix C = cosines(X);
  std::vector<int> parent(static_cast<std::size_t>(n));
  std::iota(parent.begin(), parent.end(), 0);
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if (C(i, j) > tau) {
        const int a = find(parent, i), b = find(parent, j);
        if (a != b) parent[static_cast<std::size_t>(a)] = b;
      }
  for (int i = 0; i < n; ++i) parent[static_cast<std::size_t>(i)] = find(parent, i);
  return parent;
}

}  // namespace

int cluster_count(const Eigen::Ref<const Matrix>& X, double tau) {
  const std::vector<int> root = components(X, tau);
  int count = 0;
  for (std::size_t i = 0; i < root.size(); ++i) count += root[i] == static_cast<int>(i);
  return count;
}

double largest_cluster_fraction(const Eigen::Ref<const Matrix>& X, double tau) {
  const std::vector<int> root = components(X, tau);
  if (root.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::vector<int> size(root.size(), 0);
  for (const int r : root) ++size[static_cast<std::size_t>(r)];
  return static_cast<double>(*std::max_element(size.begin(), size.end())) / static_cast<double>(root.size());
}

ClusterPartition cluster_partition(const Eigen::Ref<const Matrix>& X, double tau) {
  const std::vector<int> root = components(X, tau);
  const std::size_t n = root.size();
  ClusterPartition p;
  p.label.assign(n, -1);
  std::vector<int> label_of_root(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    int& l = label_of_root[static_cast<std::size_t>(root[i])];
    if (l < 0) {
      l = static_cast<int>(p.size.size());
      p.size.push_back(0);
    }
    p.label[i] = l;
    ++p.size[static_cast<std::size_t>(l)];
  }
  p.centre = Matrix::Zero(static_cast<Eigen::Index>(p.size.size()), X.cols());
  for (std::size_t i = 0; i < n; ++i) {
    const double norm = X.row(static_cast<Eigen::Index>(i)).norm();
    if (norm > 0.0) p.centre.row(p.label[i]) += X.row(static_cast<Eigen::Index>(i)) / norm;
  }
  for (Eigen::Index c = 0; c < p.centre.rows(); ++c) {
    const double norm = p.centre.row(c).norm();
    if (norm > 0.0) p.centre.row(c) /= norm;
  }
  return p;
}

int renyi_parking_centres(const Eigen::Ref<const Matrix>& X, double delta) {
  std::vector<Eigen::Index> centres;
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    bool far = true;
    for (const Eigen::Index c : centres) far = far && (X.row(i) - X.row(c)).norm() >= delta;
    if (far) centres.push_back(i);
  }
  return static_cast<int>(centres.size());
}

int strong_renyi_centres(const Eigen::Ref<const Matrix>& X, double delta, RenyiDistance distance) {
  const Eigen::Index n = X.rows();
  const bool geodesic = distance == RenyiDistance::geodesic;
  const Matrix C = geodesic ? cosines(X) : Matrix();
  int count = 0;
  for (Eigen::Index k = 0; k < n; ++k) {
    bool far = true;
    for (Eigen::Index i = 0; i < k && far; ++i) {
      const double dist = geodesic ? std::acos(std::clamp(C(k, i), -1.0, 1.0)) : (X.row(k) - X.row(i)).norm();
      far = dist > delta;
    }
    count += far;
  }
  return count;
}

}  // namespace rcsim
