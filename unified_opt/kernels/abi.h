// Generated from unified_opt/kernels/bytecode.py (abi_header) by
// `python -m unified_opt.kernels.bytecode`: do not edit (a test checks it).
#pragma once

#include <cstdint>

namespace uo {
namespace abi {

constexpr int VERSION = 2;
constexpr int HEADER_INTS = 6, PHASE_INTS = 2, INSTRUCTION_INTS = 9, TILE_RUN_INTS = 2;
constexpr int SELECT = -1;  // a phase that runs TOPK instructions

enum Op {
  ADD = 0,
  SUB = 1,
  MUL = 2,
  DIV = 3,
  MAX = 4,
  MIN = 5,
  GT = 6,
  GE = 7,
  LT = 8,
  LE = 9,
  EQ = 10,
  NE = 11,
  AND = 12,
  OR = 13,
  NEG = 14,
  SQRT = 15,
  ABS = 16,
  SIGN = 17,
  WHERE = 18,
  SUM = 19,
  STORE = 20,
  TOPK = 21,
};
enum Kind {
  NONE = 0,
  REG = 1,
  ARR = 2,
  SCAL = 3,
  CNT = 4,
};
enum Axis {
  AB = 1,
  AR = 2,
  AC = 4,
};
enum DType {
  FLOAT32 = 0,
  FLOAT64 = 1,
};

// an instruction as the code holds it
struct Ins { int32_t op, dst, aux, a_kind, a, b_kind, b, c_kind, c; };
static_assert(sizeof(Ins) == INSTRUCTION_INTS * sizeof(int32_t), "Ins");

}  // namespace abi
}  // namespace uo

extern "C" {
int uo_vm_version();
int uo_vm_run(int dtype, const int32_t* code, int64_t length, void* const* inputs, const int64_t* dims, const double* scalars);
void uo_vm_register(const int32_t* code, int64_t length, void* kernel);
int uo_kernel_run(int dtype, void* const* inputs, const int64_t* dims, const double* scalars);
void uo_vm_set_threads(int threads);
void uo_kernel_set_threads(int threads);
int uo_vm_threads();
int uo_kernel_threads();
void uo_vm_set_tile(int64_t bs);
void uo_kernel_set_tile(int64_t bs);
int uo_vm_aot(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* stream, void* extra);
}  // extern "C"
