"""The own MindSpore optimizer compiled into a graph as MindSpore operations
(``options={"graph": "ops"}``, ``backends/mindspore/graph_ops.py``: the form that runs
off the CPU), here in CPU GRAPH_MODE.

CAME with MindFormers' preset, Lamb, Lion and AdamW with a cosine schedule, each in a
GRAPH_MODE ``nn.TrainOneStepCell``, an ``@ms.jit`` step and ``ms.Model.train``, follow
the float64 oracle by the conformance rule, and agree with the PyNative run (the
kernel VM): bit for bit where the update is elementwise (IEEE float32 operations round
alike whoever runs them); where it sums (Lamb's norms, CAME's factored means) MindSpore
adds in its own order, so the rule holds both, not bits (measured here: bit for bit too,
with one kernel thread). Each step's gradients are a conformance case's adversarial
stream (zeros, 1e-30, 500, mixed signs) over ``LOOP_PARAMS``: the network is a probe
whose loss is ``sum(p * g)``, so the gradient MindSpore computes is exactly ``g``.

Also: decisions the update takes on the step or the lr (SGD's first-step rule, RAdam's
rectification) as paths the graph selects; an lr written from outside; the per-step
table a scheduled lr takes off the CPU (with the CPU faked away), and its warning; what
the form refuses, when the graph compiles; which form ``auto`` takes and
``uo.explain`` says.
"""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from support import LOOP_PARAMS, Replay, case_of, judge, record

import unified_opt as uo
from unified_opt.conformance.trajectory import Recorder
from unified_opt.devices import UnverifiedDeviceWarning
from unified_opt.schedules import Cosine

ms = pytest.importorskip("mindspore")
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops  # noqa: E402

SPECS = {
    "came_mindformers": uo.preset("mindformers.core.Came", learning_rate=1e-2,
                                  weight_decay=0.01),
    "lamb": uo.Lamb(lr=1e-2, weight_decay=0.01),
    "lion": uo.Lion(lr=1e-3, weight_decay=0.1),
    "adamw_cosine": uo.AdamW(lr=Cosine(lr=1e-2, T_max=6, eta_min=1e-3), weight_decay=0.1),
}
#: updates of elementwise operations only: the PyNative bits on every CPU
ELEMENTWISE = {"lion", "adamw_cosine"}
#: a few steps: past the cosine's restart (T_max=6), the bias corrections' early steps
STEPS = 8


@pytest.fixture
def pynative_after():
    yield
    ms.set_context(mode=ms.PYNATIVE_MODE)


class Probe(nn.Cell):
    """``loss = sum_i sum(p_i * g_i)``: the gradient of ``p_i`` is ``g_i``, exactly."""

    def __init__(self, params):
        super().__init__()
        self.params = ParameterTuple(params)
        self.n = len(params)

    def construct(self, *grads):
        loss = ops.zeros((), ms.float32)
        for i in range(self.n):
            loss = loss + (self.params[i] * grads[i]).sum()
        return loss


def _case(name):
    case = case_of(f"graph_ops_{name}", SPECS[name], LOOP_PARAMS)
    replay = Replay(case.spec, case.initial_params(),
                    tuple(case.gradients(t) for t in range(STEPS)))
    return case, replay


def _run(spec, case, form: str, options=None, steps: int = STEPS, groups=None):
    """``steps`` steps of ``case``'s gradients, ``form`` "pynative" (``opt(grads)``),
    "cell" (GRAPH_MODE ``TrainOneStepCell``), "jit" (an ``@ms.jit`` step) or "model"
    (GRAPH_MODE ``Model.train``): the trajectory (the lr each step used, parameters and
    spec state after it) and the optimizer."""
    ms.set_context(mode=ms.GRAPH_MODE if form in ("cell", "model") else ms.PYNATIVE_MODE)
    initial = case.initial_params()
    names = list(initial)
    params = [Parameter(Tensor(a.copy()), name=n) for n, a in initial.items()]
    options = dict({"graph": "ops"} if form != "pynative" else {}, **(options or {}))
    opt = uo.build(spec, list(zip(names, params)), path="own", options=options,
                   groups=groups)
    live = [n for n, p in zip(names, params) if p.size]    # the probe's inputs
    probe = Probe([p for p in params if p.size])

    def read():
        return ({n: p.asnumpy().copy() for n, p in zip(names, params)},
                {n: {k: v.asnumpy().copy() for k, v in opt.spec_state(p).items()}
                 for n, p in zip(names, params)})

    if form == "model":
        recorder, lrs = Recorder(), []

        class Reading(ms.train.Callback):
            def on_train_step_begin(self, run_context):
                lrs.append(opt.next_lr())

            def on_train_step_end(self, run_context):
                recorder.add(lrs[-1], *read())

        columns = {f"g{i}": np.stack([case.gradients(t)[n] for t in range(steps)])
                   for i, n in enumerate(live)}
        dataset = ms.dataset.NumpySlicesDataset(columns, shuffle=False)
        ms.Model(probe, optimizer=opt).train(1, dataset, callbacks=[Reading()],
                                             dataset_sink_mode=False)
        return recorder.trajectory(), opt
    if form == "pynative":
        def call(grads):
            opt(tuple(Tensor(grads[n]) for n in names))
    elif form == "cell":
        cell = nn.TrainOneStepCell(probe, opt)

        def call(grads):
            cell(*[Tensor(grads[n]) for n in live])
    else:
        grad_fn = ms.value_and_grad(probe, None, opt.parameters)

        @ms.jit
        def jitted(*grads):
            loss, gradients = grad_fn(*grads)
            opt(gradients)
            return loss

        def call(grads):
            jitted(*[Tensor(grads[n]) for n in live])

    def step(grads):
        lr = opt.next_lr()
        call(grads)
        return lr

    return record(step, read, case, steps), opt


_PYNATIVE: dict = {}


def _pynative(name):
    if name not in _PYNATIVE:
        case, _ = _case(name)
        _PYNATIVE[name] = _run(SPECS[name], case, "pynative")[0]
    return _PYNATIVE[name]


def _same_bits(a, b) -> bool:
    """Parameters and spec state of two trajectories, every step, bit for bit."""
    ours, theirs = a.quantities(), b.quantities()
    ours.pop("lr"), theirs.pop("lr")
    return ours.keys() == theirs.keys() and \
        all(ours[k].tobytes() == theirs[k].tobytes() for k in ours)


@pytest.mark.parametrize("form", ["cell", "jit", "model"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_ops_form_follows_the_oracle_and_agrees_with_pynative(pynative_after, name, form):
    case, replay = _case(name)
    got, opt = _run(SPECS[name], case, form)
    assert opt.graph_form == "ops"
    comparison = judge(got, replay)
    assert comparison.passed, (name, form, comparison.detail)
    pynative = _pynative(name)
    assert judge(pynative, replay).passed
    if name in ELEMENTWISE:
        assert _same_bits(got, pynative), (name, form)
    assert int(opt.global_step.asnumpy()[0]) == STEPS
    if isinstance(SPECS[name].lr, Cosine):     # the schedule's next lr, as PyNative writes
        assert float(opt.learning_rate.asnumpy()) == np.float32(SPECS[name].lr_at(STEPS))


@pytest.mark.parametrize("form", ["cell", "jit"])
def test_asgd_three_decisions_on_the_step_follow_pynative(pynative_after, form):
    # ASGD: the first step, the average's start (step 5) and the next mu are decisions on
    # the step. The form leaves 0-size parameters out, and their 0-d state with them (not
    # judged here: NAdam's mu_product alike)
    spec = uo.ASGD(lr=Cosine(lr=0.05, T_max=6, eta_min=1e-3), lambd=0.5, t0=2.0,
                   weight_decay=0.1)
    case = case_of("graph_ops_asgd", spec, {n: s for n, s in LOOP_PARAMS.items()
                                            if n != "empty"})
    replay = Replay(spec, case.initial_params(), tuple(case.gradients(t)
                                                        for t in range(STEPS)))
    got, opt = _run(spec, case, form)
    assert opt.graph_form == "ops" and opt._graph_built.paths == 6
    assert judge(got, replay).passed
    assert _same_bits(got, _run(spec, case, "pynative")[0])


def test_decisions_on_the_step_are_paths_the_graph_selects(pynative_after):
    """SGD's first-step rule (``step == 1``) and RAdam's rectification (``rho_t > 5``,
    from step 6) are decisions Python takes on the step: each path is a program, and the
    graph branches to the one whose condition holds (the PyNative bits: elementwise).
    Adafactor's relative step ``min(lr, 1/sqrt(t))`` (the lr until step 4, then
    ``t^-1/2``) keeps its program and changes a scalar: the graph chooses the scalars
    (by the rule: it sums)."""
    for spec in (uo.SGD(lr=0.1, momentum=0.9, dampening=0.5),
                 uo.RAdam(lr=1e-2, weight_decay=0.01),
                 uo.Adafactor(lr=0.5)):
        case = case_of(f"graph_ops_paths_{spec.name}", spec, LOOP_PARAMS)
        got, opt = _run(spec, case, "jit", steps=7)
        assert opt._graph_built.paths == 2, spec
        if spec.name == "adafactor":
            replay = Replay(spec, case.initial_params(),
                            tuple(case.gradients(t) for t in range(7)))
            assert judge(got, replay).passed
        else:
            assert _same_bits(got, _run(spec, case, "pynative", steps=7)[0]), spec


def test_groups_and_an_lr_written_from_outside_as_in_pynative(pynative_after):
    """Parameter groups (an lr factor; an absolute lr with its own weight decay, a name
    rule's spec) and a constant spec lr set from outside after two steps (a plateau
    scheduler does so; the absolute lr follows in proportion): the PyNative bits."""
    spec = uo.Lion(lr=1e-3, weight_decay=0.1)
    groups = [uo.Group(match="bias", lr_scale=0.5),
              uo.Group(match="ln.*", lr=3e-4, weight_decay=0.0)]
    case = case_of("graph_ops_outside_lr", spec, LOOP_PARAMS)
    runs = []
    for form in ("pynative", "jit"):
        _, opt = _run(spec, case, form, steps=2, groups=groups)
        opt.learning_rate.set_data(Tensor(np.float32(3e-4)))
        assert opt.next_lr() == float(np.float32(3e-4))
        if form == "pynative":
            opt(tuple(Tensor(case.gradients(2)[p.name]) for p in opt.parameters))
        else:
            _jit_step(opt, case.gradients(2))
        runs.append([p.asnumpy().copy() for p in opt.parameters])
    for a, b in zip(*runs):
        assert a.tobytes() == b.tobytes()


def _jit_step(opt, grads):
    @ms.jit
    def step(gradients):
        return opt(gradients)

    step(tuple(Tensor(grads[p.name]) for p in opt.parameters))


def test_off_the_cpu_a_scheduled_lr_is_the_per_step_table(pynative_after, monkeypatch):
    """With the CPU faked away (the form a GPU or Ascend gets, run here on the CPU):
    ``auto`` takes the ops form and warns that it is unverified there; a scheduled lr
    without ``total_steps`` is refused, naming it; with it the lr is the per-step table,
    the same bits as the CPU's Python lr operator, and the step after the table's end
    fails inside the graph."""
    from unified_opt.backends.mindspore import graph

    monkeypatch.setattr(graph, "on_cpu", lambda: False)
    monkeypatch.setattr(graph, "_warned_devices", set())
    name = "adamw_cosine"
    case, replay = _case(name)
    params = [Parameter(Tensor(a), name=n) for n, a in case.initial_params().items()]
    refused = uo.build(SPECS[name], params, path="own")
    assert refused.graph_form == "" and "options={'total_steps': N}" in refused.graph_why
    with pytest.warns(UnverifiedDeviceWarning, match="verified on the CPU only"):
        uo.build(uo.Lion(lr=1e-3), params, path="own")
    got, opt = _run(SPECS[name], case, "jit", {"graph": "auto", "total_steps": STEPS})
    assert opt.graph_form == "ops" and opt._ops_lr_kind == "table"
    assert "not verified on CPU" in uo.explain(opt).reason
    assert _same_bits(got, _pynative(name))
    assert judge(got, replay).passed
    before = [p.asnumpy().copy() for p in opt.parameters]
    with pytest.raises(RuntimeError):
        _jit_step(opt, case.gradients(STEPS))
    assert all(a.tobytes() == p.asnumpy().tobytes() for a, p in zip(before, opt.parameters))


@pytest.mark.parametrize("spec, phrase", [
    (uo.DGCMomentum(lr=0.05, rampup_begin_step=2, rampup_step=4, sparsity=(0.5, 0.9),
                    min_numel=1), "reads the step or the lr as a plain number"),
    (uo.AdamW(lr=1e-3, weight_decay=Cosine(lr=0.1, T_max=4)),
     "a weight-decay schedule or a momentum-cycling lr"),
    (uo.Lamb(lr=1e-2, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0)), "its gradient pre-step"),
])
def test_what_the_ops_form_cannot_run_is_refused_when_it_compiles(pynative_after, spec,
                                                                   phrase):
    """Refused when the graph compiles, naming why, with nothing changed; PyNative runs
    it (and on the CPU ``auto`` runs DGC's sparsity ramp as custom operators)."""
    case = case_of(f"graph_ops_refused_{spec.name}", spec, LOOP_PARAMS)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    initial = case.initial_params()
    params = [Parameter(Tensor(a.copy()), name=n) for n, a in initial.items()]
    opt = uo.build(spec, list(zip(initial, params)), path="own", options={"graph": "ops"})
    assert opt.graph_form == "" and phrase in opt.graph_why
    with pytest.raises(RuntimeError, match=phrase):
        _jit_step(opt, case.gradients(0))
    assert all(np.array_equal(initial[p.name], p.asnumpy()) for p in params)
    opt(tuple(Tensor(case.gradients(0)[p.name]) for p in params))
    assert not np.array_equal(initial["w"], params[0].asnumpy())
    if spec.name == "dgc_momentum":
        auto = uo.build(spec, [Parameter(Tensor(np.ones(4, np.float32)), name="v")],
                        path="own")
        assert auto.graph_form == "custom"


def test_auto_and_explain_say_which_form_and_why():
    """On the CPU ``auto`` takes the form measured faster for the algorithm
    (``CPU_STEP_MS``), ``uo.explain`` says which with the figures, for a spec and for a
    built optimizer; ``compile=False`` (no kernel VM) takes the ops form."""
    from unified_opt.backends.mindspore.graph_ops import CPU_STEP_MS, cpu_choice

    root = Path(__file__).parent.parent
    results = json.loads((root / "benchmarks" / "results" / "mindspore_graph_forms.json")
                         .read_text())
    rows = results["rows"]
    assert CPU_STEP_MS == {r["algorithm"]: (r["custom_ms"], r["ops_ms"]) for r in rows}
    # the package's table is the benchmark's, written from the committed results
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        from mindspore_graph_forms import TABLE, table_text
    finally:
        sys.path.remove(str(root / "benchmarks"))
    assert TABLE.read_text() == table_text(results), \
        "run: python benchmarks/mindspore_graph_forms.py --table"
    line = next(ln for ln in (root / "pyproject.toml").read_text().splitlines()
                if ln.startswith('"unified_opt.backends.mindspore" = ['))
    assert f'"{TABLE.name}"' in line                  # package data: the wheel has it
    assert {"adamw", "came", "lamb", "lion"} <= set(CPU_STEP_MS)
    for algorithm, (custom, ops_ms) in CPU_STEP_MS.items():
        assert cpu_choice(algorithm)[0] == ("ops" if ops_ms < custom else "custom")
    form, measured = cpu_choice("lion")
    reason = uo.explain(uo.Lion(lr=1e-3), "mindspore").reason
    assert "in GRAPH_MODE and @ms.jit: " in reason and measured in reason
    w = Parameter(Tensor(np.ones((4, 3), np.float32)), name="w")
    assert uo.build(uo.Lion(lr=1e-3), [w], path="own").graph_form == form
    assert measured in uo.explain(uo.build(uo.Lion(lr=1e-3), [w], path="own")).reason
    eager = uo.build(uo.Lion(lr=1e-3), [w], path="own", options={"compile": False})
    assert eager.graph_form == "ops" and "compile=False" in uo.explain(eager).reason
    ops_form = uo.build(uo.Lion(lr=1e-3), [w], path="own", options={"graph": "ops"})
    assert "MindSpore operations (options graph='ops')" in uo.explain(ops_form).reason


def test_the_graph_option_is_checked():
    w = Parameter(Tensor(np.ones((4, 3), np.float32)), name="w")
    with pytest.raises(ValueError, match="options graph must be one of"):
        uo.build(uo.Lion(lr=1e-3), [w], path="own", options={"graph": "fast"})
    with pytest.raises(ValueError, match="is for the own implementation"):
        uo.build(uo.SGD(lr=0.1), [w], path="native", options={"graph": "ops"})
