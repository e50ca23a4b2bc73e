"""uo optimizers in ``paddle.jit.to_static`` training (``backends/paddle/to_static.py``):
with the model compiled (``full_graph=True``, a static program) and with the whole
training step under ``to_static`` (SOT: it runs ``loss.backward()`` and the optimizer
step, which it does not translate, eagerly), the own implementation (CAME), a native
class (``paddle.optimizer.Lamb``) and a native class with a schedule and the gradient
pre-step (AdamW, cosine, global-norm clipping) give a dygraph run's numbers bit for bit.
Static-graph mode is refused with a clear error."""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.schedules import Cosine

paddle = pytest.importorskip("paddle")

SPECS = {
    "came_own": uo.preset("mindformers.core.Came", learning_rate=1e-2, weight_decay=0.01),
    "lamb_native": uo.Lamb(lr=1e-2, weight_decay=0.01),
    "adamw_cosine_clip": uo.AdamW(lr=Cosine(lr=1e-2, T_max=8), weight_decay=0.05,
                                  grad_clip=uo.ClipByGlobalNorm(max_norm=0.5)),
}
STEPS = 8


def _train(spec, compiled: str | None):
    """``compiled``: None (dygraph), "forward" (the model through
    ``paddle.jit.to_static(full_graph=True)``, the usual dy2st training) or "step" (the
    whole step through ``paddle.jit.to_static``)."""
    paddle.seed(7)
    model = paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.Tanh(),
                                 paddle.nn.Linear(16, 4))
    optimizer = uo.build(spec, model.parameters())
    scheduler = uo.native_scheduler(optimizer)
    forward = paddle.jit.to_static(model, full_graph=True) if compiled == "forward" else model

    def step(x, y):
        loss = ((forward(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        return loss

    if compiled == "step":
        step = paddle.jit.to_static(step, full_graph=False)
    rng = np.random.default_rng(3)
    losses = []
    for _ in range(STEPS):
        x = paddle.to_tensor(rng.standard_normal((32, 8)).astype("float32"))
        y = paddle.to_tensor(rng.standard_normal((32, 4)).astype("float32"))
        losses.append(float(step(x, y)))
        if scheduler is not None:
            scheduler.step()
    if compiled == "forward":      # the forward did run as a static program
        assert forward.forward.concrete_program.main_program is not None
    return losses, [p.numpy().copy() for p in model.parameters()], optimizer


@require("paddle")
@pytest.mark.parametrize("compiled", ["forward", "step"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_to_static_training_step_gives_the_dygraph_numbers(name, compiled):
    eager_losses, eager_params, optimizer = _train(SPECS[name], compiled=None)
    losses, params, _ = _train(SPECS[name], compiled=compiled)
    assert losses == eager_losses
    for got, expected in zip(params, eager_params):
        np.testing.assert_array_equal(got, expected)
    assert len(set(eager_losses)) == STEPS          # the steps moved the model
    path = uo.explain(optimizer).path
    assert path == {"came_own": "own", "lamb_native": "native",
                    "adamw_cosine_clip": "native"}[name]


@require("paddle")
def test_static_graph_mode_is_refused():
    paddle.enable_static()
    try:
        with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
            layer = paddle.nn.Linear(3, 2)
            with pytest.raises(ValueError, match=r"static-graph mode \(paddle.enable_static"
                                                 r"\(\)\); uo.build builds dynamic-graph"):
                uo.build(uo.CAME(), layer.parameters())
    finally:
        paddle.disable_static()
