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
#include <new>
#include <utility>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
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

// Scratch memory reused from one run to the next. A run's scratch (the program's small
// arrays, the sums' partials and totals, each thread's registers) was allocated and freed
// every run; freed blocks of megabytes went back to the system and came back as fresh
// pages, zeroed by the kernel on first touch: page faults and clearing were a quarter of
// a conv weight's step. Each thread keeps its freed blocks (at most POOL_BLOCKS of them,
// POOL_BYTES in all; beyond that the smallest go back to the system) and hands out the
// smallest that fits. A block comes back uninitialised: what needs zeros fills them.
constexpr size_t POOL_BYTES = size_t(256) << 20;
constexpr size_t POOL_BLOCKS = 64;

class Buffers {
 public:
  struct Block {
    void* data;
    size_t bytes;
  };

  static Buffers& of_this_thread() {
    static thread_local Buffers buffers;
    return buffers;
  }

  Block take(size_t bytes) {
    bytes = std::max<size_t>(bytes, 64);
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i].bytes >= bytes && (best == free_.size() || free_[i].bytes < free_[best].bytes))
        best = i;
    if (best == free_.size())
      return {::operator new(bytes, std::align_val_t(64)), bytes};
    const Block found = free_[best];
    free_[best] = free_.back();
    free_.pop_back();
    kept_ -= found.bytes;
    return found;
  }

  void give(Block block) {
    free_.push_back(block);
    kept_ += block.bytes;
    while (kept_ > POOL_BYTES || free_.size() > POOL_BLOCKS) {
      auto smallest = std::min_element(free_.begin(), free_.end(), [](Block a, Block b) {
        return a.bytes < b.bytes;
      });
      if (kept_ > POOL_BYTES)            // over the bytes: the largest goes first
        smallest = std::max_element(free_.begin(), free_.end(), [](Block a, Block b) {
          return a.bytes < b.bytes;
        });
      kept_ -= smallest->bytes;
      release(*smallest);
      *smallest = free_.back();
      free_.pop_back();
    }
  }

  ~Buffers() {
    for (const Block& block : free_) release(block);
  }

 private:
  static void release(Block block) { ::operator delete(block.data, std::align_val_t(64)); }
  std::vector<Block> free_;
  size_t kept_ = 0;
};

// n elements of U from this thread's Buffers, given back when it goes (on the thread that
// took it: every Buffer of a run lives within one call on one thread).
template <class U> class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(int64_t n)
      : block_(Buffers::of_this_thread().take(size_t(std::max<int64_t>(n, 1)) * sizeof(U))) {}
  Buffer(Buffer&& other) noexcept : block_(other.block_) { other.block_ = {nullptr, 0}; }
  Buffer& operator=(Buffer&& other) noexcept {
    std::swap(block_, other.block_);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (block_.data != nullptr) Buffers::of_this_thread().give(block_);
  }
  U* data() const { return static_cast<U*>(block_.data); }

 private:
  Buffers::Block block_{nullptr, 0};
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
    const Buffer<T> scratch(scratch_size);
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
    Buffer<T> scratch;
    for (;;) {
      const int64_t first = l.next.fetch_add(l.batch, std::memory_order_relaxed);
      if (first >= l.count) return;
      if (scratch.data() == nullptr) scratch = Buffer<T>(l.scratch_size);
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
// of 3 rows): four values at a time moved into 12 lanes in AVX2
template <class T>
UO_INLINE void repeat_thrice(T* __restrict__ to, const T* __restrict__ from, int64_t count) {
  int64_t k = 0;
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
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
  if (N == 3 && along_c && per_r == 0) {      // a conv weight's b rows, for each of its rows
    // 4 values loaded (the 4th the next b's: a b of the chunk follows) and stored (the 4th
    // is the next row's place, written after); the chunk's last b element by element
    for (int64_t i = 0; i < rows; r = 0, from += per_b) {
      const int64_t last = std::min(rows, i + (Dr - r));
      if (last < rows) {
        if constexpr (std::is_same_v<T, float>) {
          const __m128 v = _mm_loadu_ps(from);
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

// How a sum's values land in its array (run_phase chooses; the totals' bits are the same
// every way: the same doubles added in the same order, one rounding to T at the end):
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
  Landing landing;
  int64_t per_b, per_r;       // RUNNING: the row (b, r) adds into acc[b * per_b + r * per_r]
  double* acc;                // PARTIALS: the partials; RUNNING: the totals
  void* out;                  // ROWS, GROUPS: dst
};

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
      if (s.per_b == 0 && s.per_r == 0) {           // one total: kept in a register
        double t = s.acc[0];
        each([&](int64_t, int64_t, double p) { t += p; });
        s.acc[0] = t;
      } else if (s.per_r == 1 && s.per_b == w.Dr) {  // a total per row
        double* t = s.acc + ch.row;
        each([&](int64_t i, int64_t, double p) { t[i] += p; });
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
// the partial), in the lanes of vectors. False: not such a chunk.
template <class T>
inline bool groups_in_vectors(const Sum& s, const Walk& w, const Chunk& ch, const T* x) {
  const __m256d zero = _mm256_setzero_pd();
  T* out = static_cast<T*>(s.out) + ch.b * ch.n;
  const int64_t bs = ch.rows / w.Dr;
  if (ch.n == 3) {
    // a b at a time, its 3 columns in the lanes of a vector: 4 values loaded and stored
    // (the 4th is the next row's, the next b's total), so the chunk's last b is scalar
    for (int64_t b = 0; b + 1 < bs; ++b) {
      const T* rows = x + 3 * w.Dr * b;
      __m256d partial = zero;
      for (int64_t r = 0; r < w.Dr; ++r)
        partial = _mm256_add_pd(partial, load_four(rows + 3 * r));
      store_rounded(out + 3 * b, _mm256_add_pd(zero, partial));
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
      const __m256d partial = _mm256_add_pd(_mm256_add_pd(_mm256_add_pd(zero, x0), x1), x2);
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

// row_sums of whole rows of 3 landed ROWS, RUNNING into one total or one per row, or
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
  } else if (s.landing == Landing::RUNNING && s.per_b == 0 && s.per_r == 0) {
    double t = s.acc[0];
    for (; i < fours; i += 4) {
      alignas(32) double p[4];
      _mm256_store_pd(p, four_partials_of_3(x + 3 * i));
      t += p[0];
      t += p[1];
      t += p[2];
      t += p[3];
    }
    for (; i < rows; ++i) t += short_sum<3>(x + 3 * i);
    s.acc[0] = t;
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
template <class T>
inline void row_sums(const Sum& s, const Walk& w, const Chunk& ch, const T* x) {
#if defined(__AVX2__)
  if (ch.n == 3 && rows_of_3(s, w, ch, x)) return;
#endif
  land_row_sums<T>(s, w, ch, [&](auto&& partial) { each_partial(ch, x, partial); });
}
template <class T>
inline void row_sums_of(const Sum& s, const Walk& w, const Chunk& ch, double value) {
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
  land_column_sums<T>(s, w, ch, [&](int64_t i, int64_t c) { return double(x[i * n + c]); });
}
template <class T>
inline void column_sums_of(const Sum& s, const Walk& w, const Chunk& ch, double value) {
  land_column_sums<T>(s, w, ch, [&](int64_t, int64_t) { return value; });
}
// A chunk of one row: where its column sums add (PARTIALS; GROUPS chunks have several
// rows), for a generated kernel that adds them in its element loop.
inline double* column_partial(const Sum& s, const Walk& w, const Chunk& ch) {
  return s.acc + w.group(ch.row) * w.Dc + ch.c0;
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
    if (s.over_c) {                  // the partials in order: row after row
      const double* part = s.acc;
      for (int64_t b = 0; b < Db; ++b)
        for (int64_t r = 0; r < Dr; ++r) {
          double& t = total[b * s.per_b + r * s.per_r];
          for (int64_t k = 0; k < blocks; ++k) t += *part++;
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
