// What the kernel VM (vm.cc) and the kernels generated for one program (codegen.py)
// share: the walk over a phase's chunks, the sums and the elementwise helpers. Both run
// the same phases in the same order with the same helpers, so they give the same bits.
// Here: run_phase, top-k, a run's arrays; numbers.h: the elementwise helpers and sums in
// double; threads.h: the threads and the scratch each keeps; walk.h: chunks, gathers and
// how sums land. build.py's HEADERS lists them all (a change to any rebuilds the cache).
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
#include <cstdint>
#include <vector>

#include "abi.h"
#include "numbers.h"
#include "threads.h"
#include "walk.h"

namespace uo {

// Runs body(walk, chunk, scratch) on every chunk of the phase's domain (chunks of at most
// CH elements; several rows each where `together` and a row has at most CH / 2), on
// several threads for a large domain, then writes the sums' totals into their arrays.
// Without column sums the chunks are spread over the threads one by one. With one, a
// thread walks whole groups of rows (Walk), row after row, each row's elements in
// order. No two threads write the same place, and every total is added in the same
// order whatever the number of threads, the chunk size or the rows per chunk.
template <int64_t CH, class T, class Body>
void run_phase(int domain, const Dims& dims, std::vector<Sum>& sums, T* const* arrays,
               int64_t scratch_size, bool together, Body&& body) {
  static_assert(CH % SUM_BLOCK == 0, "a chunk holds whole sum blocks");
  const int64_t Db = domain & AB ? dims.B : 1, Dr = domain & AR ? dims.R : 1;
  const int64_t Dc = domain & AC ? dims.C : 1;
  const int64_t nch = (Dc + CH - 1) / CH, blocks = (Dc + SUM_BLOCK - 1) / SUM_BLOCK;
  const int64_t rows = Db * Dr;
  bool columns = false;
  int sum_over_b = 0;
  for (const Sum& s : sums)
    if (!(s.axes & AC)) { columns = true; sum_over_b |= s.axes & AB; }
  const int64_t span = sum_over_b ? rows : Dr;
  const int64_t per_group = std::max<int64_t>(16, (span + 63) / 64);
  const int64_t groups_per = (span + per_group - 1) / per_group;
  const int64_t groups = columns ? (sum_over_b ? groups_per : Db * groups_per) : 0;
  const Walk walk{Dr, Dc, blocks, per_group, groups_per, sum_over_b != 0};
  // column sums land per b (GROUPS) where a b is one group of 2 or more rows and chunks of
  // whole b's fit: the chunks then hold whole b's, never one row
  const bool whole_bs = columns && !sum_over_b && groups_per == 1 && Dr >= 2 && Dc >= 1 &&
                        together && Dr * Dc <= CH;
  // rows per chunk: 1 (a row's chunks along C), or as many whole rows (whole b's) as fit
  const int64_t per_chunk = whole_bs ? CH / (Dr * Dc) * Dr
                            : together && Dc > 0 ? std::max<int64_t>(1, CH / Dc) : 1;
  // the items the threads share: chunks, or (column sums) runs of whole groups holding
  // about 16 chunks' worth of elements (a group is a range of rows, and groups in order
  // cover the rows in order: group g ends where group g + 1 starts)
  const int64_t group_rows = sum_over_b ? per_group : std::min(per_group, Dr);
  const int64_t per_item = std::max<int64_t>(
      1, (16 * CH) / std::max<int64_t>(1, group_rows * std::max<int64_t>(1, Dc)));
  const int64_t items = columns ? (groups + per_item - 1) / per_item
                        : per_chunk == 1 ? rows * nch : (rows + per_chunk - 1) / per_chunk;
  const int threads = rows * Dc >= PARALLEL_MIN ? thread_count() : 1;
  const bool serial = std::min<int64_t>(threads, items) <= 1;
  std::vector<Buffer<double>> held;
  held.reserve(sums.size());
  for (Sum& s : sums) {
    const int rm = domain & ~s.axes;
    s.over_c = (s.axes & AC) != 0;
    s.out = arrays[s.dst];
    s.per_r = rm & AR ? 1 : 0;
    s.per_b = rm & AB ? (rm & AR ? Dr : 1) : 0;
    int64_t size = 0;
    bool zero = true;
    if (s.over_c && s.direct && blocks == 1 && rm == (domain & (AB | AR))) {
      s.landing = Landing::ROWS;
    } else if (s.over_c && serial) {
      s.landing = Landing::RUNNING;
      size = dims.size(rm);
    } else if (s.over_c) {
      s.landing = Landing::PARTIALS;
      size = rows * blocks;
      zero = false;                              // every row's every block is written
    } else if (whole_bs && s.direct && s.axes == AR) {
      s.landing = Landing::GROUPS;
    } else {
      s.landing = Landing::PARTIALS;
      size = groups * Dc;
    }
    held.emplace_back(size);
    s.acc = held.back().data();
    if (zero) std::fill(s.acc, s.acc + size, 0.0);
  }
  // the chunks of the rows [first, last), in order
  auto walk_rows = [&](int64_t first, int64_t last, T* scratch) {
    if (per_chunk == 1) {
      for (int64_t row = first; row < last; ++row)
        for (int64_t c0 = 0; c0 < Dc; c0 += CH)
          body(walk, Chunk{row, 1, c0, std::min(CH, Dc - c0), row / Dr, row % Dr}, scratch);
    } else {
      for (int64_t row = first; row < last; row += per_chunk)
        body(walk, Chunk{row, std::min(per_chunk, last - row), 0, Dc, row / Dr, row % Dr},
             scratch);
    }
  };
  if (!columns) {
    if (per_chunk == 1) {
      for_each_item<T>(items, threads, scratch_size, [&](int64_t item, T* scratch) {
        const int64_t row = item / nch, c0 = (item % nch) * CH;
        body(walk, Chunk{row, 1, c0, std::min(CH, Dc - c0), row / Dr, row % Dr}, scratch);
      });
    } else {
      for_each_item<T>(items, threads, scratch_size, [&](int64_t item, T* scratch) {
        const int64_t row = item * per_chunk;
        body(walk, Chunk{row, std::min(per_chunk, rows - row), 0, Dc, row / Dr, row % Dr},
             scratch);
      });
    }
  } else {
    auto first_row = [&](int64_t g) {
      if (g >= groups) return rows;
      return sum_over_b ? g * per_group : (g / groups_per) * Dr + (g % groups_per) * per_group;
    };
    for_each_item<T>(items, threads, scratch_size, [&](int64_t item, T* scratch) {
      const int64_t g0 = item * per_item;
      walk_rows(first_row(g0), first_row(std::min(groups, g0 + per_item)), scratch);
    });
  }
  for (Sum& s : sums) {
    if (s.landing == Landing::ROWS || s.landing == Landing::GROUPS) continue;
    const int rm = domain & ~s.axes;
    T* out = arrays[s.dst];
    const int64_t size = dims.size(rm);
    if (s.landing == Landing::RUNNING) {
      for (int64_t i = 0; i < size; ++i) out[i] = T(s.acc[i]);
      continue;
    }
    Buffer<double> held_total(size);
    double* total = held_total.data();
    std::fill(total, total + size, 0.0);
    if (s.over_c && s.per_b == 0 && s.per_r == 0) {   // one total: kept in a register
      double t = total[0];
      for (int64_t i = 0; i < rows * blocks; ++i) t += s.acc[i];
      total[0] = t;
    } else if (s.over_c) {           // the partials in order: row after row
      const double* part = s.acc;
      for (int64_t b = 0; b < Db; ++b)
        for (int64_t r = 0; r < Dr; ++r) {
          double t = total[b * s.per_b + r * s.per_r];
          for (int64_t k = 0; k < blocks; ++k) t += *part++;
          total[b * s.per_b + r * s.per_r] = t;
        }
    } else {
      for (int64_t g = 0; g < groups; ++g) {
        double* t = total + (sum_over_b ? 0 : (g / groups_per) * Dc);
        const double* partial = s.acc + g * Dc;
        for (int64_t c = 0; c < Dc; ++c) t[c] += partial[c];
      }
    }
    for (int64_t i = 0; i < size; ++i) out[i] = T(total[i]);
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

// The arrays of one run: the caller's (inputs, updated in place), then scratch from the
// thread's Buffers, not zeroed: each is written whole before a phase reads it (VM code
// that would read one first is refused: scratch_written_first).
template <class T> struct Arrays {
  std::vector<T*> ptr;
  std::vector<Buffer<T>> owned;
  Arrays(int n_inputs, int n_arrays, const int32_t* masks, void* const* inputs,
         const Dims& dims) : ptr(n_arrays) {
    owned.reserve(n_arrays);
    for (int k = 0; k < n_arrays; ++k) {
      if (k < n_inputs) {
        ptr[k] = static_cast<T*>(inputs[k]);
      } else {
        owned.emplace_back(dims.size(masks[k]));
        ptr[k] = owned.back().data();
      }
    }
  }
};

// Whether every scratch array (index n_inputs on) that a phase reads was written whole
// by an earlier phase: stored in a phase whose domain spans the array's axes, or a sum's
// or a top-k's result. bytecode.py's schedule writes them so (a small node is stored in
// the phase of its own axes, a sum lands at its phase's end, and a phase reading either
// comes later); codegen.py checks the same before it writes a kernel.
inline bool scratch_written_first(int n_inputs, int n_arrays, const int32_t* masks,
                                  int n_phases, const int* domains, const int* counts,
                                  const abi::Ins* const* phases) {
  std::vector<char> written(size_t(std::max(n_arrays, 0)), 0);
  for (int k = 0; k < std::min(n_inputs, n_arrays); ++k) written[k] = 1;
  auto ready = [&](int kind, int k) {
    return kind != abi::ARR || (k >= 0 && k < n_arrays && written[k]);
  };
  for (int p = 0; p < n_phases; ++p) {
    for (int i = 0; i < counts[p]; ++i) {
      const abi::Ins& in = phases[p][i];
      if (!ready(in.a_kind, in.a) || !ready(in.b_kind, in.b) || !ready(in.c_kind, in.c))
        return false;
      if (in.dst < 0 || in.dst >= n_arrays) {
        if (in.op == abi::STORE || in.op == abi::SUM || in.op == abi::TOPK) return false;
      }
    }
    for (int i = 0; i < counts[p]; ++i) {
      const abi::Ins& in = phases[p][i];
      const bool whole = in.op == abi::SUM || in.op == abi::TOPK ||
                         (in.op == abi::STORE && domains[p] != abi::SELECT &&
                          !(masks[in.dst] & ~domains[p]));
      if (whole) written[in.dst] = 1;
    }
  }
  return true;
}

}  // namespace uo
