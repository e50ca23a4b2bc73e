"""The tests' algorithm table: one :class:`Algorithm` per registry name.

Per algorithm:

* ``samples``: specs covering its knobs, among them ones that take the own
  implementation on each backend; every backend runs each one on the ``auto`` and the
  ``own`` path against the float64 oracle (``test_algorithms.py``), over the conformance
  parameter set;
* ``planted``: a wrong variant of a sample the comparison must flag (each backend's run
  of the sample against the oracle of the variant);
* ``explained``: what ``uo.explain(spec, backend)`` must say (the native class or the own
  implementation, and a phrase of the reason);
* ``natives``: a native class of a backend built by hand, the way a user of that
  framework writes it (its qualified class name and keyword arguments, as a
  conformance :class:`Native`), next to the spec whose ``uo.build`` must be that class,
  following the oracle and bit for bit the class built by hand. Every native row of
  every backend's descriptors needs one; the samples need not repeat the rows.

An algorithm's record (:mod:`unified_opt.records`, next to its spec) gives its samples
and planted deviations; this table adds, per algorithm, what concerns the backends: the
explained paths, the hand-built natives and the samples (often a framework's preset)
that go with them. An algorithm without a native class needs no entry here. The generic
tests read ``uo.algorithms()`` and the backends' rows, and fail for a name or a row that
neither this table nor the records cover.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from support import SMALL_PARAMS

import unified_opt as uo
from unified_opt.conformance.cases import Native
from unified_opt.records import Planted, records
from unified_opt.schedules import Cosine, Exponential

#: the algorithms whose update holds a matrix phase (Muon's iteration): the CUDA engine
#: hands them to eager operations (tests/test_cuda_engine.py checks the list); the CPU
#: kernels run them in segments around it (tests/test_matrix_phase.py)
UNTRACEABLE = ("muon",)
#: the steps of every run here (the conformance default)
STEPS = 50
COSINE = Cosine(lr=0.05, T_max=30, eta_min=0.001)
#: MindSpore's per-step list of COSINE, as a user writes it for STEPS steps
COSINE_LIST = [COSINE(t) for t in range(STEPS)]
#: Paddle's LambdaDecay around COSINE (the factor on learning_rate 1.0)
PADDLE_COSINE = ("paddle.optimizer.lr.LambdaDecay",
                 {"learning_rate": 1.0, "lr_lambda": {"$schedule": COSINE.to_dict()}})

#: the parameters of the runs with a class built by hand (a network being ported: no
#: 0-size tensor, which MindSpore's classes cannot hold)
HAND_PARAMS = SMALL_PARAMS
NAMES = list(HAND_PARAMS)


def every(*names):
    """A ``$params`` marker: the named parameters (every one by default)."""
    return {"$params": list(names or NAMES)}


def but(*left_out):
    return every(*[n for n in NAMES if n not in left_out])


def nn_groups(*groups):
    """MindSpore ``nn`` group dicts with ``order_params`` (explicit groups switch nn's
    beta/gamma decay filter off)."""
    return [*groups, {"order_params": every()}]


@dataclass(frozen=True)
class Explained:
    backend: str
    spec: uo.Spec
    native: str | None          # None: the own implementation
    phrase: str = ""


@dataclass(frozen=True)
class Hand:
    """``uo.build(spec, options=options)`` is the native row ``row`` (default: the class
    built by hand), bit-identical to ``native`` built by hand on the same parameters."""

    spec: uo.Spec
    native: Native
    row: str = ""
    options: dict = field(default_factory=dict)

    @property
    def backend(self) -> str:
        return self.native.framework

    @property
    def row_class(self) -> str:
        return self.row or self.native.optimizer


@dataclass(frozen=True)
class Algorithm:
    samples: tuple
    planted: tuple = ()
    explained: tuple = ()
    natives: tuple = ()


def _sgd() -> Algorithm:
    nesterov = uo.SGD(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)
    scheduled = uo.SGD(lr=COSINE, momentum=0.9)
    damped = uo.SGD(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=1e-2, maximize=True)
    nn_momentum = uo.preset("mindspore.nn.Momentum", learning_rate=0.1, momentum=0.9)
    return Algorithm(
        samples=(
damped, nesterov, scheduled),
        planted=(
            Planted(nesterov, {"nesterov": False}),
            Planted(scheduled, {"lr": Cosine(lr=0.05, T_max=31, eta_min=0.001)}),
            Planted(damped, {"dampening": 0.0}),
        ),
        explained=(
            Explained("torch", uo.SGD(), "torch.optim.SGD", "computes exactly"),
            Explained("torch", damped, "torch.optim.SGD"),
            Explained("paddle", uo.SGD(lr=0.1), "paddle.optimizer.SGD", "computes exactly"),
            Explained("paddle", uo.SGD(lr=0.1, momentum=0.9), "paddle.optimizer.Momentum",
                      "computes exactly"),
            Explained("paddle", scheduled, "paddle.optimizer.Momentum"),
            Explained("paddle", uo.SGD(lr=0.1, momentum=0.9, dampening=0.1), None,
                      "dampening=0"),
            Explained("paddle", uo.SGD(lr=COSINE, momentum=0.9, lr_placement="inside"), None),
            Explained("paddle", uo.SGD(lr=0.1, weight_decay=0.1, no_decay_names=("*bias*",)),
                      "paddle.optimizer.SGD", "computes exactly"),
            Explained("mindspore", uo.SGD(lr=0.1), "mindspore.nn.SGD"),
            Explained("mindspore", nesterov, "mindspore.nn.SGD"),
            Explained("mindspore", damped, "mindspore.experimental.optim.SGD"),
            Explained("mindspore", nn_momentum, "mindspore.nn.Momentum"),
            Explained("mindspore", uo.preset("mindspore.nn.Momentum", learning_rate=0.1,
                                             momentum=0.9, use_nesterov=True),
                      "mindspore.nn.SGD", "not mindspore.nn.Momentum: needs nesterov=False "
                      "(nn.Momentum(use_nesterov=True) runs plain momentum on CPU, measured)"),
        ),
        natives=(
            Hand(damped, Native("torch.optim.SGD", {"lr": 0.05, "momentum": 0.9,
                                                    "dampening": 0.3, "weight_decay": 1e-2,
                                                    "maximize": True})),
            Hand(nesterov, Native("torch.optim.SGD", {"lr": 0.05, "momentum": 0.9,
                                                      "nesterov": True,
                                                      "weight_decay": 0.01})),
            Hand(uo.SGD(lr=0.05, weight_decay=0.01),
                 Native("paddle.optimizer.SGD", {"learning_rate": 0.05,
                                                 "weight_decay": 0.01})),
            Hand(nesterov, Native("paddle.optimizer.Momentum", {
                "learning_rate": 0.05, "momentum": 0.9, "use_nesterov": True,
                "weight_decay": 0.01})),
            Hand(uo.SGD(lr=0.01, momentum=0.9), Native("paddle.optimizer.Momentum", {
                "learning_rate": 0.01, "momentum": 0.9, "use_multi_tensor": True}),
                options={"use_multi_tensor": True}),
            Hand(scheduled, Native("paddle.optimizer.Momentum", {"momentum": 0.9},
                                   scheduler=PADDLE_COSINE[0],
                                   scheduler_kwargs=PADDLE_COSINE[1])),
            Hand(uo.SGD(lr=0.05, momentum=0.9, dampening=0.3),
                 Native("mindspore.nn.SGD", {"learning_rate": 0.05, "momentum": 0.9,
                                             "dampening": 0.3})),
            Hand(uo.SGD(lr=COSINE, momentum=0.9, weight_decay=0.1),
                 Native("mindspore.nn.SGD", {"learning_rate": COSINE_LIST, "momentum": 0.9},
                        params=nn_groups({"params": every(), "weight_decay": 0.1}))),
            Hand(nn_momentum, Native("mindspore.nn.Momentum", {"learning_rate": 0.1,
                                                               "momentum": 0.9})),
            Hand(damped, Native("mindspore.experimental.optim.SGD", {
                "lr": 0.05, "momentum": 0.9, "dampening": 0.3, "weight_decay": 1e-2,
                "maximize": True})),
        ),
    )


def _adam() -> Algorithm:
    plain = uo.Adam(lr=1e-2, eps=1e-3)
    amsgrad = uo.Adam(lr=1e-2, amsgrad=True, weight_decay=0.1, eps=1e-3)
    eps_hat = uo.Adam(lr=1e-2, eps=1e-3, eps_placement="eps_hat")
    ms_experimental = uo.Adam(lr=0.01, eps=1e-3, eps_placement="eps_hat", maximize=True,
                              weight_decay=0.1)
    return Algorithm(
        samples=(plain, amsgrad, eps_hat),
        planted=(
            Planted(plain, {"eps_placement": "inside"}),
            Planted(amsgrad, {"amsgrad": False}),
            Planted(eps_hat, {"bias_correction": False}),
        ),
        explained=(
            Explained("torch", uo.Adam(), "torch.optim.Adam", "computes exactly"),
            Explained("torch", uo.preset("mindspore.nn.Adam"), None, "eps_placement='outside'"),
            Explained("paddle", plain, "paddle.optimizer.Adam"),
            Explained("paddle", uo.Adam(eps_placement="eps_hat"), None,
                      "eps_placement='outside'"),
            Explained("paddle", uo.Adam(maximize=True), None, "maximize=False"),
            Explained("mindspore", eps_hat, "mindspore.nn.Adam"),
            Explained("mindspore", uo.Adam(lr=0.01, amsgrad=True),
                      "mindspore.experimental.optim.AdamW"),
            Explained("mindspore", uo.Adam(lr=0.01, weight_decay=0.1), None),
            Explained("mindspore", ms_experimental, "mindspore.experimental.optim.Adam"),
            Explained("mindspore", uo.Adam(lr=0.01, eps_placement="eps_hat", amsgrad=True,
                                           maximize=True), None,
                      "experimental.optim.Adam ignores amsgrad on CPU"),
            Explained("mindspore", uo.Adam(betas=(0.0, 0.999), eps_placement="eps_hat"),
                      "mindspore.experimental.optim.Adam", "not mindspore.nn.Adam: needs "
                      "betas > 0"),
        ),
        natives=(
            Hand(amsgrad, Native("torch.optim.Adam", {"lr": 1e-2, "amsgrad": True,
                                                      "weight_decay": 0.1, "eps": 1e-3})),
            Hand(plain, Native("torch.optim.Adam", {"lr": 1e-2, "eps": 1e-3, "foreach": True}),
                 options={"foreach": True}),
            Hand(uo.Adam(lr=1e-2, amsgrad=True, weight_decay=0.01),
                 Native("paddle.optimizer.Adam", {"learning_rate": 1e-2, "amsgrad": True,
                                                  "weight_decay": 0.01})),
            Hand(uo.Adam(lr=1e-2, betas=(0.8, 0.99), eps=1e-6),
                 Native("paddle.optimizer.Adam", {"learning_rate": 1e-2, "beta1": 0.8,
                                                  "beta2": 0.99, "epsilon": 1e-6,
                                                  "use_multi_tensor": True}),
                 options={"use_multi_tensor": True}),
            Hand(eps_hat, Native("mindspore.nn.Adam", {"learning_rate": 1e-2, "eps": 1e-3})),
            Hand(uo.Adam(lr=0.01, eps_placement="eps_hat", nesterov=True, weight_decay=0.1),
                 Native("mindspore.nn.Adam", {"learning_rate": 0.01, "use_nesterov": True},
                        params=nn_groups({"params": every(), "weight_decay": 0.1}))),
            Hand(uo.Adam(lr=COSINE, eps_placement="eps_hat", amsgrad=True),
                 Native("mindspore.nn.Adam", {"learning_rate": COSINE_LIST,
                                              "use_amsgrad": True})),
            Hand(ms_experimental, Native("mindspore.experimental.optim.Adam", {
                "lr": 0.01, "eps": 1e-3, "weight_decay": 0.1, "maximize": True})),
            Hand(uo.Adam(lr=0.01, amsgrad=True), Native(
                "mindspore.experimental.optim.AdamW", {"lr": 0.01, "weight_decay": 0.0,
                                                       "amsgrad": True})),
        ),
    )


def _adamw() -> Algorithm:
    torch_like = uo.AdamW(lr=1e-2, betas=(0.8, 0.99), weight_decay=0.3, maximize=True)
    named = uo.AdamW(lr=1e-2, eps=1e-3, weight_decay=0.1, no_decay_names=("*gamma*",))
    nn_awd = uo.preset("mindspore.nn.AdamWeightDecay", learning_rate=1e-2, weight_decay=0.1)
    return Algorithm(
        samples=(torch_like, named, nn_awd),
        planted=(
            Planted(named, {"no_decay_names": ()}),
            Planted(torch_like, {"decay_times_lr": False}),
            Planted(nn_awd, {"bias_correction": True}),
        ),
        explained=(
            Explained("torch", torch_like, "torch.optim.AdamW"),
            Explained("paddle", uo.AdamW(no_decay_names=("*bias*",)), "paddle.optimizer.AdamW",
                      "apply_decay_param_fun"),
            Explained("paddle", uo.AdamW(lr=Exponential(lr=1e-2, gamma=0.98)),
                      "paddle.optimizer.AdamW"),
            Explained("paddle", uo.preset("mindspore.nn.AdamWeightDecay", weight_decay=0.1),
                      None, "decay_form='before_update'"),
            Explained("mindspore", uo.AdamW(lr=0.01), "mindspore.experimental.optim.AdamW",
                      "betas rounded to float32"),
            Explained("mindspore", nn_awd, "mindspore.nn.AdamWeightDecay"),
            Explained("mindspore", uo.AdamW(lr=COSINE), None),
        ),
        natives=(
            Hand(torch_like, Native("torch.optim.AdamW", {
                "lr": 1e-2, "betas": (0.8, 0.99), "weight_decay": 0.3, "maximize": True})),
            Hand(uo.AdamW(lr=1e-2, weight_decay=0.2, no_decay_names=("*bias*", "*gamma*")),
                 Native("torch.optim.AdamW", {"lr": 1e-2}, params=[
                     {"params": but("bias", "ln.gamma"), "weight_decay": 0.2},
                     {"params": every("bias", "ln.gamma"), "weight_decay": 0.0}])),
            Hand(named, Native("paddle.optimizer.AdamW", {
                "learning_rate": 1e-2, "epsilon": 1e-3, "weight_decay": 0.1,
                "apply_decay_param_fun": {"$match": [n for n in NAMES if n != "ln.gamma"]}})),
            Hand(torch_like.replace(maximize=False, lr=COSINE),
                 Native("paddle.optimizer.AdamW", {"beta1": 0.8, "beta2": 0.99,
                                                   "weight_decay": 0.3},
                        scheduler=PADDLE_COSINE[0], scheduler_kwargs=PADDLE_COSINE[1])),
            Hand(torch_like, Native("mindspore.experimental.optim.AdamW", {
                "lr": 1e-2, "betas": (0.8, 0.99), "weight_decay": 0.3, "maximize": True})),
            Hand(uo.AdamW(lr=0.01, weight_decay=0.1, no_decay_names=("*bias*",)),
                 Native("mindspore.experimental.optim.AdamW", {"lr": 0.01, "weight_decay": 0.1},
                        params=[{"params": but("bias")},
                                {"params": every("bias"), "weight_decay": 0.0}])),
            Hand(nn_awd, Native("mindspore.nn.AdamWeightDecay", {"learning_rate": 1e-2,
                                                                 "weight_decay": 0.1})),
        ),
    )


def _nadam() -> Algorithm:
    coupled = uo.NAdam(lr=1e-2, weight_decay=0.1, momentum_decay=0.01)
    return Algorithm(
        samples=(coupled,),
        planted=(Planted(coupled, {"decoupled_weight_decay": True}),),
        explained=(
            Explained("torch", coupled, "torch.optim.NAdam"),
            Explained("paddle", uo.NAdam(), "paddle.optimizer.NAdam",
                      "mu_product parameter-shaped"),
            Explained("paddle", uo.NAdam(lr=COSINE), "paddle.optimizer.NAdam"),
            Explained("paddle", uo.NAdam(weight_decay=0.1, decoupled_weight_decay=True), None,
                      "decoupled_weight_decay=False"),
            Explained("mindspore", uo.NAdam(), "mindspore.experimental.optim.NAdam",
                      "unregistered list"),
            Explained("mindspore", uo.NAdam(lr=COSINE), None, "a constant lr"),
            Explained("mindspore", uo.NAdam(lr=0.0), None,
                      "lr > 0 (the constructors of experimental.optim NAdam"),
            Explained("mindspore", uo.NAdam(maximize=True), None, "maximize=False"),
            Explained("mindspore", uo.NAdam(weight_decay=0.1, decoupled_weight_decay=True),
                      None),
        ),
        natives=(
            Hand(coupled, Native("torch.optim.NAdam", {"lr": 1e-2, "weight_decay": 0.1,
                                                       "momentum_decay": 0.01})),
            Hand(coupled, Native("paddle.optimizer.NAdam", {
                "learning_rate": 1e-2, "weight_decay": 0.1, "momentum_decay": 0.01})),
            Hand(coupled, Native("mindspore.experimental.optim.NAdam", {
                "lr": 1e-2, "weight_decay": 0.1, "momentum_decay": 0.01})),
            Hand(coupled.replace(no_decay_names=("*bias*",)),
                 Native("mindspore.experimental.optim.NAdam",
                        {"lr": 1e-2, "weight_decay": 0.1, "momentum_decay": 0.01},
                        params=[{"params": but("bias")},
                                {"params": every("bias"), "weight_decay": 0.0}])),
        ),
    )


def _radam() -> Algorithm:
    betas = uo.RAdam(lr=1e-2, betas=(0.8, 0.99), weight_decay=0.01)
    return Algorithm(
        samples=(betas,),
        planted=(Planted(betas, {"rectify_threshold": 4.0}),),
        explained=(
            Explained("torch", betas, "torch.optim.RAdam"),
            Explained("paddle", betas, "paddle.optimizer.RAdam"),
            Explained("paddle", uo.RAdam(rectify_threshold=4.0), None, "rectify_threshold=5"),
            Explained("mindspore", betas, "mindspore.experimental.optim.RAdam"),
            Explained("mindspore", uo.RAdam(rectify_threshold=4.0), None, "rectify_threshold=5"),
        ),
        natives=(
            Hand(betas, Native("torch.optim.RAdam", {"lr": 1e-2, "betas": (0.8, 0.99),
                                                     "weight_decay": 0.01})),
            Hand(uo.RAdam(lr=1e-2, betas=(0.8, 0.99), eps=1e-6),
                 Native("paddle.optimizer.RAdam", {"learning_rate": 1e-2, "beta1": 0.8,
                                                   "beta2": 0.99, "epsilon": 1e-6})),
            Hand(betas, Native("mindspore.experimental.optim.RAdam", {
                "lr": 1e-2, "betas": (0.8, 0.99), "weight_decay": 0.01})),
        ),
    )


def _adamax() -> Algorithm:
    paddle_form = uo.preset("paddle.optimizer.Adamax", learning_rate=1e-2, epsilon=0.1,
                            weight_decay=0.01)
    on_grad = uo.Adamax(lr=1e-2, eps=0.1)
    outside_max = uo.Adamax(lr=1e-2, eps=0.1, eps_placement="outside_max")
    return Algorithm(
        samples=(paddle_form, on_grad, outside_max),
        planted=(Planted(paddle_form, {"eps_placement": "on_grad"}),
                 Planted(on_grad, {"eps_placement": "outside_max"}),
                 Planted(outside_max, {"eps_placement": "on_grad"})),
        explained=(
            Explained("torch", on_grad, "torch.optim.Adamax"),
            Explained("paddle", paddle_form, "paddle.optimizer.Adamax"),
            Explained("paddle", uo.Adamax(), None, "eps_placement='on_decayed_norm'"),
            Explained("mindspore", outside_max, "mindspore.nn.AdaMax"),
            Explained("mindspore", on_grad, "mindspore.experimental.optim.Adamax"),
            Explained("mindspore", uo.Adamax(eps_placement="on_decayed_norm"), None,
                      "eps_placement='outside_max'"),
            Explained("mindspore", uo.Adamax(betas=(0.0, 0.999), eps_placement="outside_max"),
                      None, "betas > 0 (the nn constructor refuses"),
            Explained("mindspore", uo.Adamax(lr=COSINE), None, "a constant lr"),
        ),
        natives=(
            Hand(uo.Adamax(lr=0.01, eps=0.1, weight_decay=0.1, maximize=True),
                 Native("torch.optim.Adamax", {"lr": 0.01, "eps": 0.1, "weight_decay": 0.1,
                                               "maximize": True})),
            Hand(paddle_form, Native("paddle.optimizer.Adamax", {
                "learning_rate": 1e-2, "epsilon": 0.1, "weight_decay": 0.01})),
            Hand(uo.preset("mindspore.nn.AdaMax", learning_rate=0.01, eps=0.1,
                           weight_decay=0.1),
                 Native("mindspore.nn.AdaMax", {"learning_rate": 0.01, "eps": 0.1,
                                                "weight_decay": 0.1})),
            Hand(uo.Adamax(lr=COSINE, eps_placement="outside_max"),
                 Native("mindspore.nn.AdaMax", {"learning_rate": COSINE_LIST})),
            Hand(uo.Adamax(lr=0.01, eps=0.1, weight_decay=0.1, maximize=True),
                 Native("mindspore.experimental.optim.Adamax", {
                     "lr": 0.01, "eps": 0.1, "weight_decay": 0.1, "maximize": True})),
        ),
    )


def _adagrad() -> Algorithm:
    paddle_form = uo.preset("paddle.optimizer.Adagrad", learning_rate=1e-2,
                            initial_accumulator_value=0.1, weight_decay=0.01)
    everything = uo.Adagrad(lr=0.01, lr_decay=0.01, initial_accumulator_value=0.1,
                            weight_decay=0.1, maximize=True)
    return Algorithm(
        samples=(paddle_form,),
        explained=(
            Explained("torch", everything, "torch.optim.Adagrad"),
            Explained("paddle", paddle_form, "paddle.optimizer.Adagrad"),
            Explained("paddle", uo.Adagrad(lr=COSINE, eps=0.0, initial_accumulator_value=0.1),
                      "paddle.optimizer.Adagrad"),
            Explained("paddle", uo.Adagrad(lr_decay=0.1), None,
                      "lr_decay=0 (paddle.optimizer.Adagrad has no lr_decay)"),
            Explained("mindspore", uo.Adagrad(eps=0.0, initial_accumulator_value=0.1),
                      "mindspore.nn.Adagrad", "computes exactly"),
            Explained("mindspore", uo.Adagrad(eps=0.0), None,
                      "initial_accumulator_value >= 2**-126"),
            Explained("mindspore", uo.Adagrad(eps=0.0), None,
                      "eps > 0 (experimental.optim.Adagrad's constructor refuses"),
            Explained("mindspore", uo.Adagrad(), "mindspore.experimental.optim.Adagrad",
                      "on float64 it does nothing"),
            Explained("mindspore", uo.Adagrad(lr=COSINE), None),
        ),
        natives=(
            Hand(everything, Native("torch.optim.Adagrad", {
                "lr": 0.01, "lr_decay": 0.01, "initial_accumulator_value": 0.1,
                "weight_decay": 0.1, "maximize": True})),
            Hand(paddle_form, Native("paddle.optimizer.Adagrad", {
                "learning_rate": 1e-2, "initial_accumulator_value": 0.1,
                "weight_decay": 0.01})),
            Hand(uo.Adagrad(lr=COSINE, eps=1e-6, initial_accumulator_value=0.1),
                 Native("paddle.optimizer.Adagrad", {"epsilon": 1e-6,
                                                     "initial_accumulator_value": 0.1},
                        scheduler=PADDLE_COSINE[0], scheduler_kwargs=PADDLE_COSINE[1])),
            Hand(uo.preset("mindspore.nn.Adagrad", learning_rate=0.01, weight_decay=0.1),
                 Native("mindspore.nn.Adagrad", {"learning_rate": 0.01, "weight_decay": 0.1})),
            Hand(everything, Native("mindspore.experimental.optim.Adagrad", {
                "lr": 0.01, "lr_decay": 0.01, "initial_accumulator_value": 0.1,
                "weight_decay": 0.1, "maximize": True})),
        ),
    )


def _adadelta() -> Algorithm:
    scheduled = uo.Adadelta(lr=COSINE, rho=0.95, weight_decay=0.01)
    maximized = uo.Adadelta(lr=0.5, weight_decay=0.1, maximize=True)
    return Algorithm(
        samples=(scheduled, maximized),
        explained=(
            Explained("torch", maximized, "torch.optim.Adadelta"),
            Explained("paddle", scheduled, "paddle.optimizer.Adadelta"),
            Explained("paddle", uo.Adadelta(maximize=True), None, "maximize=False"),
            Explained("mindspore", uo.Adadelta(lr=COSINE), "mindspore.nn.Adadelta",
                      "computes exactly"),
            Explained("mindspore", uo.Adadelta(lr=COSINE, maximize=True), None,
                      "maximize=False"),
            Explained("mindspore", maximized, "mindspore.experimental.optim.Adadelta"),
        ),
        natives=(
            Hand(maximized, Native("torch.optim.Adadelta", {"lr": 0.5, "weight_decay": 0.1,
                                                            "maximize": True})),
            Hand(uo.Adadelta(lr=0.5, rho=0.95, weight_decay=0.01),
                 Native("paddle.optimizer.Adadelta", {"learning_rate": 0.5, "rho": 0.95,
                                                      "weight_decay": 0.01})),
            Hand(uo.Adadelta(lr=COSINE, rho=0.95, weight_decay=0.1),
                 Native("mindspore.nn.Adadelta", {"learning_rate": COSINE_LIST, "rho": 0.95},
                        params=nn_groups({"params": every(), "weight_decay": 0.1}))),
            Hand(maximized, Native("mindspore.experimental.optim.Adadelta", {
                "lr": 0.5, "weight_decay": 0.1, "maximize": True})),
        ),
    )


def _rmsprop() -> Algorithm:
    paddle_form = uo.preset("paddle.optimizer.RMSProp", learning_rate=1e-2, epsilon=0.1,
                            momentum=0.9, centered=True, weight_decay=0.01)
    scheduled = uo.RMSprop(lr=COSINE, eps=0.1, eps_placement="inside", lr_placement="inside",
                           momentum=0.9)
    nn_form = uo.preset("mindspore.nn.RMSProp", learning_rate=0.01, momentum=0.9,
                        centered=True, weight_decay=0.1)
    experimental = uo.RMSprop(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1,
                              maximize=True)
    return Algorithm(
        samples=(scheduled, nn_form),
        planted=(Planted(scheduled, {"lr_placement": "outside"}),
                 Planted(nn_form, {"initial_square_avg": 0.0})),
        explained=(
            Explained("torch", experimental, "torch.optim.RMSprop"),
            Explained("paddle", paddle_form, "paddle.optimizer.RMSProp"),
            Explained("paddle", scheduled, "paddle.optimizer.RMSProp"),
            Explained("paddle", uo.RMSprop(), None, "eps_placement='inside'"),
            Explained("paddle", uo.RMSprop(eps_placement="inside", momentum=0.9), None,
                      "lr_placement='inside' or momentum=0"),
            Explained("paddle", uo.RMSprop(eps_placement="inside", initial_square_avg=1.0),
                      None, "initial_square_avg=0"),
            Explained("mindspore", nn_form, "mindspore.nn.RMSProp"),
            Explained("mindspore", experimental, "mindspore.experimental.optim.RMSprop"),
            Explained("mindspore", uo.preset("paddle.optimizer.RMSProp", learning_rate=0.01,
                                             momentum=0.9), None),
            Explained("mindspore", uo.RMSprop(eps_placement="inside"), None,
                      "initial_square_avg=1"),
            Explained("mindspore", uo.RMSprop(eps_placement="inside", initial_square_avg=1.0,
                                              momentum=0.9), None,
                      "lr_placement='inside' or momentum=0"),
            Explained("mindspore", uo.RMSprop(eps_placement="inside", initial_square_avg=1.0,
                                              centered=True), "mindspore.nn.RMSProp",
                      "computes exactly"),
            Explained("mindspore", uo.RMSprop(eps_placement="inside", initial_square_avg=1.0),
                      None, "centered=True or eps=0"),
        ),
        natives=(
            Hand(experimental, Native("torch.optim.RMSprop", {
                "lr": 0.01, "momentum": 0.9, "centered": True, "weight_decay": 0.1,
                "maximize": True})),
            Hand(uo.RMSprop(lr=COSINE, eps=0.1, eps_placement="inside", lr_placement="inside",
                            momentum=0.9, centered=True, weight_decay=0.01),
                 Native("paddle.optimizer.RMSProp", {"rho": 0.99, "epsilon": 0.1,
                                                     "momentum": 0.9, "centered": True,
                                                     "weight_decay": 0.01},
                        scheduler=PADDLE_COSINE[0], scheduler_kwargs=PADDLE_COSINE[1])),
            Hand(nn_form, Native("mindspore.nn.RMSProp", {
                "learning_rate": 0.01, "momentum": 0.9, "centered": True,
                "weight_decay": 0.1})),
            Hand(experimental, Native("mindspore.experimental.optim.RMSprop", {
                "lr": 0.01, "momentum": 0.9, "centered": True, "weight_decay": 0.1,
                "maximize": True})),
        ),
    )


def _rprop() -> Algorithm:
    paddle_form = uo.preset("paddle.optimizer.Rprop", learning_rate=1e-2,
                            learning_rate_range=(1e-4, 0.05), etas=(0.3, 1.5))
    plain = uo.Rprop(lr=0.01)
    nn_form = uo.preset("mindspore.nn.Rprop", learning_rate=0.01, weight_decay=0.1)
    return Algorithm(
        samples=(plain,),
        planted=(Planted(plain, {"etas": (0.5, 1.25)}),),
        explained=(
            Explained("torch", plain, "torch.optim.Rprop"),
            Explained("paddle", paddle_form, "paddle.optimizer.Rprop"),
            Explained("paddle", uo.Rprop(lr=COSINE), None,
                      "a constant lr (paddle.optimizer.Rprop takes no LRScheduler"),
            Explained("paddle", uo.Rprop(lr=1e-2, step_sizes=(0.0, 50.0)), None,
                      "0 < step_sizes[0] <= lr <= step_sizes[1]"),
            Explained("paddle", uo.Rprop(weight_decay=0.1), None,
                      "weight_decay=0 (paddle.optimizer.Rprop has no weight"),
            Explained("mindspore", nn_form, "mindspore.nn.Rprop"),
            Explained("mindspore", uo.Rprop(lr=COSINE, weight_decay=0.1), "mindspore.nn.Rprop",
                      "computes exactly"),
            Explained("mindspore", uo.Rprop(lr=0.01, maximize=True),
                      "mindspore.experimental.optim.Rprop"),
            Explained("mindspore", uo.Rprop(lr=0.01, weight_decay=0.1, maximize=True), None,
                      "weight_decay=0"),
        ),
        natives=(
            Hand(uo.Rprop(lr=0.01, etas=(0.3, 1.5), maximize=True),
                 Native("torch.optim.Rprop", {"lr": 0.01, "etas": (0.3, 1.5),
                                              "maximize": True})),
            Hand(uo.Rprop(lr=1e-2, etas=(0.3, 1.5), step_sizes=(1e-4, 0.05)),
                 Native("paddle.optimizer.Rprop", {"learning_rate": 1e-2,
                                                   "learning_rate_range": (1e-4, 0.05),
                                                   "etas": (0.3, 1.5),
                                                   "multi_precision": False}),
                 options={"multi_precision": False}),
            Hand(nn_form, Native("mindspore.nn.Rprop", {"learning_rate": 0.01,
                                                        "weight_decay": 0.1})),
            Hand(uo.Rprop(lr=COSINE, etas=(0.3, 1.5), step_sizes=(1e-4, 0.05)),
                 Native("mindspore.nn.Rprop", {"learning_rate": COSINE_LIST,
                                               "etas": (0.3, 1.5),
                                               "step_sizes": (1e-4, 0.05)})),
            Hand(uo.Rprop(lr=0.01, maximize=True),
                 Native("mindspore.experimental.optim.Rprop", {"lr": 0.01, "maximize": True})),
        ),
    )


def _lion() -> Algorithm:
    return Algorithm(
        samples=(),
        explained=tuple(Explained(b, uo.Lion(), None, f"{b} has no native optimizer for "
                                                      "'lion'")
                        for b in ("torch", "paddle", "mindspore")),
    )


def _lamb() -> Algorithm:
    excluded = uo.Lamb(lr=0.01, weight_decay=0.05, no_decay_names=("*gamma*",))
    paddle_adapt = uo.preset("paddle.optimizer.Lamb", learning_rate=0.01,
                             lamb_weight_decay=0.0, always_adapt=True)
    ms_lamb = uo.preset("mindspore.nn.Lamb", learning_rate=0.01, weight_decay=0.05)
    return Algorithm(
        samples=(excluded, paddle_adapt),
        planted=(Planted(excluded, {"no_decay_names": ()}),
                 Planted(paddle_adapt, {"always_adapt": False})),
        explained=(
            Explained("torch", uo.Lamb(), None, "torch has no native optimizer for 'lamb'"),
            Explained("paddle", excluded, "paddle.optimizer.Lamb"),
            Explained("paddle", uo.Lamb(weight_norm_clamp=10.0), None, "weight_norm_clamp=None"),
            Explained("mindspore", ms_lamb, None, "has no CPU kernel"),
        ),
        natives=(
            Hand(uo.preset("paddle.optimizer.Lamb", learning_rate=0.01,
                           lamb_weight_decay=0.05).replace(no_decay_names=("ln.gamma",)),
                 Native("paddle.optimizer.Lamb", {
                     "learning_rate": 0.01, "lamb_weight_decay": 0.05,
                     "exclude_from_weight_decay_fn": {"$match": ["ln.gamma"]}})),
            Hand(paddle_adapt, Native("paddle.optimizer.Lamb", {
                "learning_rate": 0.01, "lamb_weight_decay": 0.0, "always_adapt": True})),
            # no CPU kernel in MindSpore 2.10: runs where the device has one
            Hand(ms_lamb, Native("mindspore.nn.Lamb", {"learning_rate": 0.01,
                                                       "weight_decay": 0.05})),
        ),
    )


def _lars() -> Algorithm:
    paddle_args = {"learning_rate": 0.5, "momentum": 0.9, "lars_coeff": 0.02,
                   "lars_weight_decay": 0.01, "epsilon": 0.5}
    paddle_form = uo.preset("paddle.incubate.optimizer.LarsMomentumOptimizer", **paddle_args,
                            exclude_from_weight_decay=["bias"])
    ms_inner = uo.preset("mindspore.nn.Momentum", learning_rate=0.5, momentum=0.9,
                         weight_decay=0.01)
    ms_lars = uo.preset("mindspore.nn.LARS", coefficient=0.02, optimizer=ms_inner)
    return Algorithm(
        samples=(paddle_form,),
        planted=(Planted(paddle_form, {"eps": 0.0}),),
        explained=(
            Explained("torch", uo.LARS(), None, "torch has no native optimizer for 'lars'"),
            Explained("paddle", paddle_form, "paddle.incubate.optimizer.LarsMomentumOptimizer"),
            Explained("paddle", uo.LARS(nesterov=True), None, "nesterov=False"),
            Explained("mindspore", ms_lars, None, "has no CPU kernel"),
        ),
        natives=(
            # epsilon > 0: the kernel adds it to the denominator only (its docstring also
            # shows it in the gradient term, which the numbers refute)
            Hand(paddle_form, Native("paddle.incubate.optimizer.LarsMomentumOptimizer", {
                **paddle_args, "exclude_from_weight_decay": {"$names": ["bias"]}})),
            # no CPU kernel in MindSpore 2.10: runs where the device has one
            Hand(ms_lars, Native("mindspore.nn.LARS", {"coefficient": 0.02}, params={
                "$call": ["mindspore.nn.Momentum", {"params": every(), "learning_rate": 0.5,
                                                    "momentum": 0.9, "weight_decay": 0.01}]})),
        ),
    )


def _adafactor() -> Algorithm:
    torch_kwargs = {"lr": 0.3, "weight_decay": 0.2, "beta2_decay": -0.5, "eps": (1e-3, 1e-2),
                    "d": 2.0, "maximize": True}
    nn_manual = dict(learning_rate=0.01, relative_step=False, scale_parameter=False,
                     weight_decay=0.1, beta1=0.0)
    return Algorithm(
        samples=(),
        explained=(
            Explained("torch", uo.preset("torch.optim.Adafactor"), "torch.optim.Adafactor"),
            Explained("torch", uo.preset("mindspore.nn.AdaFactor"), None, "eps_mode='clamp'"),
            Explained("paddle", uo.Adafactor(), None,
                      "paddle has no native optimizer for 'adafactor'"),
            Explained("mindspore", uo.Adafactor(), None, "eps_mode='add'"),
            Explained("mindspore", uo.preset("mindspore.nn.AdaFactor"), "mindspore.nn.AdaFactor"),
        ),
        natives=(
            Hand(uo.preset("torch.optim.Adafactor", **torch_kwargs),
                 Native("torch.optim.Adafactor", torch_kwargs)),
            Hand(uo.preset("mindspore.nn.AdaFactor"), Native("mindspore.nn.AdaFactor", {})),
            Hand(uo.preset("mindspore.nn.AdaFactor", **nn_manual),
                 Native("mindspore.nn.AdaFactor", nn_manual)),
        ),
    )


def _came() -> Algorithm:
    return Algorithm(
        samples=(),
        explained=tuple(Explained(b, uo.CAME(), None, f"{b} has no native optimizer for "
                                                      "'came'")
                        for b in ("torch", "paddle", "mindspore")),
    )


def _adam_offload() -> Algorithm:
    nesterov = uo.AdamOffload(lr=0.01, eps=1e-3, eps_placement="eps_hat", nesterov=True)
    amsgrad = uo.AdamOffload(lr=0.01, amsgrad=True, weight_decay=0.1)
    return Algorithm(
        samples=(nesterov, amsgrad),
        planted=(Planted(nesterov, {"nesterov": False}),
                 Planted(amsgrad, {"amsgrad": False})),
        explained=(
            Explained("torch", amsgrad, "unified_opt.backends.torch.offload.OffloadAdam"),
            Explained("paddle", uo.AdamOffload(), None,
                      "paddle has no native optimizer for 'adam_offload'"),
            Explained("mindspore", uo.AdamOffload(), None, "eps_placement='eps_hat'"),
            Explained("mindspore", nesterov, "mindspore.nn.Adam"),
        ),
        natives=(
            # the host-offloaded row is torch's fused Adam on host tensors
            Hand(amsgrad, Native("torch.optim.Adam", {"lr": 0.01, "amsgrad": True,
                                                      "weight_decay": 0.1, "fused": True}),
                 row="unified_opt.backends.torch.offload.OffloadAdam"),
            Hand(uo.preset("mindspore.nn.AdamOffload", learning_rate=0.01, eps=1e-3,
                           weight_decay=0.1),
                 Native("mindspore.nn.AdamOffload", {"learning_rate": 0.01, "eps": 1e-3,
                                                     "weight_decay": 0.1}),
                 row="mindspore.nn.Adam"),
            Hand(nesterov, Native("mindspore.nn.Adam", {"learning_rate": 0.01, "eps": 1e-3,
                                                        "use_nesterov": True,
                                                        "use_offload": True})),
        ),
    )


def _dgc_momentum() -> Algorithm:
    nesterov = uo.DGCMomentum(lr=0.05, rampup_begin_step=3, rampup_step=10,
                              sparsity=(0.5, 0.9), min_numel=10, dense_clip_norm=1.0,
                              local_grad_clip_norm=2.0, num_trainers=1, use_nesterov=True)
    return Algorithm(
        samples=(nesterov, uo.DGCMomentum(lr=0.05, rampup_begin_step=5, rampup_step=20,
                                          sparsity=(0.5, 0.9), min_numel=1,
                                          local_grad_clip_norm=2.0, num_trainers=1)),
        planted=(Planted(nesterov, {"use_nesterov": False}),
                 Planted(nesterov, {"sparsity": (0.9,)})),
        explained=tuple(Explained(b, uo.DGCMomentum(), None,
                                  f"{b} has no native optimizer for 'dgc_momentum'")
                        for b in ("torch", "paddle", "mindspore")),
    )


def _asgd() -> Algorithm:
    torch_form = uo.preset("torch.optim.ASGD", lr=0.05, lambd=0.5, alpha=0.6, t0=5.0,
                           weight_decay=0.1, maximize=True)
    nn_form = uo.preset("mindspore.nn.ASGD", learning_rate=0.05, lambd=0.5, t0=5.0,
                        weight_decay=0.1)
    scheduled = uo.ASGD(lr=COSINE, lambd=0.5, t0=5.0, weight_decay=0.1)
    return Algorithm(
        samples=(torch_form, nn_form, scheduled),
        planted=(Planted(scheduled, {"t0": 10.0}),),
        explained=(
            Explained("torch", torch_form, "torch.optim.ASGD", "computes exactly"),
            Explained("paddle", torch_form, None, "paddle has no native optimizer for 'asgd'"),
            Explained("mindspore", nn_form, "mindspore.nn.ASGD", "computes exactly"),
            Explained("mindspore", torch_form, "mindspore.experimental.optim.ASGD",
                      "eta and mu computed in float32"),
            Explained("mindspore", uo.ASGD(lr=COSINE, maximize=True), None,
                      "needs a constant lr"),
            Explained("mindspore", uo.ASGD(lr=0.0, maximize=True), None,
                      "experimental.optim.ASGD's constructor refuses lr=0"),
        ),
        natives=(
            Hand(torch_form, Native("torch.optim.ASGD", {
                "lr": 0.05, "lambd": 0.5, "alpha": 0.6, "t0": 5.0, "weight_decay": 0.1,
                "maximize": True})),
            Hand(nn_form, Native("mindspore.nn.ASGD", {
                "learning_rate": 0.05, "lambd": 0.5, "t0": 5.0, "weight_decay": 0.1})),
            Hand(scheduled, Native("mindspore.nn.ASGD", {
                "learning_rate": COSINE_LIST, "lambd": 0.5, "t0": 5.0},
                params=nn_groups({"params": every(), "weight_decay": 0.1}))),
            Hand(torch_form, Native("mindspore.experimental.optim.ASGD", {
                "lr": 0.05, "lambd": 0.5, "alpha": 0.6, "t0": 5.0, "weight_decay": 0.1,
                "maximize": True})),
        ),
    )


def _ftrl() -> Algorithm:
    nn_ftrl = uo.preset("mindspore.nn.FTRL", learning_rate=0.1, lr_power=0.0, l1=0.3,
                        l2=0.05, weight_decay=0.01)
    return Algorithm(
        samples=(nn_ftrl,),
        explained=(
            *(Explained(b, uo.FTRL(), None, f"{b} has no native optimizer for 'ftrl'")
              for b in ("torch", "paddle")),
            Explained("mindspore", uo.FTRL(), "mindspore.nn.FTRL", "computes exactly"),
            Explained("mindspore", nn_ftrl, "mindspore.nn.FTRL"),
            Explained("mindspore", uo.FTRL(l1=0.1), None, "l1_sign='positive' or l1=0"),
            Explained("mindspore", uo.FTRL(l1=0.1, l1_sign="positive", beta=0.5), None,
                      "beta=0"),
            Explained("mindspore", uo.FTRL(lr=COSINE), None, "a constant lr"),
        ),
        natives=(
            Hand(nn_ftrl, Native("mindspore.nn.FTRL", {
                "learning_rate": 0.1, "lr_power": 0.0, "l1": 0.3, "l2": 0.05,
                "weight_decay": 0.01})),
        ),
    )


def _proximal_adagrad() -> Algorithm:
    nn_form = uo.preset("mindspore.nn.ProximalAdagrad", learning_rate=0.1, l1=0.05, l2=0.3,
                        weight_decay=0.01)
    grouped = uo.ProximalAdagrad(lr=COSINE, l1=0.05, weight_decay=0.1)
    return Algorithm(
        samples=(nn_form, grouped),
        explained=(
            *(Explained(b, uo.ProximalAdagrad(), None,
                        f"{b} has no native optimizer for 'proximal_adagrad'")
              for b in ("torch", "paddle")),
            Explained("mindspore", nn_form, "mindspore.nn.ProximalAdagrad",
                      "computes exactly"),
            Explained("mindspore", uo.ProximalAdagrad(shrinkage_lr="constant"),
                      "mindspore.nn.ProximalAdagrad"),
            Explained("mindspore", uo.ProximalAdagrad(l2=0.1, shrinkage_lr="constant"), None,
                      "shrinkage_lr='adaptive' or l1=l2=0"),
            Explained("mindspore", uo.ProximalAdagrad(maximize=True), None, "maximize=False"),
        ),
        natives=(
            Hand(nn_form, Native("mindspore.nn.ProximalAdagrad", {
                "learning_rate": 0.1, "l1": 0.05, "l2": 0.3, "weight_decay": 0.01})),
            Hand(grouped, Native("mindspore.nn.ProximalAdagrad",
                                 {"learning_rate": COSINE_LIST, "l1": 0.05},
                                 params=nn_groups({"params": every(), "weight_decay": 0.1}))),
        ),
    )


def _muon() -> Algorithm:
    torch_form = uo.Muon(lr=0.02, weight_decay=0.05, ns_dtype="bfloat16")
    return Algorithm(
        samples=(),
        explained=(
            Explained("torch", uo.Muon(ns_dtype="bfloat16"), "torch.optim.Muon",
                      "computes exactly this spec"),
            Explained("torch", uo.Muon(), None, "needs ns_dtype='bfloat16'"),
            Explained("torch", uo.Muon(ns_dtype="bfloat16", others="adamw"), None,
                      "others='refuse' and muon_params='matrices'"),
            Explained("paddle", uo.Muon(), None, "paddle has no native optimizer for 'muon'"),
            Explained("mindspore", uo.Muon(), None,
                      "mindspore has no native optimizer for 'muon'"),
        ),
        natives=(
            Hand(torch_form, Native("torch.optim.Muon", {"lr": 0.02, "weight_decay": 0.05})),
        ),
    )


_BACKEND_FACTS: dict[str, Algorithm] = {
    "sgd": _sgd(), "adam": _adam(), "adamw": _adamw(), "nadam": _nadam(), "radam": _radam(),
    "adamax": _adamax(), "adagrad": _adagrad(), "adadelta": _adadelta(),
    "rmsprop": _rmsprop(), "rprop": _rprop(), "lion": _lion(), "lamb": _lamb(),
    "lars": _lars(), "adafactor": _adafactor(), "came": _came(),
    "adam_offload": _adam_offload(), "dgc_momentum": _dgc_momentum(),
    "asgd": _asgd(), "muon": _muon(),
    "ftrl": _ftrl(), "proximal_adagrad": _proximal_adagrad(),
}


def _merged(name: str) -> Algorithm:
    """The record's samples and planted deviations, then this table's entry."""
    entry = records().get(name)
    facts = _BACKEND_FACTS.get(name, Algorithm(samples=()))
    if entry is None:
        return facts
    return Algorithm(samples=(*entry.samples, *facts.samples),
                     planted=(*entry.planted, *facts.planted),
                     explained=facts.explained, natives=facts.natives)


ALGORITHMS: dict[str, Algorithm] = {name: _merged(name)
                                    for name in sorted({*_BACKEND_FACTS, *records()})}
