"""The kernels' threads and the background compiler: the VM and a generated kernel run a
parallel phase on the thread count they are handed, with the same bits at every count;
each framework's own optimizer hands them the framework's setting (torch's
``get_num_threads``, Paddle's ``OMP_NUM_THREADS``, MindSpore's ``runtime_num_threads``);
a background build's compiler runs at the lowest CPU priority (nice 19), in a process
group of its own. Counts and priorities read back, not times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import unified_opt as uo
from unified_opt.kernels import build, runtime
from unified_opt.kernels.runtime import Job, KernelRunner

try:
    build.load()
except build.KernelUnavailable as error:           # no C++ compiler on this machine
    pytest.skip(f"the kernel VM cannot be built here: {error}", allow_module_level=True)

#: a conv weight large enough that its phases run on several threads (phases.h's
#: PARALLEL_MIN is 32768 elements)
SHAPE = (96, 64, 3, 3)
SPECS = [uo.AdamW(lr=1e-3, weight_decay=0.01), uo.CAME(lr=1e-3)]


def _steps(runner: KernelRunner, spec, threads: int, steps: int = 3,
           shape=SHAPE, dtype: str = "float32") -> np.ndarray:
    """``steps`` steps of ``spec`` on one parameter at ``threads`` threads; its bytes."""
    rng = np.random.default_rng(7)
    param = rng.standard_normal(shape).astype(dtype)
    state = {k: np.zeros(n, dtype)
             for k, n in runner.state_sizes(spec, shape, dtype).items()}
    for step in range(1, steps + 1):
        grad = rng.standard_normal(shape).astype(dtype)
        arrays = [param, grad, *(state[k] for k in runner.state_order(spec, shape, dtype))]
        runner.step([Job(spec, shape, dtype, 1e-3, step,
                         [a.ctypes.data for a in arrays])], threads=threads)
        assert runtime.threads_in_use(runner.library) == threads
    return np.concatenate([param.ravel(), *state.values()]).tobytes()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_the_vm_runs_on_the_threads_it_is_handed_with_the_same_bits(spec):
    runner = KernelRunner(specialize=False)
    one = _steps(runner, spec, 1)
    for threads in (2, 3):
        assert _steps(runner, spec, threads) == one, threads


@pytest.mark.parametrize("shape", [(7, 19, 300), (41, 269, 3)])
def test_totals_of_several_rows_add_in_the_same_lanes_on_every_thread_count(shape):
    """Adafactor's RMS of the parameter and of its update add in 16 lanes (walk.h): the
    rows' partials for rows of two sum blocks (300 elements), blocks of 16 rows for
    11,029 rows of 3 (not a multiple of 16); running on one thread, kept per row or block
    and landed after the walk on several: the same bits at every count, in float64 (a
    float32 total rounds another order of its doubles to the same float32 almost
    always)."""
    runner = KernelRunner(specialize=False)
    spec = uo.Adafactor(lr=1e-2)
    one = _steps(runner, spec, 1, shape=shape, dtype="float64")
    for threads in (2, 3):
        assert _steps(runner, spec, threads, shape=shape, dtype="float64") == one, threads


def test_a_generated_kernel_follows_the_thread_count_with_the_same_bits():
    runner = KernelRunner(specialize=True)
    spec = SPECS[0]
    one = _steps(runner, spec, 1)
    kernel = runtime._kernels[runner.program(spec, SHAPE, "float32", 1e-3, 3)[1].tobytes()]
    assert kernel.uo_kernel_threads() == 1
    assert _steps(runner, spec, 3) == one
    assert kernel.uo_kernel_threads() == 3


def test_a_thread_count_that_is_not_a_count_is_refused():
    runner = KernelRunner(specialize=False)
    for bad in (2.0, True, "2"):
        with pytest.raises(TypeError, match="threads must be an int"):
            runner.step([], threads=bad)
    with pytest.raises(ValueError, match="threads must be >= 0, got -1"):
        runner.step([], threads=-1)


#: run in a process of its own (one framework per process): an own AdamW step over a
#: parameter of SHAPE, then the VM's thread count; argv: framework, then what to set
_FRAMEWORK_STEP = textwrap.dedent("""
    import json, sys
    import numpy as np
    framework, count = sys.argv[1], int(sys.argv[2])
    import unified_opt as uo
    from unified_opt.kernels import build, runtime
    shape = (96, 64, 3, 3)
    value = np.ones(shape, np.float32)
    if framework == "torch":
        import torch
        torch.set_num_threads(count)
        p = torch.nn.Parameter(torch.from_numpy(value))
        opt = uo.build(uo.AdamW(lr=1e-3), [p], path="own")
        p.grad = torch.ones(shape)
        opt.step()
    elif framework == "paddle":
        import paddle
        p = paddle.create_parameter(shape=list(shape), dtype="float32",
                                    default_initializer=paddle.nn.initializer.Assign(value))
        opt = uo.build(uo.AdamW(lr=1e-3), [p], path="own")
        p.grad = paddle.ones(shape)
        opt.step()
    else:
        import mindspore as ms
        if count:
            ms.set_context(runtime_num_threads=count)
        p = ms.Parameter(ms.Tensor(value), name="w")
        opt = uo.build(uo.AdamW(lr=1e-3), [p], path="own")
        opt((ms.Tensor(np.ones(shape, np.float32)),))
        from unified_opt.backends.mindspore.kernels import drain
        drain()
        count = ms.get_context("runtime_num_threads")
    print(json.dumps({"vm": runtime.threads_in_use(build.load()), "framework": count}))
""")


def _framework_step(framework: str, count: int, **env) -> dict:
    pytest.importorskip(framework)
    out = subprocess.run([sys.executable, "-c", _FRAMEWORK_STEP, framework, str(count)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_torchs_own_optimizer_runs_the_kernels_on_torchs_thread_count():
    # OMP_NUM_THREADS says otherwise: torch.set_num_threads is what torch runs on
    assert _framework_step("torch", 3, OMP_NUM_THREADS="1")["vm"] == 3


@pytest.mark.parametrize("omp", ["3", None])
def test_paddles_own_optimizer_runs_the_kernels_on_paddles_omp_num_threads(omp):
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if omp is not None:
        env["OMP_NUM_THREADS"] = omp
    pytest.importorskip("paddle")
    out = subprocess.run([sys.executable, "-c", _FRAMEWORK_STEP, "paddle", "0"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["vm"] == (3 if omp else 1)     # Paddle sets 1 when it is unset


def test_mindspores_own_optimizer_runs_the_kernels_on_its_runtime_num_threads():
    got = _framework_step("mindspore", 3, OMP_NUM_THREADS="1")
    assert got == {"vm": 3, "framework": 3}


#: a MindSpore process whose kernels are set to one thread through op_tuning.threads_num,
#: and with argv[1] == "both" runtime_num_threads=1 too: two own AdamW steps, then the
#: VM's thread count, the runtime_num_threads it read and the warnings the steps gave
_THREADS_NUM_STEP = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    import mindspore as ms
    ms.device_context.cpu.op_tuning.threads_num(1)
    if sys.argv[1] == "both":
        ms.set_context(runtime_num_threads=1)
    import unified_opt as uo
    from unified_opt.kernels import build, runtime
    from unified_opt.backends.mindspore.kernels import drain
    shape = (96, 64, 3, 3)
    p = ms.Parameter(ms.Tensor(np.ones(shape, np.float32)), name="w")
    opt = uo.build(uo.AdamW(lr=1e-3), [p], path="own")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            opt((ms.Tensor(np.ones(shape, np.float32)),))
            drain()
    print(json.dumps({"vm": runtime.threads_in_use(build.load()),
                      "runtime": ms.get_context("runtime_num_threads"),
                      "warnings": [str(w.message) for w in caught]}))
""")


@pytest.mark.parametrize("setting", ["threads_num", "both"])
def test_mindspores_threads_num_which_cannot_be_read_is_not_followed_silently(setting):
    # MindSpore's kernels follow threads_num, which has no getter: the own path runs on
    # runtime_num_threads and says so once where that was left at its default
    pytest.importorskip("mindspore")
    out = subprocess.run([sys.executable, "-c", _THREADS_NUM_STEP, setting],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if setting == "both":
        assert got == {"vm": 1, "runtime": 1, "warnings": []}
        return
    assert got["vm"] == got["runtime"] == min(30, os.cpu_count() or 1)
    assert len(got["warnings"]) == 1
    assert "op_tuning.threads_num was set" in got["warnings"][0]
    assert f"runtime_num_threads={got['runtime']}" in got["warnings"][0]


#: benchmarks/harness.py's MindSpore process at argv[1] threads: an own AdamW step, then
#: the VM's thread count
_HARNESS_STEP = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    sys.path.insert(0, str(Path(sys.argv[2]) / "benchmarks"))
    from harness import Harness
    harness = Harness("mindspore", int(sys.argv[1]))
    import numpy as np
    import mindspore as ms
    import unified_opt as uo
    from unified_opt.kernels import build, runtime
    shape = (96, 64, 3, 3)
    p = ms.Parameter(ms.Tensor(np.ones(shape, np.float32)), name="w")
    opt = uo.build(uo.AdamW(lr=1e-3), [p], path="own")
    harness.step(opt, (ms.Tensor(np.ones(shape, np.float32)),))
    print(json.dumps({"vm": runtime.threads_in_use(build.load())}))
""")


def test_the_benchmarks_measure_mindspores_own_path_on_the_threads_they_name():
    # the harness once set MindSpore's op_tuning.threads_num only, which MindSpore's
    # runtime_num_threads does not follow: its "one thread" rows ran the kernels on two
    pytest.importorskip("mindspore")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", _HARNESS_STEP, "5", str(root)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"vm": 5}


def _stat_fields(text: str) -> list[str]:
    """The fields of a /proc/<pid>/stat line after the command's name (state first)."""
    return text.rsplit(")", 1)[1].split()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("lowest", [True, False])
def test_a_background_compiler_and_what_it_starts_run_at_nice_19(lowest):
    # the command's child reports its own nice (field 19) and process group (field 5)
    command = ["/bin/sh", "-c", "cat /proc/self/stat >&2"]
    status, stderr = build._run_compiler(command, dict(os.environ), lowest)
    assert status == 0, stderr
    fields = _stat_fields(stderr)
    nice, group = int(fields[16]), int(fields[2])
    assert nice == (19 if lowest else os.getpriority(os.PRIO_PROCESS, 0))
    assert group != os.getpgrp()                # a process group of its own


def test_the_background_compile_asks_for_the_lowest_priority(monkeypatch):
    asked = []

    def load_kernel(source, march=build.MARCH, lowest_priority=False):
        asked.append(lowest_priority)
        raise build.KernelUnavailable("stand-in")

    monkeypatch.setattr(build, "load_kernel", load_kernel)
    code = KernelRunner(specialize=False).program(SPECS[0], SHAPE, "float32", 1e-3, 1)[1]
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        runtime._compile(build.load(), b"test", code, "adamw")   # the background thread's
    assert asked == [True]
