"""MindSpore's default no-decay filter (``*beta*``/``*gamma*``: its norm layers'
parameters) built on a torch or Paddle model, where those parameters are a norm's
``weight`` and ``bias``: the norms are found by module type and spared, as MindSpore
spares them; parameters without module types and without MindSpore's names are
refused, not decayed unseen."""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.backend import record_of

MOMENTUM = uo.preset("mindspore.nn.Momentum", learning_rate=0.1, momentum=0.9,
                     weight_decay=0.1)
NORMS = ("1.bias", "1.weight", "3.bias", "3.weight")


@require("torch")
def test_a_torch_model_s_norms_are_spared_as_mindspore_spares_them():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6),
                                torch.nn.Linear(6, 6), torch.nn.BatchNorm1d(6))
    twin = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6),
                               torch.nn.Linear(6, 6), torch.nn.BatchNorm1d(6))
    twin.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in [*model.parameters(), *twin.parameters()]:
            p.add_(0.5)                       # norms start away from 0 and 1: decay shows
    optimizer = uo.build(MOMENTUM, model)
    assert optimizer.param_groups and record_of(optimizer).spec.no_decay_names == NORMS
    named = dict(twin.named_parameters())
    # torch's own SGD over MindSpore's grouping: the norms in a group without decay
    native = torch.optim.SGD([{"params": [p for n, p in named.items() if n not in NORMS]},
                              {"params": [named[n] for n in NORMS], "weight_decay": 0.0}],
                             lr=0.1, momentum=0.9, weight_decay=0.1,
                             fused=optimizer.defaults["fused"])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rng = np.random.default_rng(0)
    for _ in range(3):
        grads = {n: torch.from_numpy(rng.standard_normal(tuple(p.shape)).astype(np.float32))
                 for n, p in model.named_parameters()}
        for (n, p), q in zip(model.named_parameters(), twin.parameters()):
            p.grad, q.grad = grads[n].clone(), grads[n].clone()
        optimizer.step()
        native.step()
    for (n, p), q in zip(model.named_parameters(), twin.parameters()):
        assert not torch.equal(p, before[n]), n
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=lambda m: f"{n}: {m}")


@require("torch")
def test_torch_pairs_without_mindspore_names_are_refused():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6))
    with pytest.raises(ValueError, match=r"build: no_decay_names=\('\*beta\*', '\*gamma\*'\) "
                                         r"is MindSpore's filter.*pass the model itself"):
        uo.build(MOMENTUM, list(model.named_parameters()))
    with pytest.raises(ValueError, match="pass the model itself"):
        uo.build(MOMENTUM, model.parameters())
    # said another way, or with nothing to spare from, or in MindSpore's names: built
    uo.build(MOMENTUM.replace(no_decay_names=("1.*",)), list(model.named_parameters()))
    uo.build(MOMENTUM.replace(weight_decay=0.0), model.parameters())
    spec = record_of(uo.build(MOMENTUM, [("dense.weight", model[0].weight),
                                            ("ln.gamma", model[1].weight)])).spec
    assert spec.no_decay_names == ("*beta*", "*gamma*")


@require("paddle")
def test_a_paddle_layer_s_norms_are_spared_as_mindspore_spares_them():
    import paddle

    paddle.seed(0)
    layer = paddle.nn.Sequential(paddle.nn.Linear(4, 6), paddle.nn.LayerNorm(6),
                                 paddle.nn.Linear(6, 6), paddle.nn.BatchNorm1D(6))
    optimizer = uo.build(MOMENTUM, layer)
    assert record_of(optimizer).spec.no_decay_names == NORMS
    for p in layer.parameters():
        p.set_value(p.numpy() + 0.5)
    before = {n: p.numpy().copy() for n, p in layer.named_parameters()}
    for p in layer.parameters():
        if not p.stop_gradient:
            p.grad = paddle.zeros_like(p)     # a zero gradient: only the decay moves one
    optimizer.step()
    for n, p in layer.named_parameters():
        if n in NORMS or p.stop_gradient:
            np.testing.assert_array_equal(p.numpy(), before[n], err_msg=n)
        else:
            # SGD with momentum, first step: p - lr * (wd * p), in float32
            wd_p = np.float32(0.1) * before[n]
            np.testing.assert_array_equal(p.numpy(), before[n] - np.float32(0.1) * wd_p,
                                          err_msg=n)
