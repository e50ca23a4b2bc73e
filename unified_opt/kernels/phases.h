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
#include <atomic>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>
#if defined(__x86_64__) || defined(_M_X64)
#include <x86intrin.h>
#endif

#include "abi.h"
#include "numbers.h"
#include "threads.h"
#include "walk.h"

namespace uo {

// The clock of a kernel that codegen.py writes with one (benchmarks/kernel_phases.py):
// the CPU's time-stamp counter on x86-64 (constant rate, read in about 20 cycles), a
// steady clock's nanoseconds elsewhere. The kernel adds each phase's ticks into an array
// of its own, a tile run's chunk by chunk; on several threads each thread's ticks add up
// (time on the CPUs, not wall time).
inline uint64_t clock_ticks() {
#if defined(__x86_64__) || defined(_M_X64)
  return __rdtsc();
#else
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count());
#endif
}

// How a phase walks its domain (run_phase's and run_tiles'): the rows, the chunks and the
// groups its column sums add in, worked out from the domain's dims and its sums.
struct PhaseLayout {
  int domain;
  int64_t Db, Dr, Dc, nch, blocks, rows;
  bool columns;                 // a sum without C (a column sum)
  int sum_over_b;               // AB where a column sum adds over B
  int64_t per_group, groups_per, groups;
  Walk walk;
  // column sums land per b (GROUPS) where a b is one group of 2 or more rows and chunks of
  // whole b's fit: the chunks then hold whole b's, never one row (a generated kernel's
  // chunk of one row adds its column sums into PARTIALS)
  bool whole_bs;
  // rows per chunk: 1 (a row's chunks along C), or as many whole rows (whole b's) as fit
  int64_t per_chunk;
  // a blocked total among the sums (walk.h's Landing): chunks of a multiple of BLOCK_ROWS
  // rows, and whole b's where a multiple of both fits
  bool blocked;
  int64_t rows_held;            // rows, rounded up to whole blocks where blocked

  PhaseLayout(int64_t CH, int dom, const Dims& dims, const std::vector<Sum>& sums,
              bool together)
      : domain(dom), Db(dom & AB ? dims.B : 1), Dr(dom & AR ? dims.R : 1),
        Dc(dom & AC ? dims.C : 1), nch((Dc + CH - 1) / CH),
        blocks((Dc + SUM_BLOCK - 1) / SUM_BLOCK), rows(Db * Dr), columns(false),
        sum_over_b(0), blocked(false) {
    for (const Sum& s : sums) {
      if (!(s.axes & AC)) { columns = true; sum_over_b |= s.axes & AB; }
      blocked = blocked || blocked_sum(s, dom, Dc, together);
    }
    rows_held = blocked ? (rows + BLOCK_ROWS - 1) / BLOCK_ROWS * BLOCK_ROWS : rows;
    const int64_t span = sum_over_b ? rows : Dr;
    per_group = std::max<int64_t>(16, (span + 63) / 64);
    groups_per = (span + per_group - 1) / per_group;
    groups = columns ? (sum_over_b ? groups_per : Db * groups_per) : 0;
    walk = Walk{Dr, Dc, blocks, per_group, groups_per, sum_over_b != 0, dom};
    // whole b's in a chunk: Dr rows at a time, or (blocked) the rows of whole b's that
    // are a multiple of 16
    const int64_t b_rows = blocked ? std::lcm<int64_t>(BLOCK_ROWS, Dr) : Dr;
    whole_bs = columns && !sum_over_b && groups_per == 1 && Dr >= 2 && Dc >= 1 && together &&
               b_rows * Dc <= CH;
    per_chunk = whole_bs ? CH / (b_rows * Dc) * b_rows
                : together && Dc > 0 ? std::max<int64_t>(1, CH / Dc) : 1;
    if (!whole_bs && blocked) per_chunk -= per_chunk % BLOCK_ROWS;   // CH / Dc >= 16
    // short rows in whole b's where a chunk holds several b's (a conv weight's): a b's
    // gathered values then start at the chunk's start (walk.h's gather of whole 3x3 b's)
    if (!whole_bs && (dom & AR) && Dr >= 2 && per_chunk >= 2 * b_rows)
      per_chunk -= per_chunk % b_rows;
  }

  // body(walk, chunk, scratch) on the chunks of the rows [first, last), in order
  template <int64_t CH, class T, class Body>
  void walk_rows(int64_t first, int64_t last, T* scratch, Body&& body) const {
    if (per_chunk == 1) {
      for (int64_t row = first; row < last; ++row)
        for (int64_t c0 = 0; c0 < Dc; c0 += CH)
          body(walk, Chunk{row, 1, c0, std::min(CH, Dc - c0), row / Dr, row % Dr}, scratch);
    } else {
      for (int64_t row = first; row < last; row += per_chunk)
        body(walk, Chunk{row, std::min(per_chunk, last - row), 0, Dc, row / Dr, row % Dr},
             scratch);
    }
  }
};

// Each sum's landing (Landing) and its accumulators, kept in `held`. `serial`: one thread
// walks the rows in order. `b_local`: the walk goes tile by tile over B (run_tiles), each
// tile's rows on one thread, so a sum that keeps B may run its totals (RUNNING) on any
// number of threads: a total's rows all lie in one b, so in one tile.
template <class T>
void prepare_sums(const PhaseLayout& L, std::vector<Sum>& sums, T* const* arrays,
                  const Dims& dims, bool serial, bool b_local,
                  std::vector<Buffer<double>>& held) {
  for (Sum& s : sums) {
    const int rm = L.domain & ~s.axes;
    s.over_c = (s.axes & AC) != 0;
    s.lanes = s.over_c && (s.axes & (AB | AR)) != 0;
    s.blocked = L.blocked && blocked_sum(s, L.domain, L.Dc, true);
    s.out = arrays[s.dst];
    s.per_r = rm & AR ? 1 : 0;
    s.per_b = rm & AB ? (rm & AR ? L.Dr : 1) : 0;
    int64_t size = 0;
    bool zero = true;
    if (s.over_c && s.direct && L.blocks == 1 && rm == (L.domain & (AB | AR))) {
      s.landing = Landing::ROWS;
    } else if (s.over_c && (serial || (b_local && (rm & AB)))) {
      s.landing = Landing::RUNNING;
      size = (s.lanes ? TOTAL_LANES : 1) * dims.size(rm);
    } else if (s.over_c) {
      s.landing = Landing::PARTIALS;
      // every row's every block is written (every block's 16 lanes where blocked)
      size = (s.blocked ? L.rows_held : L.rows) * L.blocks;
      zero = false;
    } else if (L.whole_bs && s.direct && s.axes == AR) {
      s.landing = Landing::GROUPS;
    } else {
      s.landing = Landing::PARTIALS;
      size = L.groups * L.Dc;
    }
    held.emplace_back(size);
    s.acc = held.back().data();
    if (zero) std::fill(s.acc, s.acc + size, 0.0);
  }
}

// Writes the totals of sum s (of a phase laid out as L) for the b's [b0, b1) into its
// array, from what the walk left in its accumulators (nothing to do for ROWS and GROUPS,
// written during the walk). A sum over B has one set of totals: b0 = 0, b1 = L.Db. The
// doubles of each total are added in the walk's order (rows in order, a row's blocks in
// order), whatever the range: the same bits landed at once or b range by b range.
template <class T>
void land_totals(const Sum& s, const PhaseLayout& L, const Dims& dims, int64_t b0,
                 int64_t b1) {
  if (s.landing == Landing::ROWS || s.landing == Landing::GROUPS) return;
  const int rm = L.domain & ~s.axes;
  T* out = static_cast<T*>(s.out);
  // the totals of the range: [first, first + count) of the array
  const bool keeps_b = (rm & AB) != 0;
  const int64_t per_b = keeps_b ? dims.size(rm & ~AB) : dims.size(rm);
  const int64_t first = keeps_b ? b0 * per_b : 0, count = keeps_b ? (b1 - b0) * per_b : per_b;
  if (s.landing == Landing::RUNNING) {
    if (s.lanes) {
      for (int64_t i = first; i < first + count; ++i)
        out[i] = T(lanes_total(s.acc + TOTAL_LANES * i));
    } else {
      for (int64_t i = first; i < first + count; ++i) out[i] = T(s.acc[i]);
    }
    return;
  }
  if (s.lanes && s.per_b == 0 && s.per_r == 0) {
    // one total: row % 16 is the lane of a row's partials, and of a blocked total's
    // block lanes (block k's lane l at 16k + l)
    const double* part = s.acc;
    const int64_t rows = s.blocked ? L.rows_held : L.rows, blocks = L.blocks;
    double lane[TOTAL_LANES] = {};
    int64_t row = 0;
    if (blocks == 1)               // a chain per lane, which the compiler vectorises
      for (; row + TOTAL_LANES <= rows; row += TOTAL_LANES)
        for (int l = 0; l < TOTAL_LANES; ++l) lane[l] += part[row + l];
    for (; row < rows; ++row)
      for (int64_t k = 0; k < blocks; ++k) lane[row & LANE_MASK] += part[row * blocks + k];
    out[0] = T(lanes_total(lane));
    return;
  }
  if (s.lanes) {                   // each row's partials in order into its total's lane
    Buffer<double> held_lanes(TOTAL_LANES * count);
    double* lane = held_lanes.data();
    std::fill(lane, lane + TOTAL_LANES * count, 0.0);
    const double* part = s.acc + b0 * L.Dr * L.blocks;
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t r = 0; r < L.Dr; ++r) {
        double& t = lane[TOTAL_LANES * (b * s.per_b + r * s.per_r - first) + s.lane(b, r, L.Dr)];
        double sum = t;
        for (int64_t k = 0; k < L.blocks; ++k) sum += *part++;
        t = sum;
      }
    for (int64_t i = 0; i < count; ++i) out[first + i] = T(lanes_total(lane + TOTAL_LANES * i));
    return;
  }
  if (!s.over_c && !L.sum_over_b && L.groups_per == 1) {
    // each b one group (a 1x1 conv weight's b of one row): its total is 0 + its partial,
    // in one loop the compiler vectorises (the loops below cost 4 ns a b there)
    const double* partial = s.acc + b0 * L.Dc;
    for (int64_t i = 0; i < count; ++i) out[first + i] = T(0.0 + partial[i]);
    return;
  }
  Buffer<double> held_total(count);
  double* total = held_total.data();
  std::fill(total, total + count, 0.0);
  if (s.over_c && s.per_b == 0 && s.per_r == 0) {   // one total: kept in a register
    double t = total[0];
    for (int64_t i = 0; i < L.rows * L.blocks; ++i) t += s.acc[i];
    total[0] = t;
  } else if (s.over_c) {           // the partials in order: row after row
    const double* part = s.acc + b0 * L.Dr * L.blocks;
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t r = 0; r < L.Dr; ++r) {
        double& t = total[b * s.per_b + r * s.per_r - first];
        double sum = t;
        for (int64_t k = 0; k < L.blocks; ++k) sum += *part++;
        t = sum;
      }
  } else if (L.sum_over_b) {      // the groups in order into one row of totals
    for (int64_t g = 0; g < L.groups; ++g) {
      const double* partial = s.acc + g * L.Dc;
      for (int64_t c = 0; c < L.Dc; ++c) total[c] += partial[c];
    }
  } else {                        // each b's groups in order into its row of totals
    const double* partial = s.acc + b0 * L.groups_per * L.Dc;
    for (int64_t b = b0; b < b1; ++b) {
      double* t = total + b * L.Dc - first;
      for (int64_t g = 0; g < L.groups_per; ++g, partial += L.Dc)
        for (int64_t c = 0; c < L.Dc; ++c) t[c] += partial[c];
    }
  }
  for (int64_t i = 0; i < count; ++i) out[first + i] = T(total[i]);
}

// Runs body(walk, chunk, scratch) on every chunk of the phase's domain (chunks of at most
// CH elements; several rows each where `together` and a row has at most CH / 2), on
// several threads for a large domain, then writes the sums' totals into their arrays.
// Without column sums the chunks are spread over the threads one by one. With one, a
// thread walks whole groups of rows (Walk), row after row, each row's elements in
// order. No two threads write the same place, and every total is added in the same
// order whatever the number of threads, the chunk size or the rows per chunk.
//
// `backwards` (a phase without sums or column walks; ignored otherwise: a sum's total
// adds its rows in order): the chunks go in stretches of BACKWARDS_STRETCH elements from
// the parameter's end, each stretch's chunks in order. A pass that reads what the pass
// before it wrote or read (Adafactor's and Lamb's update after the pass that computed it
// and its norm) then starts where that pass ended, on what the last-level cache still
// holds; each stretch is long enough for the hardware prefetcher (chunk by chunk
// backwards, Adafactor's ResNet-18 step got 6-9 % slower; by stretches of 256Ki
// elements, 2-5 % faster in most runs, within the noise in one). Each chunk writes
// places of its own, so the bits do not change.
constexpr int64_t BACKWARDS_STRETCH = 262144;
template <int64_t CH, class T, class Body>
void run_phase(int domain, const Dims& dims, std::vector<Sum>& sums, T* const* arrays,
               int64_t scratch_size, bool together, Body&& body, bool backwards = false) {
  static_assert(CH % SUM_BLOCK == 0, "a chunk holds whole sum blocks");
  const PhaseLayout L(CH, domain, dims, sums, together);
  const int64_t rows = L.rows, per_chunk = L.per_chunk, nch = L.nch, Dr = L.Dr, Dc = L.Dc;
  // the items the threads share: chunks, or (column sums) runs of whole groups holding
  // about 16 chunks' worth of elements (a group is a range of rows, and groups in order
  // cover the rows in order: group g ends where group g + 1 starts)
  const int64_t group_rows = L.sum_over_b ? L.per_group : std::min(L.per_group, Dr);
  int64_t per_item = std::max<int64_t>(
      1, (16 * CH) / std::max<int64_t>(1, group_rows * std::max<int64_t>(1, Dc)));
  if (L.columns && L.blocked) {  // items of groups that start at a multiple of 16 rows
    const int64_t align = std::max<int64_t>(
        1, L.sum_over_b ? BLOCK_ROWS / std::gcd<int64_t>(BLOCK_ROWS, L.per_group)
                        : L.groups_per * (BLOCK_ROWS / std::gcd<int64_t>(BLOCK_ROWS, Dr)));
    per_item = (per_item + align - 1) / align * align;
  }
  const int64_t items = L.columns ? (L.groups + per_item - 1) / per_item
                        : per_chunk == 1 ? rows * nch : (rows + per_chunk - 1) / per_chunk;
  const int threads = rows * Dc >= PARALLEL_MIN ? thread_count() : 1;
  const bool serial = std::min<int64_t>(threads, items) <= 1;
  std::vector<Buffer<double>> held;
  held.reserve(sums.size());
  prepare_sums(L, sums, arrays, dims, serial, false, held);
  const Walk& walk = L.walk;
  if (!L.columns) {
    // item k of the walk: the chunk it runs (backwards: stretches from the end)
    const int64_t stretch = std::max<int64_t>(
        1, BACKWARDS_STRETCH / std::max<int64_t>(1, per_chunk == 1 ? CH : per_chunk * Dc));
    const bool from_end = backwards && sums.empty();
    auto chunk_of = [&](int64_t k) {
      if (!from_end) return k;
      const int64_t first = std::max<int64_t>(0, items - (k / stretch + 1) * stretch);
      return first + k % stretch;
    };
    if (per_chunk == 1) {
      for_each_item<T>(items, threads, scratch_size, [&](int64_t k, T* scratch) {
        const int64_t item = chunk_of(k);
        const int64_t row = item / nch, c0 = (item % nch) * CH;
        body(walk, Chunk{row, 1, c0, std::min(CH, Dc - c0), row / Dr, row % Dr}, scratch);
      });
    } else {
      for_each_item<T>(items, threads, scratch_size, [&](int64_t k, T* scratch) {
        const int64_t row = chunk_of(k) * per_chunk;
        body(walk, Chunk{row, std::min(per_chunk, rows - row), 0, Dc, row / Dr, row % Dr},
             scratch);
      });
    }
  } else {
    auto first_row = [&](int64_t g) {
      if (g >= L.groups) return rows;
      return L.sum_over_b ? g * L.per_group
                          : (g / L.groups_per) * Dr + (g % L.groups_per) * L.per_group;
    };
    for_each_item<T>(items, threads, scratch_size, [&](int64_t item, T* scratch) {
      const int64_t g0 = item * per_item;
      L.walk_rows<CH>(first_row(g0), first_row(std::min(L.groups, g0 + per_item)), scratch,
                      body);
    });
  }
  for (const Sum& s : sums) land_totals<T>(s, L, dims, 0, L.Db);
}

// A phase of a tile run (run_tiles): its domain, its sums, whether its chunks may hold
// several rows (rows_together).
struct TilePhase {
  int domain;
  std::vector<Sum>* sums;
  bool together;
};

// The tile of a tile run: about TILE_ELEMENTS elements of the parameter's (B, R, C) a
// tile, so that what a tile's phases write (a conv weight's small row and column arrays,
// a kept full value) is read back by the next phase from the cache, not from memory.
// A tile's first phase waits on memory for the parameter and gradient it streams in, and
// the phases after it do not overlap that wait; fewer, longer streams wait less. 256Ki
// elements (1 MiB of float32 per full array: its phases' data pass through the L2 and
// L3 caches) measured best on ResNet-18's set at one thread once the phases of a conv
// weight's rows of 3 got faster: against 64Ki, CAME's step 4-7 % faster, Adafactor's
// 1-2 %; 32Ki slower still; at two threads about the same. The bits do not depend on it
// (run_tiles).
constexpr int64_t TILE_ELEMENTS = 262144;
// the b's of a tile, where set (uo_vm_set_tile, uo_kernel_set_tile: tests put tile edges
// inside small tensors); 0: TILE_ELEMENTS elements' worth
inline std::atomic<int64_t>& requested_tile_bs() {
  static std::atomic<int64_t> bs{0};
  return bs;
}

// Runs the phases of a tile run (bytecode.py's KernelPlan.tiles: consecutive phases whose
// domains span B, none reading what another sums over B, none summing over B without C)
// tile after tile of whole b's: every phase on a tile's b's, in order, before the next
// tile; body(k, walk, chunk, scratch) runs chunk `chunk` of the run's phase k. Each
// phase reads and writes at the b's it walks only, so a phase sees in a tile the values
// it would see after the phases before it ran over the whole domain, and a phase later
// in the run writes a b's values after the earlier ones read them. Sums that keep B land
// at the tile's end (the next phase reads them); sums over B after the last tile, their
// rows added in the order of the walk (rows in order on one thread, or each row's
// partial kept and added in order after the walk): the same bits as the phases one
// after the other (run_phase), which run where the parameter has fewer than two tiles
// (a matrix: B = 1) or too few for the threads.
//
// The run's tile-local arrays (`local`, tile_local_arrays: scratch written and read by
// the run's phases only) live in buffers of one tile on one thread, used again by every
// tile: what the phases pass each other stays in the cache and is never written back
// to memory. For a tile, arrays[k] of such an array is its buffer moved back by the
// tile's first b (integer arithmetic: the tile's places land in the buffer), and each
// sum's `out` follows; both are put back after the run. On several threads the tiles go
// in rounds of one tile a thread, the buffers a round's size: the arrays are placed for
// the round, and each thread's tile lands in its own part. The default tiles are then
// made a little smaller, so that every round is full (9 tiles of CAME's (512, 512, 3, 3)
// became 10 at two threads: one thread no longer waits a tile's time at the end), and a
// parameter of at least one tile a thread runs tiled (before, 4 a thread).
template <int64_t CH, class T, class Body>
void run_tiles(const TilePhase* phases, int n, const Dims& dims, T** arrays,
               const int32_t* masks, const int* local, int n_local, int64_t scratch_size,
               Body&& body) {
  static_assert(CH % SUM_BLOCK == 0, "a chunk holds whole sum blocks");
  const int64_t per_b = std::max<int64_t>(1, dims.R * dims.C);
  std::vector<PhaseLayout> layouts;
  layouts.reserve(n);
  // a tile's rows in a phase with a blocked total: a multiple of 16 (walk.h's Landing)
  int64_t tile_align = 1;
  for (int k = 0; k < n; ++k) {
    layouts.emplace_back(CH, phases[k].domain, dims, *phases[k].sums, phases[k].together);
    if (layouts.back().blocked)
      tile_align = std::lcm<int64_t>(
          tile_align, BLOCK_ROWS / std::gcd<int64_t>(BLOCK_ROWS, layouts.back().Dr));
  }
  const int64_t requested = requested_tile_bs().load(std::memory_order_relaxed);
  int64_t tile_b = requested > 0 ? requested : std::max<int64_t>(1, TILE_ELEMENTS / per_b);
  tile_b = std::max(tile_align, tile_b - tile_b % tile_align);
  const int threads = dims.B * per_b >= PARALLEL_MIN ? thread_count() : 1;
  if (threads > 1 && requested <= 0) {
    // as many tiles as the threads' rounds hold (run_tiles below), a little smaller
    const int64_t rounds = ((dims.B + tile_b - 1) / tile_b + threads - 1) / threads;
    const int64_t even = (dims.B + rounds * threads - 1) / (rounds * threads);
    tile_b = std::max(tile_align, (even + tile_align - 1) / tile_align * tile_align);
  }
  const int64_t tiles = (dims.B + tile_b - 1) / tile_b;
  if (tiles < 2 || tiles < int64_t(threads)) {
    for (int k = 0; k < n; ++k)
      run_phase<CH, T>(phases[k].domain, dims, *phases[k].sums, arrays, scratch_size,
                       phases[k].together, [&](const Walk& w, const Chunk& ch, T* scratch) {
                         body(k, w, ch, scratch);
                       });
    return;
  }
  const bool serial = threads <= 1;
  std::vector<Buffer<double>> held;
  size_t count = 0;
  for (int k = 0; k < n; ++k) count += phases[k].sums->size();
  held.reserve(count);
  for (int k = 0; k < n; ++k)
    prepare_sums(layouts[k], *phases[k].sums, arrays, dims, serial, true, held);
  // the tile-local arrays' buffers, and the arrays they stand in for: one tile's on one
  // thread; on several, a round's (`threads` consecutive tiles, walked together: each
  // thread's tile of the round lands in a part of the buffers of its own)
  const int64_t per_round = serial ? 1 : int64_t(threads);
  std::vector<Buffer<T>> buffers;
  std::vector<T*> whole;
  buffers.reserve(n_local);
  for (int j = 0; j < n_local; ++j) {
    whole.push_back(arrays[local[j]]);
    buffers.emplace_back(per_round * tile_b * dims.size(masks[local[j]] & ~AB));
  }
  auto place = [&](int64_t b0) {
    for (int j = 0; j < int(buffers.size()); ++j) {
      const uintptr_t shift = uintptr_t(b0 * dims.size(masks[local[j]] & ~AB)) * sizeof(T);
      arrays[local[j]] = reinterpret_cast<T*>(
          reinterpret_cast<uintptr_t>(buffers[j].data()) - shift);
    }
    for (int k = 0; k < n; ++k)
      for (Sum& s : *phases[k].sums) s.out = arrays[s.dst];
  };
  auto run_tile = [&](int64_t tile, T* scratch) {
    const int64_t b0 = tile * tile_b, b1 = std::min(dims.B, b0 + tile_b);
    for (int k = 0; k < n; ++k) {
      const PhaseLayout& L = layouts[k];
      L.walk_rows<CH>(b0 * L.Dr, b1 * L.Dr, scratch,
                      [&](const Walk& w, const Chunk& ch, T* s) { body(k, w, ch, s); });
      for (const Sum& s : *phases[k].sums)
        if ((phases[k].domain & ~s.axes) & AB) land_totals<T>(s, L, dims, b0, b1);
    }
  };
  if (buffers.empty()) {
    for_each_item<T>(tiles, threads, scratch_size, run_tile);
  } else if (serial) {
    for_each_item<T>(tiles, threads, scratch_size, [&](int64_t tile, T* scratch) {
      place(tile * tile_b);
      run_tile(tile, scratch);
    });
  } else {
    // a round at a time: the arrays placed for the round, its tiles on the threads (the
    // pool's run returns when every tile of the round is done). Against the whole arrays
    // and 9 tiles, CAME's (512, 512, 3, 3) at two threads took 4.29 and 4.31 ms a step,
    // not 4.72 and 4.66 (benchmarks/kernel_phases.py --threads 2)
    for (int64_t first = 0; first < tiles; first += per_round) {
      place(first * tile_b);
      for_each_item<T>(std::min(per_round, tiles - first), threads, scratch_size,
                       [&](int64_t i, T* scratch) { run_tile(first + i, scratch); });
    }
  }
  for (int j = 0; j < int(buffers.size()); ++j) arrays[local[j]] = whole[j];
  for (int k = 0; k < n; ++k)
    for (Sum& s : *phases[k].sums) {
      s.out = arrays[s.dst];
      if (!((phases[k].domain & ~s.axes) & AB)) land_totals<T>(s, layouts[k], dims, 0, layouts[k].Db);
    }
}

// The tile-local arrays of the tile run of phases [first, first + count) (run_tiles):
// the scratch arrays (from n_inputs on) spanning B that no phase outside the run reads
// or writes (bytecode.py's tile_local, for the generated kernels).
inline std::vector<int> tile_local_arrays(int n_inputs, int n_arrays, const int32_t* masks,
                                          int n_phases, const int* counts,
                                          const abi::Ins* const* phases, int first,
                                          int count) {
  std::vector<char> outside(size_t(std::max(n_arrays, 0)), 0);
  for (int p = 0; p < n_phases; ++p) {
    if (p >= first && p < first + count) continue;
    for (int i = 0; i < counts[p]; ++i) {
      const abi::Ins& in = phases[p][i];
      for (const auto& [kind, k] : {std::pair<int, int>{in.a_kind, in.a},
                                    {in.b_kind, in.b}, {in.c_kind, in.c}})
        if (kind == abi::ARR && k >= 0 && k < n_arrays) outside[k] = 1;
      if (in.dst >= 0 && in.dst < n_arrays &&
          (in.op == abi::STORE || in.op == abi::SUM || in.op == abi::TOPK))
        outside[in.dst] = 1;
    }
  }
  std::vector<int> local;
  for (int k = n_inputs; k < n_arrays; ++k)
    if ((masks[k] & AB) && !outside[k]) local.push_back(k);
  return local;
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

// Whether the tile runs (first phase, number of phases; bytecode.py's KernelPlan.tiles) are
// what bytecode.py's tile_runs makes (its tile_runs_valid): in order, not overlapping,
// two or more phases each, every phase's domain spanning B, no sum adding over B without
// C, every store into an array spanning B, and no phase reading an array that an earlier
// phase of its run writes without B (a total over B needs every tile). run_tiles relies
// on it; the VM refuses other code.
inline bool tile_runs_valid(int n_arrays, const int32_t* masks, int n_phases,
                            const int* domains, const int* counts,
                            const abi::Ins* const* phases, int n_runs, const int32_t* runs) {
  int end = 0;
  std::vector<char> over_b(size_t(std::max(n_arrays, 0)), 0);
  auto in_range = [&](int k) { return k >= 0 && k < n_arrays; };
  for (int run = 0; run < n_runs; ++run) {
    const int first = runs[abi::TILE_RUN_INTS * run], count = runs[abi::TILE_RUN_INTS * run + 1];
    if (first < end || count < 2 || first > n_phases - count) return false;
    end = first + count;
    std::fill(over_b.begin(), over_b.end(), 0);
    for (int p = first; p < end; ++p) {
      if (domains[p] == abi::SELECT || !(domains[p] & AB)) return false;
      for (int i = 0; i < counts[p]; ++i) {
        const abi::Ins& in = phases[p][i];
        for (const auto& [kind, k] : {std::pair<int, int>{in.a_kind, in.a},
                                      {in.b_kind, in.b}, {in.c_kind, in.c}})
          if (kind == abi::ARR && (!in_range(k) || over_b[k])) return false;
        if (in.op == abi::TOPK) return false;
        if (in.op == abi::SUM && (in.aux & AB) && !(in.aux & AC)) return false;
        if (in.op == abi::STORE && (!in_range(in.dst) || !(masks[in.dst] & AB))) return false;
      }
      for (int i = 0; i < counts[p]; ++i) {
        const abi::Ins& in = phases[p][i];
        if ((in.op == abi::SUM || in.op == abi::STORE) && in_range(in.dst) &&
            !(masks[in.dst] & AB))
          over_b[in.dst] = 1;
      }
    }
  }
  return true;
}

}  // namespace uo
