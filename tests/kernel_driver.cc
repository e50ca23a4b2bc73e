// One step of a kernel VM or generated-kernel library over a job file, for valgrind
// (tests/test_kernel_speed.py counts what the step executes). Usage: driver LIBRARY JOB.
// JOB: int32 dtype; int64 dims[3]; int64 n, int32 code[n]; int64 n, double scalars[n];
// int64 arrays; per array int64 bytes and its bytes.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <vector>

template <class X> static X take(FILE* f) { X x; if (fread(&x, sizeof x, 1, f) != 1) throw 1; return x; }

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 3; }
  FILE* f = fopen(argv[2], "rb");
  if (!f) return 4;
  const int32_t dtype = take<int32_t>(f);
  int64_t dims[3];
  for (auto& d : dims) d = take<int64_t>(f);
  std::vector<int32_t> code(take<int64_t>(f));
  if (fread(code.data(), 4, code.size(), f) != code.size()) return 5;
  std::vector<double> scalars(take<int64_t>(f));
  if (fread(scalars.data(), 8, scalars.size(), f) != scalars.size()) return 5;
  std::vector<std::vector<char>> arrays(take<int64_t>(f));
  std::vector<void*> inputs;
  for (auto& a : arrays) {
    a.resize(take<int64_t>(f) + 64);
    if (fread(a.data(), 1, a.size() - 64, f) != a.size() - 64) return 5;
    inputs.push_back(a.data());
  }
  using Kernel = int (*)(int, void* const*, const int64_t*, const double*);
  using Vm = int (*)(int, const int32_t*, int64_t, void* const*, const int64_t*, const double*);
  if (auto kernel = reinterpret_cast<Kernel>(dlsym(lib, "uo_kernel_run")))
    return kernel(dtype, inputs.data(), dims, scalars.data());
  auto vm = reinterpret_cast<Vm>(dlsym(lib, "uo_vm_run"));
  return vm ? vm(dtype, code.data(), int64_t(code.size()), inputs.data(), dims, scalars.data()) : 6;
}
