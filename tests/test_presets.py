"""Presets: native argument names and defaults, errors, and the acceptance check that a
preset built on the other two backends (and in the reference) follows the native
optimizer run by hand in its own framework, each through the conformance worker of its
framework (a case with the class built by hand, ``Case.native``), against the float64
oracle of the preset (the conformance rule).
"""

import warnings

import pytest
from support import DENSE_PARAMS, installed_frameworks

import unified_opt as uo
from unified_opt.conformance.cases import Case, Native
from unified_opt.conformance.compare import K

# The parameters of a network being ported (no 0-size tensor); their names exercise
# MindSpore's default decay filter ("gamma"/"beta" skipped, "bias" decayed).
PARAMS = DENSE_PARAMS

# (id, qualified name, native kwargs, documented CPU defect of the native class or None)
CASES = [
    ("torch-sgd", "torch.optim.SGD",
     dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01), None),
    ("torch-sgd-nesterov", "torch.optim.SGD", dict(lr=0.05, momentum=0.9, nesterov=True), None),
    ("torch-adam", "torch.optim.Adam",
     dict(lr=0.01, eps=1e-3, weight_decay=0.01, amsgrad=True), None),
    ("torch-adamw", "torch.optim.AdamW", dict(lr=0.01, eps=1e-3, weight_decay=0.1), None),
    ("paddle-sgd", "paddle.optimizer.SGD", dict(learning_rate=0.05, weight_decay=0.01), None),
    ("paddle-momentum", "paddle.optimizer.Momentum",
     dict(learning_rate=0.05, momentum=0.9, use_nesterov=True, weight_decay=0.01), None),
    ("paddle-adam", "paddle.optimizer.Adam",
     dict(learning_rate=0.01, epsilon=1e-3, weight_decay=0.01, amsgrad=True), None),
    ("paddle-adamw", "paddle.optimizer.AdamW",
     dict(learning_rate=0.01, epsilon=1e-3, weight_decay=0.1), None),
    ("ms-nn-sgd", "mindspore.nn.SGD",
     dict(learning_rate=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01), None),
    ("ms-nn-momentum", "mindspore.nn.Momentum",
     dict(learning_rate=0.05, momentum=0.9, weight_decay=0.01), None),
    ("ms-nn-momentum-nesterov", "mindspore.nn.Momentum",
     dict(learning_rate=0.05, momentum=0.9, use_nesterov=True),
     "use_nesterov=True runs plain momentum on CPU"),
    ("ms-nn-adam", "mindspore.nn.Adam",
     dict(learning_rate=0.01, eps=1e-3, weight_decay=0.01, use_amsgrad=True), None),
    ("ms-nn-adam-nesterov", "mindspore.nn.Adam",
     dict(learning_rate=0.01, eps=1e-3, use_nesterov=True), None),
    ("ms-nn-adamweightdecay", "mindspore.nn.AdamWeightDecay",
     dict(learning_rate=0.01, eps=1e-3, weight_decay=0.1), None),
    ("ms-exp-sgd", "mindspore.experimental.optim.SGD",
     dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01), None),
    ("ms-exp-adam", "mindspore.experimental.optim.Adam",
     dict(lr=0.01, eps=1e-3, weight_decay=0.01), None),
    ("ms-exp-adam-amsgrad", "mindspore.experimental.optim.Adam",
     dict(lr=0.01, eps=1e-3, amsgrad=True), "amsgrad=True is ignored"),
    ("ms-exp-adamw", "mindspore.experimental.optim.AdamW",
     dict(lr=0.01, eps=1e-3, weight_decay=0.1, amsgrad=True), None),
    # the other presets (eps large enough that its placement matters)
    ("torch-nadam", "torch.optim.NAdam", dict(lr=0.01, eps=1e-3, weight_decay=0.1,
                                              decoupled_weight_decay=True), None),
    ("torch-radam", "torch.optim.RAdam", dict(lr=0.01, eps=1e-3, weight_decay=0.01), None),
    ("torch-adamax", "torch.optim.Adamax", dict(lr=0.01, eps=0.05, weight_decay=0.01), None),
    ("torch-adagrad", "torch.optim.Adagrad",
     dict(lr=0.05, lr_decay=0.01, eps=1e-2, initial_accumulator_value=0.1), None),
    ("torch-adadelta", "torch.optim.Adadelta", dict(eps=1e-3, weight_decay=0.01), None),
    ("torch-rmsprop", "torch.optim.RMSprop",
     dict(lr=0.01, eps=1e-3, momentum=0.9, centered=True, weight_decay=0.01), None),
    ("torch-rprop", "torch.optim.Rprop", dict(lr=0.01), None),
    ("paddle-nadam", "paddle.optimizer.NAdam",
     dict(learning_rate=0.01, epsilon=1e-3, weight_decay=0.01), None),
    ("paddle-radam", "paddle.optimizer.RAdam", dict(learning_rate=0.01, epsilon=1e-3), None),
    ("paddle-adamax", "paddle.optimizer.Adamax",
     dict(learning_rate=0.01, epsilon=0.05, weight_decay=0.01), None),
    ("paddle-adagrad", "paddle.optimizer.Adagrad",
     dict(learning_rate=0.05, epsilon=1e-2, initial_accumulator_value=0.1), None),
    ("paddle-adadelta", "paddle.optimizer.Adadelta", dict(learning_rate=1.0, epsilon=1e-3),
     None),
    ("paddle-rmsprop", "paddle.optimizer.RMSProp",
     dict(learning_rate=0.01, epsilon=1e-3, momentum=0.9, centered=True), None),
    ("paddle-rprop", "paddle.optimizer.Rprop",
     dict(learning_rate=0.01, learning_rate_range=(1e-4, 0.5)), None),
    ("ms-nn-lazyadam", "mindspore.nn.LazyAdam", dict(learning_rate=0.01, eps=1e-3,
                                                     weight_decay=0.01), None),
    ("ms-nn-adamax", "mindspore.nn.AdaMax", dict(learning_rate=0.01, eps=0.05,
                                                 weight_decay=0.1), None),
    ("ms-nn-adagrad", "mindspore.nn.Adagrad", dict(learning_rate=0.05, weight_decay=0.1), None),
    ("ms-nn-adadelta", "mindspore.nn.Adadelta", dict(epsilon=1e-3, weight_decay=0.1), None),
    ("ms-nn-rmsprop", "mindspore.nn.RMSProp",
     dict(learning_rate=0.01, epsilon=1e-3, momentum=0.9, centered=True, weight_decay=0.01),
     None),
    ("ms-nn-rprop", "mindspore.nn.Rprop", dict(learning_rate=0.01, weight_decay=0.05), None),
    ("ms-exp-nadam", "mindspore.experimental.optim.NAdam",
     dict(lr=0.01, eps=1e-3, weight_decay=0.01), None),
    ("ms-exp-radam", "mindspore.experimental.optim.RAdam", dict(lr=0.01, eps=1e-3), None),
    ("ms-exp-adamax", "mindspore.experimental.optim.Adamax", dict(lr=0.01, eps=0.05), None),
    ("ms-exp-adagrad", "mindspore.experimental.optim.Adagrad",
     dict(lr=0.05, lr_decay=0.01, eps=1e-2), None),
    ("ms-exp-adadelta", "mindspore.experimental.optim.Adadelta", dict(eps=1e-3), None),
    ("ms-exp-rmsprop", "mindspore.experimental.optim.RMSprop",
     dict(lr=0.01, eps=1e-3, momentum=0.9, centered=True), None),
    ("ms-exp-rprop", "mindspore.experimental.optim.Rprop", dict(lr=0.01), None),
    # the seed algorithms (MindSpore nn.Lamb / nn.LARS have no CPU kernel to run)
    ("paddle-lamb", "paddle.optimizer.Lamb", dict(learning_rate=0.01, lamb_weight_decay=0.01),
     None),
    ("paddle-lamb-always-adapt", "paddle.optimizer.Lamb",
     dict(learning_rate=0.01, lamb_weight_decay=0.0, always_adapt=True), None),
    ("paddle-lars", "paddle.incubate.optimizer.LarsMomentumOptimizer",
     dict(learning_rate=0.1, momentum=0.9, lars_weight_decay=0.0005), None),
    ("torch-adafactor", "torch.optim.Adafactor", dict(lr=0.01, weight_decay=0.01), None),
    # relative step: the class reports no lr (get_lr() is 0), it runs with its fixed cap
    ("ms-nn-adafactor", "mindspore.nn.AdaFactor", dict(), None),
    ("ms-nn-adafactor-manual-lr", "mindspore.nn.AdaFactor",
     dict(learning_rate=0.01, relative_step=False, weight_decay=0.01), None),
    ("ms-nn-adamoffload", "mindspore.nn.AdamOffload",
     dict(learning_rate=0.01, eps=1e-3, weight_decay=0.01), None),
    ("ms-nn-adam-use-offload", "mindspore.nn.Adam",
     dict(learning_rate=0.01, eps=1e-3, use_offload=True), None),
]


# -- argument names, defaults and errors (no framework needed) -------------------------

def test_every_listed_class_has_a_preset():
    listed = {"torch.optim.SGD", "torch.optim.Adam", "torch.optim.AdamW",
              "paddle.optimizer.SGD", "paddle.optimizer.Momentum", "paddle.optimizer.Adam",
              "paddle.optimizer.AdamW", "mindspore.nn.SGD", "mindspore.nn.Momentum",
              "mindspore.nn.Adam", "mindspore.nn.AdamWeightDecay",
              "mindspore.experimental.optim.SGD", "mindspore.experimental.optim.Adam",
              "mindspore.experimental.optim.AdamW"}
    assert listed <= set(uo.presets())


def test_native_defaults():
    assert uo.preset("torch.optim.Adam") == uo.Adam()
    assert uo.preset("torch.optim.AdamW") == uo.AdamW(weight_decay=1e-2)
    assert uo.preset("torch.optim.Adam", decoupled_weight_decay=True, weight_decay=0.1) == \
        uo.AdamW(weight_decay=0.1)
    assert uo.preset("paddle.optimizer.Momentum") == uo.SGD(lr=1e-3, momentum=0.9,
                                                            momentum_init="zeros")
    assert uo.preset("paddle.optimizer.AdamW").weight_decay == 0.01
    ms_adam = uo.preset("mindspore.nn.Adam", weight_decay=0.1)
    assert (ms_adam.eps_placement, ms_adam.no_decay_names) == ("eps_hat", ("*beta*", "*gamma*"))
    awd = uo.preset("mindspore.nn.AdamWeightDecay", weight_decay=0.01)
    assert (awd.bias_correction, awd.eps, awd.decay_form) == (False, 1e-6, "in_update")
    assert uo.preset("mindspore.nn.SGD").lr == 0.1
    assert uo.preset("mindspore.experimental.optim.AdamW").no_decay_names == ()


def test_preset_errors_name_the_argument():
    with pytest.raises(ValueError, match="no preset for 'torch.optim.Adamm'"):
        uo.preset("torch.optim.Adamm")
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['learning_rate'\]"
                                        r"; valid: \['lr', 'betas'"):
        uo.preset("torch.optim.Adam", learning_rate=0.1)
    with pytest.raises(TypeError, match=r"missing required argument\(s\) \['momentum'\]"):
        uo.preset("mindspore.nn.Momentum", learning_rate=0.1)
    with pytest.raises(ValueError, match=r"betas\[1\] must be >= 0 and < 1, got 1\.5"):
        uo.preset("paddle.optimizer.Adam", beta2=1.5)
    with pytest.raises(NotImplementedError, match="rescale_grad=0.5"):
        uo.preset("paddle.optimizer.Momentum", rescale_grad=0.5)
    with pytest.raises(TypeError, match="loss_scale must be a float or an int, got True"):
        uo.preset("mindspore.nn.Adam", loss_scale=True)
    with pytest.raises(TypeError, match="weight_decay must be a float or L2Decay, got the int"):
        uo.preset("paddle.optimizer.SGD", weight_decay=1)
    with pytest.raises(TypeError, match="lr must be a float here"):
        uo.preset("torch.optim.SGD", lr=[0.1, 0.2])


def test_implementation_flags_warn_and_do_not_change_the_spec():
    with pytest.warns(UserWarning, match="foreach=True chooses an implementation"):
        spec = uo.preset("torch.optim.Adam", foreach=True)
    assert spec == uo.Adam()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uo.preset("torch.optim.Adam", foreach=None)


# -- the acceptance check: native by hand vs the preset everywhere ---------------------

#: what a class reports as its lr where it reports none it runs with
FIXED_LR = {"ms-nn-adafactor": 1e-2}


def _hand(case_id):
    return f"preset_{case_id}_by_hand"


def _built(case_id):
    return f"preset_{case_id}_built"


def _worker_cases():
    installed = installed_frameworks()
    if len(installed) < 2:
        return []
    out = []
    for case_id, qualified, kwargs, _ in CASES:
        native_fw = qualified.split(".")[0]
        if native_fw not in installed:
            continue
        spec = uo.preset(qualified, **kwargs)
        out.append(Case(id=_hand(case_id), spec=spec, params=PARAMS,
                        native=Native(qualified, kwargs, fixed_lr=FIXED_LR.get(case_id))))
        out.append(Case(id=_built(case_id), spec=spec, params=PARAMS, paths=("auto",),
                        backends=tuple(f for f in installed if f != native_fw)))
    return out


#: run by the session's conformance runner (conftest.py): one worker per framework
WORKER_CASES = _worker_cases()


@pytest.mark.parametrize("case_id, qualified, kwargs, defect", CASES,
                         ids=[c[0] for c in CASES])
def test_preset_follows_the_native_class_everywhere(worker_runs, case_id, qualified, kwargs,
                                                    defect):
    native_fw = qualified.split(".")[0]
    installed = installed_frameworks()
    if native_fw not in installed or len(installed) < 2:
        pytest.skip(f"needs {native_fw} and another framework")
    native = worker_runs.result(_hand(case_id), native_fw, "hand")
    if defect:
        # The native class does not do what its documentation says (the preset's math).
        assert native["status"] == "fail", f"{qualified} {defect}: expected a deviation"
        assert native["comparison"]["worst_ratio"] > 10 * K
    else:
        worker_runs.assert_passes(_hand(case_id), native_fw, "hand")
    for fw in installed:
        if fw != native_fw:
            worker_runs.assert_passes(_built(case_id), fw, "auto")
