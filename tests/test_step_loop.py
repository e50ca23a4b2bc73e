"""The own path's one step loop (``unified_opt.step_loop``) and a parameter without a
gradient at some steps.

Every backend indexes the per-step hyperparameters (``spec.at_step``) and the lr by the
optimizer's steps taken, and runs each update with the parameter's own count of updates
(bias corrections, SGD's first-step rule); a parameter without a gradient is left alone,
its count too. The float64 oracle does the same (``Reference.step`` takes None for a
missing gradient), and the default cases ``missing_grad_*`` (``Case.missing_gradients``)
hold every backend to it: torch and Paddle follow it, MindSpore (a gradient tuple with
every parameter) does not run them and the report says why. The two ways the copies of
the loop had drifted apart (``at_step`` by the parameter's count; a count that advances
without an update) each fail those cases.
"""

import dataclasses

import numpy as np
import pytest
from conftest import require
from support import assert_passes, follow, judge

import unified_opt as uo
from unified_opt.conformance.cases import Case, default_cases
from unified_opt.conformance.cases.case import MISSING_GRADIENTS_REFUSED
from unified_opt.conformance.compare import compare
from unified_opt.conformance.trajectory import (
    Recorder,
    floor_trajectories,
    reference_trajectory,
)
from unified_opt.conformance.worker import driver_class
from unified_opt.ops import numpy_ops
from unified_opt.porting.state import read_state
from unified_opt.schedules import Step

MISSING_CASES = [c for c in default_cases() if c.missing_gradients]
ADAMW = next(c for c in MISSING_CASES if c.spec.name == "adamw")
#: the same cases through the conformance runner (every installed backend, a worker
#: process each), under ids of their own
WORKER_CASES = [dataclasses.replace(c, id=f"step_loop_{c.id}") for c in MISSING_CASES]


# -- the oracle ---------------------------------------------------------------------------

def test_the_reference_leaves_a_parameter_without_a_gradient_alone():
    spec = uo.AdamW(lr=uo.schedules.Cosine(lr=0.1, T_max=10),
                    weight_decay=Step(lr=0.3, step_size=1, gamma=0.5))
    start = {"a": np.array([1.0, -2.0]), "b": np.array([0.5])}
    ref = uo.reference(spec, start)
    g = {"a": np.array([0.3, 0.1]), "b": np.array([-1.0])}
    ref.step({"a": g["a"], "b": None})
    np.testing.assert_array_equal(ref.params["b"], start["b"])
    np.testing.assert_array_equal(ref.state["b"]["exp_avg"], [0.0])
    assert ref.param_steps == {"a": 1, "b": 0} and ref.step_count == 1
    ref.step(g)
    # b's first update: the spec of optimizer step 1 (its decay, its lr), update step 1
    at_1 = spec.at_step(1)
    expected, _ = at_1.update(start["b"], g["b"], spec.init(start["b"], numpy_ops),
                              lr=spec.lr_at(1), step=1, ops=numpy_ops)
    np.testing.assert_array_equal(ref.params["b"], expected)
    assert ref.param_steps == {"a": 2, "b": 1} and ref.lrs == [spec.lr_at(0), spec.lr_at(1)]


def test_a_missing_gradient_with_workers_is_refused():
    spec = uo.DGCMomentum(lr=0.1)
    ref = uo.reference(spec, {"a": np.ones(3)}, workers=2)
    with pytest.raises(ValueError, match=r"grads\[1\]\['a'\] is None"):
        ref.step([{"a": np.ones(3)}, {"a": None}])


# -- the case -------------------------------------------------------------------------------

def test_a_case_names_the_steps_without_a_gradient():
    case = Case(id="missing", spec=uo.SGD(lr=0.1), params={"w": (3,), "b": (2,)},
                missing_gradients={"b": [0, 4]})
    assert case.missing_gradients == {"b": (0, 4)}
    assert case.gradients(0)["b"] is None and case.gradients(1)["b"] is not None
    assert case.gradients(4)["w"] is not None
    assert Case.from_dict(case.to_dict()) == case
    assert "missing_gradients" not in dataclasses.replace(
        case, missing_gradients={}).to_dict()
    assert case.runs_on("torch") and case.runs_on("paddle")
    assert not case.runs_on("mindspore")
    assert case.refused_on("mindspore") == \
        f"not run on mindspore: {MISSING_GRADIENTS_REFUSED['mindspore']}"
    assert case.refused_on("torch") is None


@pytest.mark.parametrize("fields, error", [
    (dict(missing_gradients={"x": (1,)}), "names 'x', which is not a parameter"),
    (dict(missing_gradients={"w": (3, 1)}), "must be increasing"),
    (dict(missing_gradients={"w": 3}), "must be a sequence"),
    (dict(missing_gradients=[("w", (1,))]), "must be a mapping"),
    (dict(missing_gradients={"w": (-1,)}), r"missing_gradients\['w'\]\[0\]"),
    (dict(missing_gradients={"w": (1,)}, spec=uo.DGCMomentum(lr=0.1), workers=2),
     "a distributed case"),
])
def test_a_case_refuses_what_it_cannot_mean(fields, error):
    fields = {"spec": uo.SGD(lr=0.1), **fields}
    with pytest.raises((TypeError, ValueError), match=error):
        Case(id="bad", params={"w": (3,)}, **fields)


def test_the_default_cases_make_at_step_matter():
    for case in MISSING_CASES:
        assert case.spec.varies_per_step(), case.id
        fewer = {n for n, steps in case.missing_gradients.items() if steps}
        assert {"w3d", "bias", "ln.gamma"} <= fewer, case.id


# -- power: the two drifts fail the cases ---------------------------------------------------

def _loop(case, at_step_of, step_of):
    """The case's float64 run with ``at_step`` indexed by ``at_step_of(t, count)`` and the
    update's step ``step_of(t, count)`` (``t``: 0-based optimizer step, ``count``: the
    parameter's updates, this one included)."""
    spec = case.spec
    params = {n: a.astype(np.float64) for n, a in case.initial_params().items()}
    state = {n: spec.init(p, numpy_ops) for n, p in params.items()}
    counts = dict.fromkeys(params, 0)
    recorder = Recorder()
    for t in range(case.steps):
        lr = spec.lr_at(t)
        with np.errstate(all="ignore"):
            for name, grad in case.gradients(t).items():
                if grad is None:
                    continue
                counts[name] += 1
                params[name], state[name] = spec.at_step(at_step_of(t, counts[name])).update(
                    params[name], grad.astype(np.float64), state[name], lr=lr,
                    step=step_of(t, counts[name]), ops=numpy_ops)
        recorder.add(lr, params, state)
    return recorder.trajectory()


@pytest.mark.parametrize("case", MISSING_CASES, ids=lambda c: c.id)
def test_at_step_by_the_parameters_count_fails(case):
    oracle = reference_trajectory(case.spec, case)
    floors = floor_trajectories(case.spec, case)
    same = _loop(case, lambda t, count: t, lambda t, count: count)
    assert compare(same, oracle, floors).passed        # the loop above is the oracle's
    drifted = _loop(case, lambda t, count: count - 1, lambda t, count: count)
    assert not compare(drifted, oracle, floors).passed


def test_counting_a_step_without_an_update_fails():
    oracle = reference_trajectory(ADAMW.spec, ADAMW)
    floors = floor_trajectories(ADAMW.spec, ADAMW)
    drifted = _loop(ADAMW, lambda t, count: t, lambda t, count: t + 1)
    assert not compare(drifted, oracle, floors).passed


# -- the backends ---------------------------------------------------------------------------

@pytest.mark.parametrize("backend, path", [
    pytest.param("torch", "auto", marks=require("torch")),     # the native classes
    pytest.param("torch", "own", marks=require("torch")),
    pytest.param("paddle", "auto", marks=require("paddle")),   # own: at_step varies
])
@pytest.mark.parametrize("case", MISSING_CASES, ids=lambda c: c.id)
def test_torch_and_paddle_follow_the_oracle(case, backend, path):
    run = assert_passes(follow(backend, case, path))
    if backend == "paddle":
        assert run.decision.path == "own"


def test_every_backend_in_the_conformance_runner(worker_runs):
    """MindSpore refuses the cases (its optimizers take a gradient per parameter)."""
    assert all(case.refused_on("mindspore") for case in WORKER_CASES)
    worker_runs.assert_cases_pass_or_are_refused(WORKER_CASES)


@require("torch")
def test_torch_fused_sgd_and_a_late_first_gradient():
    """torch's fused SGD with momentum (uo.build's SGD on the CPU) raises a TypeError when
    a parameter gets its first gradient after the others got theirs (torch 2.13): uo's
    step runs that one step unfused, with torch SGD's numbers (here bit for bit those of
    the for-loop class), and the next steps fused again."""
    import torch

    def run(**flags):
        a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.SGD([a, b], lr=0.1, momentum=0.9, **flags) if flags else \
            uo.build(uo.SGD(lr=0.1, momentum=0.9), [("a", a), ("b", b)])
        for t in range(4):
            a.grad = torch.full((3,), 1.0 + t)
            b.grad = None if t == 0 else torch.full((3,), 0.5 * t)
            opt.step()
        return opt, a.detach().clone(), b.detach().clone()

    opt, a, b = run()
    assert opt.param_groups[0]["fused"] is True
    _, a_loop, b_loop = run(foreach=False)
    assert torch.equal(a, a_loop) and torch.equal(b, b_loop)
    with pytest.raises(TypeError, match="NoneType"):      # what torch's fused class does
        run(fused=True)


# -- Paddle's count of steps taken ----------------------------------------------------------

def _driver(backend, arrays=None, path="auto"):
    return driver_class(backend)(ADAMW.spec, ADAMW.initial_params() if arrays is None
                                 else arrays, path=path, total_steps=ADAMW.steps)


def _run(driver, steps, recorder):
    for t in steps:
        lr = driver.step(ADAMW.gradients(t))
        recorder.add(lr, driver.params_numpy(), driver.state_numpy())


@require("paddle")
def test_paddle_counts_its_steps_in_an_accumulator():
    driver = _driver("paddle")
    _run(driver, range(12), Recorder())
    import paddle

    optimizer = driver.optimizer
    assert optimizer.steps_taken() == 12
    updates = {n: 12 - sum(t < 12 for t in ADAMW.missing_gradients.get(n, ()))
               for n in driver.names}
    assert {n: int(optimizer._get_accumulator("step", p).item())
            for n, p in driver.params.items()} == updates
    saved = paddle.optimizer.Optimizer.state_dict(optimizer)      # Paddle's own form
    # a new build over the same parameters names its accumulators the same
    again = uo.build(ADAMW.spec, list(driver.params.items()))
    assert again.steps_taken() == 0
    again.set_state_dict(saved)
    assert again.steps_taken() == 12
    # a state dict from before the count: the most updates of any parameter
    counter = again._get_accumulator("steps_taken", driver.params["w"])
    assert counter.name in saved
    older = {k: v for k, v in saved.items() if k != counter.name}
    third = uo.build(ADAMW.spec, list(driver.params.items()))
    third.set_state_dict(older)
    assert third.steps_taken() == max(updates.values()) == 12


@pytest.mark.parametrize("first, second", [
    pytest.param("paddle", "paddle", marks=require("paddle")),
    pytest.param("paddle", "torch", marks=[require("paddle"), require("torch")]),
    pytest.param("torch", "paddle", marks=[require("paddle"), require("torch")]),
])
def test_a_run_with_missing_gradients_resumes_from_its_state_file(tmp_path, first, second):
    """25 steps, the state file, 25 more in a new optimizer (another framework's): the
    50 steps follow the oracle, and the file holds the steps taken (25), not the most
    updates of a parameter (ln.gamma had 12)."""
    recorder = Recorder()
    one = _driver(first)
    _run(one, range(25), recorder)
    uo.save_state(one.optimizer, tmp_path / "run.safetensors")
    saved = read_state(tmp_path / "run.safetensors")
    assert saved.steps == 25 and saved.position == 25
    assert saved.param_steps["ln.gamma"] == 12 and saved.param_steps["w"] == 25
    two = _driver(second, one.params_numpy())
    # the drivers' bare arrays keep one layout on every framework: the square weight says
    # so (across frameworks, load_state refuses to guess a square weight's layout)
    same_layout = {"w": lambda array: array} if first != second else None
    uo.load_state(two.optimizer, tmp_path / "run.safetensors", transform=same_layout)
    _run(two, range(25, 50), recorder)
    comparison = judge(recorder.trajectory(), ADAMW)
    assert comparison.passed, comparison.detail


# -- MindSpore: the graph form indexes at_step as the PyNative loop does ---------------------

@require("mindspore")
def test_mindspore_graph_and_pynative_agree_on_per_step_hyperparameters():
    """A weight-decay schedule that changes every 3 steps and a momentum-cycling lr:
    GRAPH_MODE's ``construct`` (backends/mindspore/graph.py) and PyNative's step loop give
    the same bits over 10 steps."""
    import mindspore as ms
    from mindspore import Tensor, nn

    specs = [uo.AdamW(lr=0.01, weight_decay=Step(lr=0.3, step_size=3, gamma=0.5)),
             uo.SGD(lr=uo.schedules.OneCycle(max_lr=0.1, total_steps=10, start_lr=0.004,
                                             end_lr=1e-4, cycle_momentum=True),
                    momentum=0.9)]
    rng = np.random.default_rng(0)
    data = [(Tensor(rng.standard_normal((8, 4)).astype(np.float32)),
             Tensor(rng.standard_normal((8, 2)).astype(np.float32))) for _ in range(10)]

    def train(spec, mode):
        ms.set_context(mode=mode)
        ms.set_seed(0)
        net = nn.Dense(4, 2, weight_init="normal")
        opt = uo.build(spec, net.trainable_params(), path="own")
        step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
        for x, y in data:
            step(x, y)
        return [p.asnumpy().copy() for p in net.trainable_params()], opt

    try:
        for spec in specs:
            pynative, _ = train(spec, ms.PYNATIVE_MODE)
            graph, opt = train(spec, ms.GRAPH_MODE)
            assert int(opt.global_step.asnumpy()[0]) == 10
            for a, b in zip(pynative, graph):
                assert a.tobytes() == b.tobytes(), spec
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
