// Preloaded (LD_PRELOAD) by ./run: the frameworks' own CPU-feature checks answer as on an
// x86 CPU without AVX-512 (AVX2 and FMA: AMD EPYC before Zen 4, many Intel desktops), so
// their kernels take the code paths such a CPU runs. The rest of the emulation is
// environment variables (./run). Both libraries call these checks through the PLT, so a
// preloaded definition takes their place.

#include <dlfcn.h>

// Paddle (libphi_core.so): phi::backends::cpu::MayIUse(cpu_isa_t). Its enum, from
// paddle/phi/backends/cpu/cpu_info.h: isa_any, sse42, avx, avx2, avx512f, avx512_core,
// avx512_core_vnni, avx512_mic, avx512_mic_4ops, avx512_bf16. Everything from avx512f on
// is refused; the rest is Paddle's own answer. Paddle picks its xbyak JIT kernels
// (Adam, AdamW: FMA code) with MayIUse(avx512f), its plain C++ ones otherwise.
namespace phi {
namespace backends {
namespace cpu {
enum cpu_isa_t { isa_any, sse42, avx, avx2, avx512f };

bool MayIUse(const cpu_isa_t isa) {
  using Real = bool (*)(cpu_isa_t);
  static Real real = reinterpret_cast<Real>(
      dlsym(RTLD_NEXT, "_ZN3phi8backends3cpu7MayIUseENS1_9cpu_isa_tE"));
  if (static_cast<int>(isa) >= static_cast<int>(avx512f)) return false;
  return real != nullptr && real(isa);
}
}  // namespace cpu
}  // namespace backends
}  // namespace phi

// MindSpore (libnnacl.so): the nnacl kernels choose their AVX-512 code with this.
extern "C" bool X86_Avx512_Support(void) { return false; }
