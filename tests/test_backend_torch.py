"""The torch backend: native rows bit-identical to hand-built torch.optim, own path on
the oracle, explain, parameter forms, options, schedules, state_dict."""

import io

import numpy as np
import pytest
from conftest import require
from helpers import assert_follows_reference, gradient_stream, initial_params

import unified_opt as uo

pytestmark = require("torch")
torch = pytest.importorskip("torch")

from unified_opt.conformance.drivers.torch import TorchDriver  # noqa: E402


def _params(arrays):
    return {n: torch.nn.Parameter(torch.from_numpy(a.copy())) for n, a in arrays.items()}


def _drive(optimizer, params, grads, scheduler=None):
    for g in grads:
        for n, p in params.items():
            p.grad = torch.from_numpy(g[n].copy())
        optimizer.step()
        optimizer.zero_grad()
        if scheduler is not None:
            scheduler.step()
    return {n: p.detach().numpy().copy() for n, p in params.items()}


NATIVE_CASES = [
    (uo.SGD(lr=0.05), torch.optim.SGD, {"lr": 0.05}),
    (uo.SGD(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=1e-2, maximize=True),
     torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "dampening": 0.3, "weight_decay": 1e-2,
                       "maximize": True}),
    (uo.SGD(lr=0.05, momentum=0.9, nesterov=True), torch.optim.SGD,
     {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
    (uo.Adam(lr=1e-2, amsgrad=True, weight_decay=0.1, eps=1e-3), torch.optim.Adam,
     {"lr": 1e-2, "amsgrad": True, "weight_decay": 0.1, "eps": 1e-3}),
    (uo.AdamW(lr=1e-2, betas=(0.8, 0.99), weight_decay=0.3, maximize=True), torch.optim.AdamW,
     {"lr": 1e-2, "betas": (0.8, 0.99), "weight_decay": 0.3, "maximize": True}),
]


@pytest.mark.parametrize("spec, cls, kwargs", NATIVE_CASES)
def test_native_path_is_bit_identical_to_hand_built(spec, cls, kwargs):
    arrays, grads = initial_params(), list(gradient_stream(steps=100))
    ours, theirs = _params(arrays), _params(arrays)
    opt = uo.build(spec, ours.items())
    assert isinstance(opt, cls) and uo.explain(opt).path == "native"
    a = _drive(opt, ours, grads)
    b = _drive(cls(theirs.values(), **kwargs), theirs, grads)
    for n in arrays:
        np.testing.assert_array_equal(a[n], b[n])


def test_no_decay_names_become_param_groups():
    arrays, grads = initial_params(), list(gradient_stream(steps=100))
    spec = uo.AdamW(lr=1e-2, weight_decay=0.2, no_decay_names=("*bias*", "*gamma*"))
    ours, theirs = _params(arrays), _params(arrays)
    a = _drive(uo.build(spec, ours.items()), ours, grads)
    skip = [p for n, p in theirs.items() if n in ("bias", "ln.gamma")]
    rest = [p for n, p in theirs.items() if n not in ("bias", "ln.gamma")]
    hand = torch.optim.AdamW([{"params": rest, "weight_decay": 0.2},
                              {"params": skip, "weight_decay": 0.0}], lr=1e-2)
    b = _drive(hand, theirs, grads)
    for n in arrays:
        np.testing.assert_array_equal(a[n], b[n])


def test_options_reach_the_native_class_and_are_checked():
    arrays, grads = initial_params(), list(gradient_stream(steps=30))
    ours, theirs = _params(arrays), _params(arrays)
    a = _drive(uo.build(uo.Adam(lr=1e-2), ours.items(), options={"foreach": True}), ours, grads)
    b = _drive(torch.optim.Adam(theirs.values(), lr=1e-2, foreach=True), theirs, grads)
    for n in arrays:
        np.testing.assert_array_equal(a[n], b[n])
    with pytest.raises(ValueError, match=r"options \['eps'\] are not implementation flags"):
        uo.build(uo.Adam(), _params(arrays).items(), options={"eps": 1.0})
    with pytest.raises(ValueError, match="apply to native classes"):
        uo.build(uo.Adam(eps_placement="eps_hat"), _params(arrays).items(),
                 options={"foreach": True})


OWN_CASES = [
    uo.Adam(lr=1e-2, eps=1e-3, eps_placement="eps_hat"),
    uo.Adam(lr=1e-2, eps=1e-3, eps_placement="inside", amsgrad=True),
    uo.Adam(lr=1e-2, bias_correction=False, nesterov=True, weight_decay=0.1),
    uo.AdamW(lr=1e-2, decay_form="in_update", bias_correction=False, eps=1e-6,
             weight_decay=0.1, no_decay_names=("*gamma*",)),
    uo.AdamW(lr=1e-2, decay_times_lr=False, weight_decay=1e-3),
    uo.SGD(lr=uo.schedules.Cosine(lr=0.1, T_max=40), momentum=0.9, lr_placement="inside"),
    uo.SGD(lr=0.05, momentum=0.9, dampening=0.5, momentum_init="zeros"),
]


@pytest.mark.parametrize("spec", OWN_CASES + [c[0] for c in NATIVE_CASES])
@pytest.mark.parametrize("path", ["auto", "own"])
def test_follows_the_oracle(spec, path):
    arrays = initial_params()
    driver = TorchDriver(spec, arrays, path=path)
    if path == "own":
        assert driver.decision.path == "own"
    assert_follows_reference(driver.step, driver.params_numpy, spec, arrays,
                             gradient_stream(steps=100), read_state=driver.state_numpy)


def test_explain_names_path_and_reason():
    native = uo.explain(uo.Adam(), "torch")
    assert (native.path, native.native) == ("native", "torch.optim.Adam")
    own = uo.explain(uo.preset("mindspore.nn.Adam"), "torch")
    assert own.path == "own" and own.native is None
    assert "eps_placement='outside'" in str(own)
    with pytest.raises(ValueError, match="no native torch optimizer computes this spec"):
        uo.build(uo.preset("mindspore.nn.Adam"), [torch.nn.Parameter(torch.zeros(2))],
                 path="native")


def test_module_pairs_and_bare_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    spec = uo.SGD(lr=0.1, weight_decay=0.5, no_decay_names=("*bias*",))
    opt = uo.build(spec, model)
    assert [len(g["params"]) for g in opt.param_groups] == [2, 2]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.5, 0.0]
    assert isinstance(uo.build(spec, list(model.named_parameters())), torch.optim.SGD)
    bare = uo.build(uo.SGD(lr=0.1), model.parameters())
    assert len(bare.param_groups[0]["params"]) == 4
    with pytest.raises(ValueError, match="needs parameter names"):
        uo.build(spec, model.parameters())


def test_bad_parameters_raise_before_building():
    with pytest.raises(ValueError, match="params is empty"):
        uo.build(uo.SGD(), [])
    with pytest.raises(TypeError, match="must all come from one framework"):
        uo.build(uo.SGD(), [torch.nn.Parameter(torch.zeros(1)), np.zeros(1)])
    with pytest.raises(ValueError, match="backend='paddle' but the parameters are torch"):
        uo.build(uo.SGD(), [torch.nn.Parameter(torch.zeros(1))], backend="paddle")
    with pytest.raises(TypeError, match="spec must be a unified_opt spec"):
        uo.build(torch.optim.SGD, [torch.nn.Parameter(torch.zeros(1))])


def test_scheduled_lr_is_a_lambda_lr_stepped_the_usual_way():
    schedule = uo.schedules.Step(lr=0.1, step_size=2, gamma=0.5)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = uo.build(uo.SGD(lr=schedule), [p])
    sched = uo.lr_scheduler(opt)
    assert isinstance(sched, torch.optim.lr_scheduler.LambdaLR)
    used = []
    for _ in range(6):
        used.append(opt.param_groups[0]["lr"])
        p.grad = torch.ones(1)
        opt.step()
        sched.step()
    assert used == [schedule(t) for t in range(6)]
    assert uo.lr_scheduler(uo.build(uo.SGD(lr=0.1), [p])) is None


def test_own_optimizer_state_dict_round_trip():
    arrays, grads = initial_params(), list(gradient_stream(steps=8))
    spec = uo.Adam(lr=1e-2, eps_placement="eps_hat", amsgrad=True)
    whole = _params(arrays)
    full = _drive(uo.build(spec, whole.items()), whole, grads)
    first = _params(arrays)
    opt = uo.build(spec, first.items())
    _drive(opt, first, grads[:3])
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    resumed = {n: torch.nn.Parameter(p.detach().clone()) for n, p in first.items()}
    again = uo.build(spec, resumed.items())
    again.load_state_dict(torch.load(buffer, weights_only=True))
    rest = _drive(again, resumed, grads[3:])
    for n in arrays:
        np.testing.assert_array_equal(rest[n], full[n])


@pytest.mark.parametrize("skip_nonfinite", [False, True])
def test_a_checkpoint_with_a_nested_schedule_loads_with_weights_only(skip_nonfinite):
    """The scheduler's state_dict is plain data: LambdaLR saves the __dict__ of a callable
    object, and a schedule is one (a nested one failed under weights_only=True)."""
    arrays, grads = initial_params(), list(gradient_stream(steps=10))
    schedule = uo.schedules.LinearWarmup(after=uo.schedules.Cosine(lr=0.1, T_max=20),
                                         warmup_steps=4)
    spec = uo.SGD(lr=schedule, momentum=0.9, skip_nonfinite=skip_nonfinite)
    whole = _params(arrays)
    full_opt = uo.build(spec, whole.items())
    full = _drive(full_opt, whole, grads, uo.lr_scheduler(full_opt))
    first = _params(arrays)
    opt = uo.build(spec, first.items())
    scheduler = uo.lr_scheduler(opt)
    _drive(opt, first, grads[:4], scheduler)
    buffer = io.BytesIO()
    torch.save({"optimizer": opt.state_dict(), "scheduler": scheduler.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    resumed = {n: torch.nn.Parameter(p.detach().clone()) for n, p in first.items()}
    again = uo.build(spec, resumed.items())
    again.load_state_dict(saved["optimizer"])
    again_scheduler = uo.lr_scheduler(again)
    again_scheduler.load_state_dict(saved["scheduler"])
    rest = _drive(again, resumed, grads[4:], again_scheduler)
    for n in arrays:
        np.testing.assert_array_equal(rest[n], full[n])


def test_momentum_cycling_needs_a_momentum_to_cycle():
    cycling = uo.schedules.preset("torch.optim.lr_scheduler.OneCycleLR", max_lr=0.1,
                                  total_steps=10)
    with pytest.raises(ValueError, match="Adagrad has neither momentum nor betas"):
        uo.build(uo.Adagrad(lr=cycling), [torch.nn.Parameter(torch.zeros(1))])
    plain = uo.schedules.preset("torch.optim.lr_scheduler.OneCycleLR", max_lr=0.1,
                                total_steps=10, cycle_momentum=False)
    assert isinstance(uo.build(uo.SGD(lr=plain, momentum=0.9),
                               [torch.nn.Parameter(torch.zeros(1))]), torch.optim.SGD)
