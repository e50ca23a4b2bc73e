"""The torch native rows on CUDA (issue 20, "Conformance on CUDA"): the two failure
classes measured on an H200, and their causes.

* ``uo.build`` must not give ``torch.optim.Adagrad`` ``fused=True`` off the CPU (its
  fused kernel is CPU-only up to torch 2.11): the decision is tested here on the CPU with
  a build context that names a CUDA device.
* The gradient pre-step (clips, loss scale, skip_nonfinite, centralisation) wrote
  gradients in torch's default layout into ``p.grad``; a parameter with other strides
  (a zero-size dimension from ``torch.from_numpy``: stride 0, as the conformance
  parameters have) then had a gradient the CUDA fused kernels refuse. The CPU test
  checks that every gradient the native step sees has its parameter's dtype, device,
  layout and strides.
* torch's fused CPU kernels pair a parameter, its gradient and its state by memory
  order: a gradient or a loaded state laid out unlike its parameter, or a parameter
  with gaps, gave other numbers without an error. The CPU tests check the step and load
  hooks' answer to each.
* On CUDA (skipped without it): each fused class with each pre-step, on the conformance
  parameters, passes the conformance rule against the float64 oracle, as on the CPU.
"""

import inspect

import numpy as np
import pytest
from conftest import require

pytestmark = require("torch")
torch = pytest.importorskip("torch")

import unified_opt as uo  # noqa: E402
from unified_opt.backend import Context  # noqa: E402
from unified_opt.backends.torch import BACKEND  # noqa: E402
from unified_opt.backends.torch.native import fast_flags  # noqa: E402
from unified_opt.backends.torch.steps import laid_out_like, same_strides  # noqa: E402
from unified_opt.clipping import ClipByGlobalNorm, ClipByNorm, ClipByValue  # noqa: E402
from unified_opt.conformance.cases import PARAMS, Case  # noqa: E402
from unified_opt.conformance.device import place  # noqa: E402
from unified_opt.conformance.drivers.torch import TorchDriver  # noqa: E402
from unified_opt.conformance.verdict import References, verdict  # noqa: E402
from unified_opt.conformance.worker import drive, start  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

#: the classes uo.build gives a fused kernel (on the CPU), by the spec that lowers to each
FUSED_SPECS = {
    "SGD": uo.SGD(lr=0.05, momentum=0.9, weight_decay=0.05),
    "Adam": uo.Adam(lr=0.01, eps=1e-3, weight_decay=0.05),
    "AdamW": uo.AdamW(lr=0.01, eps=1e-3, weight_decay=0.1),
    "Adagrad": uo.Adagrad(lr=0.05, weight_decay=0.01),
}
#: each gradient pre-step, as spec fields
PRE_STEPS = {
    "clip_value": {"grad_clip": ClipByValue(max=0.5)},
    "clip_norm": {"grad_clip": ClipByNorm(max_norm=2.0)},
    "clip_global_norm": {"grad_clip": ClipByGlobalNorm(max_norm=1.0)},
    "loss_scale": {"loss_scale": 1024.0},
    "skip_nonfinite": {"loss_scale": 1024.0, "skip_nonfinite": True},
    "centralization": {"grad_centralization": True},
}
#: steps with a planted NaN/Inf in the skip_nonfinite case (two in a row), as the suite's
SKIPS = (3, 17, 18, 31)


def _context(device: str, **kw) -> Context:
    return Context(plans=(), dtypes=("float32",), device=device, **kw)


# -- the decision ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "Adagrad"])
def test_fused_on_the_cpu_for_every_fused_class(name):
    assert fast_flags(getattr(torch.optim, name), _context("cpu")) == {"fused": True}


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_fused_on_cuda_for_sgd_and_the_adam_family(name):
    assert fast_flags(getattr(torch.optim, name), _context("cuda")) == {"fused": True}


@pytest.mark.parametrize("device", ["cuda", "cpu,cuda", "npu", "mps", "meta"])
def test_fused_adagrad_is_never_chosen_off_the_cpu(device):
    assert fast_flags(torch.optim.Adagrad, _context(device)) == {}


def test_no_fused_where_the_options_choose_or_the_dtype_or_sharding_rule_it_out():
    assert fast_flags(torch.optim.Adam, _context("cuda", options={"foreach": True})) == {}
    assert fast_flags(torch.optim.Adam, _context("cuda", options={"fused": False})) == {}
    assert fast_flags(torch.optim.Adam, Context(plans=(), dtypes=("int64",),
                                                device="cuda")) == {}
    assert fast_flags(torch.optim.Adam, _context("cuda", sharded=("w",))) == {}
    assert fast_flags(torch.optim.RMSprop, _context("cuda")) == {}    # has no fused kernel


def test_explain_says_adagrad_runs_without_fused_on_cuda():
    spec = FUSED_SPECS["Adagrad"]
    decision = uo.explain(spec, backend="torch")
    on_cuda = BACKEND.notes(decision, spec, _context("cuda"))
    on_cpu = BACKEND.notes(decision, spec, _context("cpu"))
    assert on_cuda == ("torch.optim.Adagrad runs without fused=True on cuda: uo.build "
                       "takes its fused kernel on ('cpu',) only")
    assert on_cpu.startswith("torch.optim.Adagrad runs its fused kernel (fused=True")


# -- the layout of the prepared gradients -----------------------------------------------

def _odd_layout_params():
    """Parameters whose strides are not torch's defaults: a zero-size one from numpy
    (stride 0, as the conformance driver makes them), a transposed one, a plain one."""
    rng = np.random.default_rng(0)
    return [("empty", torch.nn.Parameter(torch.from_numpy(np.zeros((0,), np.float32)))),
            ("empty2d", torch.nn.Parameter(torch.from_numpy(np.zeros((0, 3), np.float32)))),
            ("wt", torch.nn.Parameter(torch.from_numpy(
                rng.standard_normal((6, 5)).astype(np.float32)).t())),
            ("w", torch.nn.Parameter(torch.from_numpy(
                rng.standard_normal((4, 3)).astype(np.float32))))]


def test_odd_layout_params_have_other_strides_than_fresh_tensors():
    params = dict(_odd_layout_params())
    assert params["empty"].stride() == (0,) and (params["empty"] * 2).stride() == (1,)
    assert params["empty2d"].stride() == (0, 0)
    assert params["wt"].stride() == (1, 5)


@pytest.mark.parametrize("pre_step", sorted(PRE_STEPS))
@pytest.mark.parametrize("name", sorted(FUSED_SPECS))
def test_prepared_gradients_keep_the_parameters_dtype_device_layout_and_strides(name,
                                                                                pre_step):
    named = _odd_layout_params()
    opt = uo.build(FUSED_SPECS[name].replace(**PRE_STEPS[pre_step]), named)
    assert type(opt) is getattr(torch.optim, name)
    assert opt.param_groups[0]["fused"] is True
    seen = []

    def record(optimizer, args, kwargs):      # runs after uo's pre-step hook
        seen.append([(p.grad.dtype, p.grad.device, p.grad.layout, p.grad.stride())
                     for _, p in named])

    opt.register_step_pre_hook(record)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        for _, p in named:
            # gradients as autograd lays them out: like the parameter
            p.grad = torch.empty_like(p).copy_(torch.randn(p.shape, generator=g) * 3.0)
        opt.step()
    expected = [(p.dtype, p.device, p.layout, p.stride()) for _, p in named]
    assert seen == [expected] * 3
    assert expected[0][3] == (0,) and expected[2][3] == (1, 5)


def test_laid_out_like_copies_only_where_the_strides_differ():
    param = torch.from_numpy(np.zeros((0,), np.float32))
    fresh = torch.zeros(0)
    moved = laid_out_like(fresh, param)
    assert fresh.stride() == (1,) and moved.stride() == (0,) and moved is not fresh
    wt = torch.arange(12.0).reshape(3, 4).t()
    same = wt * 2.0                       # elementwise results keep the permutation
    assert laid_out_like(same, wt) is same
    contiguous = (wt * 2.0).contiguous()
    relaid = laid_out_like(contiguous, wt)
    assert relaid.stride() == (1, 4) and torch.equal(relaid, contiguous)
    # size-1 dimensions may have any stride (torch's fast-path rule ignores them)
    assert same_strides(torch.zeros(1, 5), torch.zeros(5, 1).t())


# -- gradients and state laid out unlike their parameters, on the CPU ----------------------

def _three_steps(opt, params, layouts, seed=2):
    """Three steps of ``opt`` with the same random gradients each time, each given to
    its parameter through ``layouts`` (``grad -> grad in some layout``)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(3):
        for p, layout in zip(params, layouts):
            p.grad = layout(torch.randn(p.shape, generator=g))
        opt.step()
    return [p.detach().clone() for p in params]


def _transposed(t):
    """``t``'s values in a transposed layout (strides (1, rows))."""
    return t.t().contiguous().t()


@pytest.mark.parametrize("case", ["transposed gradient", "transposed parameter"])
@pytest.mark.parametrize("name", sorted(FUSED_SPECS))
def test_a_fused_cpu_class_gets_gradients_laid_out_like_its_parameters(name, case):
    """torch's fused CPU kernels pair a parameter, its gradient and its state by memory
    order: a gradient laid out otherwise (given by hand) was paired with other elements,
    silently. uo's step hook lays it out like the parameter: the numbers are, bit for
    bit, those of the same build given the gradients in the parameters' layouts (as
    autograd gives them; the same memory, so the same vector and tail code)."""
    rng = np.random.default_rng(4)
    values = [torch.from_numpy(rng.standard_normal((5, 7)).astype(np.float32)),
              torch.from_numpy(rng.standard_normal((6,)).astype(np.float32))]
    as_given = _transposed if case == "transposed gradient" else torch.Tensor.contiguous
    made = _transposed if case == "transposed parameter" else torch.Tensor.clone

    def run(weight_grad_layout):
        params = [torch.nn.Parameter(made(values[0])), torch.nn.Parameter(values[1].clone())]
        opt = uo.build(FUSED_SPECS[name], [("w", params[0]), ("b", params[1])])
        assert opt.param_groups[0]["fused"] is True
        return params, _three_steps(opt, params, [weight_grad_layout, lambda g: g])

    params, ours = run(as_given)
    assert params[0].grad.stride() == params[0].stride()
    assert as_given(values[0]).stride() != params[0].stride()
    _, expected = run(lambda g: torch.empty_like(params[0]).copy_(g))
    assert all(torch.equal(a, b) for a, b in zip(ours, expected))


@pytest.mark.parametrize("name", sorted(FUSED_SPECS))
def test_a_fused_cpu_group_with_a_strided_slice_runs_unfused(name):
    """A parameter with gaps (every other column of a matrix): no gradient layout lets a
    fused CPU kernel walk it, so its group runs unfused for the step, with the numbers of
    torch's for-loop class over the same layout, and is fused again after it."""
    rng = np.random.default_rng(5)
    base = torch.from_numpy(rng.standard_normal((4, 12)).astype(np.float32))
    sliced = torch.nn.Parameter(base.clone()[:, ::2])
    assert sliced.stride() == (12, 2)
    opt = uo.build(FUSED_SPECS[name], [("w", sliced)])
    assert opt.param_groups[0]["fused"] is True
    ours = _three_steps(opt, [sliced], [lambda t: t])
    assert opt.param_groups[0]["fused"] is True
    same = torch.nn.Parameter(base.clone()[:, ::2])
    cls = getattr(torch.optim, name)
    arguments = inspect.signature(cls).parameters
    flags = {k: v for k, v in opt.defaults.items()
             if k in arguments and k not in ("fused", "foreach")}
    loop = cls([same], foreach=False, **flags)
    assert torch.equal(ours[0], _three_steps(loop, [same], [lambda t: t])[0])


@pytest.mark.parametrize("saved, loaded", [("transposed", "contiguous"),
                                           ("contiguous", "transposed")])
@pytest.mark.parametrize("name", sorted(FUSED_SPECS))
def test_a_loaded_state_is_laid_out_like_its_parameter(name, saved, loaded):
    """``load_state_dict`` keeps the saved tensors' strides: the state of a transposed
    parameter loaded for a contiguous one (or the other way) would be paired with other
    elements by a fused CPU kernel. uo's load hook lays it out like the parameter: the
    steps after the load give, bit for bit, the numbers of the same state loaded in the
    parameter's own layout."""
    layouts = {"transposed": _transposed, "contiguous": torch.Tensor.contiguous}
    rng = np.random.default_rng(6)
    start = torch.from_numpy(rng.standard_normal((5, 7)).astype(np.float32))
    source = torch.nn.Parameter(layouts[saved](start))
    opt = uo.build(FUSED_SPECS[name], [("w", source)])
    _three_steps(opt, [source], [lambda g: torch.empty_like(source).copy_(g)], seed=7)
    state = torch.optim.Optimizer.state_dict(opt)      # torch's own form

    def resumed(state_layout):
        p = torch.nn.Parameter(layouts[loaded](source.detach()))
        copy = {"param_groups": state["param_groups"],
                "state": {k: {n: state_layout(v) if v.dim() else v.clone()
                              for n, v in s.items()} for k, s in state["state"].items()}}
        resumed = uo.build(FUSED_SPECS[name], [("w", p)])
        resumed.load_state_dict(copy)
        out = _three_steps(resumed, [p], [lambda g: torch.empty_like(p).copy_(g)], seed=8)
        return out, [v.stride() for v in resumed.state[p].values() if v.dim()], p

    ours, strides, p = resumed(lambda v: v.clone())
    assert strides and all(s == p.stride() for s in strides)
    expected, _, _ = resumed(lambda v: torch.empty_like(p).copy_(v))
    assert torch.equal(ours[0], expected[0])


def test_dense_tells_a_layout_with_gaps():
    from unified_opt.backends.torch.steps import dense

    m = torch.zeros(4, 6)
    assert dense(m) and dense(m.t()) and dense(torch.zeros(0, 3)) and dense(m[:1])
    assert not dense(m[:, ::2]) and not dense(m[:, :3]) and not dense(m.expand(2, 4, 6))


# -- on CUDA ----------------------------------------------------------------------------

def _case(name: str, pre_step: str) -> Case:
    spec = FUSED_SPECS[name].replace(**PRE_STEPS[pre_step])
    return Case(id=f"cuda_{name.lower()}_{pre_step}", spec=spec, params=PARAMS,
                nonfinite_steps=SKIPS if pre_step == "skip_nonfinite" else ())


def _run(case: Case, device: str, references: References):
    driver = start(TorchDriver, case, "auto", device=place("torch", device))
    trajectory = drive(driver, case)
    return driver, verdict(case, "torch", "auto", trajectory, driver.decision, None,
                           references)


def _check_native_with_pre_step(name: str, pre_step: str, device: str) -> None:
    """The native class on ``device`` (fused but for Adagrad off the CPU), with the
    pre-step, on the conformance parameters (the 0-size one from numpy included),
    passes the conformance rule against the float64 oracle, as the CPU build does."""
    case = _case(name, pre_step)
    references = References()           # the oracle and floors, computed once
    driver, result = _run(case, device, references)
    assert str(driver.params["w"].device) == device
    assert type(driver.optimizer) is getattr(torch.optim, name)
    fused = bool(driver.optimizer.param_groups[0]["fused"])
    assert fused == (name != "Adagrad" or device == "cpu")
    assert result["error"] is None, result["error"]
    assert result["status"] == "pass", result["comparison"]
    assert result["comparison"]["worst_ratio"] <= 8.0
    if device != "cpu":
        _, on_cpu = _run(case, "cpu", references)
        assert on_cpu["status"] == "pass", on_cpu["comparison"]


@pytest.mark.parametrize("name, pre_step", [("Adam", "clip_global_norm"),
                                            ("SGD", "skip_nonfinite")])
def test_fused_native_with_pre_step_passes_on_the_cpu(name, pre_step):
    """The CUDA test's own check, run on the CPU (the same code but the device)."""
    _check_native_with_pre_step(name, pre_step, "cpu")


@needs_cuda
@pytest.mark.parametrize("pre_step", sorted(PRE_STEPS))
@pytest.mark.parametrize("name", sorted(FUSED_SPECS))
def test_cuda_fused_native_with_pre_step_passes_like_the_cpu(name, pre_step):
    """Each fused class with each pre-step on cuda:0: the failure classes of issue 20
    (fused Adagrad refused on CUDA; fused SGD/Adam refusing the pre-step's gradients)."""
    _check_native_with_pre_step(name, pre_step, "cuda:0")
