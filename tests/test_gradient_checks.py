"""Every gradient checked against its parameter before a torch step changes anything.

A torch optimizer ``uo.build`` returns (the own path on each engine, the native classes
behind their step pre-hook, the host offload class) refuses a gradient of another shape
(no broadcasting), dtype, device or a sparse one where the class does not step it, with
an error naming the parameter, and leaves every parameter and state as they were. Before
the check a 1-element gradient on a 1000-element parameter was read past its end
(garbage and Inf written; a segmentation fault at 10M elements). torch's native SGD and
Adagrad step sparse gradients: the default path passes them on, bit for bit as torch.
The Paddle and MindSpore forms are in ``test_gradient_checks_paddle.py`` and
``test_gradient_checks_mindspore.py``.
"""

import re

import pytest
import torch

import unified_opt as uo

SPECS = {"adamw": uo.AdamW(lr=0.1, weight_decay=0.01), "sgd": uo.SGD(lr=0.1, momentum=0.9),
         "adagrad": uo.Adagrad(lr=0.1)}
#: the ways uo.build runs a torch step on the CPU: the own path on the kernel VM and
#: eagerly, the default (a fused native class)
BUILDS = {"own": {"path": "own"}, "own_eager": {"path": "own", "options": {"compile": False}},
          "default": {}}


def _built(spec, build, size=1000):
    w = torch.nn.Parameter(torch.linspace(-1.0, 1.0, size))
    b = torch.nn.Parameter(torch.tensor([0.5, -0.25, 2.0]))
    opt = uo.build(spec, [("w", w), ("b", b)], **build)
    # one good step first, so there is state to keep
    w.grad, b.grad = torch.full_like(w, 0.3), torch.full_like(b, -0.2)
    opt.step()
    return opt, w, b


def _snapshot(opt, params) -> list:
    out = [p.detach().clone() for p in params]
    for p in params:
        out += [v.clone() for v in opt.state[p].values() if isinstance(v, torch.Tensor)]
    return out


def _assert_unchanged(before, after) -> None:
    assert len(before) == len(after)
    for x, y in zip(before, after):
        assert x.dtype == y.dtype and x.shape == y.shape
        # bit for bit: the bytes (NaN == NaN, -0.0 != 0.0)
        assert torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8))


def _force_grad(p, grad) -> None:
    """``grad`` as ``p``'s gradient, past torch's own check of ``p.grad = ...`` (the way
    the issue's reproduction wrote it: ``p.grad.data = ...``)."""
    if p.grad is None:
        p.grad = torch.zeros_like(p)
    p.grad.data = grad


WRONG = {
    "one_element": ("w", lambda: torch.ones(1), ValueError, "shape [1]"),
    "five_on_three": ("b", lambda: torch.ones(5), ValueError, "shape [5]"),
    "float64": ("w", lambda: torch.ones(1000, dtype=torch.float64), TypeError,
                "dtype float64"),
}


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("wrong", WRONG)
def test_a_gradient_unlike_its_parameter_is_refused_before_anything_changes(wrong, spec,
                                                                            build):
    name, grad, error, shown = WRONG[wrong]
    opt, w, b = _built(SPECS[spec], BUILDS[build])
    before = _snapshot(opt, [w, b])
    w.grad, b.grad = torch.full_like(w, 0.1), torch.full_like(b, 0.1)
    _force_grad(w if name == "w" else b, grad())
    with pytest.raises(error, match=f"the gradient of {name} does not fit its parameter: "
                                    + re.escape(shown)):
        opt.step()
    _assert_unchanged(before, _snapshot(opt, [w, b]))
    # the same optimizer steps on with fitting gradients
    w.grad, b.grad = torch.full_like(w, 0.1), torch.full_like(b, 0.1)
    opt.step()
    assert not torch.equal(w.detach(), before[0])


def test_unnamed_parameters_are_named_by_index():
    p = torch.nn.Parameter(torch.zeros(4))
    q = torch.nn.Parameter(torch.zeros(2))
    opt = uo.build(uo.Adam(lr=0.1), [p, q], path="own")
    p.grad = torch.zeros(4)
    _force_grad(q, torch.zeros(1))
    with pytest.raises(ValueError, match=r"gradient of (parameter 1|1) does not fit") as info:
        opt.step()
    assert "shape [1] (the parameter's: [2])" in str(info.value)


def test_the_offload_class_checks_too():
    opt, w, b = _built(uo.AdamOffload(lr=0.1), {})
    before = _snapshot(opt, [w, b])
    w.grad, b.grad = torch.full_like(w, 0.1), torch.full_like(b, 0.1)
    _force_grad(w, torch.ones(1))
    with pytest.raises(ValueError, match=r"the gradient of w does not fit"):
        opt.step()
    _assert_unchanged(before, _snapshot(opt, [w, b]))


def test_a_closure_makes_the_gradients_the_native_check_reads():
    w = torch.nn.Parameter(torch.ones(3))
    opt = uo.build(uo.Adam(lr=0.1), [("w", w)])

    def closure():
        w.grad = torch.zeros(3)
        w.grad.data = torch.ones(1)
        return torch.tensor(1.0)

    with pytest.raises(ValueError, match="the gradient of w does not fit"):
        opt.step(closure)
    assert torch.equal(w.detach(), torch.ones(3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device (CUDA)")
def test_a_gradient_on_another_device_is_refused():
    w = torch.nn.Parameter(torch.ones(3, device="cuda"))
    for build in ({"path": "own"}, {}):
        opt = uo.build(uo.Adam(lr=0.1), [("w", w)], **build)
        w.grad = torch.zeros(3, device="cuda")
        w.grad.data = torch.ones(3)
        with pytest.raises(ValueError, match="the gradient of w does not fit its parameter: "
                                             "device cpu"):
            opt.step()
        assert torch.equal(w.detach().cpu(), torch.ones(3))


# -- sparse gradients -----------------------------------------------------------------------

def _sparse_gradients(steps=3):
    """Sparse gradients of an embedding's rows, with a repeated index (coalesced by
    torch's Adagrad) and rows never touched."""
    out = []
    for t in range(steps):
        rows = torch.tensor([[t % 5, 2, 2]])
        values = torch.linspace(-1.0, 1.0, 3 * 4).reshape(3, 4) * (t + 1)
        out.append(torch.sparse_coo_tensor(rows, values, (6, 4), check_invariants=True))
    return out


@pytest.mark.parametrize("name", ["sgd", "adagrad"])
def test_sparse_gradients_step_as_torch_does_on_the_default_path(name):
    spec = {"sgd": uo.SGD(lr=0.1), "adagrad": uo.Adagrad(lr=0.1, lr_decay=0.01)}[name]
    start = torch.linspace(-2.0, 2.0, 24).reshape(6, 4)
    ours = torch.nn.Parameter(start.clone())
    theirs = torch.nn.Parameter(start.clone())
    opt = uo.build(spec, [("embedding.weight", ours)])
    native = {"sgd": lambda: torch.optim.SGD([theirs], lr=0.1),
              "adagrad": lambda: torch.optim.Adagrad([theirs], lr=0.1, lr_decay=0.01)}[name]()
    for grad in _sparse_gradients():
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        opt.step()
        native.step()
        assert torch.equal(ours.detach().view(torch.int32), theirs.detach().view(torch.int32))
    assert not torch.equal(ours.detach(), start)
    # a dense step after sparse ones runs fused again (measured: the same bits as
    # torch's for-loop here)
    ours.grad, theirs.grad = torch.full_like(start, 0.5), torch.full_like(start, 0.5)
    opt.step()
    native.step()
    assert torch.equal(ours.detach(), theirs.detach())
    assert all(g["fused"] for g in opt.param_groups)


@pytest.mark.parametrize("spec", [uo.AdamW(lr=0.1), uo.SGD(lr=0.1, momentum=0.9),
                                  uo.SGD(lr=0.1, weight_decay=0.01),
                                  uo.Adagrad(lr=0.1, weight_decay=0.01),
                                  uo.SGD(lr=0.1, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0))],
                         ids=["adamw", "sgd_momentum", "sgd_decay", "adagrad_decay",
                              "sgd_clipped"])
@pytest.mark.parametrize("path", ["default", "own"])
def test_a_sparse_gradient_is_refused_by_name_where_the_class_does_not_step_it(spec, path):
    w = torch.nn.Parameter(torch.ones(6, 4))
    b = torch.nn.Parameter(torch.ones(4))
    opt = uo.build(spec, [("embedding.weight", w), ("b", b)],
                   **({"path": "own"} if path == "own" else {}))
    before = _snapshot(opt, [w, b])    # (torch's Adagrad makes its state when built)
    b.grad = torch.ones(4)
    w.grad = _sparse_gradients(1)[0]
    with pytest.raises(RuntimeError, match=r"the gradient of embedding\.weight does not fit "
                                           r"its parameter: form sparse_coo.*torch\.optim\.SGD "
                                           r"\(momentum=0, weight_decay=0\) and torch\.optim"
                                           r"\.Adagrad"):
        opt.step()
    _assert_unchanged(before, _snapshot(opt, [w, b]))
    assert torch.equal(w.detach(), torch.ones(6, 4)) and torch.equal(b.detach(), torch.ones(4))
