"""``add_param_group`` after ``uo.build`` on MindSpore (PyNative): the own path and the
``mindspore.experimental.optim`` classes take a group (its own lr and weight decay)
after k steps, follow the float64 oracle of a run where those parameters joined then
(the conformance rule), match torch doing the same add (torch's own path bit for bit,
torch's class by the same rule), and ``uo.save_state`` -> ``uo.resume`` keeps the
added parameters and their own step counts; what a path cannot take is refused,
before anything changes.

MindSpore runs in this process (conftest imports it first); torch runs in a
subprocess.
"""

import json
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from conftest import require
from support import Replay, judge

import unified_opt as uo
from unified_opt.conformance.trajectory import Recorder, Trajectory
from unified_opt.ops import numpy_ops
from unified_opt.porting.state import read_state

pytestmark = require("mindspore")
ms = pytest.importorskip("mindspore")

SHAPES = {"w": (5, 4), "b": (4,)}
BEFORE, AFTER = 3, 5                    # steps before and after the add
ADDED = {"lr": 0.02, "weight_decay": 0.0}
OWN = {"adamw": uo.AdamW(lr=0.05, weight_decay=0.1),
       "sgd": uo.SGD(lr=0.05, momentum=0.9, weight_decay=0.01)}


def _init():
    rng = np.random.default_rng(7)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}


def _grads():
    rng = np.random.default_rng(8)
    return [{n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
            for _ in range(BEFORE + AFTER + 3)]


@dataclass(frozen=True)
class AddedLater(Replay):
    """A replay where ``late`` parameters have no gradient before step ``added_at``
    (the oracle leaves them and their step counts alone until then)."""

    added_at: int = 0
    late: tuple = ()

    def gradients(self, step: int) -> dict:
        return {n: None if n in self.late and step < self.added_at else
                np.array(g, dtype=np.float32) for n, g in self.grads[step].items()}


def _case(spec, before):
    group = uo.Group(match="b", **ADDED)
    return AddedLater(spec, _init(), tuple(_grads()[:before + AFTER]), (group,),
                      added_at=before, late=("b",))


def _params():
    return {n: ms.Parameter(ms.Tensor(a), name=n) for n, a in _init().items()}


def _run(spec, before, path_or_prefer, read_state_of):
    """``before`` steps over w, the add of b, ``AFTER`` steps over both: the optimizer,
    its parameters and the trajectory (b's initial values and state before the add)."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params, grads, recorder = _params(), _grads(), Recorder()
    opt = uo.build(spec, [("w", params["w"])], backend="mindspore", **path_or_prefer)
    initial = {k: np.array(v) for k, v in
               spec.init(np.zeros(SHAPES["b"], np.float32), numpy_ops).items()}
    for t in range(before + AFTER):
        if t == before:
            opt.add_param_group({"params": [("b", params["b"])], **ADDED})
        names = ["w", "b"] if t >= before else ["w"]
        opt(tuple(ms.Tensor(grads[t][n]) for n in names))
        values = {n: p.asnumpy() for n, p in params.items()}
        state = {n: read_state_of(opt, params[n]) if t >= before or n == "w" else initial
                 for n in params}
        recorder.add(spec.lr, values, state)
    return opt, params, recorder.trajectory()


def _own_state(opt, p):
    return {k: v.asnumpy() for k, v in opt.spec_state(p).items()}


# -- torch, in a subprocess -------------------------------------------------------------

TORCH_RUNS = """
import json, sys
import numpy as np, torch
import unified_opt as uo
out, runs = sys.argv[1], json.loads(sys.argv[2])
rng = np.random.default_rng(7)
init = {n: rng.standard_normal(s).astype(np.float32) for n, s in (("w", (5, 4)), ("b", (4,)))}
rng = np.random.default_rng(8)
grads = [{n: rng.standard_normal(a.shape).astype(np.float32) for n, a in init.items()}
         for _ in range(%(steps)d)]
saved = {}
for key, (kind, spec, before, added) in runs.items():
    steps = before + %(after)d
    p = {n: torch.nn.Parameter(torch.tensor(a)) for n, a in init.items()}
    spec = uo.spec_from_dict(spec) if kind == "own" else spec
    if kind == "own":
        opt = uo.build(spec, [("w", p["w"])], path="own")
    else:
        cls = getattr(torch.optim, kind)
        opt = cls([p["w"]], **spec)
    for t in range(steps):
        if t == before:
            opt.add_param_group({"params": [p["b"]] if kind != "own" else [("b", p["b"])],
                                 **added})
        for n in (("w", "b") if t >= before else ("w",)):
            p[n].grad = torch.tensor(grads[t][n])
        opt.step()
        opt.zero_grad()
        for n, q in p.items():
            saved.setdefault(f"{key}/{n}", []).append(q.detach().numpy().copy())
np.savez(out, **{k: np.stack(v) for k, v in saved.items()})
"""


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory):
    """The torch runs of these tests: own path (``uo.build(..., path="own")``) and
    torch's classes, each adding b after its steps; "<run>/<parameter>" -> the values
    after each step."""
    pytest.importorskip("torch")
    runs = {f"own-{name}": ("own", spec.to_dict(), BEFORE, ADDED)
            for name, spec in OWN.items()}
    runs["AdamW"] = ("AdamW", {"lr": 0.05, "weight_decay": 0.1}, 0, ADDED)
    runs["SGD"] = ("SGD", {"lr": 0.05, "momentum": 0.9, "maximize": True}, BEFORE, ADDED)
    out = tmp_path_factory.mktemp("torch") / "runs.npz"
    code = TORCH_RUNS % {"steps": BEFORE + AFTER, "after": AFTER}
    subprocess.run([sys.executable, "-c", code, str(out), json.dumps(runs)], check=True,
                   timeout=300)
    with np.load(out) as held:
        return {k: held[k] for k in held.files}


# -- the own path -----------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(OWN))
def test_the_own_path_takes_a_group_after_steps(name, torch_runs, tmp_path):
    spec = OWN[name]
    opt, params, trajectory = _run(spec, BEFORE, {"path": "own"}, _own_state)
    assert [(g["lr"], g["weight_decay"]) for g in opt.param_groups] == \
        [(0.05, spec.weight_decay), (0.02, 0.0)]
    comparison = judge(trajectory, _case(spec, BEFORE))
    assert comparison.passed, comparison.detail
    assert opt.graph_form == "" and "joined at different steps" in str(uo.explain(opt))
    for n in params:                # torch's own path doing the same add: the same bits
        np.testing.assert_array_equal(trajectory.params[n], torch_runs[f"own-{name}/{n}"],
                                      err_msg=n)

    # kept in save_state: resumed, both runs take the same next steps
    uo.save_state(opt, tmp_path / "run.safetensors")
    saved = read_state(tmp_path / "run.safetensors")
    assert saved.param_steps == {"w": BEFORE + AFTER, "b": AFTER}
    again = _params()
    resumed = uo.resume(tmp_path / "run.safetensors", list(again.items()), path_taken="own")
    assert [(g["lr"], g["weight_decay"]) for g in resumed.param_groups] == \
        [(0.05, spec.weight_decay), (0.02, 0.0)]
    for n, p in again.items():
        p.set_data(ms.Tensor(params[n].asnumpy()))
    for g in _grads()[BEFORE + AFTER:]:
        opt(tuple(ms.Tensor(g[n]) for n in ("w", "b")))
        resumed(tuple(ms.Tensor(g[n]) for n in ("w", "b")))
    for n, p in params.items():
        np.testing.assert_array_equal(again[n].asnumpy(), p.asnumpy(), err_msg=n)
        for key, value in _own_state(opt, p).items():
            np.testing.assert_array_equal(_own_state(resumed, again[n])[key], value)


def test_a_group_added_before_the_first_step_is_the_build_with_it():
    spec = OWN["adamw"]
    added, _, _ = _run(spec, 0, {"path": "own"}, _own_state)
    both = _params()
    built = uo.build(spec, [{"params": [("w", both["w"])]},
                            {"params": [("b", both["b"])], **ADDED}], path="own")
    for g in _grads()[:AFTER]:
        built(tuple(ms.Tensor(g[n]) for n in ("w", "b")))
    assert not hasattr(added, "added_at_step")      # no per-parameter counts needed
    assert added.graph_form == built.graph_form and added.graph_form
    for p, q in zip(added.parameters, built.parameters):
        np.testing.assert_array_equal(p.asnumpy(), q.asnumpy(), err_msg=p.name)


def test_old_length_gradients_are_refused_with_nothing_changed():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params, grads = _params(), _grads()

    class Net(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.w, self.b = params["w"], params["b"]

        def construct(self, x):
            return (ms.ops.matmul(x, self.w) * self.b).sum()

    opt = uo.build(OWN["adamw"], [("w", params["w"])], path="own")
    train = ms.nn.TrainOneStepCell(Net(), opt)      # made before the add: w only
    x = ms.Tensor(np.ones((2, 5), np.float32))
    train(x)
    opt.add_param_group({"params": [("b", params["b"])], **ADDED})
    before = {p.name: p.asnumpy().copy() for _, p in opt.parameters_and_names()}
    with pytest.raises(ValueError, match=r"got 1 gradients for 2 parameters; the optimizer "
                                         r"held 1 parameters before add_param_group.*make "
                                         r"it again after add_param_group"):
        train(x)
    with pytest.raises(ValueError, match="before add_param_group"):
        opt((ms.Tensor(grads[0]["w"]),))
    for _, p in opt.parameters_and_names():
        np.testing.assert_array_equal(p.asnumpy(), before[p.name], err_msg=p.name)
    ms.nn.TrainOneStepCell(Net(), opt)(x)           # made after the add: both
    assert int(opt.global_step.asnumpy()[0]) == 2
    assert not np.array_equal(params["b"].asnumpy(), before["b"])


def test_the_own_path_refuses_what_it_cannot_take_with_nothing_changed():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params = _params()
    opt = uo.build(OWN["sgd"], [("w", params["w"])], path="own")
    names = [n for n, _ in opt.parameters_and_names()]
    clash = ms.Parameter(ms.Tensor(np.ones(3, np.float32)), name="w")
    with pytest.raises(ValueError, match=r"Parameter names \['w'\] are already held"):
        opt.add_param_group({"params": [("w2", clash)]})
    double = ms.Parameter(ms.Tensor(np.ones(3, np.float64)), name="d")
    with pytest.raises(TypeError, match="takes float32 parameters"):
        opt.add_param_group({"params": [("d", double)]})
    with pytest.raises(ValueError, match="already in the optimizer"):
        opt.add_param_group({"params": [params["w"]]})
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(ValueError, match="add the group in PyNative mode"):
            opt.add_param_group({"params": [("b", params["b"])]})
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert [n for n, _ in opt.parameters_and_names()] == names
    assert len(opt.param_groups) == 1 and len(opt.parameters) == 1
    opt.add_param_group({"params": [("b", params["b"])]})       # still takes a good one
    assert len(opt.param_groups) == 2


# -- the native classes ------------------------------------------------------------------

def _native_state(opt, p):
    from unified_opt.backend import record_of
    from unified_opt.backends.mindspore import BACKEND

    record = record_of(opt)
    spec = record.plans[[id(q) for q in record.params].index(id(p))].spec
    return {k: v.asnumpy() for k, v in BACKEND.native_state(record, opt, p, spec).items()}


@pytest.mark.parametrize("name, spec, before", [
    ("AdamW", uo.AdamW(lr=0.05, weight_decay=0.1), 0),
    ("SGD", uo.SGD(lr=0.05, momentum=0.9, maximize=True), BEFORE)])
def test_an_experimental_class_takes_a_group_as_torchs_class_does(name, spec, before,
                                                                    torch_runs):
    from mindspore.experimental import optim

    opt, params, trajectory = _run(spec, before, {"prefer": "native"}, _native_state)
    assert isinstance(opt, getattr(optim, name))
    comparison = judge(trajectory, _case(spec, before))
    assert comparison.passed, comparison.detail
    # torch's class doing the same add follows the same oracle by the same rule
    torch_class = Trajectory(np.full(before + AFTER, spec.lr),
                             {n: torch_runs[f"{name}/{n}"] for n in params}, {})
    comparison = judge(torch_class, _case(spec, before), state=False)
    assert comparison.passed, comparison.detail


def test_an_experimental_class_with_a_step_counter_refuses_a_group_after_a_step():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params = _params()
    opt = uo.build(OWN["adamw"], [("w", params["w"])], prefer="native")
    opt((ms.Tensor(_grads()[0]["w"]),))
    with pytest.raises(ValueError, match=r"one state_step for every parameter \(1 taken\).*"
                                         r"path='own'"):
        opt.add_param_group({"params": [("b", params["b"])]})
    assert len(opt.param_groups) == 1 and len(opt.parameters) == 1
    assert len(opt.exp_avg) == 1


def test_an_nn_class_refuses_naming_the_own_path():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params = _params()
    opt = uo.build(OWN["sgd"], [("w", params["w"])], prefer="native")
    assert isinstance(opt, ms.nn.SGD)
    with pytest.raises(ValueError, match=r"mindspore\.nn\.SGD fixes its parameter groups.*"
                                         r"path='own'"):
        opt.add_param_group({"params": [("b", params["b"])]})
    assert len(opt.param_groups) == 1 and len(opt.parameters) == 1


def test_a_mindspore_checkpoint_carries_the_joining_steps():
    """``Cell.state_dict`` holds ``added_at_step``; ``Cell.load_state_dict`` into an
    optimizer that added the group before its first step (so has none) makes it, and
    both runs take the same next step; a joining step past ``global_step`` is refused
    before anything is copied."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    grads = _grads()
    first = _params()
    opt = uo.build(OWN["adamw"], [("w", first["w"])], path="own")
    opt((ms.Tensor(grads[0]["w"]),))
    opt.add_param_group({"params": [("b", first["b"])], **ADDED})
    opt(tuple(ms.Tensor(grads[1][n]) for n in ("w", "b")))
    saved = {k: ms.Tensor(v.asnumpy()) for k, v in ms.nn.Cell.state_dict(opt).items()}
    assert saved["added_at_step"].asnumpy().tolist() == [0, 1]
    second = _params()
    again = uo.build(OWN["adamw"], [("w", second["w"])], path="own")
    again.add_param_group({"params": [("b", second["b"])], **ADDED})
    wrong = dict(saved, added_at_step=ms.Tensor(np.array([0, 3], np.int32)))
    with pytest.raises(ValueError, match=r"'added_at_step' must hold one whole step per "
                                         r"parameter \(2\), each between 0 and global_step"):
        ms.nn.Cell.load_state_dict(again, wrong)
    assert not hasattr(again, "added_at_step")
    assert int(again.global_step.asnumpy()[0]) == 0
    ms.nn.Cell.load_state_dict(again, saved)
    assert again.added_at_step.asnumpy().tolist() == [0, 1]
    assert again.graph_form == "" and "joined at different steps" in again.graph_why
    for n, p in second.items():
        p.set_data(ms.Tensor(first[n].asnumpy()))
    step = tuple(ms.Tensor(grads[2][n]) for n in ("w", "b"))
    opt(step)
    again(step)
    for n, p in first.items():
        np.testing.assert_array_equal(second[n].asnumpy(), p.asnumpy(), err_msg=n)


def test_an_optimizer_that_stepped_in_a_compiled_graph_refuses_a_group():
    """An ``@ms.jit`` step compiled before the add keeps the parameters it was compiled
    with: the add is refused, nothing changed."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params = _params()
    opt = uo.build(uo.SGD(lr=0.1), [("w", params["w"])], path="own")
    grad = ms.Tensor(_grads()[0]["w"])

    @ms.jit
    def step(g):
        return opt((g,))

    step(grad)
    assert int(opt.global_step.asnumpy()[0]) == 1
    with pytest.raises(ValueError, match=r"stepped compiled into a graph.*go on stepping "
                                         r"only those"):
        opt.add_param_group({"params": [("b", params["b"])]})
    assert len(opt.param_groups) == 1 and len(opt.parameters) == 1


def test_an_experimental_class_refuses_old_length_gradients_and_graph_mode():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params, grads = _params(), _grads()
    spec = uo.SGD(lr=0.05, momentum=0.9, maximize=True)
    opt = uo.build(spec, [("w", params["w"])], prefer="native")
    opt((ms.Tensor(grads[0]["w"]),))
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(ValueError, match="add the group in PyNative mode"):
            opt.add_param_group({"params": [("b", params["b"])]})
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert len(opt.param_groups) == 1 and len(opt.accum) == 1
    opt.add_param_group({"params": [("b", params["b"])]})
    before = {p.name: p.asnumpy().copy() for _, p in opt.parameters_and_names()}
    with pytest.raises(ValueError, match=r"got 1 gradients for 2 parameters; it held 1 "
                                         r"parameters before add_param_group"):
        opt((ms.Tensor(grads[1]["w"]),))
    for _, p in opt.parameters_and_names():
        np.testing.assert_array_equal(p.asnumpy(), before[p.name], err_msg=p.name)


def test_a_group_added_before_the_first_step_runs_compiled_into_a_graph():
    """The graph forms are made again over every parameter: an ``@ms.jit`` step in
    GRAPH_MODE (the custom operators) gives the PyNative numbers bit for bit."""
    runs = []
    for mode in (ms.PYNATIVE_MODE, ms.GRAPH_MODE):
        ms.set_context(mode=ms.PYNATIVE_MODE)
        params = _params()
        opt = uo.build(OWN["adamw"], [("w", params["w"])], path="own",
                       options={"graph": "custom"})
        opt.add_param_group({"params": [("b", params["b"])], **ADDED})
        assert opt.graph_form == "custom"

        @ms.jit
        def step(gw, gb):
            return opt((gw, gb))

        ms.set_context(mode=mode)
        try:
            for g in _grads()[:3]:
                pair = (ms.Tensor(g["w"]), ms.Tensor(g["b"]))
                step(*pair) if mode == ms.GRAPH_MODE else opt(pair)
        finally:
            ms.set_context(mode=ms.PYNATIVE_MODE)
        runs.append({n: p.asnumpy() for n, p in params.items()})
    for n in SHAPES:
        np.testing.assert_array_equal(runs[1][n], runs[0][n], err_msg=n)
