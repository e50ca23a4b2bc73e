"""ReduceOnPlateau: the rule, its presets, and each framework's own plateau scheduler
driving a ``uo.build`` optimizer (native and own path), in this process, one framework
per test (``plateau_loops.py``).

For every job the lr the optimizer holds after each metric report must equal
``preset.lrs(...)`` of the native scheduler's preset exactly (float64 natives: the same
Python float; float32 natives: the same float32), and the lr each optimizer step applied
(read back from a weight update) must be the float32 of the lr after the previous report.
Each sequence also proves its power: the rule with a knob changed gives other lrs.
"""

import json
import math

import numpy as np
import pytest
from conftest import require
from plateau_loops import run

import unified_opt as uo
from unified_opt.schedules import preset as schedule_preset
from unified_opt.schedules.plateau import (
    MS_CALLBACK,
    MS_EXP,
    PADDLE,
    TORCH,
    PlateauState,
    ReduceOnPlateau,
    natives,
)

LR = 0.1
NAN, INF = float("nan"), float("inf")
# min mode, 1% relative threshold, patience 2, cooldown 2, floor 0.01: a first value, one
# within the threshold, improvements, an improvement during the cooldown (8.0), a NaN,
# plateaus down to min_lr
K_MIN = dict(mode="min", factor=0.5, patience=2, threshold=0.01, threshold_mode="rel",
             cooldown=2, min_lr=0.01)
M_MIN = [10.0, 9.95, 9.0, 9.0, 8.95, 9.2, 8.0, 8.6, 8.6, 8.6, 8.6, 8.6, 8.5, 8.52,
         7.0, 7.0, 7.0, NAN, 7.0, 7.0, 7.0, 7.0, 7.0, 6.94, 6.93, 6.0, 6.0, 6.0, 6.0, 6.0,
         6.0, 6.0, 6.0, 6.0]
# max mode, absolute threshold 0.05, patience 0, cooldown 1; eps 0.001 stops the last
# reduction (0.0027 -> 0.002); accuracies start (and dip) at 0.0
K_MAX = dict(mode="max", factor=0.3, patience=0, threshold=0.05, threshold_mode="abs",
             cooldown=1, min_lr=0.002, eps=0.001)
M_MAX = [0.0, 0.02, 0.03, 0.1, 0.12, 0.2, 0.2, 0.24, 0.3, 0.31, 0.3, 0.5, 0.0, 0.0, 0.53,
         0.56, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
# steps below float32 resolution: improvements in float64, equal in float32
K_FINE = dict(mode="min", factor=0.5, patience=1, threshold=0.0, threshold_mode="abs")
M_FINE = [1.0 - k * 1e-9 for k in range(8)] + [0.5 - k * 1e-9 for k in range(8)]
# the first metrics are NaN and inf: torch counts them as bad; Paddle keeps the NaN as
# best, and nothing ever improves on it (an inf best would do the same in Paddle's
# rel_form: inf - inf * threshold is NaN)
M_FIRST = [NAN, INF, 5.0, 4.0, 3.0, 3.0, 3.0, 2.0, 1.0, 0.5, 0.25, 0.2, 0.1]
# MindSpore callback: Keras patience/cooldown, abs min_delta, monitor "acc" (auto: max)
K_CALLBACK = dict(monitor="acc", factor=0.3, patience=2, min_delta=0.05, cooldown=2,
                  min_lr=0.002)


def _boundary(threshold):
    """(best, metric): a metric between torch's ``best * (1 - t)`` and Paddle's ``best -
    best * t`` benchmarks, which round differently, so exactly one of them counts it."""
    for k in range(1, 10_000):
        best = 1.0 + k / 997.0
        scaled, offset = best * (1.0 - threshold), best - best * threshold
        if scaled != offset:
            return best, min(scaled, offset)
    raise AssertionError("no boundary found")


_B, _M = _boundary(0.01)
K_EDGE = dict(mode="min", factor=0.5, patience=0, threshold=0.01, threshold_mode="rel")
M_EDGE = [_B, _M, _M, _M * 0.5, _M * 0.5]


def _sgd(**kw):
    return uo.SGD(lr=LR, **kw).to_dict()


def _paddle_kwargs(k, learning_rate=LR):
    out = {key: v for key, v in k.items() if key != "eps"}
    return dict(out, learning_rate=learning_rate, **({"epsilon": k["eps"]} if "eps" in k else {}))


# (id, framework, spec, path, scheduler, metrics, extra) where scheduler is
# ("native", qualified, kwargs) or ("rule", ReduceOnPlateau, monitor)
JOBS = [
    *[(f"torch-{name}-{path}", "torch", _sgd(), path, ("native", TORCH, k), m, {})
      for path in ("native", "own")
      for name, k, m in (("min", K_MIN, M_MIN), ("max", K_MAX, M_MAX), ("fine", K_FINE, M_FINE),
                         ("first", K_MIN, M_FIRST), ("edge", K_EDGE, M_EDGE))],
    ("torch-rule", "torch", _sgd(), "native",
     ("rule", ReduceOnPlateau.from_native(TORCH, **K_MIN), None), M_MIN, {}),
    # Paddle's scheduler brings its own lr (0.2), which replaces the optimizer's 0.1
    *[(f"paddle-{name}-{path}", "paddle", _sgd(), path,
       ("native", PADDLE, _paddle_kwargs(k, 0.2)), m, {})
      for path in ("native", "own")
      for name, k, m in (("min", K_MIN, M_MIN), ("max", K_MAX, M_MAX), ("fine", K_FINE, M_FINE),
                         ("first", K_MIN, M_FIRST), ("edge", K_EDGE, M_EDGE))],
    ("paddle-fine-tensor", "paddle", _sgd(), "native",
     ("native", PADDLE, _paddle_kwargs(K_FINE)), M_FINE, {"tensor": True}),
    ("paddle-rule", "paddle", _sgd(), "own",
     ("rule", ReduceOnPlateau.from_native(PADDLE, **_paddle_kwargs(K_MIN)), None), M_MIN, {}),
    # maximize=True lowers to mindspore.experimental.optim.SGD, plain SGD to mindspore.nn.SGD
    *[(f"mindspore-exp-{name}", "mindspore", _sgd(maximize=True), "native",
       ("native", MS_EXP, k), m, {})
      for name, k, m in (("min", K_MIN, M_MIN), ("max", K_MAX, M_MAX), ("fine", K_FINE, M_FINE),
                         ("first", K_MIN, M_FIRST), ("edge", K_EDGE, M_EDGE))],
    ("mindspore-exp-rule", "mindspore", _sgd(maximize=True), "native",
     ("rule", ReduceOnPlateau.from_native(MS_EXP, **K_MIN), None), M_MIN, {}),
    ("mindspore-callback-native", "mindspore", _sgd(), "native",
     ("native", MS_CALLBACK, K_CALLBACK), M_MAX, {"monitor": "acc"}),
    ("mindspore-callback-loss", "mindspore", _sgd(), "native",
     ("native", MS_CALLBACK, dict(monitor="loss", patience=3, cooldown=1, min_delta=0.1,
                                  factor=0.5)), M_MIN[:17] + M_MIN[18:], {"monitor": "loss"}),
    ("mindspore-callback-rule", "mindspore", _sgd(), "native",
     ("rule", ReduceOnPlateau.from_native(MS_CALLBACK, **K_CALLBACK), "acc"), M_MAX,
     {"monitor": "acc"}),
    # the own implementation follows an lr written from outside (constant spec lr)
    ("mindspore-callback-own", "mindspore", _sgd(), "own",
     ("native", MS_CALLBACK, K_CALLBACK), M_MAX, {"monitor": "acc"}),
    ("mindspore-callback-own-rule", "mindspore", _sgd(), "own",
     ("rule", ReduceOnPlateau.from_native(MS_CALLBACK, **K_CALLBACK), "acc"), M_MAX,
     {"monitor": "acc"}),
]
# plateau_scheduler refusing: a rule the native does not compute (naming the knobs), and
# wrong calls
REFUSED = [
    ("torch-refuses-paddle-rule", "torch", _sgd(), "native",
     ReduceOnPlateau.from_native(PADDLE, **_paddle_kwargs(K_MIN)), None, NotImplementedError,
     r"ReduceLROnPlateau does not compute this rule: rel_form='offset' \('scaled' there\), "
     r"best_in_cooldown=False \(True there\), first_is_best=True"),
    ("paddle-refuses-torch-rule", "paddle", _sgd(), "native",
     ReduceOnPlateau(**K_MIN), None, NotImplementedError, r"rel_form='scaled' \('offset' there\)"),
    ("mindspore-exp-refuses-float64", "mindspore", _sgd(maximize=True), "native",
     ReduceOnPlateau(**K_MIN), None, NotImplementedError,
     r"metric_dtype='float64' \('float32' there\), lr_dtype='float64' \('float32' there\)"),
    ("mindspore-callback-refuses-rel", "mindspore", _sgd(), "native",
     ReduceOnPlateau(**K_MIN), "eval_loss", NotImplementedError,
     r"threshold_mode='rel' \('abs' there\)"),
    ("torch-monitor-is-for-the-callback", "torch", _sgd(), "native", ReduceOnPlateau(), "acc",
     ValueError, r"monitor='acc' is for the mindspore\.train\.ReduceLROnPlateau callback"),
    ("paddle-initial-lr-differs", "paddle", _sgd(), "native",
     ReduceOnPlateau.from_native(PADDLE, **_paddle_kwargs(K_MIN, 0.2)), None, ValueError,
     r"rule\.initial_lr=0\.2 differs from the optimizer's lr 0\.1"),
    ("torch-refuses-a-scheduled-spec", "torch",
     uo.SGD(lr=uo.schedules.Step(lr=LR, step_size=2)).to_dict(), "native", ReduceOnPlateau(),
     None, ValueError, "the optimizer's spec has the scheduled lr"),
]


def _preset(scheduler, extra):
    kind, what, kwargs = scheduler
    rule = ReduceOnPlateau.from_native(what, **kwargs) if kind == "native" else what
    # what the loop reports: a float32 Tensor is compared in float32 by Paddle
    return rule.replace(metric_dtype="float32") if extra.get("tensor") else rule


def _job(i, fw, spec, path, scheduler, metrics, extra):
    kind, what, kwargs = scheduler
    job = {"spec": spec, "path": path, "metrics": metrics, **extra}
    if kind == "native":
        job["native"] = [what, kwargs]
    else:
        job["rule"] = what.to_dict()
        job["monitor"] = kwargs
    return job


@pytest.mark.parametrize("job", [pytest.param(j, id=j[0], marks=require(j[1])) for j in JOBS])
def test_native_scheduler_follows_its_preset(job):
    job_id, fw, spec, path, scheduler, metrics, extra = job
    got = run(fw, _job(*job))
    rule = _preset(scheduler, extra)
    lr0 = rule.initial_lr if rule.initial_lr is not None else LR
    want = rule.lrs(lr0, metrics)
    assert got["after"] == want, _first_difference(got["after"], want)
    # the step before report k ran with the lr after report k - 1
    applied = [float(np.float32(x)) for x in [lr0] + want[:-1]]
    assert got["used"] == applied, _first_difference(got["used"], applied)


def _first_difference(got, want):
    k = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), None)
    return f"first difference at report {k}: native {got[k]!r}, preset {want[k]!r}" \
        if k is not None else f"lengths {len(got)} != {len(want)}"


@pytest.mark.parametrize("job", [pytest.param(j, id=j[0], marks=require(j[1]))
                                 for j in REFUSED])
def test_a_rule_the_native_does_not_compute_is_refused(job):
    job_id, fw, spec, path, rule, monitor, error_type, message = job
    with pytest.raises(error_type, match=message):
        run(fw, {"spec": spec, "path": path, "metrics": [1.0], "rule": rule.to_dict(),
                 "monitor": monitor})


# -- power: every knob the presets set changes the lrs of the sequences used above --------

def _differs(rule, lr0, metrics, **change):
    return rule.lrs(lr0, metrics) != rule.replace(**change).lrs(lr0, metrics)


def test_the_sequences_tell_every_knob_apart():
    torch_min = ReduceOnPlateau.from_native(TORCH, **K_MIN)
    paddle_min = ReduceOnPlateau.from_native(PADDLE, **_paddle_kwargs(K_MIN))
    for knob in ({"patience": 3}, {"patience": 1}, {"cooldown": 1}, {"cooldown": 3},
                 {"factor": 0.4}, {"min_lr": 0.005}, {"threshold": 0.001},
                 {"best_in_cooldown": False}, {"threshold_mode": "abs"}):
        assert _differs(torch_min, LR, M_MIN, **knob), knob
    assert _differs(paddle_min, None, M_MIN, best_in_cooldown=True)
    assert _differs(torch_min, LR, M_FIRST, first_is_best=True)
    assert _differs(paddle_min, None, [INF] + M_FIRST[2:], rel_form="scaled")
    paddle_edge = ReduceOnPlateau.from_native(PADDLE, **_paddle_kwargs(K_EDGE))
    assert _differs(paddle_edge, None, M_EDGE, rel_form="scaled")
    fine = ReduceOnPlateau(**K_FINE)
    assert _differs(fine, LR, M_FINE, metric_dtype="float32")
    torch_max = ReduceOnPlateau.from_native(TORCH, **K_MAX)
    for knob in ({"eps": 0.0}, {"cooldown": 0}, {"patience": 1}, {"mode": "min"}):
        assert _differs(torch_max, LR, M_MAX, **knob), knob
    callback = ReduceOnPlateau.from_native(MS_CALLBACK, **K_CALLBACK)
    for knob in ({"skip_zero_metric": False}, {"patience": 2}, {"cooldown": 2},
                 {"lr_dtype": "float64"}):
        assert _differs(callback, LR, M_MAX, **knob), knob


# -- the rule itself ----------------------------------------------------------------------

def test_lrs_by_hand():
    rule = ReduceOnPlateau(factor=0.5, patience=1, cooldown=1, threshold=0.0)
    # 5 best; 4 better; 4, 4 bad -> halve, cooldown; 4 (cooldown); 4 bad; 3 better; 3, 3
    assert rule.lrs(1.0, [5, 4, 4, 4, 4, 4, 3, 3, 3, 3]) == \
        [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25]
    state = rule.report(rule.start(1.0), 5.0)
    assert state == PlateauState(lr=1.0, best=5.0, bad=0, cooldown_left=0)
    # Paddle ignores the cooldown's metric: 2.0 does not become the best there
    paddle = rule.replace(best_in_cooldown=False, first_is_best=True, rel_form="offset")
    assert paddle.lrs(1.0, [5, 5, 5, 2, 4, 4]) == [1.0, 1.0, 0.5, 0.5, 0.5, 0.5]
    assert rule.lrs(1.0, [5, 5, 5, 2, 4, 4]) == [1.0, 1.0, 0.5, 0.5, 0.5, 0.25]
    # float32: lr and comparisons rounded like MindSpore's Parameters
    f32 = rule.replace(metric_dtype="float32", lr_dtype="float32")
    assert f32.lrs(0.1, [1.0, 1.0 - 1e-9, 1.0 - 2e-9]) == [float(np.float32(0.1))] * 2 + \
        [float(np.float32(0.1) * np.float32(0.5))]


def test_json_round_trip_of_every_preset():
    made = [ReduceOnPlateau(), ReduceOnPlateau.from_native(TORCH, **K_MAX),
            ReduceOnPlateau.from_native(PADDLE, **_paddle_kwargs(K_MIN)),
            ReduceOnPlateau.from_native(MS_EXP, **K_FINE),
            ReduceOnPlateau.from_native(MS_CALLBACK, **K_CALLBACK)]
    for rule in made:
        data = json.loads(json.dumps(rule.to_dict()))
        assert ReduceOnPlateau.from_dict(data) == rule
    assert sorted(natives()) == sorted([TORCH, PADDLE, MS_EXP, MS_CALLBACK])


def test_presets_map_native_arguments():
    cb = ReduceOnPlateau.from_native(MS_CALLBACK, monitor="acc", patience=4, cooldown=3,
                                     min_delta=-0.2)
    assert (cb.mode, cb.patience, cb.cooldown, cb.threshold, cb.threshold_mode, cb.eps) == \
        ("max", 3, 2, 0.2, "abs", 0.0)
    assert ReduceOnPlateau.from_native(MS_CALLBACK, monitor="eval_loss", patience=0).patience == 0
    assert ReduceOnPlateau.from_native(MS_CALLBACK).mode == "min"
    paddle = ReduceOnPlateau.from_native(PADDLE, learning_rate=0.3, mode="MAX")
    assert (paddle.mode, paddle.initial_lr, paddle.eps) == ("max", 0.3, 1e-8)
    assert ReduceOnPlateau.from_native(TORCH) == ReduceOnPlateau()
    with pytest.warns(UserWarning, match="verbose=True only prints"):
        ReduceOnPlateau.from_native(PADDLE, learning_rate=0.1, verbose=True)


@pytest.mark.parametrize("call, error, message", [
    (lambda: ReduceOnPlateau(factor=1.0), ValueError, r"factor must be >= 0 and < 1, got 1\.0"),
    (lambda: ReduceOnPlateau(patience=-1), ValueError, r"patience must be >= 0, got -1"),
    (lambda: ReduceOnPlateau(patience=2.0), TypeError, r"patience must be an int, got 2\.0"),
    (lambda: ReduceOnPlateau(mode="avg"), ValueError, r"mode must be one of \('min', 'max'\)"),
    (lambda: ReduceOnPlateau(metric_dtype="float16"), ValueError, "metric_dtype must be one"),
    (lambda: ReduceOnPlateau(min_lr=-1.0), ValueError, r"min_lr must be >= 0, got -1\.0"),
    (lambda: ReduceOnPlateau(first_is_best=1), TypeError, "first_is_best must be a bool"),
    (lambda: ReduceOnPlateau(0.1), TypeError, "keyword arguments only"),
    (lambda: ReduceOnPlateau(gamma=0.1), TypeError,
     r"unexpected keyword argument\(s\) \['gamma'\]"),
    (lambda: ReduceOnPlateau().lrs(0.1, [1.0, True]), TypeError,
     r"metrics\[1\] must be a real number, got True"),
    (lambda: ReduceOnPlateau().lrs(0.1, "1.0"), TypeError, "metrics must be a sequence"),
    (lambda: ReduceOnPlateau().lrs(None, [1.0]), ValueError, "initial_lr is None"),
    (lambda: ReduceOnPlateau(initial_lr=0.2).lrs(0.1, [1.0]), ValueError,
     r"initial_lr=0\.1, but the rule starts from its own initial_lr=0\.2"),
    (lambda: ReduceOnPlateau.from_dict({"schedule": "step"}), ValueError, "'rule'"),
    (lambda: ReduceOnPlateau.from_native(TORCH, min_lr=[0.1, 0.2]), NotImplementedError,
     r"ReduceLROnPlateau: min_lr=\[0\.1, 0\.2\] gives one floor per parameter group"),
    (lambda: ReduceOnPlateau.from_native(TORCH, lr=0.1), TypeError,
     r"unexpected keyword argument\(s\) \['lr'\]"),
    (lambda: ReduceOnPlateau.from_native(PADDLE), TypeError, r"missing required .*learning_rate"),
    (lambda: ReduceOnPlateau.from_native("keras.ReduceLROnPlateau"), ValueError,
     "no plateau preset"),
    (lambda: ReduceOnPlateau.from_native(MS_CALLBACK, mode="up"), ValueError,
     r"mindspore\.train\.ReduceLROnPlateau: .*mode must be one of"),
    (lambda: ReduceOnPlateau.from_native(TORCH, factor=1.5), ValueError,
     r"torch\.optim\.lr_scheduler\.ReduceLROnPlateau: ReduceOnPlateau: factor must be"),
])
def test_bad_input_is_refused_naming_argument_and_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_schedule_presets_point_to_the_plateau_rule():
    for qualified in (TORCH, PADDLE, MS_EXP):
        with pytest.raises(NotImplementedError, match=r"metric-driven.*ReduceOnPlateau"
                                                      r"\.from_native.*plateau_scheduler"):
            schedule_preset(qualified)


def test_nan_and_inf_metrics_follow_ieee_comparisons():
    rule = ReduceOnPlateau(patience=0, factor=0.5)
    assert rule.lrs(1.0, [NAN, 1.0, NAN]) == [0.5, 0.5, 0.25]
    assert math.isnan(rule.replace(first_is_best=True).report(
        rule.replace(first_is_best=True).start(1.0), NAN).best)
