// The threads of the kernels' parallel phases (a pool whose helpers sleep between
// loops) and the scratch memory each thread keeps from one run to the next (phases.h).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#ifdef _WIN32
#include <process.h>
#else
#include <unistd.h>
#endif

namespace uo {


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
// until it runs again and finishes that batch, so batches are short. But not shorter
// than MIN_BATCH items (a quarter of a thread's share where that is less): every claim
// is an atomic add on a line the threads share, and with claims of 1 or 2 chunks a
// tensor of a million elements ran no faster on two threads than on one. Every i writes
// places of its own, so the numbers do not depend on the threads or on which thread ran
// which item. Each thread's scratch comes from its Buffers.
constexpr int64_t MIN_BATCH = 16;
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
  loop.batch = std::min(std::max(MIN_BATCH, count / (used * 256)),
                        std::max<int64_t>(1, count / (4 * used)));
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

}  // namespace uo
