"""Scheduled lr and weight decay on native MindSpore ``nn`` classes with no step limit.

On CPU a schedule reaches an ``nn`` optimizer as a ScheduleCell (Python computes
``float32(scale * s(t))`` at every step through an ``ops.Custom`` pyfunc op), so it needs
no ``options={"total_steps": N}``. Each case runs well past the per-step list it replaces
(its length T): the parameters follow the float64 numpy oracle (the conformance rule), the
lr equals ``float32(scale * s(t))``, and the optimizer is bit-identical to the same class
built by hand with MindSpore's per-step list while that list lasts (which then fails
with MindSpore's Gather error, the defect this replaces). ``total_steps`` given is a step
limit with our error; on devices without the pyfunc op (forced here) the per-step list
stays, with our error before MindSpore's.
"""

import numpy as np
import pytest
from conftest import require
from support import case_of, judge

import unified_opt as uo
from unified_opt.backend import record_of
from unified_opt.conformance.trajectory import Recorder

pytestmark = require("mindspore")

T = 15                # the per-step list's length, as total_steps=T would have made it
STEPS = 50            # a conformance case's steps: well past T
SHAPES = {"w": (3, 4), "b": (5,)}
COSINE = uo.schedules.Cosine(lr=0.05, T_max=20, eta_min=0.001)
WD = uo.schedules.Cosine(lr=0.2, T_max=12, eta_min=0.01)        # a weight-decay schedule
GATHER = "For 'Gather', the 'input_indices' should be in the range"


def parameters(arrays):
    from mindspore import Parameter, Tensor
    return {n: Parameter(Tensor(a.copy()), name=n) for n, a in arrays.items()}


def listed(schedule, scale=1.0, n=T):
    """MindSpore's per-step list, as the backend built it before: scale * s(t) in float."""
    return [scale * schedule(t) for t in range(n)] if scale != 1.0 else \
        [schedule(t) for t in range(n)]


def decay_table(schedule, n=T):
    """MindSpore's dynamic weight decay by hand: a Cell gathering from the table."""
    from mindspore import Tensor, nn, ops

    class Table(nn.Cell):
        def __init__(self):
            super().__init__()
            self.values = Tensor(np.array([schedule(t) for t in range(n)], np.float32))

        def construct(self, global_step):
            return ops.gather(self.values, global_step, 0).reshape(())

    return Table()


def stepper(optimizer, params, driver):
    """One training step from numpy gradients: ``opt(grads)``, or an
    ``nn.TrainOneStepCell`` over a loss whose gradient is exactly the given one
    (``sum(p * g)``: d/dp = g, times the sens 1.0)."""
    from mindspore import Tensor, nn

    names = list(params)
    if driver == "direct":
        def step(grads):
            optimizer(tuple(Tensor(grads[n]) for n in names))
        return step

    class Linear(nn.Cell):   # the parameters in SHAPES' order
        def __init__(self):
            super().__init__()
            self.w, self.b = params["w"], params["b"]

        def construct(self, gw, gb):
            return (self.w * gw).sum() + (self.b * gb).sum()

    assert names == ["w", "b"]
    train = nn.TrainOneStepCell(Linear(), optimizer)

    def step(grads):
        train(Tensor(grads["w"]), Tensor(grads["b"]))
    return step


def lr_of(optimizer):
    """Each parameter's lr for the next step, as MindSpore holds it (float32)."""
    lr = optimizer.get_lr()
    lrs = lr if optimizer.is_group_lr else (lr,) * len(optimizer.parameters)
    return [np.float32(x.asnumpy()) for x in lrs]


def follow(spec, by_hand, *, groups=None, driver="direct", options=None):
    """Build ``spec`` with uo.build and run it a case's steps through ``driver``,
    checking the lr against ``float32(lr_scale * s(t))`` at every step and the parameters
    and states against the float64 oracle (the conformance rule); ``by_hand(params)`` builds the
    class with MindSpore's per-step list of T entries, which must stay bit-identical
    for T steps and then fail with MindSpore's Gather error."""
    from unified_opt.backends.mindspore.native import native_state

    case = case_of(f"schedule_cell_{spec.name}", spec, SHAPES, steps=STEPS,
                   groups=tuple(groups or ()))
    arrays = case.initial_params()
    mine, theirs = parameters(arrays), parameters(arrays)
    # the class (prefer="native"): prefer="speed" may take the faster own path
    optimizer = uo.build(spec, list(mine.items()), groups=groups, options=options or {},
                         prefer="native")
    record = uo.explain(optimizer)
    hand = by_hand(theirs)
    step_mine = stepper(optimizer, mine, driver)
    step_hand = stepper(hand, theirs, driver)
    plans = dict(zip(mine, record_of(optimizer).plans))
    recorder = Recorder()
    for t in range(case.steps):
        grads = case.gradients(t)
        lr = spec.lr_at(t)
        expected = [np.float32(plans[n].lr(lr)) for n in mine]
        assert lr_of(optimizer) == expected, (t, lr_of(optimizer), expected)
        step_mine(grads)
        recorder.add(lr, {n: p.asnumpy() for n, p in mine.items()},
                     {n: {k: v.asnumpy() for k, v in native_state(
                         record.native_class, optimizer, p, plans[n].spec).items()}
                      for n, p in mine.items()})
        if t < T:
            step_hand(grads)
            for n, p in theirs.items():
                assert np.array_equal(p.asnumpy(), mine[n].asnumpy()), (t, n)
                spec_n = plans[n].spec
                ours = native_state(record.native_class, optimizer, mine[n], spec_n)
                for key, value in native_state(record.native_class, hand, p, spec_n).items():
                    assert np.array_equal(value.asnumpy(), ours[key].asnumpy()), (t, n, key)
        elif t == T:   # what total_steps=T gave: MindSpore's error past the list
            with pytest.raises(RuntimeError, match=GATHER):
                step_hand(grads)
                hand.global_step.asnumpy()
    comparison = judge(recorder.trajectory(), case)
    assert comparison.passed, comparison.detail
    assert int(optimizer.global_step.asnumpy()[0]) == STEPS
    return optimizer


def _nn(name):
    import mindspore.nn as nn
    return getattr(nn, name)


def _ordered(ps, *groups):
    """nn group dicts (names -> Parameters) plus order_params."""
    return [{**g, "params": [ps[n] for n in g["params"]]} for g in groups] + \
        [{"order_params": list(ps.values())}]


# (id, spec, groups, native class, by hand with the per-step list of T entries)
CASES = [
    ("momentum-cosine", uo.SGD(lr=COSINE, momentum=0.9, momentum_init="zeros"), None,
     "mindspore.nn.Momentum",
     lambda ps: _nn("Momentum")(list(ps.values()), learning_rate=listed(COSINE),
                                momentum=0.9)),
    ("adam-cosine", uo.Adam(lr=COSINE, eps_placement="eps_hat"), None, "mindspore.nn.Adam",
     lambda ps: _nn("Adam")(list(ps.values()), learning_rate=listed(COSINE))),
    ("momentum-group-lr-scale", uo.SGD(lr=COSINE, momentum=0.9, momentum_init="zeros",
                                       weight_decay=0.01),
     [uo.Group(match="b", lr_scale=0.3)], "mindspore.nn.Momentum",
     lambda ps: _nn("Momentum")(_ordered(
         ps, {"params": ["w"], "weight_decay": 0.01},
         {"params": ["b"], "lr": listed(COSINE, 0.3), "weight_decay": 0.01}),
         learning_rate=listed(COSINE), momentum=0.9)),
    ("adamweightdecay-dynamic-decay", uo.preset("mindspore.nn.AdamWeightDecay",
                                                learning_rate=COSINE, weight_decay=WD)
     .replace(no_decay_names=()),
     [uo.Group(match="b", lr_scale=0.5)], "mindspore.nn.AdamWeightDecay",
     lambda ps: _nn("AdamWeightDecay")(_ordered(
         ps, {"params": ["w"], "weight_decay": decay_table(WD)},
         {"params": ["b"], "lr": listed(COSINE, 0.5), "weight_decay": decay_table(WD)}),
         learning_rate=listed(COSINE))),
    ("rprop-dynamic-decay", uo.preset("mindspore.nn.Rprop", learning_rate=COSINE,
                                      weight_decay=WD).replace(no_decay_names=()), None,
     "mindspore.nn.Rprop",
     lambda ps: _nn("Rprop")(_ordered(ps, {"params": ["w", "b"],
                                           "weight_decay": decay_table(WD)}),
                             learning_rate=listed(COSINE))),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_native_schedule_runs_past_any_step_limit(case):
    _, spec, groups, native, by_hand = case
    optimizer = follow(spec, by_hand, groups=groups)
    decision = uo.explain(optimizer)
    assert decision.native == native, str(decision)
    assert "ScheduleCell" in decision.reason and "no step limit" in decision.reason
    assert type(optimizer.learning_rate).__name__ in ("ScheduleCell", "CellList")


@pytest.mark.parametrize("case", [CASES[0], CASES[3]], ids=[CASES[0][0], CASES[3][0]])
def test_native_schedule_in_a_graph_mode_train_step(case):
    import mindspore as ms
    _, spec, groups, native, by_hand = case
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        optimizer = follow(spec, by_hand, groups=groups, driver="train_one_step")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert uo.explain(optimizer).native == native


def test_experimental_classes_still_take_a_constant_lr_only():
    decision = uo.explain(uo.AdamW(lr=COSINE), "mindspore")
    assert decision.path == "own"
    rejected = dict(decision.rejected)["mindspore.experimental.optim.AdamW"]
    assert any(r.startswith("a constant lr") for r in rejected)


def test_a_scheduled_lr_survives_a_checkpoint(tmp_path):
    import mindspore as ms
    spec = uo.Adam(lr=COSINE, eps_placement="eps_hat")
    case = case_of("schedule_cell_checkpoint", spec, SHAPES)
    arrays = case.initial_params()

    def fresh():
        return uo.build(spec, list(parameters(arrays).items()))

    straight, resumed = fresh(), fresh()
    for t in range(5):
        stepper(straight, dict(zip(arrays, straight.parameters)), "direct")(case.gradients(t))
    ms.save_checkpoint(straight, str(tmp_path / "opt.ckpt"))
    ms.load_param_into_net(resumed, ms.load_checkpoint(str(tmp_path / "opt.ckpt")))
    assert float(resumed.get_lr().asnumpy()) == np.float32(COSINE(5))
    for t in range(5, T):
        for opt in (straight, resumed):
            stepper(opt, dict(zip(arrays, opt.parameters)), "direct")(case.gradients(t))
    for a, b in zip(straight.parameters, resumed.parameters):
        assert np.array_equal(a.asnumpy(), b.asnumpy())


# -- options={"total_steps": N} ---------------------------------------------------------------

def _momentum_decay_preset():
    """nn.Momentum with a weight-decay schedule over every parameter (no beta/gamma rule)."""
    return uo.preset("mindspore.nn.Momentum", learning_rate=0.05, momentum=0.9,
                     weight_decay=WD).replace(no_decay_names=())


def _one_parameter():
    import mindspore as ms
    return ms.Parameter(ms.Tensor(np.ones(3, np.float32)), name="w")


def _grad():
    import mindspore as ms
    return (ms.Tensor(np.ones(3, np.float32)),)


@pytest.mark.parametrize("spec", [
    uo.SGD(lr=COSINE, momentum=0.9, momentum_init="zeros"),
    _momentum_decay_preset(),
    uo.Adam(lr=COSINE, weight_decay=0.1),          # the own implementation
], ids=["native-lr", "native-decay", "own"])
def test_total_steps_is_a_step_limit_with_our_error(spec):
    p = _one_parameter()
    opt = uo.build(spec, [("w", p)], options={"total_steps": 3})
    decision = uo.explain(opt)
    if decision.path == "native":
        assert "options total_steps=3 limits it: step 4 raises RuntimeError" in decision.reason
    for _ in range(3):
        opt(_grad())
    before = p.asnumpy().copy()
    with pytest.raises(RuntimeError, match=r"was built with options=\{'total_steps': 3\}: "
                                           r"step 4 is past it"):
        opt(_grad())
        p.asnumpy()      # PyNative may report the op's error at the next read
    assert np.array_equal(p.asnumpy(), before)
    assert int(opt.global_step.asnumpy()[0]) == 3


@pytest.mark.parametrize("total_steps,error,phrase", [
    (10.0, TypeError, r"options\['total_steps'\] must be an int, got 10.0"),
    (True, TypeError, r"options\['total_steps'\] must be an int, got True"),
    (0, ValueError, r"options\['total_steps'\] must be >= 1, got 0"),
])
def test_total_steps_must_be_a_positive_int(total_steps, error, phrase):
    with pytest.raises(error, match=phrase):
        uo.build(uo.SGD(lr=COSINE), [("w", _one_parameter())],
                 options={"total_steps": total_steps})


def test_total_steps_is_refused_without_a_schedule():
    with pytest.raises(ValueError, match=r"options\['total_steps'\]=10 is for a scheduled lr "
                                         "or weight decay"):
        uo.build(uo.SGD(lr=0.1), [("w", _one_parameter())], options={"total_steps": 10})


# -- devices without the pyfunc op: the per-step list (forced on CPU) ------------------------

@pytest.fixture
def list_device(monkeypatch):
    """This device treated as one where the schedule must be MindSpore's per-step list."""
    import unified_opt.backends.mindspore as backend
    monkeypatch.setattr(backend, "SCHEDULE_CELL_DEVICES", ())


def test_without_the_pyfunc_op_a_schedule_needs_total_steps(list_device):
    spec = uo.SGD(lr=COSINE, momentum=0.9, momentum_init="zeros")
    opt = uo.build(spec, [("w", _one_parameter())])       # no list length: own
    decision = uo.explain(opt)
    assert decision.path == "own"
    assert "options={'total_steps': N} for a scheduled lr or weight decay" in \
        " ".join(dict(decision.rejected)["mindspore.nn.Momentum"])
    with pytest.raises(ValueError, match=r"path='native'.*options=\{'total_steps': N\}"):
        uo.build(spec, [("w", _one_parameter())], path="native")


@pytest.mark.parametrize("spec,by_hand", [
    (uo.SGD(lr=COSINE, momentum=0.9, momentum_init="zeros"),
     lambda ps: _nn("Momentum")(ps, learning_rate=listed(COSINE, n=4), momentum=0.9)),
    (_momentum_decay_preset(),
     lambda ps: _nn("Momentum")([{"params": ps, "weight_decay": decay_table(WD, 4)},
                                 {"order_params": ps}], learning_rate=0.05, momentum=0.9)),
], ids=["lr", "decay"])
def test_without_the_pyfunc_op_the_list_ends_with_our_error(list_device, spec, by_hand):
    from mindspore import nn
    p, copy = _one_parameter(), _one_parameter()
    opt = uo.build(spec, [("w", p)], options={"total_steps": 4}, prefer="native")
    hand = by_hand([copy])
    assert isinstance(opt, nn.Momentum) and type(opt).__name__ == "Momentum"
    decision = uo.explain(opt)
    assert "MindSpore's per-step list [s(0), ..., s(3)]" in decision.reason
    assert "step 5 raises our RuntimeError" in decision.reason
    for _ in range(4):
        opt(_grad())
        hand(_grad())
        assert np.array_equal(p.asnumpy(), copy.asnumpy())
    with pytest.raises(RuntimeError, match=r"mindspore.nn.Momentum was built with "
                                           r"options=\{'total_steps': 4\}: step 5 is past it"):
        opt(_grad())
    assert np.array_equal(p.asnumpy(), copy.asnumpy())
    with pytest.raises(RuntimeError, match=GATHER):   # what the list alone gives
        hand(_grad())
        copy.asnumpy()
