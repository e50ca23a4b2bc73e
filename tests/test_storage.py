"""Storage dtypes (:mod:`unified_opt.storage`, issue 20): bfloat16 parameters compute in
float32 and round once per step; a spec's ``state_dtype`` keeps the state in another
dtype. The numpy rounding is the frameworks' cast, the reference rounds where the module
says, torch's own path gives the rounded float32 reference's bits, the conformance rule
judges such a run in the storage dtype's ulps (a correct run passes, planted deviations
fail), and whatever cannot honour it refuses by name."""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.reference import Reference
from unified_opt.storage import round_to, spacing


def _awkward_floats(rng):
    """float32 values around every kind of rounding: ties, subnormals, the overflow edge,
    infinities and NaN."""
    base = (rng.standard_normal(20000) * 10.0 ** rng.uniform(-40, 38, 20000)).astype(np.float32)
    ties = (np.arange(1, 200, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
    edges = np.float32([0.0, -0.0, 1e-45, -1e-40, 3.3961775e38, 3.4028235e38, np.inf,
                        -np.inf, np.nan, 65504.0, 65520.0, 6e-8])
    return np.concatenate([base, ties, -ties, edges])


@require("torch")
@pytest.mark.parametrize("storage", ["bfloat16", "float16"])
def test_round_to_is_the_frameworks_cast_bit_for_bit(storage):
    import torch

    values = _awkward_floats(np.random.default_rng(0))
    cast = torch.from_numpy(values).to(getattr(torch, storage)).float().numpy()
    ours = round_to(values, storage)
    assert ours.dtype == np.float32
    same = (ours.view(np.uint32) == cast.view(np.uint32)) | (np.isnan(ours) & np.isnan(cast))
    assert same.all(), values[~same][:5]
    # float64 values round through float32, as the frameworks' double casts do
    doubles = values.astype(np.float64) * (1 + 2.0 ** -30)
    assert np.array_equal(round_to(doubles, storage), round_to(doubles.astype(np.float32),
                                                               storage), equal_nan=True)


@pytest.mark.parametrize("storage", ["bfloat16", "float16", "float32"])
def test_round_to_takes_each_value_alone_as_in_an_array(storage):
    """A 0-d value (a spec's scalar: a norm, a NaN gradient's sum) is rounded as the same
    value inside an array, comes back as a 0-d array of its dtype, and a NaN stays NaN."""
    values = _awkward_floats(np.random.default_rng(1))[-240:]
    whole = round_to(values, storage)
    for value, expected in zip(values, whole):
        for given in (np.array(value), np.array(value, dtype=np.float64)):
            alone = round_to(given, storage)
            assert isinstance(alone, np.ndarray) and alone.shape == () \
                and alone.dtype == given.dtype
            assert np.array_equal(alone.astype(np.float32), expected, equal_nan=True), value


def test_spacing_is_one_storage_ulp():
    assert spacing(np.array([1.0, 1.5, 0.75, 0.0]), "bfloat16").tolist() == \
        [2.0 ** -7, 2.0 ** -7, 2.0 ** -8, 2.0 ** -133]
    assert spacing(np.array([1.0]), "float32")[0] == np.spacing(np.float32(1.0))


def test_state_dtype_is_checked_and_written_only_when_set():
    with pytest.raises(TypeError, match=r"AdamW: state_dtype must be None or a str, got 16"):
        uo.AdamW(state_dtype=16)
    with pytest.raises(ValueError, match=r"state_dtype must be None or one of \('float32', "
                                         r"'bfloat16'\), got 'float64'"):
        uo.AdamW(state_dtype="float64")
    spec = uo.Lion(lr=1e-3, state_dtype="bfloat16")
    assert uo.spec_from_dict(spec.to_dict()) == spec
    assert "state_dtype" not in uo.Lion().to_dict()["hyperparameters"]


def test_the_reference_computes_in_float32_and_rounds_once():
    """Momentum SGD on a bfloat16 parameter of 1.0 for two steps: each moves it by less
    than half a bfloat16 ulp below 1.0 (2**-9), so the kept value stays 1.0, while the
    momentum grows to 1.9 in float32, and to bfloat16's 1.8984375 when kept there."""
    spec = uo.SGD(lr=1e-3, momentum=0.9)
    kept = Reference(spec, {"w": np.ones(3)}, "float32", storage="bfloat16")
    state32 = Reference(spec.replace(state_dtype="float32"), {"w": np.ones(3)}, "float32",
                        storage="bfloat16")
    for _ in range(2):
        for ref in (kept, state32):
            ref.step({"w": np.full(3, 1.0 + 2.0 ** -12)})      # rounds to 1.0 on arrival
    assert kept.params["w"].tolist() == [1.0] * 3 == state32.params["w"].tolist()
    assert state32.state["w"]["momentum_buffer"][0] == np.float32(0.9) + np.float32(1.0)
    assert kept.state["w"]["momentum_buffer"][0] == 1.8984375
    kept.step({"w": np.ones(3)})             # 1 - 2.71e-3: the nearer bfloat16 is 1 - 2**-8
    assert kept.params["w"][0] == 1.0 - 2.0 ** -8
    with pytest.raises(ValueError, match="storage must be None or one of"):
        Reference(spec, {"w": np.ones(3)}, storage="float32")


def _bf16_run(spec, steps=12, state_dtype_params=None, clip=None):
    import torch

    rng = np.random.default_rng(5)
    shapes = {"w": (33, 17), "b": (9,), "s": (1,)}
    dtype = torch.float32 if state_dtype_params == "float32" else torch.bfloat16
    storage = None if dtype == torch.float32 else "bfloat16"
    init = {n: round_to(rng.standard_normal(s) * 0.3, storage or "float32")
            for n, s in shapes.items()}
    params = [torch.nn.Parameter(torch.tensor(init[n]).to(dtype)) for n in shapes]
    opt = uo.build(spec, params, path="own")
    reference = Reference(spec, init, "float32", storage=storage)
    for _ in range(steps):
        grads = {n: round_to(rng.standard_normal(s), storage or "float32")
                 for n, s in shapes.items()}
        for p, n in zip(params, shapes):
            p.grad = torch.tensor(grads[n]).to(dtype)
        opt.step()
        reference.step(grads)
    return opt, params, shapes, reference


@require("torch")
@pytest.mark.parametrize("state_dtype", [None, "float32", "bfloat16"])
@pytest.mark.parametrize("name", ["adamw", "lion", "sgd"])
def test_torch_s_own_bfloat16_update_is_the_rounded_float32_reference_bit_for_bit(
        name, state_dtype):
    import torch

    spec = uo.get(name, lr=1e-2, state_dtype=state_dtype, **(
        {"momentum": 0.9, "grad_clip": uo.ClipByGlobalNorm(max_norm=1.0)} if name == "sgd" else {}))
    opt, params, shapes, reference = _bf16_run(spec)
    kept = getattr(torch, state_dtype or "bfloat16")
    for p, n in zip(params, shapes):
        assert p.dtype == torch.bfloat16
        np.testing.assert_array_equal(p.detach().float().numpy(), reference.params[n])
        for key, value in opt.spec_state(p).items():
            assert value.dtype == kept, (key, value.dtype)
            np.testing.assert_array_equal(value.float().numpy(), reference.state[n][key])


@require("torch")
def test_a_float32_model_keeps_bfloat16_state_and_follows_the_oracle():
    import torch

    from unified_opt.conformance.cases import default_cases
    from unified_opt.conformance.worker import driver_class, run_case

    case = next(c for c in default_cases() if c.id == "float32_adam_bfloat16_state")
    assert case.refused_on("mindspore") and case.storage is None
    trajectory, decision, error = run_case(driver_class("torch"), case, "auto")
    assert error is None and decision.path == "own"
    from support import judge

    assert judge(trajectory, case).passed
    state = trajectory.state["w"]["exp_avg_sq"]
    assert np.array_equal(round_to(state, "bfloat16"), state) and state.any()
    p = torch.nn.Parameter(torch.ones(3))
    opt = uo.build(case.spec, [p])
    p.grad = torch.ones(3)
    opt.step()
    assert {v.dtype for v in opt.spec_state(p).values()} == {torch.bfloat16}


def _recorded(step_fn, case):
    from unified_opt.conformance.trajectory import Recorder

    recorder = Recorder()
    for t in range(case.steps):
        lr, params, state = step_fn(case.gradients(t), t)
        recorder.add(lr, params, state)
    return recorder.trajectory()


def _numpy_run(case, round_fn, math="float32", per_op_torch=False):
    """``case.spec``'s update with another rounding than the spec's (a planted deviation):
    ``round_fn`` on what is kept, or (``per_op_torch``) every operation in bfloat16."""
    import torch

    from unified_opt.backends.torch.ops import torch_ops
    from unified_opt.ops import numpy_ops

    spec = case.spec
    params = case.initial_params()
    if per_op_torch:
        values = {n: torch.tensor(a).bfloat16() for n, a in params.items()}
        state = {n: spec.init(v, torch_ops) for n, v in values.items()}
    else:
        values = {n: a.astype(math) for n, a in params.items()}
        state = {n: spec.init(v, numpy_ops) for n, v in values.items()}
    steps = dict.fromkeys(params, 0)

    def step(grads, t):
        for n in values:
            steps[n] += 1
            if per_op_torch:
                g = torch.tensor(grads[n]).bfloat16()
                values[n], state[n] = spec.update(values[n], g, state[n], lr=spec.lr_at(t),
                                                  step=steps[n], ops=torch_ops)
            else:
                new, new_state = spec.update(values[n], grads[n].astype(math), state[n],
                                             lr=spec.lr_at(t), step=steps[n], ops=numpy_ops)
                values[n] = round_fn(new)
                state[n] = {k: round_fn(v) for k, v in new_state.items()}
        if per_op_torch:
            return (spec.lr_at(t), {n: v.float().numpy() for n, v in values.items()},
                    {n: {k: v.float().numpy() for k, v in s.items()} for n, s in state.items()})
        return spec.lr_at(t), dict(values), {n: dict(s) for n, s in state.items()}

    return _recorded(step, case)


def _truncated(values):
    values = np.asarray(values, dtype=np.float32)
    return (values.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


@require("torch")
def test_the_bfloat16_case_passes_and_planted_roundings_fail():
    from support import judge

    from unified_opt.conformance.cases import default_cases
    from unified_opt.conformance.worker import driver_class, run_case

    case = next(c for c in default_cases() if c.id == "bfloat16_adamw")
    assert case.storage == "bfloat16" and case.refused_on("paddle")
    trajectory, decision, error = run_case(driver_class("torch"), case, "auto")
    assert error is None and decision.path == "own"
    assert judge(trajectory, case).passed
    # every operation rounded to bfloat16 (the spec's update run on bfloat16 tensors)
    per_op = judge(_numpy_run(case, None, per_op_torch=True), case)
    assert not per_op.passed and per_op.failure == "ratio", per_op.detail
    # bfloat16 by truncation, not to nearest even
    truncated = judge(_numpy_run(case, _truncated), case)
    assert not truncated.passed and truncated.failure == "ratio", truncated.detail
    # the state kept in float32 where the spec keeps it in bfloat16
    state32 = _numpy_run(case, lambda v: np.asarray(v, np.float32))
    for name, values in state32.params.items():
        state32.params[name] = round_to(values, "bfloat16")
    kept = judge(state32, case)
    assert not kept.passed and kept.failure == "storage", kept.detail
    assert "are not bfloat16 values" in kept.detail


@require("torch")
def test_native_rows_are_not_taken_for_bfloat16_parameters():
    import torch

    p = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    decision = uo.explain(uo.build(uo.SGD(lr=0.1), [p]))
    assert decision.path == "own"
    assert "float32 or float64 parameters (these are bfloat16" in str(decision)
    with pytest.raises(ValueError, match=r"path='native': .*these are bfloat16"):
        uo.build(uo.SGD(lr=0.1), [p], path="native")
    with pytest.raises(ValueError, match=r"path='native': .*state kept in the parameter's"):
        uo.build(uo.SGD(lr=0.1, state_dtype="bfloat16"), [torch.nn.Parameter(torch.ones(2))],
                 path="native")


@require("paddle")
def test_paddle_refuses_what_its_own_optimizer_cannot_round():
    import paddle

    p = paddle.create_parameter([4], dtype="float32")
    with pytest.raises(ValueError, match=r"state_dtype='bfloat16': the Paddle own optimizer"):
        uo.build(uo.AdamW(state_dtype="bfloat16"), [p])
    low = paddle.create_parameter([4], dtype="bfloat16",
                                  default_initializer=paddle.nn.initializer.Constant(0.0))
    with pytest.raises(TypeError, match=rf"parameter {low.name} is bfloat16; the Paddle own"):
        uo.build(uo.AdamW(), [low])


@require("mindspore")
def test_mindspore_refuses_a_state_dtype():
    import mindspore as ms

    p = ms.Parameter(ms.Tensor(np.ones(4, np.float32)), name="w")
    with pytest.raises(ValueError, match=r"state_dtype='float32': the MindSpore own"):
        uo.build(uo.Adam(state_dtype="float32"), [p])
