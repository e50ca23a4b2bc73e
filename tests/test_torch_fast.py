"""torch's fast paths. The own path compiled: on CPU tensors the kernel VM and its
generated kernels (``options={"compile": "auto"|True}``, ``backends/torch/kernels.py``),
and ``torch.compile``'s Inductor kernels (``{"compile": "inductor"}``, the path of CUDA
tensors, ``backends/torch/compiled.py``): the algorithms torch has no native class for
follow the float64 oracle within the conformance noise floor on the standard parameter
set (kernel sizes 1 to 4225, 1-D to 3-D, a 0-size tensor) and the adversarial gradient
stream, including an lr schedule (symbolic for Inductor: no recompile per step). The VM
and the generated kernels give the same bits; Inductor's "auto" rule's switch step;
refusals and fallbacks. The native classes with a fused kernel run it by default (the
conformance suite runs them so); options that choose an implementation keep theirs."""

import warnings

import numpy as np
import pytest
from support import UntraceableSGD, judge

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.trajectory import Recorder
from unified_opt.schedules import Cosine

torch = pytest.importorskip("torch")
from torch._dynamo.utils import counters  # noqa: E402

from unified_opt.conformance.drivers.torch import TorchDriver  # noqa: E402

COSINE = Cosine(lr=0.02, T_max=50, eta_min=0.001)
#: specs torch runs by the own implementation only (and Adam with eps_hat, own there too)
SPECS = {
    "came": uo.CAME(lr=COSINE, weight_decay=0.01),
    "lamb": uo.Lamb(lr=0.01, weight_decay=0.01),
    "lars": uo.LARS(lr=0.1, weight_decay=1e-3),
    "lion": uo.Lion(lr=COSINE, weight_decay=0.1),
    "adafactor": uo.Adafactor(lr=0.01),
    "adam_eps_hat": uo.Adam(lr=COSINE, eps=1e-3, eps_placement="eps_hat"),
}


def _run(spec, compile_mode):
    case = Case(id=f"compiled_{spec.name}", spec=spec, steps=50)
    driver = TorchDriver(spec, case.initial_params(), path="own",
                         options={"compile": compile_mode})
    assert driver.decision.path == "own"
    recorder = Recorder()
    for t in range(case.steps):
        lr = driver.step(case.gradients(t))
        recorder.add(lr, driver.params_numpy(), driver.state_numpy())
    return case, driver, recorder.trajectory()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_inductor_update_follows_the_oracle(name):
    graphs = counters["stats"]["unique_graphs"]
    case, driver, trajectory = _run(SPECS[name], "inductor")
    result = judge(trajectory, case)
    assert result.passed, f"{name} compiled: {result.detail}"
    assert driver.optimizer._engines(0, SPECS[name])[0].name == "inductor"
    assert counters["stats"]["unique_graphs"] > graphs      # Dynamo did compile it


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_update_on_generated_kernels_follows_the_oracle(name):
    from unified_opt.kernels import runtime

    before = len(runtime._kernels)
    case, driver, trajectory = _run(SPECS[name], True)
    result = judge(trajectory, case)
    assert result.passed, f"{name} on kernels: {result.detail}"
    assert driver.optimizer._kernels._runner._codes           # it ran on the VM's code
    assert len(runtime._kernels) > before or name == "lion"   # and compiled its kernels


def test_the_vm_and_the_generated_kernels_give_the_same_bits():
    """"auto" runs the conformance parameters (4225 elements at most) on the VM; True on
    generated kernels: the same bits, every step."""
    for name in ("came", "lamb", "adam_eps_hat"):
        _, _, vm = _run(SPECS[name], "auto")
        _, _, kernels = _run(SPECS[name], True)
        for key, values in vm.quantities().items():
            assert values.tobytes() == kernels.quantities()[key].tobytes(), (name, key)


def test_compiled_and_eager_are_the_same_update():
    """The control: the same run eager passes too; the compiled and VM runs differ from
    it only by rounding (Inductor's and the VM's kernels order and fuse operations their
    own way), so all three pass the conformance rule on the same case."""
    case, _, compiled_run = _run(SPECS["lamb"], "inductor")
    _, _, vm_run = _run(SPECS["lamb"], "auto")
    _, _, eager_run = _run(SPECS["lamb"], False)
    for way, run in (("eager", eager_run), ("inductor", compiled_run), ("vm", vm_run)):
        comparison = judge(run, case)
        assert comparison.passed, f"{way}: {comparison.detail}"


def test_an_update_that_does_not_trace_runs_eagerly():
    """The own optimizer runs an update that does not trace eagerly, and keeps the VM
    for the ones that do (DGC's top-k selection traces)."""
    params = [torch.nn.Parameter(torch.ones(4, 4))]
    optimizer = uo.build(UntraceableSGD(lr=0.5), params, path="own")
    params[0].grad = torch.full((4, 4), 2.0)
    optimizer.step()
    assert torch.equal(params[0].detach(), torch.zeros(4, 4))
    assert optimizer._kernels._untraceable
    spec = uo.DGCMomentum(lr=0.05, rampup_begin_step=2, sparsity=(0.9,), min_numel=1)
    case = Case(id="dgc_vm", spec=spec, steps=50)
    driver = TorchDriver(spec, case.initial_params(), path="own")
    recorder = Recorder()
    for t in range(case.steps):
        recorder.add(driver.step(case.gradients(t)), driver.params_numpy(),
                     driver.state_numpy())
    assert judge(recorder.trajectory(), case).passed
    assert not driver.optimizer._kernels._untraceable


def test_each_compile_option_picks_its_engines():
    """CPU: "auto"/True the kernel VM, "inductor" Inductor, False eagerly; each list ends
    with the eager update, which runs anything."""
    p = torch.nn.Parameter(torch.zeros(4, 4))
    for mode, first in (("auto", "vm"), (True, "vm"), ("inductor", "inductor"),
                        (False, "eager")):
        engines = uo.build(uo.CAME(), [p], options={"compile": mode})._engines(0, uo.CAME())
        assert engines[0].name == first and engines[-1].name == "eager", mode


def test_bad_compile_options_are_refused_before_anything_is_built():
    p = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match=r"options compile must be one of \('auto', True, "
                                         r"False, 'inductor'\), got 'yes'"):
        uo.build(uo.CAME(), [p], options={"compile": "yes"})
    with pytest.raises(TypeError, match="got 1 of type int"):
        uo.build(uo.CAME(), [p], options={"compile": 1})
    with pytest.raises(ValueError, match=r"compile=True is for the own implementation; this "
                                         r"spec runs natively \(torch.optim.AdamW\)"):
        uo.build(uo.AdamW(), [p], options={"compile": True})


def test_native_classes_with_a_fused_kernel_run_it_and_explain_says_so():
    p = [torch.nn.Parameter(torch.zeros(3))]
    for spec, name in [(uo.AdamW(), "AdamW"), (uo.Adam(), "Adam"),
                       (uo.SGD(lr=0.1, momentum=0.9), "SGD"), (uo.Adagrad(), "Adagrad")]:
        optimizer = uo.build(spec, p)
        assert type(optimizer).__name__ == name and optimizer.defaults["fused"] is True
        assert f"torch.optim.{name} runs its fused kernel (fused=True" in \
            uo.explain(optimizer).reason
    assert uo.build(uo.NAdam(), p).defaults.get("fused") is None      # no fused NAdam


def test_options_that_choose_an_implementation_keep_it():
    p = [torch.nn.Parameter(torch.zeros(3))]
    for options in ({"foreach": False}, {"foreach": True}, {"fused": False}):
        optimizer = uo.build(uo.AdamW(), p, options=options)
        assert not optimizer.defaults["fused"]
        assert "fused kernel" not in uo.explain(optimizer).reason
    doubles = [torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))]
    assert uo.build(uo.AdamW(), doubles).defaults["fused"] is True


def test_the_fused_kernel_follows_the_for_loop_within_rounding():
    """The control for the default: AdamW fused and for-loop on the same gradients both
    follow the oracle by the conformance rule (the fused kernel's vector code rounds by
    the CPU's vector width and FMA; no fixed margin between the two holds on every
    CPU)."""
    spec = uo.AdamW(lr=1e-2, weight_decay=0.1)
    case = Case(id="fused_adamw", spec=spec, params={"w": (65, 65)}, steps=50)
    for options in ({}, {"foreach": False}):
        driver = TorchDriver(spec, case.initial_params(), path="auto", options=options)
        assert bool(driver.optimizer.defaults["fused"]) == (not options)
        recorder = Recorder()
        for t in range(case.steps):
            lr = driver.step(case.gradients(t))
            recorder.add(lr, driver.params_numpy(), driver.state_numpy())
        comparison = judge(recorder.trajectory(), case)
        assert comparison.passed, f"{options}: {comparison.detail}"


def test_the_topk_mask_selects_what_the_numpy_binding_selects():
    """DGC's top-k on torch takes the k-th largest value and fills ties up to k by the
    lowest index (no full sort); on ties, infinities, NaN and every k it selects the
    elements numpy's stable sort selects."""
    from unified_opt.backends.torch.ops import torch_ops
    from unified_opt.ops import numpy_ops

    rng = np.random.default_rng(0)
    levels = np.array([0.0, 1.0, 2.0, 3.5, np.inf, np.nan])
    for trial in range(400):
        n = int(rng.integers(1, 120))
        a = (rng.choice(levels[:5 + trial % 2], size=n) if trial % 3 else
             rng.standard_normal(n)).astype(np.float32)
        for k in (0, 1, int(rng.integers(0, n + 1)), n - 1, n):
            expected = numpy_ops.topk_mask(a, k)
            got = torch_ops.topk_mask(torch.from_numpy(a), k).numpy()
            if np.isnan(a).any():      # torch's sort puts NaN first, numpy's last
                assert got.sum() == expected.sum() == max(0, min(k, n))
                continue
            np.testing.assert_array_equal(got, expected, err_msg=f"{a} k={k}")


def test_inductor_raises_where_it_cannot_compile(monkeypatch):
    """No C++ compiler (planted: Inductor's CPU compile raises): "inductor" raises the
    compiler's error at the step, nothing changed."""
    from torch._dynamo.exc import BackendCompilerFailed

    def failing(spec):
        def kernel(*args):
            raise BackendCompilerFailed(lambda *a: None, RuntimeError("no C++ compiler"),
                                        None)
        return kernel

    monkeypatch.setattr("unified_opt.backends.torch.engines.kernel", failing)
    p = torch.nn.Parameter(torch.zeros(3))
    strict = uo.build(SPECS["lion"], [p], options={"compile": "inductor"})
    p.grad = torch.ones(3)
    with pytest.raises(BackendCompilerFailed):
        strict.step()
    assert torch.equal(p.detach(), torch.zeros(3))


def test_auto_runs_eagerly_after_a_warning_where_the_kernel_vm_cannot_be_built(monkeypatch):
    """No C++ compiler for the VM (planted): "auto" warns once (at the build, where the
    VM is loaded) and steps eagerly with the numbers of compile=False; compile=True
    raises at build, naming the compiler."""
    from unified_opt.kernels import build

    def unavailable(*args, **kwargs):
        raise build.KernelUnavailable("no C++ compiler: 'c++' is not on PATH (set CXX)")

    monkeypatch.setattr("unified_opt.kernels.runtime.KernelRunner", unavailable)
    case = Case(id="no_vm", spec=SPECS["lamb"], steps=50)
    grads = [case.gradients(t) for t in range(3)]
    finals = []
    for mode in (False, "auto"):
        params = {n: torch.nn.Parameter(torch.from_numpy(a))
                  for n, a in case.initial_params().items()}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")      # (the build looks for the VM)
            optimizer = uo.build(case.spec, list(params.items()), options={"compile": mode})
            for g in grads:
                for n, p in params.items():
                    p.grad = torch.from_numpy(g[n])
                optimizer.step()
        finals.append({n: p.detach().clone() for n, p in params.items()})
        assert len(caught) == (1 if mode == "auto" else 0)
    assert "compile='auto' found no kernel VM (no C++ compiler" in str(caught[0].message)
    for name in finals[0]:
        assert torch.equal(finals[0][name], finals[1][name])
    with pytest.raises(build.KernelUnavailable, match=r"no C\+\+ compiler"):
        uo.build(case.spec, [torch.nn.Parameter(torch.zeros(3))], options={"compile": True})


@pytest.mark.parametrize("spec", [uo.CAME(lr=1e-3), uo.Adafactor(lr=1e-3), uo.Lamb()],
                         ids=["came", "adafactor", "lamb"])
def test_a_state_of_another_shape_is_refused_before_the_vm_writes(spec):
    """torch's load_state_dict checks no shapes: the own optimizer's load refuses a state
    of another model, and the VM (which walks the parameter's dims) a state written by
    hand."""
    p = torch.nn.Parameter(torch.randn(5, 6, 7))
    opt = uo.build(spec, [p], path="own")
    p.grad = torch.randn_like(p)
    opt.step()
    q = torch.nn.Parameter(torch.randn(5, 6, 8))
    other = uo.build(spec, [q], path="own")
    with pytest.raises(ValueError, match=r"load_state_dict: the state of parameter 0 "
                                         r"\[5, 6, 8\]: '\w+' is \[5, \d, 7\], it keeps "
                                         r"\[5, \d, 8\]"):
        other.load_state_dict(torch.optim.Optimizer.state_dict(opt))    # torch's form
    assert not other.state
    other.state[q] = {k: v.clone() for k, v in opt.state[p].items()}     # by hand
    q.grad = torch.randn_like(q)
    before = q.detach().clone()
    with pytest.raises(ValueError, match=r"of a parameter of shape \[5, 6, 8\] has shape"):
        other.step()
    assert torch.equal(q.detach(), before)


def test_a_parameter_saved_for_backward_and_stepped_on_the_vm_makes_backward_raise():
    """As after torch's own in-place step: autograd sees the VM's write."""
    p = torch.nn.Parameter(torch.ones(4, 4))
    opt = uo.build(uo.Lion(lr=0.1), [p])
    loss = (p * p).sum()                         # saves p for backward
    p.grad = torch.ones(4, 4)
    opt.step()
    assert not torch.equal(p.detach(), torch.ones(4, 4))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_compile_true_refuses_at_build_what_would_run_eagerly():
    """compile=True promises the kernels: an update that does not trace, a dtype the VM
    does not run and a non-contiguous parameter are refused before any step."""
    for spec, p, phrase in [
            (UntraceableSGD(lr=0.5), torch.nn.Parameter(torch.ones(4, 4)), "truth value"),
            (uo.Lion(), torch.nn.Parameter(torch.ones(4, 4, dtype=torch.float16)),
             "dtype float16"),
            (uo.Lion(), torch.nn.Parameter(torch.ones(4, 4).t()), "not contiguous")]:
        with pytest.raises(ValueError, match=r"options compile=True, but the \w+ update of "
                                             rf"parameter 0 \[4, 4\] cannot run on the "
                                             rf"kernels: .*{phrase}"):
            uo.build(spec, [p], path="own", options={"compile": True})
        uo.build(spec, [p], path="own")            # "auto": eagerly
