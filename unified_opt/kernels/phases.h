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
//
// Speed does not depend on the data: every elementwise helper here is branch-free, a
// chain of selects on comparisons that the compiler turns into blends in vector code and
// conditional moves in scalar code (tests/test_kernels.py counts the branches the CPU
// mispredicts under valgrind on random-sign and on constant data: the same).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#else
#include <thread>
#endif

#include "abi.h"

namespace uo {

// Sums over C add per block of SUM_BLOCK elements along C (lane_sum), then the blocks
// in order: the same bits whatever chunk size a walk uses (a multiple of SUM_BLOCK).
constexpr int64_t SUM_BLOCK = 256;
// the VM's chunk (its registers stay in the L1 cache); a generated kernel's
constexpr int64_t CHUNK = SUM_BLOCK;
constexpr int64_t KERNEL_CHUNK = 4 * SUM_BLOCK;
// a phase runs on several threads when its domain has at least this many elements
constexpr int64_t PARALLEL_MIN = 1 << 15;
using abi::AB;
using abi::AR;
using abi::AC;

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

// selects, not branches: each line is a blend (vector) or a conditional move (scalar)
template <class T> inline T nan_max(T a, T b) {
  T r = a >= b ? a : b;
  r = b != b ? b : r;
  r = a != a ? a : r;
  return r;
}
template <class T> inline T nan_min(T a, T b) {
  T r = a <= b ? a : b;
  r = b != b ? b : r;
  r = a != a ? a : r;
  return r;
}
// 1, -1, or the value itself for 0, -0 and NaN (numpy's sign)
template <class T> inline T sign_of(T a) {
  T r = a > T(0) ? T(1) : a;
  r = a < T(0) ? T(-1) : r;
  return r;
}
// where(c, x, y) with c a 1/0 mask; logic on masks without short-circuit
template <class T> inline T select(T c, T x, T y) { return c != T(0) ? x : y; }
template <class T> inline T logical_and(T x, T y) { return T((x != T(0)) & (y != T(0))); }
template <class T> inline T logical_or(T x, T y) { return T((x != T(0)) | (y != T(0))); }

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
// Over C: one partial per block of SUM_BLOCK elements of a row (acc[part]), added in
// order at the end. Otherwise (a column sum: the result keeps C) one partial row per
// group of rows (acc[group * width + c]), added in group order at the end.
struct Sum {
  int axes, dst;
  bool over_c;
  std::vector<double> acc;
};

// The partials of a sum over C of the chunk x[0..n) (its first block is `part`).
template <class T> inline void block_sums(double* acc, const T* x, int64_t n) {
  for (int64_t k = 0; k * SUM_BLOCK < n; ++k)
    acc[k] = lane_sum(x + k * SUM_BLOCK, std::min(SUM_BLOCK, n - k * SUM_BLOCK));
}
inline void block_sums_of(double* acc, double value, int64_t n) {
  for (int64_t k = 0; k * SUM_BLOCK < n; ++k)
    acc[k] = value * double(std::min(SUM_BLOCK, n - k * SUM_BLOCK));
}

// The threads of a parallel phase: OMP_NUM_THREADS where it is set (Paddle sets it to 1
// when imported), else the CPU's.
inline int thread_count() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  const int n = env ? std::atoi(env) : 0;
#ifdef _OPENMP
  return n > 0 ? n : omp_get_max_threads();
#else
  return n > 0 ? n : std::max(1, int(std::thread::hardware_concurrency()));
#endif
}

// work(i, scratch) for every i in [0, count), on several threads when `parallel`: each
// thread a contiguous range and scratch of its own (OpenMP's static schedule; with a
// compiler without OpenMP's runtime, std::thread does the same). Every i writes places
// of its own, so the numbers do not depend on the threads.
template <class T, class Work>
void for_each_item(int64_t count, bool parallel, int64_t scratch_size, Work&& work) {
#ifdef _OPENMP
#pragma omp parallel if (parallel)
  {
    std::vector<T> scratch(std::max<int64_t>(1, scratch_size));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < count; ++i) work(i, scratch.data());
  }
#else
  const int64_t threads =
      parallel ? std::max<int64_t>(1, std::min<int64_t>(thread_count(), count)) : 1;
  auto range = [&](int64_t t) {
    std::vector<T> scratch(std::max<int64_t>(1, scratch_size));
    for (int64_t i = count * t / threads; i < count * (t + 1) / threads; ++i)
      work(i, scratch.data());
  };
  std::vector<std::thread> others;
  for (int64_t t = 1; t < threads; ++t) others.emplace_back(range, t);
  range(0);
  for (std::thread& other : others) other.join();
#endif
}

// Runs body(b, r, c0, n, part, group, scratch) on every chunk of the phase's domain
// (chunks of CH elements along C; `part`: the chunk's first sum block), on several
// threads for a large domain, then writes the sums' totals into their arrays.
// Without column sums the chunks are spread over the threads one by one (group 0).
// With one, the rows (b, r) form groups of consecutive rows (never across b when the
// sum keeps B); a thread walks a whole group row after row, each row's chunks in order,
// adding into that group's partial row. No two threads write the same place, and every
// total is added in the same order whatever the number of threads or the chunk size.
template <int64_t CH, class T, class Body>
void run_phase(int domain, const Dims& dims, std::vector<Sum>& sums, T* const* arrays,
               int64_t scratch_size, Body&& body) {
  static_assert(CH % SUM_BLOCK == 0, "a chunk holds whole sum blocks");
  const int64_t Db = domain & AB ? dims.B : 1, Dr = domain & AR ? dims.R : 1;
  const int64_t Dc = domain & AC ? dims.C : 1;
  const int64_t nch = (Dc + CH - 1) / CH, blocks = (Dc + SUM_BLOCK - 1) / SUM_BLOCK;
  const int64_t rows = Db * Dr, items = rows * nch;
  bool columns = false;
  int sum_over_b = 0;
  for (const Sum& s : sums)
    if (!(s.axes & AC)) { columns = true; sum_over_b |= s.axes & AB; }
  // groups of rows for the column sums: within one b unless a sum adds over B
  const int64_t span = sum_over_b ? rows : Dr;
  const int64_t per_group = std::max<int64_t>(16, (span + 63) / 64);
  const int64_t groups_per = (span + per_group - 1) / per_group;
  const int64_t groups = columns ? (sum_over_b ? groups_per : Db * groups_per) : 0;
  for (Sum& s : sums) {
    s.over_c = (s.axes & AC) != 0;
    s.acc.assign(s.over_c ? rows * blocks : groups * Dc, 0.0);
  }
  const bool parallel = rows * Dc >= PARALLEL_MIN;
  if (!columns) {
    for_each_item<T>(items, parallel, scratch_size, [&](int64_t item, T* scratch) {
      const int64_t ch = item % nch, row = item / nch, c0 = ch * CH;
      body(row / Dr, row % Dr, c0, std::min(CH, Dc - c0), row * blocks + c0 / SUM_BLOCK,
           int64_t(0), scratch);
    });
  } else {
    for_each_item<T>(groups, parallel, scratch_size, [&](int64_t g, T* scratch) {
      const int64_t base = sum_over_b ? 0 : (g / groups_per) * Dr;
      const int64_t first = base + (g % groups_per) * per_group;
      const int64_t last = std::min(first + per_group, base + span);
      for (int64_t row = first; row < last; ++row)
        for (int64_t c0 = 0; c0 < Dc; c0 += CH)
          body(row / Dr, row % Dr, c0, std::min(CH, Dc - c0),
               row * blocks + c0 / SUM_BLOCK, g, scratch);
    });
  }
  for (Sum& s : sums) {
    const int rm = domain & ~s.axes;
    T* out = arrays[s.dst];
    std::vector<double> total(dims.size(rm), 0.0);
    if (s.over_c) {
      for (int64_t part = 0; part < rows * blocks; ++part) {
        const int64_t row = part / blocks;
        total[dims.index(rm, row / Dr, row % Dr, 0)] += s.acc[part];
      }
    } else {
      for (int64_t g = 0; g < groups; ++g) {
        double* t = total.data() + (sum_over_b ? 0 : (g / groups_per) * Dc);
        const double* partial = s.acc.data() + g * Dc;
        for (int64_t c = 0; c < Dc; ++c) t[c] += partial[c];
      }
    }
    for (size_t i = 0; i < total.size(); ++i) out[i] = T(total[i]);
  }
}

// DGC's top-k: mask[i] = 1 at the k largest of x[0..n), else 0, as the numpy binding
// selects them (a stable descending sort, first k): ties go to the lower index, NaN
// comes after every number. k is rounded down and clipped to [0, n].
template <class T> void top_k(const T* x, int64_t n, double kd, T* mask) {
  const int64_t k = std::max<int64_t>(0, std::min<int64_t>(n, int64_t(kd)));
  std::fill(mask, mask + n, T(0));
  std::vector<T> values;
  values.reserve(n);
  for (int64_t i = 0; i < n; ++i)
    if (x[i] == x[i]) values.push_back(x[i]);
  const int64_t numbers = int64_t(values.size());
  if (k >= numbers) {         // every number, then the first NaNs
    int64_t nan_left = k - numbers;
    for (int64_t i = 0; i < n; ++i) {
      if (x[i] == x[i]) mask[i] = T(1);
      else if (nan_left > 0) { mask[i] = T(1); --nan_left; }
    }
    return;
  }
  if (k == 0) return;
  std::nth_element(values.begin(), values.begin() + (k - 1), values.end(),
                   [](T a, T b) { return a > b; });
  const T threshold = values[k - 1];
  int64_t taken = 0;
  for (int64_t i = 0; i < n; ++i)
    if (x[i] > threshold) { mask[i] = T(1); ++taken; }
  for (int64_t i = 0; i < n && taken < k; ++i)
    if (x[i] == threshold) { mask[i] = T(1); ++taken; }
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
