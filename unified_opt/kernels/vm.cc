// The kernel VM: runs the code of unified_opt/kernels/bytecode.py over one parameter's
// arrays, in place, instruction by instruction over chunks of CHUNK elements held in
// registers. Written once for every algorithm: the algorithms are the specs' Python
// update functions, traced (trace.py). The walk, the sums and the numbers' rules are
// phases.h's, shared with the kernels codegen.py writes for one program.

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "phases.h"

namespace {

using uo::CHUNK;
// the code's layout, opcodes and operand kinds: abi.h, generated from bytecode.py
using namespace uo::abi;

struct Phase { int domain; int n; const Ins* ins; };

struct Program {
  int n_inputs = 0, n_arrays = 0, n_regs = 0;
  const int32_t* masks = nullptr;
  std::vector<Phase> phases;
  // the phases each phase's tile run holds from it on (phases.h's run_tiles): 0 where no
  // run starts at the phase
  std::vector<int> run_length;
  // each phase's instruction count and list (phases.h's checks read them so)
  std::vector<int> counts;
  std::vector<const Ins*> lists;
};

bool parse(const int32_t* code, int64_t length, Program& p) {
  if (length < HEADER_INTS || code[0] != VERSION) return false;
  p.n_inputs = code[1]; p.n_arrays = code[2]; p.n_regs = code[3];
  const int n_phases = code[4], n_runs = code[5];
  int64_t at = HEADER_INTS;
  if (p.n_inputs < 0 || p.n_arrays < p.n_inputs || n_phases < 0 || n_runs < 0 ||
      at + p.n_arrays + int64_t(n_runs) * TILE_RUN_INTS > length)
    return false;
  p.masks = code + at;
  at += p.n_arrays;
  const int32_t* runs = code + at;
  at += int64_t(n_runs) * TILE_RUN_INTS;
  for (int k = 0; k < n_phases; ++k) {
    if (at + PHASE_INTS > length) return false;
    Phase ph{code[at], code[at + 1], reinterpret_cast<const Ins*>(code + at + PHASE_INTS)};
    at += PHASE_INTS + int64_t(ph.n) * INSTRUCTION_INTS;
    if (at > length) return false;
    p.phases.push_back(ph);
  }
  if (at != length) return false;
  // scratch arrays come unzeroed from a pool: each must be written before it is read
  std::vector<int> domains, counts;
  std::vector<const Ins*> lists;
  for (const Phase& ph : p.phases) {
    domains.push_back(ph.domain);
    counts.push_back(ph.n);
    lists.push_back(ph.ins);
  }
  if (!uo::scratch_written_first(p.n_inputs, p.n_arrays, p.masks, int(p.phases.size()),
                                 domains.data(), counts.data(), lists.data()) ||
      !uo::tile_runs_valid(p.n_arrays, p.masks, int(p.phases.size()), domains.data(),
                           counts.data(), lists.data(), n_runs, runs))
    return false;
  p.run_length.assign(p.phases.size(), 0);
  for (int k = 0; k < n_runs; ++k) p.run_length[runs[2 * k]] = runs[2 * k + 1];
  p.counts = std::move(counts);
  p.lists = std::move(lists);
  return true;
}

template <class T> struct Val { const T* p; T s; bool vec; };

template <class T, class F>
inline void binary(T* __restrict__ d, const Val<T>& a, const Val<T>& b, int64_t n, F f) {
  if (a.vec && b.vec) {
    const T* __restrict__ x = a.p; const T* __restrict__ y = b.p;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = f(x[j], y[j]);
  } else if (a.vec) {
    const T* __restrict__ x = a.p; const T y = b.s;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = f(x[j], y);
  } else if (b.vec) {
    const T x = a.s; const T* __restrict__ y = b.p;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = f(x, y[j]);
  } else {
    const T v = f(a.s, b.s);
    for (int64_t j = 0; j < n; ++j) d[j] = v;
  }
}

template <class T, class F>
inline void unary(T* __restrict__ d, const Val<T>& a, int64_t n, F f) {
  if (a.vec) {
    const T* __restrict__ x = a.p;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = f(x[j]);
  } else {
    const T v = f(a.s);
    for (int64_t j = 0; j < n; ++j) d[j] = v;
  }
}

template <class T>
inline void select(T* __restrict__ d, const Val<T>& c, const Val<T>& a, const Val<T>& b,
                   int64_t n) {
  if (!c.vec) {
    unary(d, c.s != T(0) ? a : b, n, [](T x) { return x; });
    return;
  }
  const T* __restrict__ cp = c.p;
  if (a.vec && b.vec) {
    const T* __restrict__ x = a.p; const T* __restrict__ y = b.p;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = uo::select(cp[j], x[j], y[j]);
  } else if (a.vec) {
    const T* __restrict__ x = a.p; const T y = b.s;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = uo::select(cp[j], x[j], y);
  } else if (b.vec) {
    const T x = a.s; const T* __restrict__ y = b.p;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = uo::select(cp[j], x, y[j]);
  } else {
    const T x = a.s, y = b.s;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = uo::select(cp[j], x, y);
  }
}

template <class T> struct Interpreter {
  const Program& prog;
  const uo::Dims& dims;
  T* const* arrays;
  const double* scalars;

  // an operand over the chunk; an array of fewer axes than a chunk of several rows is
  // gathered into `gathered`
  Val<T> value(int kind, int k, T* regs, int domain, const uo::Walk& w, const uo::Chunk& ch,
               T* gathered) const {
    switch (kind) {
      case REG: return {regs + int64_t(k) * CHUNK, T(0), true};
      case ARR: {
        const int m = prog.masks[k];
        if (ch.rows > 1 && m != 0) {
          if (m == domain) return {arrays[k] + ch.row * w.Dc, T(0), true};
          uo::gather(gathered, arrays[k], m, dims, w, ch);
          return {gathered, T(0), true};
        }
        const int64_t i = dims.index(m, ch.b, ch.r, ch.c0);
        if (m & uo::AC) return {arrays[k] + i, T(0), true};
        return {nullptr, arrays[k][i], false};
      }
      case SCAL: return {nullptr, T(scalars[k]), false};
      case CNT: return {nullptr, T(dims.size(k)), false};
      default: return {nullptr, T(0), false};
    }
  }

  // one chunk of a phase (phases.h's Chunk), instruction after instruction; registers
  // hold CHUNK elements, then 3 gather buffers of CHUNK
  void chunk(const Phase& ph, const std::vector<uo::Sum>& sums, T* regs, const uo::Walk& w,
             const uo::Chunk& ch) const {
    const int64_t n = ch.size();
    T* gathered = regs + int64_t(prog.n_regs) * CHUNK;
    int s = 0;
    for (int k = 0; k < ph.n; ++k) {
      const Ins& in = ph.ins[k];
      const Val<T> a = value(in.a_kind, in.a, regs, ph.domain, w, ch, gathered);
      T* d = regs + int64_t(in.dst) * CHUNK;
      auto second = [&]() {
        return value(in.b_kind, in.b, regs, ph.domain, w, ch, gathered + CHUNK);
      };
      switch (in.op) {
        case ADD: binary(d, a, second(), n, [](T x, T y) { return x + y; }); break;
        case SUB: binary(d, a, second(), n, [](T x, T y) { return x - y; }); break;
        case MUL: binary(d, a, second(), n, [](T x, T y) { return x * y; }); break;
        case DIV: binary(d, a, second(), n, [](T x, T y) { return x / y; }); break;
        case MAX: binary(d, a, second(), n, [](T x, T y) { return uo::nan_max(x, y); }); break;
        case MIN: binary(d, a, second(), n, [](T x, T y) { return uo::nan_min(x, y); }); break;
        case GT: binary(d, a, second(), n, [](T x, T y) { return T(x > y); }); break;
        case GE: binary(d, a, second(), n, [](T x, T y) { return T(x >= y); }); break;
        case LT: binary(d, a, second(), n, [](T x, T y) { return T(x < y); }); break;
        case LE: binary(d, a, second(), n, [](T x, T y) { return T(x <= y); }); break;
        case EQ: binary(d, a, second(), n, [](T x, T y) { return T(x == y); }); break;
        case NE: binary(d, a, second(), n, [](T x, T y) { return T(x != y); }); break;
        case AND: binary(d, a, second(), n, [](T x, T y) { return uo::logical_and(x, y); }); break;
        case OR: binary(d, a, second(), n, [](T x, T y) { return uo::logical_or(x, y); }); break;
        case NEG: unary(d, a, n, [](T x) { return -x; }); break;
        case SQRT: unary(d, a, n, [](T x) { return std::sqrt(x); }); break;
        case ABS: unary(d, a, n, [](T x) { return std::fabs(x); }); break;
        case SIGN: unary(d, a, n, [](T x) { return uo::sign_of(x); }); break;
        case WHERE:
          select(d, a, second(),
                 value(in.c_kind, in.c, regs, ph.domain, w, ch, gathered + 2 * CHUNK), n);
          break;
        case SUM: {
          const uo::Sum& sum = sums[s++];
          if (sum.over_c) {
            if (a.vec) uo::row_sums(sum, w, ch, a.p);
            else uo::row_sums_of<T>(sum, w, ch, double(a.s));
          } else {
            if (a.vec) uo::column_sums(sum, w, ch, a.p);
            else uo::column_sums_of<T>(sum, w, ch, double(a.s));
          }
          break;
        }
        case STORE: {
          // a chunk of several rows stores into an array spanning the domain (rows_together)
          T* out = arrays[in.dst] + (ch.rows > 1 ? ch.row * w.Dc
                                     : dims.index(prog.masks[in.dst], ch.b, ch.r, ch.c0));
          if (a.vec) {
            const T* x = a.p;
            for (int64_t j = 0; j < n; ++j) out[j] = x[j];
          } else {
            for (int64_t j = 0; j < n; ++j) out[j] = a.s;
          }
          break;
        }
      }
    }
  }
};

template <class T>
int run(const int32_t* code, int64_t length, void* const* inputs, const int64_t* d,
        const double* scalars) {
  Program prog;
  if (!parse(code, length, prog)) return 1;
  const uo::Dims dims{d[0], d[1], d[2]};
  uo::Arrays<T> arrays(prog.n_inputs, prog.n_arrays, prog.masks, inputs, dims);
  const Interpreter<T> vm{prog, dims, arrays.ptr.data(), scalars};
  auto sums_of = [](const Phase& ph) {
    std::vector<uo::Sum> sums;
    for (int k = 0; k < ph.n; ++k)
      if (ph.ins[k].op == SUM) {
        const int dst = ph.ins[k].dst;
        sums.push_back({ph.ins[k].aux, dst, uo::lands_direct(dst, ph.ins, ph.n)});
      }
    return sums;
  };
  const int64_t scratch = int64_t(prog.n_regs + 3) * CHUNK;
  for (size_t p = 0; p < prog.phases.size(); ++p) {
    const Phase& ph = prog.phases[p];
    if (ph.domain == SELECT) {
      for (int k = 0; k < ph.n; ++k) {
        const Ins& in = ph.ins[k];
        uo::top_k<T>(arrays.ptr[in.a], dims.size(prog.masks[in.a]), scalars[in.b],
                     arrays.ptr[in.dst]);
      }
      continue;
    }
    const int run = prog.run_length[p];
    if (run >= 2) {                 // a tile run: its phases tile by tile over B
      std::vector<std::vector<uo::Sum>> sums(run);
      std::vector<uo::TilePhase> tiled(run);
      for (int k = 0; k < run; ++k) {
        const Phase& member = prog.phases[p + k];
        sums[k] = sums_of(member);
        tiled[k] = {member.domain, &sums[k],
                    uo::rows_together(member.domain, prog.masks, member.ins, member.n)};
      }
      const std::vector<int> local = uo::tile_local_arrays(
          prog.n_inputs, prog.n_arrays, prog.masks, int(prog.phases.size()), prog.counts.data(),
          prog.lists.data(), int(p), run);
      uo::run_tiles<CHUNK, T>(tiled.data(), run, dims, arrays.ptr.data(), prog.masks,
                              local.data(), int(local.size()), scratch,
                              [&](int k, const uo::Walk& w, const uo::Chunk& ch, T* regs) {
                                vm.chunk(prog.phases[p + k], sums[k], regs, w, ch);
                              });
      p += run - 1;
      continue;
    }
    std::vector<uo::Sum> sums = sums_of(ph);
    uo::run_phase<CHUNK, T>(ph.domain, dims, sums, arrays.ptr.data(), scratch,
                            uo::rows_together(ph.domain, prog.masks, ph.ins, ph.n),
                            [&](const uo::Walk& w, const uo::Chunk& ch, T* regs) {
                              vm.chunk(ph, sums, regs, w, ch);
                            });
  }
  return 0;
}

// Generated kernels (codegen.py) registered by their program's code: a program with one
// runs it, whoever calls (Python through ctypes, or MindSpore's graph through
// uo_vm_aot); the same bits as the VM either way.
using Kernel = int (*)(int, void* const*, const int64_t*, const double*);
std::unordered_map<std::string, Kernel>& kernels() {
  static std::unordered_map<std::string, Kernel> table;
  return table;
}
std::mutex kernels_lock;

int dispatch(int dtype, const int32_t* code, int64_t length, void* const* inputs,
             const int64_t* dims, const double* scalars) {
  Kernel kernel = nullptr;
  {
    std::lock_guard<std::mutex> hold(kernels_lock);
    auto found = kernels().find(std::string(reinterpret_cast<const char*>(code),
                                            size_t(length) * sizeof(int32_t)));
    if (found != kernels().end()) kernel = found->second;
  }
  if (kernel != nullptr) return kernel(dtype, inputs, dims, scalars);
  if (dtype == FLOAT32) return run<float>(code, length, inputs, dims, scalars);
  if (dtype == FLOAT64) return run<double>(code, length, inputs, dims, scalars);
  return 2;
}

}  // namespace

extern "C" {

int uo_vm_version() { return VERSION; }

// One parameter's step. dtype: 0 float32, 1 float64. inputs: the program's input arrays
// (parameter, gradient, state), updated in place. dims: B, R, C.
int uo_vm_run(int dtype, const int32_t* code, int64_t length, void* const* inputs,
              const int64_t* dims, const double* scalars) {
  return dispatch(dtype, code, length, inputs, dims, scalars);
}

// The threads of the VM's parallel phases from now on (phases.h's thread_count; 0: its
// default).
void uo_vm_set_threads(int threads) {
  uo::requested_threads().store(threads > 0 ? threads : 0, std::memory_order_relaxed);
}

int uo_vm_threads() { return uo::thread_count(); }

// The b's of a tile run's tile from now on (phases.h's run_tiles; 0: its default).
void uo_vm_set_tile(int64_t bs) {
  uo::requested_tile_bs().store(bs > 0 ? bs : 0, std::memory_order_relaxed);
}

// Run the generated kernel `kernel` (its uo_kernel_run) for the program `code` from now on.
void uo_vm_register(const int32_t* code, int64_t length, void* kernel) {
  std::lock_guard<std::mutex> hold(kernels_lock);
  kernels()[std::string(reinterpret_cast<const char*>(code), size_t(length) * sizeof(int32_t))] =
      reinterpret_cast<Kernel>(kernel);
}

// MindSpore's AOT custom operator (func_type="aot", CPU): inputs
//   packed (float64): [next lr, offset of parameter 0's segment, ..., segments...], a
//     segment [code length, scalar count, code..., scalars...] (backends/mindspore/graph.py)
//   index (int32 [1]): whose segment; then the parameter, its gradient, its state arrays
// and one float32 [1] output (0: done). The arrays are updated in place. Returns 4 for a
// dtype the VM does not run, 5 for a gradient whose shape is not the parameter's, 6 for
// a gradient or state array whose dtype is not the parameter's.
int uo_vm_aot(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
              void* /*stream*/, void* /*extra*/) {
  if (nparam < 5) return 3;
  const double* packed = static_cast<const double*>(params[0]);
  const int index = static_cast<const int32_t*>(params[1])[0];
  const double* segment = packed + int64_t(packed[1 + index]);
  const int64_t length = int64_t(segment[0]);
  std::vector<int32_t> code(length);
  for (int64_t i = 0; i < length; ++i) code[i] = int32_t(segment[2 + i]);
  int64_t dims[3] = {1, 1, 1};
  const int ndim = ndims[2];
  if (ndim >= 1) dims[2] = shapes[2][ndim - 1];
  if (ndim >= 2) dims[1] = shapes[2][ndim - 2];
  for (int i = 0; i + 2 < ndim; ++i) dims[0] *= shapes[2][i];
  int dtype = std::strcmp(dtypes[2], "float64") == 0 ? FLOAT64
              : (std::strcmp(dtypes[2], "float32") == 0 || std::strcmp(dtypes[2], "float") == 0
                 ? FLOAT32 : -1);
  if (dtype < 0) return 4;
  // the gradient has the parameter's dtype and shape, the state arrays its dtype: the
  // VM reads them as the parameter's element type (a mismatch would read out of bounds)
  if (ndims[3] != ndim) return 5;
  for (int i = 0; i < ndim; ++i)
    if (shapes[3][i] != shapes[2][i]) return 5;
  for (int i = 3; i < nparam - 1; ++i)
    if (std::strcmp(dtypes[i], dtypes[2]) != 0) return 6;
  static_cast<float*>(params[nparam - 1])[0] = 0.0f;
  return dispatch(dtype, code.data(), length, params + 2, dims, segment + 2 + length);
}

}  // extern "C"
