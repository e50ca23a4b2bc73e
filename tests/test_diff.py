"""``uo.diff`` and ``unified-opt diff``: two configurations through their presets on the
same parameters and gradients; same within the float32 noise floor (exit 0) or not
(exit 1, naming the knobs that differ and what each does alone)."""

import numpy as np
import pytest

import unified_opt as uo
from unified_opt import cli
from unified_opt.conformance.spec_diff import STEPS, _cases, diff, parting
from unified_opt.conformance.trajectory import reference_trajectory


def _run(capsys, a, b):
    code = cli.main(["diff", a, b])
    return code, capsys.readouterr()


@pytest.mark.parametrize("a, b", [
    ("torch.optim.AdamW(lr=1e-3, weight_decay=0.01)",
     "paddle.optimizer.AdamW(learning_rate=1e-3, weight_decay=0.01)"),
    ("torch.optim.SGD(lr=0.1, momentum=0.9, nesterov=True)",
     "mindspore.nn.SGD(learning_rate=0.1, momentum=0.9, nesterov=True)"),
    ("torch.optim.Adagrad(lr=0.01, initial_accumulator_value=0.1)",
     "adagrad(lr=0.01, initial_accumulator_value=0.1)"),
])
def test_the_same_configuration_in_two_frameworks_exits_0(capsys, a, b):
    code, out = _run(capsys, a, b)
    assert code == 0, out.out + out.err
    assert out.out.splitlines()[2].startswith("SAME: within the float32 noise floor")


def test_torch_adam_and_mindspore_adam_differ_in_eps_placement(capsys):
    code, out = _run(capsys, "torch.optim.Adam(lr=1e-3)", "mindspore.nn.Adam(learning_rate=1e-3)")
    assert code == 1
    lines = out.out.splitlines()
    assert lines[2].startswith("DIFFERENT: parts from step 1")
    assert lines[3:] == [
        "knobs that differ:",
        f"  eps_placement: 'outside' vs 'eps_hat' -- alone, {lines[2][len('DIFFERENT: '):]}"
        .split(" (3 gradient streams")[0]]


def test_torch_sgd_with_dampening_and_paddle_momentum_name_both_knobs():
    found = diff("torch.optim.SGD(lr=0.1, momentum=0.9, dampening=0.1)",
                 "paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9)")
    assert not found.same and not found
    knobs = {k.field: k for k in found.knobs}
    assert set(knobs) == {"dampening", "momentum_init"}
    assert (knobs["dampening"].a, knobs["dampening"].b) == (0.1, 0.0)
    assert (knobs["momentum_init"].a, knobs["momentum_init"].b) == ("grad", "zeros")
    # torch starts the buffer at the gradient, Paddle at zero: step 1 already differs;
    # dampening only shows from step 2 (torch does not dampen the first step)
    assert knobs["momentum_init"].alone.first_step == 1
    assert knobs["dampening"].alone.first_step == 2
    assert not knobs["dampening"].alone.same and not knobs["momentum_init"].alone.same
    assert "momentum_init: 'grad' vs 'zeros' -- alone, parts from step 1" in str(found)


def test_a_knob_without_effect_is_listed_as_such():
    # no weight decay at all: which names are excluded from it changes nothing
    found = diff(uo.Adam(lr=1e-3), uo.Adam(lr=1e-3, no_decay_names=("bias",)))
    assert found.same
    (knob,) = found.knobs
    assert knob.field == "no_decay_names" and knob.alone.same
    assert "no_decay_names: () vs ('bias',) -- alone, no effect beyond the noise floor" in str(
        found)


def test_two_algorithms_that_compute_the_same_numbers():
    found = diff(uo.Adam(lr=1e-3), uo.AdamW(lr=1e-3, weight_decay=0.0))
    assert found.same
    assert "algorithm: 'adam' vs 'adamw'" in str(found)
    assert all(k.alone is None for k in found.knobs)    # fields of two algorithms


def test_the_rule_is_the_noise_floor():
    lr = 1e-3
    assert diff(uo.Adam(lr=lr), uo.Adam(lr=lr * (1 + 1e-9))).same       # below float32
    found = diff(uo.Adam(lr=lr), uo.Adam(lr=lr * 1.001))
    assert not found.same and found.parting.first_step == 1
    assert found.parting.quantity == "lr"


def test_the_gap_is_the_parameters_distance_over_their_movement():
    a, b = uo.Adam(lr=1e-3), uo.Adam(lr=1e-3, eps_placement="eps_hat")
    expected = 0.0
    for case in _cases(a):
        ta = reference_trajectory(a, case, "float64")
        tb = reference_trajectory(b, case, "float64")
        start = case.initial_params()
        apart = sum(np.sum((tb.params[n][-1] - ta.params[n][-1]) ** 2) for n in ta.params)
        moved = sum(np.sum((ta.params[n][-1] - start[n]) ** 2) for n in ta.params)
        expected = max(expected, float(np.sqrt(apart / moved)))
    got = parting(a, b)
    # float64 from the same oracle trajectories on both sides, summed in other orders:
    # ulps apart on any CPU, far inside rel=1e-9
    assert got.gap == pytest.approx(expected, rel=1e-9) and got.gap > 0
    assert parting(a, a).gap == 0.0 and parting(a, a).same
    assert f"after {STEPS} steps" in got.text()


def test_bad_arguments(capsys):
    with pytest.raises(TypeError, match="diff: spec_a must be a unified_opt spec .* got 3"):
        diff(3, uo.Adam())
    code, out = _run(capsys, "torch.optim.Adamx(lr=1e-3)", "torch.optim.Adam(lr=1e-3)")
    assert code == 2 and "no preset for the native class 'torch.optim.Adamx'" in out.err
