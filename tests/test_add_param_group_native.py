"""``add_param_group`` on the native classes ``uo.build`` returns on torch and Paddle: a
group added after some steps (its own lr and weight decay) steps bit for bit as the
framework's own optimizer given the same group, a build's gradient pre-step (a
global-norm clip) spans it as the own path's does, ``uo.save_state`` keeps it and
``uo.resume`` continues bit for bit; what the native class cannot take is refused
naming ``path='own'``, with nothing changed.

Each framework runs in this process (conftest imports MindSpore first).
"""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo

SHAPES = {"w": (4, 3), "b": (3,)}
BEFORE, AFTER, RESUMED = 2, 3, 2


def _init():
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}


def _grads(t, scale=1.0):
    rng = np.random.default_rng(100 + t)
    return {n: (scale * rng.standard_normal(s)).astype(np.float32) for n, s in SHAPES.items()}


# -- torch -----------------------------------------------------------------------------

def _torch_params():
    import torch

    return {n: torch.nn.Parameter(torch.tensor(a)) for n, a in _init().items()}


def _torch_step(opt, params, t, scale=1.0):
    import torch

    for n, g in _grads(t, scale).items():
        if n in params:
            params[n].grad = torch.tensor(g)
    opt.step()


def _torch_values(params):
    return {n: p.detach().numpy().copy() for n, p in params.items()}


TORCH_CASES = {
    "adamw": (uo.AdamW(lr=0.1, weight_decay=0.1), "AdamW", {"weight_decay": 0.1}),
    "sgd_momentum": (uo.SGD(lr=0.1, momentum=0.9, weight_decay=0.01), "SGD",
                     {"momentum": 0.9, "weight_decay": 0.01}),
}


@require("torch")
@pytest.mark.parametrize("case", sorted(TORCH_CASES))
def test_torch_native_group_added_later_steps_as_torch_and_resumes(case, tmp_path):
    import torch

    spec, name, kwargs = TORCH_CASES[case]
    added = {"lr": 0.05, "weight_decay": 0.0}
    ours = _torch_params()
    opt = uo.build(spec, [("w", ours["w"])], path="native")
    assert type(opt) is getattr(torch.optim, name)
    theirs = _torch_params()
    # the same implementation flags as the build chose (fused kernels on the CPU)
    flags = {k: opt.defaults[k] for k in ("fused", "foreach")}
    plain = getattr(torch.optim, name)([theirs["w"]], lr=0.1, **kwargs, **flags)
    for t in range(BEFORE):
        _torch_step(opt, {"w": ours["w"]}, t)
        _torch_step(plain, {"w": theirs["w"]}, t)
    opt.add_param_group({"params": [("b", ours["b"])], **added})
    plain.add_param_group({"params": [theirs["b"]], **added})
    assert opt.param_groups[1]["lr"] == 0.05 and opt.param_groups[1]["weight_decay"] == 0.0
    for t in range(BEFORE, BEFORE + AFTER):
        _torch_step(opt, ours, t)
        _torch_step(plain, theirs, t)
    for n, value in _torch_values(ours).items():
        np.testing.assert_array_equal(value, _torch_values(theirs)[n], err_msg=n)
    assert not np.array_equal(_torch_values(ours)["b"], _init()["b"])

    uo.save_state(opt, tmp_path / "run.safetensors")
    again = {n: torch.nn.Parameter(torch.tensor(v)) for n, v in _torch_values(ours).items()}
    resumed = uo.resume(tmp_path / "run.safetensors", list(again.items()),
                        path_taken="native")
    assert type(resumed) is type(opt)
    for t in range(BEFORE + AFTER, BEFORE + AFTER + RESUMED):
        _torch_step(opt, ours, t)
        _torch_step(resumed, again, t)
    for n, value in _torch_values(ours).items():
        np.testing.assert_array_equal(_torch_values(again)[n], value, err_msg=n)


@require("torch")
def test_torch_native_per_step_weight_decay_covers_the_added_group():
    # the step hook writes each step's weight decay into every group, the added one too
    spec = uo.AdamW(lr=0.1, weight_decay=uo.schedules.Piecewise(boundaries=[3],
                                                                values=[0.0, 0.5]))
    runs = {}
    for path in ("native", "own"):
        params = _torch_params()
        opt = uo.build(spec, [("w", params["w"])], path=path)
        for t in range(BEFORE):
            _torch_step(opt, {"w": params["w"]}, t)
        opt.add_param_group({"params": [("b", params["b"])], "lr": 0.05})
        for t in range(BEFORE, BEFORE + AFTER):
            _torch_step(opt, params, t)
        runs[path] = (type(opt).__name__, _torch_values(params))
    assert runs["native"][0] == "AdamW" and runs["own"][0] == "SpecOptimizer"
    for n, value in runs["own"][1].items():
        np.testing.assert_allclose(runs["native"][1][n], value, rtol=1e-6, atol=1e-7,
                                   err_msg=n)


@require("torch")
def test_torch_native_pre_step_clips_the_added_group_with_the_others():
    # a global-norm clip spans every group: the gradients here are far above max_norm,
    # so a group the clip missed would move by lr times its whole gradient
    spec = uo.SGD(lr=0.1, momentum=0.9, grad_clip=uo.ClipByGlobalNorm(max_norm=0.5))
    runs = {}
    for path in ("native", "own"):
        params = _torch_params()
        opt = uo.build(spec, [("w", params["w"])], path=path)
        for t in range(BEFORE):
            _torch_step(opt, {"w": params["w"]}, t, scale=50.0)
        opt.add_param_group({"params": [("b", params["b"])], "lr": 0.05})
        for t in range(BEFORE, BEFORE + AFTER):
            _torch_step(opt, params, t, scale=50.0)
        runs[path] = (type(opt).__name__, _torch_values(params))
    assert runs["native"][0] == "SGD" and runs["own"][0] == "SpecOptimizer"
    for n, value in runs["own"][1].items():
        # the conformance rule's float32 noise floor for a few steps of these sizes
        np.testing.assert_allclose(runs["native"][1][n], value, rtol=1e-6, atol=1e-7,
                                   err_msg=n)
    moved = np.abs(runs["native"][1]["b"] - _init()["b"]).max()
    assert 0 < moved < 0.05 * AFTER * 0.5 * 2      # clipped: far below 50 * lr * steps


@require("torch")
def test_torch_native_refuses_what_it_cannot_take_and_changes_nothing(tmp_path):
    import torch

    params = _torch_params()
    opt = uo.build(uo.AdamW(lr=0.1), [("w", params["w"])], path="native")
    _torch_step(opt, {"w": params["w"]}, 0)
    half = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"AdamW\.add_param_group: with this group "
                                         r"torch\.optim\.AdamW no longer computes the spec "
                                         r"exactly: it needs float32 or float64 parameters.*"
                                         r"path='own'"):
        opt.add_param_group({"params": [("half", half)]})
    with pytest.raises(ValueError, match="already in the optimizer"):
        opt.add_param_group({"params": [params["w"]]})
    assert len(opt.param_groups) == 1 and opt.param_groups[0]["params"] == [params["w"]]
    uo.save_state(opt, tmp_path / "run.safetensors")      # the record holds only w
    uo.load_state(uo.build(uo.AdamW(lr=0.1), [("w", _torch_params()["w"])], path="native"),
                  tmp_path / "run.safetensors")
    # a group without names steps, and save_state refuses it as on the own path
    opt.add_param_group({"params": [params["b"]]})
    _torch_step(opt, params, 1)
    with pytest.raises(ValueError, match="have no names"):
        uo.save_state(opt, tmp_path / "unnamed.safetensors")

    scheduled = uo.build(uo.AdamW(lr=uo.schedules.Cosine(lr=0.1, T_max=10)),
                         [("w", _torch_params()["w"])], path="native")
    with pytest.raises(ValueError, match="the spec's lr is a schedule"):
        scheduled.add_param_group({"params": [("b", _torch_params()["b"])]})
    assert len(scheduled.param_groups) == 1


# -- Paddle ----------------------------------------------------------------------------

def _paddle_params():
    import paddle

    params = {}
    for n, a in _init().items():
        p = paddle.create_parameter(list(a.shape), "float32")
        p.set_value(a)
        params[n] = p
    return params


def _paddle_step(opt, params, t, scale=1.0):
    import paddle

    grads = _grads(t, scale)
    loss = sum((p * paddle.to_tensor(grads[n])).sum() for n, p in params.items())
    loss.backward()
    opt.step()
    opt.clear_grad()


def _paddle_values(params):
    return {n: p.numpy().copy() for n, p in params.items()}


@require("paddle")
@pytest.mark.parametrize("method", ["add_param_group", "_add_param_group"])
def test_paddle_native_group_added_later_steps_as_paddle_and_resumes(method, tmp_path):
    import paddle

    ours = _paddle_params()
    opt = uo.build(uo.AdamW(lr=0.1, weight_decay=0.1), [("w", ours["w"])],
                   backend="paddle", path="native")
    assert isinstance(opt, paddle.optimizer.AdamW)
    theirs = _paddle_params()
    plain = paddle.optimizer.AdamW(learning_rate=0.1, parameters=[{"params": [theirs["w"]]}],
                                   weight_decay=0.1)
    for t in range(BEFORE):
        _paddle_step(opt, {"w": ours["w"]}, t)
        _paddle_step(plain, {"w": theirs["w"]}, t)
    # torch's absolute lr on one, Paddle's factor on the other: 0.1 * 0.5 == 0.05
    group = {"lr": 0.05} if method == "add_param_group" else {"learning_rate": 0.5}
    getattr(opt, method)({"params": [("b", ours["b"])], "weight_decay": 0.0, **group})
    plain._add_param_group({"params": [theirs["b"]], "learning_rate": 0.5,
                            "weight_decay": 0.0})
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.05]
    for t in range(BEFORE, BEFORE + AFTER):
        _paddle_step(opt, ours, t)
        _paddle_step(plain, theirs, t)
    for n, value in _paddle_values(ours).items():
        np.testing.assert_array_equal(value, _paddle_values(theirs)[n], err_msg=n)
    assert not np.array_equal(_paddle_values(ours)["b"], _init()["b"])

    uo.save_state(opt, tmp_path / "run.safetensors")
    again = _paddle_params()
    for n, value in _paddle_values(ours).items():
        again[n].set_value(value)
    resumed = uo.resume(tmp_path / "run.safetensors", list(again.items()),
                        path_taken="native")
    assert isinstance(resumed, paddle.optimizer.AdamW)
    for t in range(BEFORE + AFTER, BEFORE + AFTER + RESUMED):
        _paddle_step(opt, ours, t)
        _paddle_step(resumed, again, t)
    for n, value in _paddle_values(ours).items():
        np.testing.assert_array_equal(_paddle_values(again)[n], value, err_msg=n)


@require("paddle")
def test_paddle_native_lr_written_into_the_groups_reaches_the_added_one():
    import paddle

    ours, theirs = _paddle_params(), _paddle_params()
    opt = uo.build(uo.AdamW(lr=0.1), [("w", ours["w"])], backend="paddle", path="native")
    plain = paddle.optimizer.AdamW(learning_rate=0.1, parameters=[{"params": [theirs["w"]]}],
                                   weight_decay=0.01)
    opt.add_param_group({"params": [("b", ours["b"])], "learning_rate": 0.5})
    plain._add_param_group({"params": [theirs["b"]], "learning_rate": 0.5})
    for t in range(AFTER):
        lr = 0.2 / (t + 1)
        for group, factor in zip(opt.param_groups, (1.0, 0.5)):
            group["lr"] = lr * factor             # one Paddle lr gives both groups theirs
        plain.set_lr(lr)
        _paddle_step(opt, ours, t)
        _paddle_step(plain, theirs, t)
        assert opt.get_lr() == lr
    for n, value in _paddle_values(ours).items():
        np.testing.assert_array_equal(value, _paddle_values(theirs)[n], err_msg=n)


@require("paddle")
def test_paddle_native_group_joins_the_built_group_sharing_its_keys():
    # built with group dicts; the added parameters' lr factor is the second group's, so
    # they join that Paddle group: bit for bit the build given all of them
    import paddle

    runs = []
    for added in (True, False):
        params = {**_paddle_params(), "c": _paddle_params()["b"]}
        pairs = [{"params": [("w", params["w"])]},
                 {"params": [("c", params["c"])] + ([] if added else [("b", params["b"])]),
                  "learning_rate": 0.5}]
        opt = uo.build(uo.AdamW(lr=0.1, weight_decay=0.1), pairs, backend="paddle",
                       path="native")
        if added:
            opt._add_param_group({"params": [("b", params["b"])], "learning_rate": 0.5})
            assert [len(g["params"]) for g in opt._param_groups] == [1, 2]
        for t in range(AFTER):
            # c takes b's gradients reversed (its own numbers, of b's shape)
            grads = {**_grads(t), "c": _grads(t)["b"][::-1].copy()}
            sum((p * paddle.to_tensor(grads[n])).sum() for n, p in params.items()).backward()
            opt.step()
            opt.clear_grad()
        runs.append(_paddle_values(params))
    for n, value in runs[1].items():
        np.testing.assert_array_equal(runs[0][n], value, err_msg=n)


@require("paddle")
def test_paddle_native_lamb_takes_a_group_added_later():
    """paddle.optimizer.Lamb's _default_dict holds neither 'weight_decay' nor
    'grad_clip', which Paddle's base class reads from every group (KeyError, then a list
    called as the clip): the added group gets what the constructor's groups got. Bit for
    bit the build given both groups."""
    import paddle

    spec = uo.Lamb(lr=0.1, weight_decay=0.01)
    runs = []
    for added in (True, False):
        params = _paddle_params()
        if added:
            opt = uo.build(spec, [("w", params["w"])], backend="paddle", path="native")
            opt.add_param_group({"params": [("b", params["b"])], "lr": 0.05})
        else:
            opt = uo.build(spec, [{"params": [("w", params["w"])]},
                                  {"params": [("b", params["b"])], "lr": 0.05}],
                           backend="paddle", path="native")
        assert isinstance(opt, paddle.optimizer.Lamb)
        for t in range(AFTER):
            _paddle_step(opt, params, t)
        runs.append(_paddle_values(params))
    for n, value in runs[1].items():
        np.testing.assert_array_equal(runs[0][n], value, err_msg=n)


@require("paddle")
def test_paddle_native_coupled_decay_of_an_added_group_is_its_own():
    # SGD's coupled decay: the optimizer keeps the built one, the added group carries
    # its own (a regularizer, which Paddle applies before the optimizer's); bit for bit
    # the build given both groups, and the Parameters hold no attribute between steps
    spec = uo.SGD(lr=0.1, weight_decay=0.01)
    extra = {"lr": 0.05, "weight_decay": 0.0}
    runs = []
    for added in (True, False):
        params = _paddle_params()
        if added:
            opt = uo.build(spec, [("w", params["w"])], backend="paddle", path="native")
            _paddle_step(opt, {"w": params["w"]}, 0)
            opt.add_param_group({"params": [("b", params["b"])], **extra})
            assert params["b"].regularizer is None
            assert params["b"].optimize_attr["learning_rate"] == 1.0
        else:
            opt = uo.build(spec, [{"params": [("w", params["w"])]},
                                  {"params": [("b", params["b"])], **extra}],
                           backend="paddle", path="native")
            _paddle_step(opt, {"w": params["w"]}, 0)
        assert type(opt).__name__ == "SGD"
        for t in range(1, 1 + AFTER):
            _paddle_step(opt, params, t)
        runs.append(_paddle_values(params))
    for n, value in runs[1].items():
        np.testing.assert_array_equal(runs[0][n], value, err_msg=n)


@require("paddle")
def test_paddle_native_global_clip_spans_the_added_parameters():
    # one lr and decay: the parameters join Paddle's list, and its global-norm clip
    # (ClipGradByGlobalNorm) takes them into the one norm, as the own path's does
    spec = uo.SGD(lr=0.1, weight_decay=0.01, grad_clip=uo.ClipByGlobalNorm(max_norm=0.5))
    runs = {}
    for path in ("native", "own"):
        params = _paddle_params()
        opt = uo.build(spec, [("w", params["w"])], backend="paddle", path=path)
        for t in range(BEFORE):
            _paddle_step(opt, {"w": params["w"]}, t, scale=50.0)
        opt.add_param_group({"params": [("b", params["b"])]})
        for t in range(BEFORE, BEFORE + AFTER):
            _paddle_step(opt, params, t, scale=50.0)
        runs[path] = (type(opt).__name__, _paddle_values(params))
    assert runs["native"][0] == "SGD" and runs["own"][0] == "SpecOptimizer"
    for n, value in runs["own"][1].items():
        np.testing.assert_allclose(runs["native"][1][n], value, rtol=1e-6, atol=1e-7,
                                   err_msg=n)
    moved = np.abs(runs["native"][1]["b"] - _init()["b"]).max()
    assert 0 < moved < 0.1 * 0.5 * AFTER        # clipped: far below 50 * lr * steps


@require("paddle")
def test_paddle_native_refuses_what_it_cannot_take_and_changes_nothing():
    # Momentum's constructor turns each group's weight_decay into what its kernel reads;
    # a group added later would miss that, so one needing a Paddle group is refused, and
    # so is one that would change the optimizer's own weight decay
    params = _paddle_params()
    opt = uo.build(uo.SGD(lr=0.1, momentum=0.9, weight_decay=0.01), [("w", params["w"])],
                   backend="paddle", path="native")
    _paddle_step(opt, {"w": params["w"]}, 0)
    listed = list(opt._parameter_list)
    with pytest.raises(ValueError, match=r"Momentum's constructor turns each group's "
                                         r"weight_decay.*path='own'"):
        opt.add_param_group({"params": [("b", params["b"])], "lr": 0.05})
    with pytest.raises(ValueError, match=r"Momentum's constructor turns"):
        opt.add_param_group({"params": [("b", params["b"])], "weight_decay": 0.0})
    assert list(opt._parameter_list) == listed and len(opt.param_groups) == 1
    # the same values join its plain list
    opt.add_param_group({"params": [("b", params["b"])]})
    assert len(opt.param_groups) == 2 and opt._parameter_list[-1] is params["b"]
    value = params["b"].numpy().copy()
    _paddle_step(opt, params, 1)
    assert not np.array_equal(params["b"].numpy(), value)

    # AdamW decays through one optimizer-level value (and a selector of the parameters
    # it decays): a build without decay cannot give an added group one in place
    params = _paddle_params()
    opt = uo.build(uo.AdamW(lr=0.1, weight_decay=0.0), [("w", params["w"])],
                   backend="paddle", path="native")
    with pytest.raises(ValueError, match=r"AdamW cannot take this group in place: it would "
                                         r"need other optimizer-level arguments "
                                         r"\(weight_decay: 0\.0 as built, 0\.1 with the "
                                         r"group\).*path='own'"):
        opt.add_param_group({"params": [("b", params["b"])], "weight_decay": 0.1})
    assert len(opt.param_groups) == 1 and len(opt._parameter_list) == 1
