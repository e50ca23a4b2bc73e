// The numbers' rules the kernel VM and the generated kernels share (phases.h): the
// chunk and sum-block sizes, a phase's (B, R, C) dims, the branch-free elementwise
// helpers and the sums in double of a fixed order (lane_sum, short_sum).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

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

constexpr int LANES = 16;

// inlined whatever the compiler's heuristics say: the short sums of a conv weight's rows,
// called once per row of 3 (a call per row kept a running total out of the registers)
#if defined(__GNUC__) || defined(__clang__)
#define UO_INLINE inline __attribute__((always_inline))
#else
#define UO_INLINE inline
#endif

// lane_sum of fewer than LANES elements (a conv weight's row of 3) without the empty
// lanes: lane l < n holds 0.0 + x[l], never -0; every other lane is +0, and adding +0 to
// a value that is not -0 gives it back, bits and NaN payload alike, so the lanes that
// stay +0 are left out of the tree (the same bits as the tree over all LANES).
template <class T> inline double short_lane_sum(const T* __restrict__ x, int64_t n) {
  double lane[LANES];
  for (int64_t l = 0; l < n; ++l) lane[l] = 0.0 + double(x[l]);
  int64_t live = n;          // lanes [0, live) may be other than +0
  for (int64_t width = LANES / 2; width > 0; width /= 2) {
    for (int64_t l = 0; l + width < live && l < width; ++l) lane[l] += lane[l + width];
    live = std::min(live, width);
  }
  return live > 0 ? lane[0] : 0.0;
}

// lane_sum's lanes added in its fixed tree (a generated kernel's element loop adds into
// the lanes itself: codegen.py)
UO_INLINE double lane_tree(double* lane) {
  for (int width = LANES / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

// The sum of x[0..n) in double: element j goes to lane j % LANES, the lanes are added in
// a fixed tree. Vectorises (each lane is its own chain) and gives the same bits anywhere.
template <class T> inline double lane_sum(const T* __restrict__ x, int64_t n) {
  if (n < LANES) return short_lane_sum(x, n);
  double lane[LANES] = {0};
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int l = 0; l < LANES; ++l) lane[l] += double(x[j + l]);
  for (int l = 0; j < n; ++j, ++l) lane[l] += double(x[j]);
  return lane_tree(lane);
}

// short_lane_sum of N elements, N known to the compiler (unrolled: a conv weight's rows)
template <int N, class T> UO_INLINE double short_sum(const T* __restrict__ x) {
  double lane[N];
  for (int l = 0; l < N; ++l) lane[l] = 0.0 + double(x[l]);
  int live = N;
  for (int width = LANES / 2; width > 0; width /= 2) {
    for (int l = 0; l < width && l + width < live; ++l) lane[l] += lane[l + width];
    live = std::min(live, width);
  }
  return lane[0];
}

}  // namespace uo
