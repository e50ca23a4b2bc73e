"""The own MindSpore optimizer compiled into a graph as custom operators over the kernel
VM (``options={"graph": "custom"}``, ``backends/mindspore/graph.py``; the other form,
MindSpore operations, is ``test_mindspore_graph_ops.py``'s): a GRAPH_MODE
``nn.TrainOneStepCell``, an ``@ms.jit`` train step calling ``opt(grads)`` in PyNative,
and ``ms.Model.train`` in GRAPH_MODE give the PyNative run's numbers bit for bit, for
CAME (MindFormers' preset), Lamb, Lion, AdamW with a cosine schedule and DGC, and the
PyNative run follows the float64 oracle; what a graph cannot run is refused when it
compiles, naming why, with nothing changed."""

import numpy as np
import pytest
from support import Replay, judge

import unified_opt as uo
from unified_opt.conformance.trajectory import Recorder
from unified_opt.schedules import Cosine

ms = pytest.importorskip("mindspore")
from mindspore import Tensor, nn  # noqa: E402

SPECS = {
    "came_mindformers": uo.preset("mindformers.core.Came", learning_rate=1e-2,
                                  weight_decay=0.01),
    "lamb": uo.Lamb(lr=1e-2, weight_decay=0.01),
    "lion": uo.Lion(lr=1e-3, weight_decay=0.1),
    "adamw_cosine": uo.AdamW(lr=Cosine(lr=1e-2, T_max=6, eta_min=1e-3), weight_decay=0.1),
    "dgc": uo.DGCMomentum(lr=0.05, rampup_begin_step=2, rampup_step=4, sparsity=(0.5, 0.9),
                          min_numel=1),
}
STEPS = 10


@pytest.fixture
def pynative_after():
    yield
    ms.set_context(mode=ms.PYNATIVE_MODE)


def _data():
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((16, 8)).astype(np.float32),
             rng.standard_normal((16, 4)).astype(np.float32)) for _ in range(STEPS)]


def _network():
    ms.set_seed(0)
    return nn.SequentialCell(nn.Dense(8, 16, weight_init="normal"), nn.Tanh(),
                             nn.Dense(16, 4, weight_init="normal"))


def _train(spec, form: str):
    """Parameters after STEPS steps trained the ``form`` way; the optimizer."""
    ms.set_context(mode=ms.GRAPH_MODE if form in ("graph_cell", "model") else
                   ms.PYNATIVE_MODE)
    net = _network()
    opt = uo.build(spec, net.trainable_params(), path="own", options={"graph": "custom"})
    assert opt.graph_form == "custom"
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    data = _data()
    if form in ("pynative_cell", "graph_cell"):
        step = nn.TrainOneStepCell(loss_net, opt)
        for x, y in data:
            step(Tensor(x), Tensor(y))
    elif form == "jit":
        grad_fn = ms.value_and_grad(loss_net, None, opt.parameters)

        @ms.jit
        def step(x, y):
            loss, grads = grad_fn(x, y)
            opt(grads)
            return loss

        for x, y in data:
            step(Tensor(x), Tensor(y))
    else:                                    # ms.Model.train, GRAPH_MODE
        dataset = ms.dataset.NumpySlicesDataset(
            {"x": np.stack([x for x, _ in data]), "y": np.stack([y for _, y in data])},
            shuffle=False)
        model = ms.Model(net, loss_fn=nn.MSELoss(), optimizer=opt)
        model.train(1, dataset.batch(1, drop_remainder=True).map(
            lambda x, y: (x[0], y[0]), ["x", "y"]), dataset_sink_mode=False)
    return [p.asnumpy().copy() for p in net.trainable_params()], opt


@pytest.mark.parametrize("form", ["graph_cell", "jit", "model"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_compiled_step_gives_the_pynative_numbers(pynative_after, name, form):
    spec = SPECS[name]
    expected, _ = _train(spec, "pynative_cell")
    got, opt = _train(spec, form)
    for a, b in zip(expected, got):
        assert a.tobytes() == b.tobytes(), (name, form, float(np.abs(a - b).max()))
    assert int(opt.global_step.asnumpy()[0]) == STEPS
    assert not np.array_equal(got[0], [p.asnumpy() for p in _network().trainable_params()][0])
    if isinstance(spec.lr, Cosine):          # the schedule reached the graph's steps
        assert float(opt.learning_rate.asnumpy()) == np.float32(spec.lr_at(STEPS))


def test_the_pynative_run_follows_the_oracle(pynative_after):
    """What the compiled forms equal bit for bit is the spec: 10 steps of a network's
    real gradients, replayed on the float64 oracle, within the conformance rule (the
    float32 floors of the same gradients, K)."""
    from mindspore import ops

    spec = SPECS["came_mindformers"]
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = _network()
    names = [p.name for p in net.trainable_params()]
    start = {n: p.asnumpy().copy() for n, p in zip(names, net.trainable_params())}
    opt = uo.build(spec, net.trainable_params(), path="own")
    grad_fn = ms.value_and_grad(nn.WithLossCell(net, nn.MSELoss()), None, opt.parameters)
    grads, recorder = [], Recorder()
    for x, y in _data():
        _, step = grad_fn(Tensor(x), Tensor(y))
        grads.append({n: g.asnumpy().copy() for n, g in zip(names, step)})
        opt(tuple(ops.stop_gradient(g) for g in step))
        recorder.add(0.0, {n: p.asnumpy() for n, p in zip(names, net.trainable_params())}, {})
    comparison = judge(recorder.trajectory(), Replay(spec, start, tuple(grads)), state=False,
                       lr=False)
    assert comparison.passed, comparison.detail


def test_what_a_graph_cannot_run_is_refused_when_it_compiles(pynative_after):
    clipped = uo.Lamb(lr=1e-2, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0))
    for spec, options, phrase in [
            (clipped, {}, "its gradient pre-step"),
            (uo.Lamb(lr=1e-2), {"compile": False, "graph": "custom"},
             "options compile=False")]:
        ms.set_context(mode=ms.GRAPH_MODE)
        net = _network()
        before = [p.asnumpy().copy() for p in net.trainable_params()]
        opt = uo.build(spec, net.trainable_params(), path="own", options=options)
        step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
        x, y = _data()[0]
        with pytest.raises(RuntimeError, match=phrase):
            step(Tensor(x), Tensor(y))
        for a, p in zip(before, net.trainable_params()):
            assert np.array_equal(a, p.asnumpy())
        ms.set_context(mode=ms.PYNATIVE_MODE)
        nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)(Tensor(x), Tensor(y))
        assert not np.array_equal(before[0], net.trainable_params()[0].asnumpy())


@pytest.mark.parametrize("form", ["custom", "ops"])
def test_a_gradient_of_another_dtype_is_refused_when_the_graph_compiles(pynative_after,
                                                                        form):
    net = nn.Dense(8, 4)
    opt = uo.build(uo.Lamb(lr=1e-2), net.trainable_params(), path="own",
                   options={"graph": form})
    assert opt.graph_form == form
    before = [p.asnumpy().copy() for p in net.trainable_params()]

    @ms.jit
    def step(weight_grad, bias_grad):
        return opt((weight_grad, bias_grad))

    with pytest.raises(TypeError, match="each gradient must have its parameter's dtype"):
        step(Tensor(np.ones((4, 8), np.float16)), Tensor(np.ones((4,), np.float16)))
    for a, p in zip(before, net.trainable_params()):
        assert np.array_equal(a, p.asnumpy())
    step(Tensor(np.ones((4, 8), np.float32)), Tensor(np.ones((4,), np.float32)))
    assert not np.array_equal(before[0], net.trainable_params()[0].asnumpy())


def test_a_device_other_than_the_cpu_is_refused_in_a_graph(monkeypatch):
    from unified_opt.backends.mindspore import graph

    monkeypatch.setattr(graph, "on_cpu", lambda: False)
    opt = uo.build(uo.Lion(lr=1e-3), nn.Dense(8, 4).trainable_params(), path="own",
                   options={"graph": "custom"})
    assert opt.graph_form == ""
    assert "runs custom CPU operators, and the device_target is 'CPU'" in opt.graph_why
