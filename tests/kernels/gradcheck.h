// Test helpers: random inputs (values and token ids), central finite differences and a norm-based
// relative error, all in double precision. Shared by the kernel and transformer tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace strait::testing {

inline std::vector<double> random_vector(std::mt19937_64& rng, std::size_t n, double lo = -1.0,
                                         double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// n token ids drawn uniformly from [0, V).
inline std::vector<std::int32_t> random_tokens(std::mt19937_64& rng, std::size_t n, int V) {
  std::uniform_int_distribution<std::int32_t> dist(0, V - 1);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = dist(rng);
  return t;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d f / d x[i] for every i by central differences with a step of 1e-6 relative to |x[i]| (at least
// 1e-6). x is perturbed in place and restored exactly.
inline std::vector<double> numeric_gradient(std::span<double> x, const std::function<double()>& f) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    const double h = 1e-6 * std::max(1.0, std::fabs(x0));
    const double xp = x0 + h;
    const double xm = x0 - h;
    x[i] = xp;
    const double fp = f();
    x[i] = xm;
    const double fm = f();
    x[i] = x0;
    g[i] = (fp - fm) / (xp - xm);  // the representable step, not the nominal 2h
  }
  return g;
}

// ||a - b|| / max(||a||, ||b||); 0 when both are zero.
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0;
  double na = 0;
  double nb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  const double denom = std::sqrt(std::max(na, nb));
  return denom == 0.0 ? 0.0 : std::sqrt(diff) / denom;
}

// after - before: what a backward pass accumulated onto a gradient buffer.
inline std::vector<double> accumulated(const std::vector<double>& after,
                                       const std::vector<double>& before) {
  std::vector<double> d(after.size());
  for (std::size_t i = 0; i < after.size(); ++i) d[i] = after[i] - before[i];
  return d;
}

// Calls check(rows, cols) for each (rows, cols) shape: plain ints, which check's lambdas may
// capture (clang 14 cannot capture structured bindings).
inline void for_each_shape(std::initializer_list<std::pair<int, int>> shapes,
                           const std::function<void(int, int)>& check) {
  for (const auto& shape : shapes) check(shape.first, shape.second);
}

// A gradient buffer for a backward pass that adds into it, seeded with random values so that a
// test also sees that it adds: added() takes the seed back off.
struct SeededGrad {
  std::vector<double> seed;
  std::vector<double> grad;

  SeededGrad(std::mt19937_64& rng, std::size_t n) : seed(random_vector(rng, n)), grad(seed) {}
  [[nodiscard]] double* data() { return grad.data(); }
  [[nodiscard]] std::vector<double> added() const { return accumulated(grad, seed); }
};

}  // namespace strait::testing
