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
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>
#ifdef _WIN32
#include <process.h>
#else
#include <unistd.h>
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

constexpr int LANES = 16;

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

// The sum of x[0..n) in double: element j goes to lane j % LANES, the lanes are added in
// a fixed tree. Vectorises (each lane is its own chain) and gives the same bits anywhere.
template <class T> inline double lane_sum(const T* __restrict__ x, int64_t n) {
  if (n < LANES) return short_lane_sum(x, n);
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

// The threads of a parallel phase. The caller (Python's runtime.py) sets the framework's
// own setting with uo_vm_set_threads / uo_kernel_set_threads before a step (torch's
// get_num_threads, Paddle's OMP_NUM_THREADS, MindSpore's runtime_num_threads); until
// then (a library called directly, MindSpore's graph operators) OMP_NUM_THREADS where
// it is set, else the CPU's count.
inline std::atomic<int>& requested_threads() {
  static std::atomic<int> threads{0};
  return threads;
}
inline int thread_count() {
  const int requested = requested_threads().load(std::memory_order_relaxed);
  if (requested > 0) return requested;
  const char* env = std::getenv("OMP_NUM_THREADS");
  const int n = env ? std::atoi(env) : 0;
  return n > 0 ? n : std::max(1, int(std::thread::hardware_concurrency()));
}

inline int current_process() {
#ifdef _WIN32
  return _getpid();
#else
  return int(getpid());
#endif
}

// The helper threads of parallel loops: they sleep on a condition variable between
// loops and never spin (an OpenMP runtime's threads spin at barriers and between
// regions, and several runtimes share the process with torch's, Paddle's and
// MindSpore's threads: on a machine with other jobs, spinning threads and a descheduled
// one stalled steps ~10x). A loop's items are claimed in small batches from one counter
// by whoever runs: the caller starts at once, a helper joins when it wakes, and the
// caller waits only for helpers that joined, so a helper that is not scheduled costs
// its share of the speed-up, never a stall. Which thread runs an item does not change
// the numbers (every item writes places of its own). One pool per library and process
// (a fork gets a new one); a loop started while another thread holds the pool runs on
// its caller alone.
class Pool {
 public:
  using Task = void (*)(void*);

  static Pool& of_this_process() {
    static std::atomic<Pool*> pool{nullptr};
    static std::mutex creating;
    Pool* found = pool.load(std::memory_order_acquire);
    if (found != nullptr && found->pid_ == current_process()) return *found;
    std::lock_guard<std::mutex> hold(creating);
    found = pool.load(std::memory_order_acquire);
    if (found == nullptr || found->pid_ != current_process()) {
      found = new Pool();      // kept for the process's life (its threads sleep in it);
      pool.store(found, std::memory_order_release);  // a parent's, after fork, is left
    }
    return *found;
  }

  // task(context) on the caller and on up to `helpers` sleeping threads that wake in time
  void run(int helpers, Task task, void* context) {
    std::unique_lock<std::mutex> use(in_use_, std::try_to_lock);
    if (helpers <= 0 || !use.owns_lock()) {
      task(context);
      return;
    }
    {
      std::lock_guard<std::mutex> hold(lock_);
      while (int(threads_) < helpers) {
        try {
          std::thread(&Pool::serve, this).detach();
        } catch (const std::system_error&) {   // no more threads: fewer helpers
          break;
        }
        ++threads_;
      }
      task_ = task;
      context_ = context;
      seats_ = std::min(helpers, int(threads_));
      open_ = true;
      ++generation_;
    }
    wake_.notify_all();
    task(context);
    std::unique_lock<std::mutex> hold(lock_);
    open_ = false;                          // no helper joins from now on
    idle_.wait(hold, [this] { return busy_ == 0; });
  }

 private:
  Pool() : pid_(current_process()) {}

  void serve() {
    std::unique_lock<std::mutex> hold(lock_);
    uint64_t seen = generation_;
    for (;;) {
      wake_.wait(hold, [&] { return generation_ != seen; });
      seen = generation_;
      if (!open_ || seats_ == 0) continue;
      --seats_;
      ++busy_;
      Task task = task_;
      void* context = context_;
      hold.unlock();
      task(context);
      hold.lock();
      if (--busy_ == 0) idle_.notify_all();
    }
  }

  const int pid_;
  std::mutex in_use_, lock_;
  std::condition_variable wake_, idle_;
  size_t threads_ = 0;
  uint64_t generation_ = 0;
  Task task_ = nullptr;
  void* context_ = nullptr;
  int seats_ = 0, busy_ = 0;
  bool open_ = false;
};

// work(i, scratch) for every i in [0, count), on up to `threads` threads (the Pool's):
// each thread scratch of its own, items claimed in batches of about a 256th of a
// thread's share: a helper descheduled while it holds a batch holds up the loop's end
// until it runs again and finishes that batch, so batches are short. Every i writes places of its own, so the numbers do not depend on
// the threads or on which thread ran which item.
template <class T, class Work>
void for_each_item(int64_t count, int threads, int64_t scratch_size, Work&& work) {
  const int64_t used = std::max<int64_t>(1, std::min<int64_t>(threads, count));
  if (used == 1) {
    std::vector<T> scratch(std::max<int64_t>(1, scratch_size));
    for (int64_t i = 0; i < count; ++i) work(i, scratch.data());
    return;
  }
  struct Loop {
    std::atomic<int64_t> next{0};
    int64_t count, batch, scratch_size;
    std::remove_reference_t<Work>* work;
  } loop;
  loop.count = count;
  loop.batch = std::max<int64_t>(1, count / (used * 256));
  loop.scratch_size = std::max<int64_t>(1, scratch_size);
  loop.work = &work;
  auto claim = [](void* context) {
    Loop& l = *static_cast<Loop*>(context);
    std::vector<T> scratch;
    for (;;) {
      const int64_t first = l.next.fetch_add(l.batch, std::memory_order_relaxed);
      if (first >= l.count) return;
      if (scratch.empty()) scratch.resize(size_t(l.scratch_size));
      const int64_t last = std::min(l.count, first + l.batch);
      for (int64_t i = first; i < last; ++i) (*l.work)(i, scratch.data());
    }
  };
  Pool::of_this_process().run(int(used - 1), claim, &loop);
}

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
  int64_t b(int64_t row) const { return row / Dr; }
  int64_t r(int64_t row) const { return row % Dr; }
  int64_t group(int64_t row) const {
    return sum_over_b ? row / per_group : (row / Dr) * groups_per + (row % Dr) / per_group;
  }
};
struct Chunk {
  int64_t row, rows, c0, n;
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

// The chunk's elements of an array spanning `mask` (axes of the domain, not all of them):
// a row's elements, or its one value repeated along the row.
template <class T>
inline void gather(T* __restrict__ dst, const T* src, int mask, const Dims& dims,
                   const Walk& w, const Chunk& ch) {
  int64_t b = w.b(ch.row), r = w.r(ch.row);
  for (int64_t i = 0; i < ch.rows; ++i, ++r) {
    if (r == w.Dr) { r = 0; ++b; }
    const T* from = src + dims.index(mask, b, r, 0);
    T* to = dst + i * ch.n;
    if (mask & AC) {
      for (int64_t c = 0; c < ch.n; ++c) to[c] = from[ch.c0 + c];
    } else {
      for (int64_t c = 0; c < ch.n; ++c) to[c] = from[0];
    }
  }
}

// short_lane_sum of N elements, N known to the compiler (unrolled: a conv weight's rows)
template <int N, class T> inline double short_sum(const T* __restrict__ x) {
  double lane[N];
  for (int l = 0; l < N; ++l) lane[l] = 0.0 + double(x[l]);
  int live = N;
  for (int width = LANES / 2; width > 0; width /= 2) {
    for (int l = 0; l < width && l + width < live; ++l) lane[l] += lane[l + width];
    live = std::min(live, width);
  }
  return lane[0];
}
template <int N, class T>
inline void short_row_sums(double* __restrict__ out, const T* __restrict__ x, int64_t rows) {
  for (int64_t i = 0; i < rows; ++i) out[i] = short_sum<N>(x + i * N);
}

// A sum over C of the chunk's values x (each row's blocks: the same partials as one
// chunk per row), and a column sum (each row added into its group's partial row, rows in
// order: the order of a walk of one row per chunk).
template <class T>
inline void row_sums(double* acc, const Walk& w, const Chunk& ch, const T* x) {
  if (w.blocks == 1) {          // whole rows of at most one block: a partial per row
    double* out = acc + ch.row;
    switch (ch.n) {
      case 1: return short_row_sums<1>(out, x, ch.rows);
      case 2: return short_row_sums<2>(out, x, ch.rows);
      case 3: return short_row_sums<3>(out, x, ch.rows);
      case 4: return short_row_sums<4>(out, x, ch.rows);
      case 5: return short_row_sums<5>(out, x, ch.rows);
      case 7: return short_row_sums<7>(out, x, ch.rows);
      default: break;
    }
  }
  for (int64_t i = 0; i < ch.rows; ++i)
    block_sums(acc + (ch.row + i) * w.blocks + ch.c0 / SUM_BLOCK, x + i * ch.n, ch.n);
}
inline void row_sums_of(double* acc, const Walk& w, const Chunk& ch, double value) {
  for (int64_t i = 0; i < ch.rows; ++i)
    block_sums_of(acc + (ch.row + i) * w.blocks + ch.c0 / SUM_BLOCK, value, ch.n);
}
// the rows from `row` on that add into the same partial row: up to the group's end
inline int64_t group_end(const Walk& w, int64_t row) {
  if (w.sum_over_b) return (row / w.per_group + 1) * w.per_group;
  const int64_t b = row / w.Dr, r = row % w.Dr;
  return b * w.Dr + std::min(w.Dr, (r / w.per_group + 1) * w.per_group);
}
template <class T>
inline void column_sums(double* acc, const Walk& w, const Chunk& ch, const T* x) {
  for (int64_t i = 0; i < ch.rows;) {
    const int64_t row = ch.row + i;
    const int64_t end = std::min(ch.rows, group_end(w, row) - ch.row);
    double* __restrict__ partial = acc + w.group(row) * w.Dc + ch.c0;
    if (ch.n == 1) {
      double total = partial[0];
      for (; i < end; ++i) total += double(x[i]);
      partial[0] = total;
      continue;
    }
    for (; i < end; ++i) {
      const T* __restrict__ values = x + i * ch.n;
#pragma omp simd
      for (int64_t c = 0; c < ch.n; ++c) partial[c] += double(values[c]);
    }
  }
}
inline void column_sums_of(double* acc, const Walk& w, const Chunk& ch, double value) {
  for (int64_t i = 0; i < ch.rows; ++i) {
    double* partial = acc + w.group(ch.row + i) * w.Dc + ch.c0;
    for (int64_t c = 0; c < ch.n; ++c) partial[c] += value;
  }
}

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
  // rows per chunk: 1 (a row's chunks along C), or as many whole rows as fit
  const int64_t per_chunk = together && Dc > 0 ? std::max<int64_t>(1, CH / Dc) : 1;
  bool columns = false;
  int sum_over_b = 0;
  for (const Sum& s : sums)
    if (!(s.axes & AC)) { columns = true; sum_over_b |= s.axes & AB; }
  const int64_t span = sum_over_b ? rows : Dr;
  const int64_t per_group = std::max<int64_t>(16, (span + 63) / 64);
  const int64_t groups_per = (span + per_group - 1) / per_group;
  const int64_t groups = columns ? (sum_over_b ? groups_per : Db * groups_per) : 0;
  const Walk walk{Dr, Dc, blocks, per_group, groups_per, sum_over_b != 0};
  for (Sum& s : sums) {
    s.over_c = (s.axes & AC) != 0;
    s.acc.assign(s.over_c ? rows * blocks : groups * Dc, 0.0);
  }
  const int threads = rows * Dc >= PARALLEL_MIN ? thread_count() : 1;
  // the chunks of the rows [first, last), in order
  auto walk_rows = [&](int64_t first, int64_t last, T* scratch) {
    if (per_chunk == 1) {
      for (int64_t row = first; row < last; ++row)
        for (int64_t c0 = 0; c0 < Dc; c0 += CH)
          body(walk, Chunk{row, 1, c0, std::min(CH, Dc - c0)}, scratch);
    } else {
      for (int64_t row = first; row < last; row += per_chunk)
        body(walk, Chunk{row, std::min(per_chunk, last - row), 0, Dc}, scratch);
    }
  };
  if (!columns) {
    if (per_chunk == 1) {
      for_each_item<T>(rows * nch, threads, scratch_size, [&](int64_t item, T* scratch) {
        const int64_t row = item / nch, c0 = (item % nch) * CH;
        body(walk, Chunk{row, 1, c0, std::min(CH, Dc - c0)}, scratch);
      });
    } else {
      for_each_item<T>((rows + per_chunk - 1) / per_chunk, threads, scratch_size,
                       [&](int64_t item, T* scratch) {
        const int64_t row = item * per_chunk;
        body(walk, Chunk{row, std::min(per_chunk, rows - row), 0, Dc}, scratch);
      });
    }
  } else {
    // a thread's item: consecutive groups holding about 16 chunks' worth of elements (a
    // group is a range of rows, and groups in order cover the rows in order: group g
    // ends where group g + 1 starts)
    const int64_t group_rows = sum_over_b ? per_group : std::min(per_group, Dr);
    const int64_t per_item = std::max<int64_t>(
        1, (16 * CH) / std::max<int64_t>(1, group_rows * std::max<int64_t>(1, Dc)));
    auto first_row = [&](int64_t g) {
      if (g >= groups) return rows;
      return sum_over_b ? g * per_group : (g / groups_per) * Dr + (g % groups_per) * per_group;
    };
    for_each_item<T>((groups + per_item - 1) / per_item, threads, scratch_size,
                     [&](int64_t item, T* scratch) {
      const int64_t g0 = item * per_item;
      walk_rows(first_row(g0), first_row(std::min(groups, g0 + per_item)), scratch);
    });
  }
  for (Sum& s : sums) {
    const int rm = domain & ~s.axes;
    T* out = arrays[s.dst];
    std::vector<double> total(dims.size(rm), 0.0);
    if (s.over_c) {                  // the partials in order: row after row
      const double* part = s.acc.data();
      for (int64_t b = 0; b < Db; ++b)
        for (int64_t r = 0; r < Dr; ++r) {
          double& t = total[dims.index(rm, b, r, 0)];
          for (int64_t k = 0; k < blocks; ++k) t += *part++;
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
