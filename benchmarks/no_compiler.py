"""The CPU fast path where no C++ compiler is installed: the options, measured.

    python benchmarks/no_compiler.py [--size 4096] [--rounds 9] [--cold]
                                     [--out benchmarks/results]

One float32 parameter of ``--size``² and its state (numpy arrays), fresh random gradients
every step (three draws in turn), every algorithm of ``algorithm_step_time.py``'s
table. In one process, the options' steps interleaved round after round (load from other
processes falls on all alike), the median of ``--rounds``:

* ``system``: the fast path as it is with a system compiler: each program's generated
  kernel (``codegen.py``) built by ``c++ -march=native`` with OpenMP;
* ``zig``: the same kernels built by the clang of the ``ziglang`` package (no system
  compiler; no OpenMP runtime there: std::thread, ``phases.h``);
* ``vm-x86-64-v3`` / ``vm-x86-64-v2``: the kernel VM alone compiled for a fixed CPU
  level, what a wheel could carry prebuilt (gcc, OpenMP): no per-program kernels;
* ``numba``: a prototype generating numba code from the same :class:`KernelPlan`
  (elementwise one-phase programs only: Adam, AdamW, Lion; ``parallel=True``, no
  fastmath), where numba is importable.

Also: which compiler a process with no ``c++``, ``g++`` or ``cc`` on PATH picks, and
its step time through the public path (:class:`KernelRunner`, ``specialize=True``);
compile times; with ``--cold``, zig's first build on a machine (its C++ runtime, once);
the packages' installed sizes. Writes ``OUT/no_compiler.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from unified_opt.files import write_text

SPECS = {"adam": "Adam(lr=1e-3)", "adamw": "AdamW(lr=1e-3, weight_decay=0.01)",
         "came": "CAME(lr=1e-4)", "lamb": "Lamb(lr=1e-3, weight_decay=0.01)",
         "lars": "LARS(lr=0.1, weight_decay=1e-4)", "lion": "Lion(lr=1e-4)",
         "adafactor": "Adafactor(lr=1e-3)"}            # algorithm_step_time.ALGORITHMS
#: the no-compiler path's step over the system compiler's, at most (issue 21)
TARGET = 1.5


def numba_source(scheduled) -> str | None:
    """Prototype: numba code of a one-phase elementwise program (None for another)."""
    from unified_opt.kernels.bytecode import OPCODES, OPERAND_KINDS

    names = {v: k for k, v in OPCODES.items()}
    if len(scheduled.phases) != 1:
        return None
    domain, instructions = scheduled.phases[0]
    if any(m != domain for m in scheduled.masks) or any(
            names[i.op] in ("sum", "topk") for i in instructions):
        return None
    arrays = ", ".join(f"A{k}" for k in range(len(scheduled.masks)))
    head = [f"def kernel({arrays}, S, n):"]
    body, regs = [], {}

    def operand(kind, k):
        if kind == OPERAND_KINDS["register"]:
            return regs[k]
        if kind == OPERAND_KINDS["scalar"]:
            head.append(f"    s{k} = np.float32(S[{k}])")
            return f"s{k}"
        if kind == OPERAND_KINDS["array"]:
            return f"A{k}[i]"
        raise NotImplementedError(kind)

    binary = {"add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}",
              "div": "{a} / {b}", "gt": "np.float32({a} > {b})",
              "lt": "np.float32({a} < {b})"}
    for count, ins in enumerate(instructions):
        op = names[ins.op]
        a = operand(ins.a_kind, ins.a)
        if op == "store":
            body.append(f"        A{ins.dst}[i] = {a}")
            continue
        v = f"v{count}"
        if op in binary:
            body.append(f"        {v} = " + binary[op].format(a=a, b=operand(ins.b_kind, ins.b)))
        elif op == "sqrt":
            body.append(f"        {v} = np.sqrt({a})")
        elif op == "neg":
            body.append(f"        {v} = -{a}")
        elif op == "sign":
            body += [f"        {v} = np.float32(1.0) if {a} > 0 else {a}",
                     f"        {v} = np.float32(-1.0) if {a} < 0 else {v}"]
        else:
            return None
        regs[ins.dst] = v
    return "\n".join(["import numpy as np", "import numba", "",
                      "@numba.njit(parallel=True, error_model='numpy', fastmath=False)"]
                     + list(dict.fromkeys(head)) + ["    for i in numba.prange(n):"] + body)


def _installed_mb(module: str) -> float | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0])
    return round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20)


def measure(size: int, rounds: int) -> dict:
    import unified_opt as uo
    from unified_opt.expressions import parse_spec
    from unified_opt.kernels import build
    from unified_opt.kernels.bytecode import decode
    from unified_opt.kernels.codegen import kernel_source
    from unified_opt.kernels.runtime import Programs
    from unified_opt.kernels.trace import canonical_dims

    del uo
    shape, programs = (size, size), Programs()
    rng = np.random.default_rng(0)
    pool = [rng.standard_normal(shape, dtype=np.float32) for _ in range(3)]
    dims = np.asarray(canonical_dims(shape), np.int64)
    vm_source = build.SOURCE.read_text()
    has_numba = importlib.util.find_spec("numba") is not None
    rows = []
    for name, expression in SPECS.items():
        spec = parse_spec(expression)
        code, scalars = programs.code_and_scalars(spec, shape, "float32", 1e-3, 5)
        source, engines, compile_s = kernel_source(code), {}, {}

        def timed(label, make):
            t0 = time.perf_counter()
            engines[label] = make()
            compile_s[label] = round(time.perf_counter() - t0, 2)

        def kernel_of(compiler):
            build._compiler = lambda: compiler        # this process only
            library = build.load_kernel(source)
            return lambda a: library.uo_kernel_run(0, a, dims.ctypes.data,
                                                   scalars.ctypes.data)

        system, zig = build._compiler(), build.zig_compiler()
        timed("system", lambda: kernel_of(system))
        if importlib.util.find_spec("ziglang") is not None:
            timed("zig", lambda: kernel_of(zig))
        build._compiler = lambda: system
        for level in ("x86-64-v3", "x86-64-v2"):
            def vm(level=level):
                library = build._bind(ctypes.CDLL(str(build.compiled(vm_source, "uo_vm",
                                                                     level))))
                return lambda a: library.uo_vm_run(0, code.ctypes.data, code.size, a,
                                                   dims.ctypes.data, scalars.ctypes.data)
            timed(f"vm-{level}", vm)
        generated = numba_source(decode(code)) if has_numba else None
        if generated is not None:
            def numba_kernel():
                namespace: dict = {}
                exec(compile(generated, f"<numba {name}>", "exec"), namespace)
                n_arrays = len(decode(code).masks)
                warm = _arrays(programs, spec, shape, pool[0])      # kept while it runs

                def run(a):
                    views = [np.ctypeslib.as_array(ctypes.cast(a[k], ctypes.POINTER(
                        ctypes.c_float)), (size * size,)) for k in range(n_arrays)]
                    namespace["kernel"](*views, scalars, size * size)
                run(warm[0])
                return run
            timed("numba", numba_kernel)
        arrays = {label: _arrays(programs, spec, shape, pool[0]) for label in engines}
        times: dict = {label: [] for label in engines}
        for round_ in range(rounds + 1):
            for label, run in engines.items():
                addresses, keep = arrays[label]
                addresses[1] = pool[round_ % 3].ctypes.data
                t0 = time.perf_counter()
                run(addresses)
                if round_:
                    times[label].append((time.perf_counter() - t0) * 1e3)
        ms = {label: round(statistics.median(t), 2) for label, t in times.items()}
        # the same steps on the same gradients: the same bits as the system's kernel?
        same = {label: all(a.tobytes() == b.tobytes() for a, b in
                           zip(arrays[label][1], arrays["system"][1]))
                for label in engines}
        rows.append({"algorithm": name, "ms": ms, "compile_s": compile_s,
                     "over_system": {k: round(v / ms["system"], 2) for k, v in ms.items()},
                     "same_bits": same})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {"rows": rows}


def _arrays(programs, spec, shape, grad):
    """Addresses (a ctypes array: parameter, gradient, state) and the arrays kept."""
    rng = np.random.default_rng(1)
    sizes = programs.state_sizes(spec, shape, "float32")
    arrays = [rng.standard_normal(shape, dtype=np.float32), grad] + [
        np.full(sizes[k], 0.01, np.float32) for k in programs.state_order(spec, shape,
                                                                          "float32")]
    return (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays]), arrays


_PUBLIC = """
import json, os, statistics, sys, time
import numpy as np
from unified_opt.expressions import parse_spec
from unified_opt.kernels import build
from unified_opt.kernels.runtime import KernelRunner, run_numpy
from unified_opt.ops import numpy_ops
size, rounds = int(sys.argv[1]), int(sys.argv[2])
t0 = time.perf_counter()
runner = KernelRunner(specialize=True)
# the compiler's command with program paths as bare names (no machine's folders in results)
out = {"compiler": " ".join(os.path.basename(c) for c in build._compiler()),
       "vm_s": round(time.perf_counter() - t0, 2), "ms": {}}
rng = np.random.default_rng(0)
pool = [rng.standard_normal((size, size), dtype=np.float32) for _ in range(3)]
for name, expression in json.loads(sys.argv[3]).items():
    spec = parse_spec(expression)
    p = rng.standard_normal((size, size), dtype=np.float32)
    state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
    times = []
    for step in range(1, rounds + 3):
        t0 = time.perf_counter()
        run_numpy(runner, spec, p, pool[step % 3], state, lr=1e-3, step=step)
        times.append((time.perf_counter() - t0) * 1e3)
    out["ms"][name] = round(statistics.median(times[2:]), 2)
print(json.dumps(out))
"""


def public(size: int, rounds: int, no_compiler: bool) -> dict:
    """The public path in a process of its own; with ``no_compiler``, PATH holds no
    c++, g++ or cc (an empty folder)."""
    with tempfile.TemporaryDirectory() as empty:
        env = dict(os.environ)
        if no_compiler:
            env["PATH"] = empty
            env.pop("CXX", None)
        done = subprocess.run([sys.executable, "-c", _PUBLIC, str(size), str(rounds),
                               json.dumps(SPECS)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def cold_zig_seconds() -> float | None:
    """zig's first build of the VM on a machine: its C++ runtime built into an empty
    zig cache, then the VM."""
    if importlib.util.find_spec("ziglang") is None:
        return None
    from unified_opt.kernels import build

    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, ZIG_GLOBAL_CACHE_DIR=f"{folder}/zig",
                   ZIG_LOCAL_CACHE_DIR=f"{folder}/local")
        t0 = time.perf_counter()
        subprocess.run([*build.zig_compiler(), *build.flags(openmp=False),
                        f"-I{build.HEADER.parent}", "-o", f"{folder}/vm.so",
                        str(build.SOURCE)], env=env, check=True, capture_output=True)
        return round(time.perf_counter() - t0, 1)


def markdown(result: dict) -> str:
    labels = list(result["rows"][0]["ms"])
    lines = [f"One {result['size']}² float32 parameter, fresh random gradients, median ms "
             f"per step (× the system compiler's kernels); options interleaved in one "
             f"process.", "",
             "| algorithm | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for r in result["rows"]:
        lines.append(f"| {r['algorithm']} | " + " | ".join(
            f"{r['ms'][k]} ({r['over_system'][k]}×)"
            f"{'' if r['same_bits'][k] else ', other bits'}" if k in r["ms"] else "—"
            for k in labels) + " |")
    lines += ["", "Compile seconds (first build of each program's library, warm tool caches):",
              "", "| algorithm | " + " | ".join(labels) + " |",
              "|---|" + "---|" * len(labels)]
    for r in result["rows"]:
        lines.append(f"| {r['algorithm']} | " + " | ".join(
            str(r["compile_s"].get(k, "—")) for k in labels) + " |")
    pub = result["public"]
    lines += ["", "The public path (`KernelRunner(specialize=True)`, a process of its own):", "",
              "| | compiler | " + " | ".join(SPECS) + " |", "|---|---|" + "---|" * len(SPECS)]
    for label in ("system", "no compiler on PATH"):
        run = pub[label]
        lines.append(f"| {label} | {run.get('compiler', run.get('error', ''))} | " + " | ".join(
            str(run.get("ms", {}).get(k, "")) for k in SPECS) + " |")
    ratios = result["zig_over_system"]
    lines += ["", f"The kernels without a system compiler (zig) over the system compiler's, "
              f"interleaved: {', '.join(f'{k} {v}' for k, v in ratios.items())}; the largest "
              f"{max(ratios.values())}, target ≤ {TARGET}: {result['met']}. Public path, "
              f"no compiler on PATH over the system compiler (separate processes, so "
              f"noisier): {result['no_compiler_over_system']}.", "",
              f"Load average while it ran: {result['load']}.", "",
              f"Installed sizes MB: {result['installed_mb']}. zig's first build on a "
              f"machine (its C++ runtime, then the VM): {result['cold_zig_s']} s."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    result = {"size": args.size, **measure(args.size, args.rounds)}
    result["public"] = {"system": public(args.size, args.rounds, False),
                        "no compiler on PATH": public(args.size, args.rounds, True)}
    system, none = (result["public"][k].get("ms", {}) for k in ("system",
                                                                "no compiler on PATH"))
    result["no_compiler_over_system"] = {k: round(none[k] / system[k], 2) for k in system
                                         if k in none}
    result["zig_over_system"] = {r["algorithm"]: r["over_system"]["zig"]
                                 for r in result["rows"] if "zig" in r["over_system"]}
    result["met"] = ("met" if result["zig_over_system"] and
                     max(result["zig_over_system"].values()) <= TARGET else "missed")
    result["load"] = [round(x, 1) for x in os.getloadavg()]
    result["installed_mb"] = {m: _installed_mb(m) for m in ("ziglang", "numba", "llvmlite")}
    result["cold_zig_s"] = cold_zig_seconds() if args.cold else None
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "no_compiler.json", json.dumps(result, indent=1) + "\n")
    write_text(args.out / "no_compiler.md", markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
