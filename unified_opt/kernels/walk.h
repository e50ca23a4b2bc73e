// A phase's walk over its domain in chunks of rows (phases.h): the chunk, the gathers of
// arrays of fewer axes, and the sums (over C per row, over R per group of rows) landed as
// run_phase chooses, rows of 3 (a conv weight's) in AVX2 where the CPU has it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "abi.h"
#include "numbers.h"

namespace uo {


// A phase's domain as rows (row = b * Dr + r) of Dc elements, and where a row's column
// sums go. A chunk is the rows [row, row + rows), elements [c0, c0 + n) of each row: one
// row and a part of it when a row is long, several whole rows (c0 = 0, n = Dc) when rows
// are short, so that a conv weight's rows of 3 do not cost a chunk each. The rows of a
// chunk are consecutive in the domain, so are its rows * n elements in every array
// spanning the domain's axes; an array of fewer axes is gathered for the chunk.
struct Walk {
  int64_t Dr, Dc, blocks;
  // column sums: the rows form groups of per_group consecutive rows, within one b unless
  // a sum adds over B; a row adds into its group's partial row
  int64_t per_group, groups_per;
  bool sum_over_b;
  int domain;                   // the phase's axes
  int64_t group(int64_t row) const {
    return sum_over_b ? row / per_group : (row / Dr) * groups_per + (row % Dr) / per_group;
  }
};
// (b, r): the first row's place (row = b * Dr + r), worked out once per chunk
struct Chunk {
  int64_t row, rows, c0, n, b, r;
  int64_t size() const { return rows * n; }
};

// Whether a phase may put several rows in a chunk: every array it reads spans axes of
// its domain only, and every array it writes spans the domain (codegen.py's rule too).
inline bool rows_together(int domain, const int32_t* masks, const abi::Ins* ins, int n) {
  auto inside = [&](int kind, int k) { return kind != abi::ARR || !(masks[k] & ~domain); };
  for (int k = 0; k < n; ++k) {
    const abi::Ins& in = ins[k];
    if (in.op == abi::STORE && masks[in.dst] != domain) return false;
    if (!inside(in.a_kind, in.a) || !inside(in.b_kind, in.b) || !inside(in.c_kind, in.c))
      return false;
  }
  return true;
}

// Whether the sum into array `dst` of a phase may land during the walk (Sum::direct):
// no instruction of the phase reads `dst` or stores into it (codegen.py's rule too).
inline bool lands_direct(int dst, const abi::Ins* ins, int n) {
  for (int k = 0; k < n; ++k) {
    const abi::Ins& in = ins[k];
    if ((in.op == abi::STORE && in.dst == dst) || (in.a_kind == abi::ARR && in.a == dst) ||
        (in.b_kind == abi::ARR && in.b == dst) || (in.c_kind == abi::ARR && in.c == dst))
      return false;
  }
  return true;
}

// n values of a row copied to each of `rows` rows, or one value per row repeated n
// times (N: n known to the compiler for short rows)
// to[3k + j] = from[k] for k < count, j < 3 (a conv weight's values per row of 3, or per b
// of 3 rows): eight values at a time moved into 24 lanes in AVX2, then four into 12
template <class T>
UO_INLINE void repeat_thrice(T* __restrict__ to, const T* __restrict__ from, int64_t count) {
  int64_t k = 0;
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    const __m256i first = _mm256_setr_epi32(0, 0, 0, 1, 1, 1, 2, 2);
    const __m256i second = _mm256_setr_epi32(2, 3, 3, 3, 4, 4, 4, 5);
    const __m256i third = _mm256_setr_epi32(5, 5, 6, 6, 6, 7, 7, 7);
    for (; k + 8 <= count; k += 8) {
      const __m256 v = _mm256_loadu_ps(from + k);
      _mm256_storeu_ps(to + 3 * k, _mm256_permutevar8x32_ps(v, first));
      _mm256_storeu_ps(to + 3 * k + 8, _mm256_permutevar8x32_ps(v, second));
      _mm256_storeu_ps(to + 3 * k + 16, _mm256_permutevar8x32_ps(v, third));
    }
    const __m256i low = _mm256_setr_epi32(0, 0, 0, 1, 1, 1, 2, 2);
    const __m256i high = _mm256_setr_epi32(2, 3, 3, 3, 0, 0, 0, 0);
    for (; k + 4 <= count; k += 4) {
      const __m256 v = _mm256_castps128_ps256(_mm_loadu_ps(from + k));
      _mm256_storeu_ps(to + 3 * k, _mm256_permutevar8x32_ps(v, low));
      _mm_storeu_ps(to + 3 * k + 8, _mm256_castps256_ps128(_mm256_permutevar8x32_ps(v, high)));
    }
  } else if constexpr (std::is_same_v<T, double>) {
    for (; k + 4 <= count; k += 4) {
      const __m256d v = _mm256_loadu_pd(from + k);
      _mm256_storeu_pd(to + 3 * k, _mm256_permute4x64_pd(v, _MM_SHUFFLE(1, 0, 0, 0)));
      _mm256_storeu_pd(to + 3 * k + 4, _mm256_permute4x64_pd(v, _MM_SHUFFLE(2, 2, 1, 1)));
      _mm256_storeu_pd(to + 3 * k + 8, _mm256_permute4x64_pd(v, _MM_SHUFFLE(3, 3, 3, 2)));
    }
  }
#endif
  for (; k < count; ++k) to[3 * k] = to[3 * k + 1] = to[3 * k + 2] = from[k];
}

#if defined(__AVX2__)
// Where vector k of 72 values (8 b's of 3 rows of 3, each row its b's 3 values) comes
// from: 8 values loaded from start[k], permuted by lanes[k]
struct TileIndex {
  int start[9];
  __m256i lanes[9];
  TileIndex() {
    for (int k = 0; k < 9; ++k) {
      start[k] = std::min(3 * ((8 * k) / 9), 16);   // loads within the 24 values
      alignas(32) int32_t lane[8];
      for (int l = 0; l < 8; ++l) {
        const int e = 8 * k + l;
        lane[l] = 3 * (e / 9) + e % 3 - start[k];
      }
      lanes[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lane));
    }
  }
};
#endif
template <int N, class T>
UO_INLINE void gather_rows(T* __restrict__ to, const T* __restrict__ from, int64_t n,
                           int64_t rows, bool along_c, int64_t per_r, int64_t per_b,
                           int64_t r, int64_t Dr) {
  const int64_t width = N > 0 ? N : n;
  if (N == 3 && !along_c && per_r == 1 && per_b == Dr)   // a conv weight's row values
    return repeat_thrice(to, from, rows);
  if (N == 1 && !along_c && per_r == 0 && per_b == 1 && Dr == 3) {  // its b values
    int64_t i = 0;
    for (; r != 0 && i < rows; ++i, r = (r + 1) % 3) {
      *to++ = from[0];
      if (r == 2) ++from;
    }
    const int64_t whole = (rows - i) / 3;
    repeat_thrice(to, from, whole);
    to += 3 * whole;
    from += whole;
    for (i += 3 * whole; i < rows; ++i) *to++ = from[0];
    return;
  }
  if (!along_c && per_b == Dr * per_r) {      // a value per row, the rows' values in a run
    for (int64_t i = 0; i < rows; ++i, to += width) {
      const T value = from[i * per_r];
      for (int64_t c = 0; c < width; ++c) to[c] = value;
    }
    return;
  }
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    if (N == 3 && along_c && per_r == 0 && per_b == 3 && r == 0 && Dr == 3) {
      // whole 3x3 b's: 8 b's (72 values from 24) at a time, each vector of 8 a permute
      // of 8 values loaded from the b's its elements belong to
      static const TileIndex index;
      int64_t i = 0;
      for (; i + 24 <= rows; i += 24, to += 72, from += 24)
        for (int k = 0; k < 9; ++k)
          _mm256_storeu_ps(to + 8 * k, _mm256_permutevar8x32_ps(
              _mm256_loadu_ps(from + index.start[k]), index.lanes[k]));
      rows -= i;
      if (rows == 0) return;
    }
  }
  if (N == 3 && along_c && per_r == 0 && per_b == 3) {  // a conv weight's b rows, each
    // for each of the b's rows: 4 values loaded (the 4th the next b's: a b of the chunk
    // follows) and stored (the 4th is the next row's place, written after); the chunk's
    // last b element by element
    for (int64_t i = 0; i < rows; r = 0, from += per_b) {
      const int64_t last = std::min(rows, i + (Dr - r));
      if (last < rows) {
        if constexpr (std::is_same_v<T, float>) {
          const __m128 v = _mm_loadu_ps(from);
          if (r == 0 && Dr == 3) {     // a whole b of 3 rows: 8 values at once, then the 9th
            const __m256i thrice = _mm256_setr_epi32(0, 1, 2, 0, 1, 2, 0, 1);
            _mm256_storeu_ps(to, _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), thrice));
            to[8] = from[2];
            i += 3;
            to += 9;
            continue;
          }
          for (; i < last; ++i, to += 3) _mm_storeu_ps(to, v);
        } else {
          const __m256d v = _mm256_loadu_pd(from);
          for (; i < last; ++i, to += 3) _mm256_storeu_pd(to, v);
        }
      } else {
        for (; i < last; ++i, to += 3)
          for (int c = 0; c < 3; ++c) to[c] = from[c];
      }
    }
    return;
  }
#endif
  if (per_r == 0) {                           // a b's row or value, for each of its rows
    for (int64_t i = 0; i < rows; r = 0, from += per_b) {
      const int64_t last = std::min(rows, i + (Dr - r));
      for (; i < last; ++i, to += width)
        for (int64_t c = 0; c < width; ++c) to[c] = from[along_c ? c : 0];
    }
    return;
  }
  for (int64_t i = 0; i < rows; ++i, to += width) {
    if (along_c) {
      for (int64_t c = 0; c < width; ++c) to[c] = from[c];
    } else {
      const T value = from[0];
      for (int64_t c = 0; c < width; ++c) to[c] = value;
    }
    from += per_r;
    if (++r == Dr) { r = 0; from += per_b - Dr * per_r; }
  }
}

// The chunk's elements of an array spanning `mask` (axes of the domain, not all of them):
// a row's elements, or its one value repeated along the row. The array's place moves by
// per_r from one row to the next within a b, by per_b from one b to the next.
template <class T>
inline void gather(T* __restrict__ dst, const T* src, int mask, const Dims& dims,
                   const Walk& w, const Chunk& ch) {
  if (dims.size(w.domain & ~mask) == 1) {    // the axes it lacks are 1 long (a 1x1 conv
    // weight's rows and columns): its places are the domain's, the chunk's in a run
    const T* from = src + ch.row * w.Dc + ch.c0;
    std::copy(from, from + ch.size(), dst);
    return;
  }
  const bool along_c = (mask & AC) != 0;
  const int64_t width_c = along_c ? dims.C : 1;
  const int64_t per_r = mask & AR ? width_c : 0;
  const int64_t per_b = mask & AB ? (mask & AR ? dims.R : 1) * width_c : 0;
  const T* from = src + ch.b * per_b + ch.r * per_r + (along_c ? ch.c0 : 0);
  switch (ch.n) {
    case 1: return gather_rows<1>(dst, from, 1, ch.rows, along_c, per_r, per_b, ch.r, w.Dr);
    case 2: return gather_rows<2>(dst, from, 2, ch.rows, along_c, per_r, per_b, ch.r, w.Dr);
    case 3: return gather_rows<3>(dst, from, 3, ch.rows, along_c, per_r, per_b, ch.r, w.Dr);
    case 4: return gather_rows<4>(dst, from, 4, ch.rows, along_c, per_r, per_b, ch.r, w.Dr);
    default:
      return gather_rows<0>(dst, from, ch.n, ch.rows, along_c, per_r, per_b, ch.r, w.Dr);
  }
}

// the lanes of a total of several rows (Landing), as many as lane_sum's; BLOCK_ROWS: the
// rows of a block of a blocked total (below)
constexpr int TOTAL_LANES = LANES;
constexpr int64_t LANE_MASK = TOTAL_LANES - 1;
constexpr int64_t BLOCK_ROWS = TOTAL_LANES;
static_assert((TOTAL_LANES & LANE_MASK) == 0, "a power of two: a row's lane is place & LANE_MASK");

// How a sum's values land in its array (run_phase chooses; the totals' bits are the same
// every way: the same doubles added in the same order, one rounding to T at the end).
// A sum over C whose total takes several rows (`lanes`: it adds over B or R too, as a
// norm's or a mean's over the whole tensor) adds each row's partials, in order, into one
// of 16 lanes (TOTAL_LANES) by the row's place among the total's rows (place % 16), and
// the lanes in lane_tree's order at the end: sixteen chains instead of one. A total of
// one row has only its lane 0 (never -0: it starts at +0; the other lanes stay +0, and
// adding +0 to a value that is not -0 gives it back), so the lanes change nothing there.
//
// A *blocked* total (blocked_sum: one total over every axis of a domain whose rows are
// shorter than LANES, as a conv weight's RMS over rows of 3 or 1, in a phase whose chunks
// hold several rows) has no row partials: its rows go in blocks of BLOCK_ROWS (16) rows
// by place, a block's elements (16 x C, fewer in the domain's last block) in order,
// element i into lane i % 16 from +0 (block_lanes), and the total's lane l adds each
// block's lane l, block after block. Every element then adds in the lane it was loaded
// in: a row's partial of 3 needed the rows transposed across vector lanes first, which
// took a third of Adafactor's update pass on (512, 512, 3, 3). Chunks, thread items and
// tiles start at a multiple of 16 rows where a phase has one (PhaseLayout, run_phase,
// run_tiles), so that a block lies in one chunk. On rows of 1, a block's lane l is row
// l's 0 + x, as a row's partial there: the bits of the rows' order.
//
// The landings:
enum class Landing : int32_t {
  // partials kept, per row and block (over C) or per group and column (a column sum),
  // and added in order when the walk is done: the walk on several threads
  PARTIALS,
  // over C on one thread, which walks the rows in order: each row's partials added into
  // its total (acc) as the walk goes
  RUNNING,
  // over C alone, rows of at most one block: a row's total written into dst at once
  ROWS,
  // over R alone, each b one group and each chunk whole b's: a b's column totals
  // written into dst at once
  GROUPS,
};

// One sum of a phase: over the axes `axes` of the phase's domain, into array `dst`.
// direct: lands_direct (the sum may write dst during the walk). The rest run_phase sets.
struct Sum {
  int axes, dst;
  bool direct;
  bool over_c;
  bool lanes;                 // over C and over B or R: a total of several rows (above)
  bool blocked;               // a blocked total (above)
  Landing landing;
  int64_t per_b, per_r;       // RUNNING: the row (b, r) adds into acc[b * per_b + r * per_r]
  double* acc;                // PARTIALS: the partials (a blocked total's: block k's lanes
                              // at 16k to 16k + 15); RUNNING: the totals (TOTAL_LANES each
                              // where `lanes`: acc[TOTAL_LANES * total + lane])
  void* out;                  // ROWS, GROUPS: dst
  // the lane of row (b, r) (r < Dr): its place among the rows of its total, modulo 16
  int64_t lane(int64_t b, int64_t r, int64_t Dr) const {
    return ((axes & AB ? b : 0) * (axes & AR ? Dr : 1) + (axes & AR ? r : 0)) & LANE_MASK;
  }
};

// Whether sum s of a phase over `domain` (rows of Dc elements; `together`: its chunks
// may hold several rows) is a blocked total (see Landing)
inline bool blocked_sum(const Sum& s, int domain, int64_t Dc, bool together) {
  return together && Dc > 0 && Dc < LANES && (s.axes & AC) && (s.axes & (AB | AR)) &&
         (domain & ~s.axes) == 0;
}

// a total's lanes added (see Landing): lane_tree's order, on a copy
UO_INLINE double lanes_total(const double* lane) {
  double copy[TOTAL_LANES];
  for (int l = 0; l < TOTAL_LANES; ++l) copy[l] = lane[l];
  return lane_tree(copy);
}

// A block's lanes (see Landing): x's `count` elements, element i into lane i % 16 from +0
template <class T>
UO_INLINE void block_lanes(const T* __restrict__ x, int64_t count, double* __restrict__ lane) {
  for (int l = 0; l < TOTAL_LANES; ++l) lane[l] = 0.0;
  int64_t i = 0;
  for (; i + TOTAL_LANES <= count; i += TOTAL_LANES)
    for (int l = 0; l < TOTAL_LANES; ++l) lane[l] += double(x[i + l]);
  for (int l = 0; i < count; ++i, ++l) lane[l] += double(x[i]);
}

// A blocked total's values x of the chunk (whole rows from a multiple of 16: the phase's
// layout): RUNNING adds each block's lanes into the total's, PARTIALS keeps them
template <class T>
inline void block_sums(const Sum& s, const Chunk& ch, const T* x) {
  const int64_t n = ch.n;
  double lane[TOTAL_LANES];
  if (s.landing == Landing::RUNNING) {
    double total[TOTAL_LANES];
    for (int l = 0; l < TOTAL_LANES; ++l) total[l] = s.acc[l];
    for (int64_t i = 0; i < ch.rows; i += BLOCK_ROWS) {
      block_lanes(x + i * n, std::min(BLOCK_ROWS, ch.rows - i) * n, lane);
      for (int l = 0; l < TOTAL_LANES; ++l) total[l] += lane[l];
    }
    for (int l = 0; l < TOTAL_LANES; ++l) s.acc[l] = total[l];
    return;
  }
  for (int64_t i = 0; i < ch.rows; i += BLOCK_ROWS)
    block_lanes(x + i * n, std::min(BLOCK_ROWS, ch.rows - i) * n, s.acc + ch.row + i);
}

// partial(i, k, value) for block k of the chunk's row i (blocks of SUM_BLOCK elements
// from c0, a multiple of SUM_BLOCK), rows and blocks in order
template <class T, class Partial>
inline void each_partial(const Chunk& ch, const T* __restrict__ x, Partial&& partial) {
  const int64_t n = ch.n;
  if (n <= 8) {                 // whole short rows (a conv weight's): unrolled
    switch (n) {
      case 1: for (int64_t i = 0; i < ch.rows; ++i) partial(i, 0, short_sum<1>(x + i)); return;
      case 2: for (int64_t i = 0; i < ch.rows; ++i) partial(i, 0, short_sum<2>(x + 2 * i)); return;
      case 3: for (int64_t i = 0; i < ch.rows; ++i) partial(i, 0, short_sum<3>(x + 3 * i)); return;
      case 4: for (int64_t i = 0; i < ch.rows; ++i) partial(i, 0, short_sum<4>(x + 4 * i)); return;
      default: break;
    }
  }
  for (int64_t i = 0; i < ch.rows; ++i)
    for (int64_t k = 0; k * SUM_BLOCK < n; ++k)
      partial(i, k, lane_sum(x + i * n + k * SUM_BLOCK, std::min(SUM_BLOCK, n - k * SUM_BLOCK)));
}
template <class Partial>
inline void each_partial_of(const Chunk& ch, double value, Partial&& partial) {
  for (int64_t i = 0; i < ch.rows; ++i)
    for (int64_t k = 0; k * SUM_BLOCK < ch.n; ++k)
      partial(i, k, value * double(std::min(SUM_BLOCK, ch.n - k * SUM_BLOCK)));
}

// the landing of a sum over C of the chunk's partials (each_partial's or each_partial_of's)
template <class T, class Each>
inline void land_row_sums(const Sum& s, const Walk& w, const Chunk& ch, Each&& each) {
  switch (s.landing) {
    case Landing::ROWS: {
      T* out = static_cast<T*>(s.out) + ch.row;
      each([&](int64_t i, int64_t, double p) { out[i] = T(0.0 + p); });
      return;
    }
    case Landing::RUNNING: {
      if (!s.lanes && s.per_b == 0 && s.per_r == 0) {     // one total of one row
        double t = s.acc[0];
        each([&](int64_t, int64_t, double p) { t += p; });
        s.acc[0] = t;
      } else if (s.lanes && s.per_b == 0 && s.per_r == 0) {   // one total: row % 16
        double* lane = s.acc;
        each([&](int64_t i, int64_t, double p) { lane[(ch.row + i) & LANE_MASK] += p; });
      } else if (s.per_r == 1 && s.per_b == w.Dr) {  // a total per row
        double* t = s.acc + ch.row;
        each([&](int64_t i, int64_t, double p) { t[i] += p; });
      } else if (s.lanes) {
        each([&](int64_t i, int64_t, double p) {
          const int64_t r = ch.r + i, b = ch.b + r / w.Dr, rr = r % w.Dr;
          s.acc[TOTAL_LANES * (b * s.per_b + rr * s.per_r) + s.lane(b, rr, w.Dr)] += p;
        });
      } else {
        each([&](int64_t i, int64_t, double p) {
          const int64_t r = ch.r + i;
          s.acc[(ch.b + r / w.Dr) * s.per_b + (r % w.Dr) * s.per_r] += p;
        });
      }
      return;
    }
    default: {
      double* acc = s.acc + ch.row * w.blocks + ch.c0 / SUM_BLOCK;
      each([&](int64_t i, int64_t k, double p) { acc[i * w.blocks + k] = p; });
      return;
    }
  }
}

// GROUPS: per b (Dr rows), each column's partial from 0 over the rows in order, its total
// 0 + the partial (N: n known to the compiler, up to 4 columns)
template <int N, class T, class Value>
UO_INLINE void group_totals(T* __restrict__ out, int64_t Dr, int64_t rows, int64_t n,
                            Value&& value) {
  if (N == 0) {
    for (int64_t first = 0; first < rows; first += Dr, out += n)
      for (int64_t c = 0; c < n; ++c) {
        double partial = 0.0;
        for (int64_t r = 0; r < Dr; ++r) partial += value(first + r, c);
        out[c] = T(0.0 + partial);
      }
    return;
  }
  constexpr int W = N > 0 ? N : 1;
  for (int64_t first = 0; first < rows; first += Dr, out += W) {
    double partial[W];
    for (int c = 0; c < W; ++c) partial[c] = 0.0;
    for (int64_t r = 0; r < Dr; ++r)
      for (int c = 0; c < W; ++c) partial[c] += value(first + r, c);
    for (int c = 0; c < W; ++c) out[c] = T(0.0 + partial[c]);
  }
}

#if defined(__AVX2__)
// Rows of 3 (a conv weight's), four at a time in AVX2: the lanes of 12 values (each
// 0 + x, as short_sum's) moved so that lane i of X0, X1, X2 holds row i's elements, then
// (X0 + X2) + X1: short_sum<3>'s operations, lane by lane (the same bits).
// d0, d1, d2: 12 consecutive values; x0, x1, x2: element 0, 1, 2 of each of 4 triples
UO_INLINE void split_triples(__m256d d0, __m256d d1, __m256d d2, __m256d& x0, __m256d& x1,
                             __m256d& x2) {
  x0 = _mm256_permute4x64_pd(_mm256_blend_pd(_mm256_blend_pd(d0, d1, 0x4), d2, 0x2),
                             _MM_SHUFFLE(1, 2, 3, 0));
  x1 = _mm256_permute4x64_pd(_mm256_blend_pd(_mm256_blend_pd(d0, d1, 0x9), d2, 0x4),
                             _MM_SHUFFLE(2, 3, 0, 1));
  x2 = _mm256_permute4x64_pd(_mm256_blend_pd(_mm256_blend_pd(d0, d1, 0x2), d2, 0x9),
                             _MM_SHUFFLE(3, 0, 1, 2));
}
UO_INLINE __m256d four_rows_of_3(__m256d d0, __m256d d1, __m256d d2) {
  __m256d x0, x1, x2;
  split_triples(d0, d1, d2, x0, x1, x2);
  return _mm256_add_pd(_mm256_add_pd(x0, x2), x1);
}
UO_INLINE void store_rounded(float* out, __m256d v) { _mm_storeu_ps(out, _mm256_cvtpd_ps(v)); }
UO_INLINE void store_rounded(double* out, __m256d v) { _mm256_storeu_pd(out, v); }
UO_INLINE __m256d load_four(const float* x) { return _mm256_cvtps_pd(_mm_loadu_ps(x)); }
UO_INLINE __m256d load_four(const double* x) { return _mm256_loadu_pd(x); }
UO_INLINE void load_doubles(const float* x, __m256d& d0, __m256d& d1, __m256d& d2) {
  d0 = _mm256_cvtps_pd(_mm_loadu_ps(x));
  d1 = _mm256_cvtps_pd(_mm_loadu_ps(x + 4));
  d2 = _mm256_cvtps_pd(_mm_loadu_ps(x + 8));
}
UO_INLINE void load_doubles(const double* x, __m256d& d0, __m256d& d1, __m256d& d2) {
  d0 = _mm256_loadu_pd(x);
  d1 = _mm256_loadu_pd(x + 4);
  d2 = _mm256_loadu_pd(x + 8);
}

// GROUPS of the chunk's values x where rows are 3 long, or 1 long with 3 to a b: each
// b's totals as group_totals's (a partial from 0 adding the b's rows in order, then 0 +
// the partial), in the lanes of vectors. False: not such a chunk. Where the b has 3 rows
// the partial starts at its first row, not at 0 + it: the two differ only where the
// first row is -0 (0 + -0 is +0), so the partials differ at most in a zero's sign (a
// nonzero value added to either zero gives the value), and the total's 0 + makes every
// zero +0: the same bits, one addition fewer per b (about 2 % of CAME's and
// Adafactor's step on (512, 512, 3, 3), one thread).
template <class T>
inline bool groups_in_vectors(const Sum& s, const Walk& w, const Chunk& ch, const T* x) {
  const __m256d zero = _mm256_setzero_pd();
  T* out = static_cast<T*>(s.out) + ch.b * ch.n;
  const int64_t bs = ch.rows / w.Dr;
  if (ch.n == 3) {
    // a b at a time, its 3 columns in the lanes of a vector: 4 values loaded and stored
    // (the 4th is the next row's, the next b's total), so the chunk's last b is scalar
    if (w.Dr == 3) {           // a 3x3 kernel's: the rows unrolled, b's interleaved
      for (int64_t b = 0; b + 1 < bs; ++b) {
        const T* rows = x + 9 * b;
        const __m256d partial = _mm256_add_pd(
            _mm256_add_pd(load_four(rows), load_four(rows + 3)), load_four(rows + 6));
        store_rounded(out + 3 * b, _mm256_add_pd(zero, partial));
      }
    } else {
      for (int64_t b = 0; b + 1 < bs; ++b) {
        const T* rows = x + 3 * w.Dr * b;
        __m256d partial = zero;
        for (int64_t r = 0; r < w.Dr; ++r)
          partial = _mm256_add_pd(partial, load_four(rows + 3 * r));
        store_rounded(out + 3 * b, _mm256_add_pd(zero, partial));
      }
    }
    if (bs > 0) group_totals<3>(out + 3 * (bs - 1), w.Dr, w.Dr, 3, [&](int64_t i, int64_t c) {
      return double(x[3 * w.Dr * (bs - 1) + 3 * i + c]);
    });
    return true;
  }
  if (ch.n == 1 && w.Dr == 3) {
    const int64_t fours = bs - bs % 4;
    int64_t b = 0;
    for (; b < fours; b += 4) {
      __m256d d0, d1, d2, x0, x1, x2;
      load_doubles(x + 3 * b, d0, d1, d2);
      split_triples(d0, d1, d2, x0, x1, x2);
      const __m256d partial = _mm256_add_pd(_mm256_add_pd(x0, x1), x2);
      store_rounded(out + b, _mm256_add_pd(zero, partial));
    }
    for (; b < bs; ++b) {
      double partial = 0.0;
      for (int64_t r = 0; r < 3; ++r) partial += double(x[3 * b + r]);
      out[b] = T(0.0 + partial);
    }
    return true;
  }
  return false;
}
UO_INLINE __m256d four_partials_of_3(const float* x) {
  const __m256d zero = _mm256_setzero_pd();
  return four_rows_of_3(_mm256_add_pd(zero, _mm256_cvtps_pd(_mm_loadu_ps(x))),
                        _mm256_add_pd(zero, _mm256_cvtps_pd(_mm_loadu_ps(x + 4))),
                        _mm256_add_pd(zero, _mm256_cvtps_pd(_mm_loadu_ps(x + 8))));
}
UO_INLINE __m256d four_partials_of_3(const double* x) {
  const __m256d zero = _mm256_setzero_pd();
  return four_rows_of_3(_mm256_add_pd(zero, _mm256_loadu_pd(x)),
                        _mm256_add_pd(zero, _mm256_loadu_pd(x + 4)),
                        _mm256_add_pd(zero, _mm256_loadu_pd(x + 8)));
}

// row_sums of whole rows of 3 landed ROWS, RUNNING into one total per row, or
// PARTIALS of one block: false (nothing done) for the other landings
template <class T>
inline bool rows_of_3(const Sum& s, const Walk& w, const Chunk& ch, const T* x) {
  const int64_t rows = ch.rows, fours = rows - rows % 4;
  const __m256d zero = _mm256_setzero_pd();
  int64_t i = 0;
  if (s.landing == Landing::ROWS) {
    T* out = static_cast<T*>(s.out) + ch.row;
    for (; i < fours; i += 4)
      store_rounded(out + i, _mm256_add_pd(zero, four_partials_of_3(x + 3 * i)));
    for (; i < rows; ++i) out[i] = T(0.0 + short_sum<3>(x + 3 * i));
  } else if (s.landing == Landing::RUNNING && s.per_r == 1 && s.per_b == w.Dr) {
    double* t = s.acc + ch.row;
    for (; i < fours; i += 4)
      _mm256_storeu_pd(t + i, _mm256_add_pd(_mm256_loadu_pd(t + i), four_partials_of_3(x + 3 * i)));
    for (; i < rows; ++i) t[i] += short_sum<3>(x + 3 * i);
  } else if (s.landing == Landing::PARTIALS && w.blocks == 1) {
    double* acc = s.acc + ch.row;
    for (; i < fours; i += 4) _mm256_storeu_pd(acc + i, four_partials_of_3(x + 3 * i));
    for (; i < rows; ++i) acc[i] = short_sum<3>(x + 3 * i);
  } else {
    return false;
  }
  return true;
}
#endif

// A sum over C of the chunk's values x: each row's blocks (the same partials as one chunk
// per row), landed as s says.
// row_sums of whole rows of 1 (a 1x1 conv weight's): each row's partial is 0 + x, as
// short_sum<1>'s, in loops the compiler vectorises where the landing allows; false
// (nothing done) for the other landings
template <class T>
inline bool rows_of_1(const Sum& s, const Walk& w, const Chunk& ch, const T* __restrict__ x) {
  const int64_t rows = ch.rows;
  if (s.landing == Landing::ROWS) {
    T* __restrict__ out = static_cast<T*>(s.out) + ch.row;
    for (int64_t i = 0; i < rows; ++i) out[i] = T(0.0 + (0.0 + double(x[i])));
  } else if (s.landing == Landing::RUNNING && s.per_r == 1 && s.per_b == w.Dr) {
    double* __restrict__ t = s.acc + ch.row;
    for (int64_t i = 0; i < rows; ++i) t[i] += 0.0 + double(x[i]);
  } else if (s.landing == Landing::PARTIALS && w.blocks == 1) {
    double* __restrict__ acc = s.acc + ch.row;
    for (int64_t i = 0; i < rows; ++i) acc[i] = 0.0 + double(x[i]);
  } else {
    return false;
  }
  return true;
}

template <class T>
inline void row_sums(const Sum& s, const Walk& w, const Chunk& ch, const T* x) {
  if (s.blocked) return block_sums(s, ch, x);
#if defined(__AVX2__)
  if (ch.n == 3 && rows_of_3(s, w, ch, x)) return;
#endif
  if (ch.n == 1 && ch.c0 == 0 && rows_of_1(s, w, ch, x)) return;
  land_row_sums<T>(s, w, ch, [&](auto&& partial) { each_partial(ch, x, partial); });
}
// row_sums of a chunk whose block partials a generated kernel added in its element loop
// (never a blocked total's: codegen.py walks rows shorter than LANES through row_sums):
// lane_sum's of block k (SUM_BLOCK elements from c0) of the chunk's row i in
// partial[i * blocks + k], landed in each_partial's order
template <class T>
inline void row_partials(const Sum& s, const Walk& w, const Chunk& ch, const double* partial) {
  const int64_t blocks = (ch.n + SUM_BLOCK - 1) / SUM_BLOCK;
  land_row_sums<T>(s, w, ch, [&](auto&& land) {
    for (int64_t i = 0; i < ch.rows; ++i)
      for (int64_t k = 0; k < blocks; ++k) land(i, k, partial[i * blocks + k]);
  });
}
template <class T>
inline void row_sums_of(const Sum& s, const Walk& w, const Chunk& ch, double value) {
  if (s.blocked) {               // the value at every element (the VM's scalar operand)
    std::vector<double> values(size_t(ch.size()), value);
    return block_sums(s, ch, values.data());
  }
  land_row_sums<T>(s, w, ch, [&](auto&& partial) { each_partial_of(ch, value, partial); });
}

// A column sum of the chunk's values (x: a value per element, or `value` for all): each
// row added into its group's partial row, rows in order (the order of a walk of one row
// per chunk). GROUPS: the chunk is whole b's, a b a group: each column's partial starts
// at 0 and takes the b's rows in order, its total is 0 + the partial (one group).
// PARTIALS: the groups met in the chunk in order, found by counting rows, not dividing.
template <class T, class Value>
inline void land_column_sums(const Sum& s, const Walk& w, const Chunk& ch, Value&& value) {
  const int64_t n = ch.n;
  if (s.landing == Landing::GROUPS) {
    T* out = static_cast<T*>(s.out) + ch.b * n;
    switch (n) {                 // a conv weight's rows: the columns in registers
      case 1: return group_totals<1>(out, w.Dr, ch.rows, n, value);
      case 2: return group_totals<2>(out, w.Dr, ch.rows, n, value);
      case 3: return group_totals<3>(out, w.Dr, ch.rows, n, value);
      case 4: return group_totals<4>(out, w.Dr, ch.rows, n, value);
      default: return group_totals<0>(out, w.Dr, ch.rows, n, value);
    }
  }
  int64_t group, end, b_end = ch.row - ch.r + w.Dr;     // end: the group's last row + 1
  if (w.sum_over_b) {
    group = ch.row / w.per_group;
    end = (group + 1) * w.per_group;
  } else {
    group = ch.b * w.groups_per + ch.r / w.per_group;
    end = std::min(b_end, ch.row - ch.r + (ch.r / w.per_group + 1) * w.per_group);
  }
  for (int64_t i = 0; i < ch.rows; ++group) {
    const int64_t last = std::min(ch.rows, end - ch.row);
    double* __restrict__ partial = s.acc + group * w.Dc + ch.c0;
    if (n == 1) {
      double total = partial[0];
      for (; i < last; ++i) total += value(i, 0);
      partial[0] = total;
    } else {
      for (; i < last; ++i)
        for (int64_t c = 0; c < n; ++c) partial[c] += value(i, c);
    }
    if (w.sum_over_b) {
      end += w.per_group;
    } else if (end == b_end) {                           // the next b's first group
      b_end += w.Dr;
      end = std::min(b_end, end + w.per_group);
    } else {
      end = std::min(b_end, end + w.per_group);
    }
  }
}
template <class T>
inline void column_sums(const Sum& s, const Walk& w, const Chunk& ch, const T* x) {
#if defined(__AVX2__)
  if (s.landing == Landing::GROUPS && groups_in_vectors(s, w, ch, x)) return;
#endif
  const int64_t n = ch.n;
  if (s.landing == Landing::PARTIALS && n == 1 && w.Dr == 1 && w.Dc == 1 && !w.sum_over_b) {
    // rows of 1 in b's of 1 row (a 1x1 conv weight's): a group per row, its partial
    // from 0 (acc is zeroed) plus the row's value, as land_column_sums adds it
    double* __restrict__ partial = s.acc + ch.row;
    for (int64_t i = 0; i < ch.rows; ++i) partial[i] += double(x[i]);
    return;
  }
  land_column_sums<T>(s, w, ch, [&](int64_t i, int64_t c) { return double(x[i * n + c]); });
}
template <class T>
inline void column_sums_of(const Sum& s, const Walk& w, const Chunk& ch, double value) {
  land_column_sums<T>(s, w, ch, [&](int64_t, int64_t) { return value; });
}
// A sum over C and a sum over R of one value x (a factored moment's row and column
// sums of a conv weight's squared gradient). Where the chunk is whole 3x3 b's of float
// and the sums land ROWS and GROUPS, each b's rows are converted to double once for both
// (a row loaded as 4 lanes, the 4th the next row's, as groups_in_vectors loads them):
// the conversions, not the additions, are what such sums wait on. The column totals are
// groups_in_vectors's; the row totals short_sum<3>'s, (x0 + x2) + x1 on the b's 3x3
// transposed in registers (its zero-adds only turn a -0 total into +0, as the landing's
// 0.0 + does), the column partials from the first row (groups_in_vectors): the same
// bits (tests/test_kernel_short_row_totals.py). The chunk's last b goes element by
// element, so that no load or store passes the chunk. Otherwise row_sums and
// column_sums.
template <class T>
inline void rows_and_columns(const Sum& rows, const Sum& columns, const Walk& w,
                             const Chunk& ch, const T* x) {
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    if (ch.n == 3 && w.Dr == 3 && ch.r == 0 && ch.rows % 3 == 0 &&
        rows.landing == Landing::ROWS && columns.landing == Landing::GROUPS) {
      const __m256d zero = _mm256_setzero_pd();
      float* row_out = static_cast<float*>(rows.out) + ch.row;
      float* col_out = static_cast<float*>(columns.out) + ch.b * 3;
      const int64_t bs = ch.rows / 3;
      for (int64_t b = 0; b + 1 < bs; ++b) {
        const float* v = x + 9 * b;
        const __m256d r0 = _mm256_cvtps_pd(_mm_loadu_ps(v));
        const __m256d r1 = _mm256_cvtps_pd(_mm_loadu_ps(v + 3));
        const __m256d r2 = _mm256_cvtps_pd(_mm_loadu_ps(v + 6));
        const __m256d col = _mm256_add_pd(_mm256_add_pd(r0, r1), r2);
        _mm_storeu_ps(col_out + 3 * b, _mm256_cvtpd_ps(_mm256_add_pd(zero, col)));
        const __m256d lo01 = _mm256_unpacklo_pd(r0, r1), hi01 = _mm256_unpackhi_pd(r0, r1);
        const __m256d lo2 = _mm256_unpacklo_pd(r2, r2), hi2 = _mm256_unpackhi_pd(r2, r2);
        const __m256d t0 = _mm256_permute2f128_pd(lo01, lo2, 0x20);
        const __m256d t1 = _mm256_permute2f128_pd(hi01, hi2, 0x20);
        const __m256d t2 = _mm256_permute2f128_pd(lo01, lo2, 0x31);
        const __m256d sum = _mm256_add_pd(_mm256_add_pd(t0, t2), t1);
        _mm_storeu_ps(row_out + 3 * b, _mm256_cvtpd_ps(_mm256_add_pd(zero, sum)));
      }
      if (bs > 0) {
        const float* v = x + 9 * (bs - 1);
        group_totals<3>(col_out + 3 * (bs - 1), 3, 3, 3,
                        [&](int64_t r, int64_t c) { return double(v[3 * r + c]); });
        for (int r = 0; r < 3; ++r)
          row_out[3 * (bs - 1) + r] = float(0.0 + short_sum<3>(v + 3 * r));
      }
      return;
    }
  }
#endif
  row_sums(rows, w, ch, x);
  column_sums(columns, w, ch, x);
}
// A chunk of one row: where its column sums add (PARTIALS; GROUPS chunks have several
// rows), for a generated kernel that adds them in its element loop.
inline double* column_partial(const Sum& s, const Walk& w, const Chunk& ch) {
  return s.acc + w.group(ch.row) * w.Dc + ch.c0;
}

}  // namespace uo
