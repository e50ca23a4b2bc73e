// What the kernel VM (vm.cc) and the kernels generated for one program (codegen.py)
// share: the walk over a phase's chunks, the sums and the elementwise helpers. Both run
// the same phases in the same order with the same helpers, so they give the same bits.
//
// Numbers: every elementwise operation rounds to the parameter's type T, in the order of
// the spec's code, as numpy and the eager bindings do (compiled without contraction into
// fused multiply-adds and without fast-math; -fno-math-errno only lets sqrt vectorise).
// Sums add in double, in an order that depends neither on the number of threads nor on
// vectorisation (lane_sum; columns row after row), and round once to T.
// Non-finite values follow numpy: max/min keep NaN, sign(NaN) is NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace uo {

constexpr int64_t CHUNK = 256;
// a phase runs on several threads when its domain has at least this many elements
constexpr int64_t PARALLEL_MIN = 1 << 15;
enum Axis { AB = 1, AR = 2, AC = 4 };

struct Dims {
  int64_t B, R, C;
  int64_t size(int mask) const {
    return (mask & AB ? B : 1) * (mask & AR ? R : 1) * (mask & AC ? C : 1);
  }
  // the position of (b, r, c) in an array spanning the axes of mask
  int64_t index(int mask, int64_t b, int64_t r, int64_t c) const {
    int64_t i = 0;
    if (mask & AB) i = b;
    if (mask & AR) i = i * R + r;
    if (mask & AC) i = i * C + c;
    return i;
  }
};

template <class T> inline T nan_max(T a, T b) {
  T r = a >= b ? a : b;
  if (b != b) r = b;
  if (a != a) r = a;
  return r;
}
template <class T> inline T nan_min(T a, T b) {
  T r = a <= b ? a : b;
  if (b != b) r = b;
  if (a != a) r = a;
  return r;
}
template <class T> inline T sign_of(T a) { return a > 0 ? T(1) : (a < 0 ? T(-1) : a); }

// The sum of x[0..n) in double: element j goes to lane j % LANES, the lanes are added in
// a fixed tree. Vectorises (each lane is its own chain) and gives the same bits anywhere.
constexpr int LANES = 16;
template <class T> inline double lane_sum(const T* __restrict__ x, int64_t n) {
  double lane[LANES] = {0};
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int l = 0; l < LANES; ++l) lane[l] += double(x[j + l]);
  for (int l = 0; j < n; ++j, ++l) lane[l] += double(x[j]);
  for (int width = LANES / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

// One sum of a phase: over the axes `axes` of the phase's domain, into array `dst`.
// Over C: one partial per chunk (acc[item]), added in item order at the end; otherwise
// the result keeps C and each chunk adds its slice into acc (the result's layout).
struct Sum {
  int axes, dst;
  bool over_c;
  std::vector<double> acc;
};

struct Walk {
  int domain;
  int64_t Db, Dr, Dc, nch, items;
  Walk(int domain, const Dims& d)
      : domain(domain), Db(domain & AB ? d.B : 1), Dr(domain & AR ? d.R : 1),
        Dc(domain & AC ? d.C : 1), nch((Dc + CHUNK - 1) / CHUNK), items(Db * Dr * nch) {}
};

// Runs body(b, r, c0, n, item, scratch) on every chunk of the phase's domain, on
// several threads for a large domain, then writes the sums' totals into their arrays.
// Chunks of a phase without column sums are spread over the threads in any order;
// with one, each thread owns whole columns and walks their rows in order. No two
// threads write the same place, and every total is added in the same order.
template <class T, class Body>
void run_phase(int domain, const Dims& dims, std::vector<Sum>& sums, T* const* arrays,
               int64_t scratch_size, Body&& body) {
  const Walk w(domain, dims);
  bool columns = false;
  int sum_over_b = 0;
  for (Sum& s : sums) {
    s.over_c = (s.axes & AC) != 0;
    s.acc.assign(s.over_c ? w.items : dims.size(domain & ~s.axes), 0.0);
    if (!s.over_c) { columns = true; sum_over_b |= s.axes & AB; }
  }
  const bool parallel = w.Db * w.Dr * w.Dc >= PARALLEL_MIN;
  if (!columns) {
#pragma omp parallel if (parallel)
    {
      std::vector<T> scratch(std::max<int64_t>(1, scratch_size));
#pragma omp for schedule(static)
      for (int64_t item = 0; item < w.items; ++item) {
        int64_t ch = item % w.nch, row = item / w.nch, c0 = ch * CHUNK;
        body(row / w.Dr, row % w.Dr, c0, std::min(CHUNK, w.Dc - c0), item, scratch.data());
      }
    }
  } else {
    const int64_t ub = sum_over_b ? 1 : w.Db, inner_b = sum_over_b ? w.Db : 1;
#pragma omp parallel if (parallel)
    {
      std::vector<T> scratch(std::max<int64_t>(1, scratch_size));
#pragma omp for schedule(static)
      for (int64_t u = 0; u < ub * w.nch; ++u) {
        int64_t ch = u % w.nch, c0 = ch * CHUNK, n = std::min(CHUNK, w.Dc - c0);
        for (int64_t bi = 0; bi < inner_b; ++bi) {
          int64_t b = sum_over_b ? bi : u / w.nch;
          for (int64_t r = 0; r < w.Dr; ++r)
            body(b, r, c0, n, (b * w.Dr + r) * w.nch + ch, scratch.data());
        }
      }
    }
  }
  for (Sum& s : sums) {
    const int rm = domain & ~s.axes;
    T* out = arrays[s.dst];
    if (s.over_c) {
      std::vector<double> total(dims.size(rm), 0.0);
      for (int64_t item = 0; item < w.items; ++item) {
        int64_t row = item / w.nch;
        total[dims.index(rm, row / w.Dr, row % w.Dr, 0)] += s.acc[item];
      }
      for (size_t i = 0; i < total.size(); ++i) out[i] = T(total[i]);
    } else {
      for (size_t i = 0; i < s.acc.size(); ++i) out[i] = T(s.acc[i]);
    }
  }
}

// The arrays of one run: the caller's (inputs, updated in place), then scratch.
template <class T> struct Arrays {
  std::vector<T*> ptr;
  std::vector<std::vector<T>> owned;
  Arrays(int n_inputs, int n_arrays, const int32_t* masks, void* const* inputs,
         const Dims& dims) : ptr(n_arrays) {
    owned.reserve(n_arrays);
    for (int k = 0; k < n_arrays; ++k) {
      if (k < n_inputs) {
        ptr[k] = static_cast<T*>(inputs[k]);
      } else {
        owned.emplace_back(std::max<int64_t>(1, dims.size(masks[k])));
        ptr[k] = owned.back().data();
      }
    }
  }
};

}  // namespace uo
