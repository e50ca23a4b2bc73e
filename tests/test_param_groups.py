"""The one optimizer surface (``unified_opt.param_groups``) on every backend and path:
``param_groups`` values written before a step are the ones that step uses, bit for bit
the same as the spec that schedules them (whose numbers the conformance suite proves
against the oracle); group dicts in ``uo.build``; what a path cannot honour refused,
naming the key, before anything changes.

Each framework runs in this process (conftest imports MindSpore first).
"""

import importlib.util

import numpy as np
import pytest

import unified_opt as uo

BACKENDS = [b for b in ("torch", "paddle", "mindspore") if importlib.util.find_spec(b)]
SHAPES = {"w": (5, 4), "b": (4,)}
STEPS = 12
LRS = [0.1, 0.05, 0.05, 0.2, 0.01, 0.3, 0.3, 0.07, 0.11, 0.02, 0.4, 0.09]
DECAYS = [0.01, 0.01, 0.2, 0.0, 0.05, 0.05, 0.3, 0.1, 0.0, 0.02, 0.02, 0.15]


def _init():
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}


def _grads(t):
    rng = np.random.default_rng(100 + t)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}


class Model:
    """Named float32 parameters of ``backend`` and a step that feeds them gradients."""

    def __init__(self, backend):
        self.backend = backend
        init = _init()
        if backend == "torch":
            import torch

            self.params = {n: torch.nn.Parameter(torch.tensor(a)) for n, a in init.items()}
        elif backend == "paddle":
            import paddle

            self.params = {}
            for n, a in init.items():
                p = paddle.create_parameter(list(a.shape), "float32")
                p.set_value(a)
                self.params[n] = p
        else:
            import mindspore as ms

            self.params = {n: ms.Parameter(ms.Tensor(a), name=n) for n, a in init.items()}

    def step(self, opt, t):
        grads = _grads(t)
        if self.backend == "torch":
            import torch

            for n, p in self.params.items():
                p.grad = torch.tensor(grads[n])
            opt.step()
        elif self.backend == "paddle":
            import paddle

            for n, p in self.params.items():
                p.grad = paddle.to_tensor(grads[n])
            opt.step()
            opt.clear_grad()
        else:
            import mindspore as ms

            opt(tuple(ms.Tensor(grads[n]) for n in self.params))

    def values(self):
        return {n: np.array(p.detach().numpy() if self.backend == "torch" else
                            p.numpy() if self.backend == "paddle" else p.asnumpy())
                for n, p in self.params.items()}


def _paths(backend, spec):
    decision = uo.explain(spec, backend)
    return ["own"] + (["native"] if decision.alternative or decision.path == "native"
                      else [])


def _build(spec, model, path, **options):
    return uo.build(spec, list(model.params.items()), path=path, options=options or None)


def _scheduled(values):
    return uo.schedules.Lambda(fn=lambda t: values[min(t, len(values) - 1)])


def _refused_and_kept(model, opt, key, value, match, t=0):
    """``value`` written into the first group's ``key`` and a step: a ValueError matching
    ``match``, the parameters as they were."""
    before = model.values()
    with pytest.raises(ValueError, match=match):
        opt.param_groups[0][key] = value
        model.step(opt, t)
    for name, array in model.values().items():
        np.testing.assert_array_equal(array, before[name], err_msg=name)


def _stepped_alike(first, opt, second, other, steps, before=lambda t: None, label=""):
    """``first`` stepped by ``opt`` and ``second`` by ``other`` for ``steps`` steps
    (``before(t)`` ahead of each): the same bits."""
    for t in range(steps):
        before(t)
        first.step(opt, t)
        second.step(other, t)
    for name, value in first.values().items():
        np.testing.assert_array_equal(value, second.values()[name], err_msg=f"{label}{name}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", ["own", "native"])
def test_an_lr_written_into_param_groups_is_the_next_steps_lr(backend, path):
    spec = uo.SGD(lr=LRS[0], momentum=0.9, weight_decay=1e-3)
    if path not in _paths(backend, spec):
        pytest.skip(f"no native class for {spec} on {backend}")
    written, model = Model(backend), Model(backend)
    opt = _build(spec, written, path)
    options = {"total_steps": STEPS} if backend == "mindspore" else {}
    scheduled = _build(spec.replace(lr=_scheduled(LRS)), model, path, **options)
    sched = uo.native_scheduler(scheduled)
    for t in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = LRS[t]
        written.step(opt, t)
        model.step(scheduled, t)
        if sched is not None:
            sched.step()
    for name, value in written.values().items():
        np.testing.assert_array_equal(value, model.values()[name], err_msg=name)
    assert not np.array_equal(written.values()["w"], _init()["w"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_weight_decay_written_into_param_groups_is_the_next_steps(backend):
    spec = uo.AdamW(lr=0.05, weight_decay=DECAYS[0])
    written, model = Model(backend), Model(backend)
    opt = _build(spec, written, "own")
    scheduled = _build(spec.replace(weight_decay=_scheduled(DECAYS)), model, "own")
    _stepped_alike(written, opt, model, scheduled, STEPS,
                   before=lambda t: opt.param_groups[0].__setitem__("weight_decay", DECAYS[t]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", [uo.CAME(lr=0.05), uo.Adafactor(lr=0.05, relative_step=False)],
                         ids=["came", "adafactor"])
def test_a_factored_spec_takes_a_written_decay_and_refuses_a_new_moment(backend, spec,
                                                                        tmp_path):
    """Adafactor's and CAME's state depends on each parameter's shape (factored for a
    matrix, whole for a vector): a write is judged over the group's shapes, at the step
    and in a state file."""
    written, model = Model(backend), Model(backend)
    opt = _build(spec, written, "own")
    built = _build(spec.replace(weight_decay=0.1), model, "own")
    opt.param_groups[0]["weight_decay"] = 0.1
    _stepped_alike(written, opt, model, built, 4)
    uo.save_state(opt, tmp_path / "run.safetensors")
    resumed = _build(spec, Model(backend), "own")
    uo.load_state(resumed, tmp_path / "run.safetensors")
    assert resumed.param_groups[0]["weight_decay"] == 0.1
    if isinstance(spec, uo.Adafactor):        # beta1 None -> 0.9: a first moment to keep
        _refused_and_kept(written, opt, "beta1", 0.9,
                          r"changes the state Adafactor keeps \(\['exp_avg_sq_row', "
                          r"'exp_avg_sq_col', 'exp_avg_sq'\] ->", t=4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_betas_written_before_a_step_are_that_steps(backend):
    written, model = Model(backend), Model(backend)
    opt = _build(uo.Adam(lr=0.05), written, "own")
    built = _build(uo.Adam(lr=0.05, betas=(0.5, 0.9)), model, "own")
    opt.param_groups[0]["betas"] = (0.5, 0.9)
    _stepped_alike(written, opt, model, built, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_group_dicts_build_what_the_equivalent_rules_build(backend):
    spec = uo.AdamW(lr=0.05, weight_decay=0.1)
    dicts, rules = Model(backend), Model(backend)
    opt = uo.build(spec, [{"params": [dicts.params["w"]]},
                          {"params": [dicts.params["b"]], "weight_decay": 0.0, "lr": 0.02}])
    built = uo.build(spec, list(rules.params.items()),
                     groups=[uo.Group(match="b", weight_decay=0.0, lr=0.02)])
    assert [(g["lr"], g["weight_decay"]) for g in opt.param_groups] == [(0.05, 0.1),
                                                                      (0.02, 0.0)]
    said = str(uo.explain(opt))
    assert "group dicts: 2 groups" in said and "lr=0.02, weight_decay=0.0" in said, said
    if backend != "torch":      # (torch's own class keeps its constructor's defaults)
        assert opt.defaults["lr"] == 0.05 and opt.defaults["betas"] == (0.9, 0.999)
    _stepped_alike(dicts, opt, rules, built, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_group_dict_is_a_param_group_of_its_own_in_order(backend, tmp_path):
    """Layer-wise lr decay (MAE, BEiT) keeps one factor per group dict and writes
    ``param_groups[i]['lr']`` by position: dicts of equal values stay apart, as torch
    keeps them, on every path and through a state file (which holds them as rules)."""
    spec = uo.AdamW(lr=0.05)
    for path in _paths(backend, spec):
        model = Model(backend)
        opt = uo.build(spec, [{"params": [model.params["w"]], "weight_decay": 0.1},
                              {"params": [model.params["b"]], "weight_decay": 0.1}], path=path)
        assert [len(g["params"]) for g in opt.param_groups] == [1, 1], path
    dicts, rules = Model(backend), Model(backend)
    opt = uo.build(spec, [{"params": [("w", dicts.params["w"])], "weight_decay": 0.1},
                          {"params": [("b", dicts.params["b"])], "weight_decay": 0.1}],
                   path="own")
    built = uo.build(spec.replace(weight_decay=0.1), list(rules.params.items()),
                     groups=[uo.Group(match="b", lr=0.025)], path="own")
    _stepped_alike(dicts, opt, rules, built, 4,
                   before=lambda t: opt.param_groups[1].__setitem__("lr", 0.025))
    uo.save_state(opt, tmp_path / "run.safetensors")
    resumed = uo.resume(tmp_path / "run.safetensors", list(Model(backend).params.items()),
                        path_taken="own")
    assert [(len(g["params"]), g["lr"]) for g in resumed.param_groups] == [(1, 0.05),
                                                                           (1, 0.025)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_group_dicts_own_keys_are_kept_unread_and_a_near_miss_is_refused(backend):
    """timm's and MAE's layer-decay groups carry ``lr_scale`` for the script's lr loop:
    kept in the param group as torch keeps it, read by no step; a misspelt
    hyperparameter would do nothing, so it is refused, at the build and at a write."""
    spec = uo.AdamW(lr=0.05)
    for path in _paths(backend, spec):
        kept, plain = Model(backend), Model(backend)
        opt = uo.build(spec, [{"params": [kept.params["w"]], "lr_scale": 0.5, "layer_id": 1},
                              {"params": [kept.params["b"]], "lr_scale": 1.0}], path=path)
        assert [g["lr_scale"] for g in opt.param_groups] == [0.5, 1.0], path
        assert opt.param_groups[0]["layer_id"] == 1, path
        built = uo.build(spec, [{"params": [plain.params["w"]]},
                                {"params": [plain.params["b"]]}], path=path)
        _stepped_alike(kept, opt, plain, built, 3, label=f"{path} ")
    model = Model(backend)
    with pytest.raises(ValueError, match=r"params\[0\]\['weight_decya'\].*'weight_decay' "
                                         r"misspelt"):
        uo.build(spec, [{"params": list(model.params.values()), "weight_decya": 0.1}])
    opt = uo.build(spec, list(model.params.items()), path="own")
    opt.param_groups[0]["max_momentum"] = 0.95       # OneCycleLR's bookkeeping: kept
    _refused_and_kept(model, opt, "weight_decya", 0.1,
                      r"\['weight_decya'\] = 0.1 would not be read.*'weight_decay' misspelt")


WRONG_WRITES = [("momentum", 0.9, ValueError, r"param_groups\[0\]\['momentum'\].*no 'momentum'"),
                ("betas", (1.5, 0.9), ValueError, r"param_groups\[0\].*betas"),
                ("amsgrad", True, ValueError, "changes the state"),
                ("lr", -1.0, ValueError, r"param_groups\[0\]\['lr'\]"),
                ("lr", "0.1", TypeError, r"param_groups\[0\]\['lr'\]")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_a_path_cannot_honour_are_refused_naming_the_key(backend):
    """Paddle's and MindSpore's groups refuse at the write; torch's own dicts (torch's
    Optimizer makes them) at the next step, before it changes anything."""
    model = Model(backend)
    opt = _build(uo.AdamW(lr=0.05), model, "own")
    group = opt.param_groups[0]
    before = model.values()
    for key, value, error, message in WRONG_WRITES:
        kept = dict(group)
        with pytest.raises(error, match=message):
            group[key] = value
            model.step(opt, 0)
        dict.clear(group)
        dict.update(group, kept)
        for name, array in model.values().items():
            np.testing.assert_array_equal(array, before[name])
    if backend != "torch":
        with pytest.raises(ValueError, match="cannot be replaced"):
            group["params"] = []
    group["initial_lr"] = 0.05          # a scheduler's key: kept, not read
    model.step(opt, 0)
    assert not np.array_equal(model.values()["w"], before["w"])


@pytest.mark.parametrize("backend", ["paddle", "mindspore"])
def test_a_native_class_refuses_a_hyperparameter_written_after_it_was_built(backend):
    if backend not in BACKENDS:
        pytest.skip(f"{backend} is not installed")
    spec = uo.SGD(lr=0.1, momentum=0.9)
    model = Model(backend)
    opt = _build(spec, model, "native")
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['momentum'\].*path='own'"):
        opt.param_groups[0]["momentum"] = 0.5
    opt.param_groups[0]["momentum"] = 0.9           # the value it has: nothing changes


def test_paddle_lr_writers_agree_the_last_one_wins_and_a_clash_is_refused():
    if "paddle" not in BACKENDS:
        pytest.skip("paddle is not installed")
    model = Model("paddle")
    opt = _build(uo.SGD(lr=0.1), model, "own")
    opt.param_groups[0]["lr"] = 0.05
    assert opt.get_lr() == 0.05                     # the write is Paddle's lr at once
    opt.set_lr(0.02)
    assert opt.param_groups[0]["lr"] == 0.02        # and Paddle's lr the group's
    opt.param_groups[0]["lr"] = 0.04                # the last writer wins
    # an lr no step can run with is refused by set_lr itself, nothing changed (Paddle's
    # own set_lr takes it, and the refusal came at the next step)
    for path in ("own", "native"):
        built = opt if path == "own" else _build(uo.SGD(lr=0.1), Model("paddle"), path)
        held, owner = built.get_lr(), type(built).__name__     # SpecOptimizer, SGD
        for bad in (-1.0, float("nan"), float("inf")):
            with pytest.raises(ValueError, match=rf"{owner}.set_lr: value must be a finite "
                                                 rf"lr >= 0, got {bad!r}"):
                built.set_lr(bad)
        with pytest.raises(TypeError, match=f"{owner}.set_lr: value must be a float, got True"):
            built.set_lr(True)
        assert built.get_lr() == held
    model.step(opt, 0)
    assert opt.get_lr() == 0.04 == opt.param_groups[0]["lr"]
    scheduled = _build(uo.SGD(lr=uo.schedules.Step(lr=0.1, step_size=1, gamma=0.5)),
                       model, "own")
    sched = uo.native_scheduler(scheduled)
    model.step(scheduled, 1)
    sched.step()
    assert scheduled.param_groups[0]["lr"] == 0.05  # the scheduler's next lr, before the step
    scheduled.param_groups[0]["lr"] = 0.5           # and a write: two writers of one lr
    sched.step()
    before = model.values()
    with pytest.raises(ValueError, match="one of them must drive the lr"):
        model.step(scheduled, 2)
    for name, value in model.values().items():
        np.testing.assert_array_equal(value, before[name])


def test_paddle_group_factor_form_and_closure():
    if "paddle" not in BACKENDS:
        pytest.skip("paddle is not installed")
    import paddle

    model = Model("paddle")
    opt = uo.build(uo.SGD(lr=0.1), [{"params": [model.params["w"]]},
                                    {"params": [model.params["b"]], "learning_rate": 0.5}])
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.05]
    before = model.values()

    def closure():
        loss = (model.params["w"] * model.params["w"]).sum() + model.params["b"].sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert float(loss) == pytest.approx(float((before["w"] ** 2).sum() + before["b"].sum()),
                                        rel=1e-6)
    w = model.values()["w"]
    np.testing.assert_array_equal(w, (before["w"] - np.float32(0.1) * (2 * before["w"]))
                                  .astype(np.float32))
    assert isinstance(opt.param_groups[0], dict) and paddle.is_tensor(model.params["w"])


def test_mindspore_graph_mode_refuses_what_only_python_reads():
    if "mindspore" not in BACKENDS:
        pytest.skip("mindspore is not installed")
    import mindspore as ms

    model = Model("mindspore")
    opt = _build(uo.AdamW(lr=0.05), model, "own")
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(ValueError, match="GRAPH_MODE"):
            opt.param_groups[0]["weight_decay"] = 0.5
        opt.param_groups[0]["lr"] = 0.02            # carried into learning_rate
    finally:
        ms.set_context(mode=mode)
    assert float(opt.learning_rate.asnumpy()) == np.float32(0.02)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch"])
def test_save_state_keeps_group_dicts_and_a_written_lr(backend, tmp_path):
    """A run built from group dicts and driven through param_groups resumes with the
    same groups and the lr it had; a hyperparameter written into a group is recorded
    with that group's parameters and set back by loading."""
    spec = uo.AdamW(lr=0.05, weight_decay=0.1)
    model = Model(backend)
    opt = uo.build(spec, [{"params": [("w", model.params["w"])]},
                          {"params": [("b", model.params["b"])], "weight_decay": 0.0}],
                   path="own")
    for t in range(3):
        for group in opt.param_groups:
            group["lr"] = LRS[t]
        model.step(opt, t)
    uo.save_state(opt, tmp_path / "run.safetensors")
    again = Model(backend)
    for name, p in again.params.items():     # the weights the first run reached
        value = model.values()[name]
        p.set_value(value) if backend == "paddle" else p.set_data(
            __import__("mindspore").Tensor(value))
    resumed = uo.resume(tmp_path / "run.safetensors", list(again.params.items()),
                        path_taken="own")
    assert [(g["lr"], g["weight_decay"]) for g in resumed.param_groups] == \
        [(LRS[2], 0.1), (LRS[2], 0.0)]
    for t in range(3, 6):
        for group in opt.param_groups:
            group["lr"] = LRS[t]
        for group in resumed.param_groups:
            group["lr"] = LRS[t]
        model.step(opt, t)
        again.step(resumed, t)
    for name, value in model.values().items():
        np.testing.assert_array_equal(again.values()[name], value, err_msg=name)
    opt.param_groups[1]["eps"] = 1e-6
    uo.save_state(opt, tmp_path / "other.safetensors")
    from unified_opt.porting.state import read_state

    values = read_state(tmp_path / "other.safetensors").group_values
    assert values == {"w": {"lr": LRS[5]}, "b": {"lr": LRS[5], "eps": 1e-6}}
    resumed = uo.resume(tmp_path / "other.safetensors", list(again.params.items()),
                        path_taken="own")
    assert [g["eps"] for g in resumed.param_groups] == [1e-8, 1e-6]


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "mindspore"])
def test_a_group_added_after_the_build_steps_and_saves_as_if_built_with_it(backend, tmp_path):
    """torch's and Paddle's own paths: add_param_group gives the new parameters the
    group's values (Paddle's lr factor form too), bit for bit the build with both groups,
    and save_state keeps them; native classes take one too."""
    spec = uo.AdamW(lr=0.05, weight_decay=0.1)
    extra = {"weight_decay": 0.0, ("lr" if backend == "torch" else "learning_rate"):
             0.025 if backend == "torch" else 0.5}      # 0.05 * 0.5 == 0.025 exactly
    added, built = Model(backend), Model(backend)
    opt = uo.build(spec, [("w", added.params["w"])], path="own")
    opt.add_param_group({"params": [("b", added.params["b"])], **extra})
    both = uo.build(spec, [{"params": [("w", built.params["w"])]},
                           {"params": [("b", built.params["b"])], **extra}], path="own")
    assert [(g["lr"], g["weight_decay"]) for g in opt.param_groups] == \
        [(0.05, 0.1), (0.025, 0.0)]
    _stepped_alike(added, opt, built, both, 4)
    uo.save_state(opt, tmp_path / "run.safetensors")
    resumed = uo.resume(tmp_path / "run.safetensors", list(Model(backend).params.items()),
                        path_taken="own")
    assert [(g["lr"], g["weight_decay"]) for g in resumed.param_groups] == \
        [(0.05, 0.1), (0.025, 0.0)]
    with pytest.raises(ValueError, match="already in the optimizer"):
        opt.add_param_group({"params": [added.params["b"]]})
    native = _build(spec, Model(backend), "native")     # (tests/test_add_param_group_native.py)
    count = len(native.param_groups)
    native.add_param_group({"params": [Model(backend).params["b"]]})
    assert len(native.param_groups) == count + 1


def test_mindspore_zero_grad_has_nothing_to_clear():
    if "mindspore" not in BACKENDS:
        pytest.skip("mindspore is not installed")
    model = Model("mindspore")
    for path in ("own", "native"):
        opt = _build(uo.SGD(lr=0.1), model, path)
        assert opt.zero_grad() is None and opt.zero_grad(set_to_none=False) is None
        with pytest.raises(TypeError, match="set_to_none must be a bool"):
            opt.zero_grad(set_to_none="yes")
