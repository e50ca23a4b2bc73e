"""Conformance cases: a spec, named parameter shapes, a seed, a number of steps, paths.

Parameter names matter: name rules (``no_decay_names``, MindSpore's
``("beta", "gamma")``) pick parameters by name, so the standard set has a ``ln.gamma``
and a ``ln.beta`` next to ``w`` and ``bias``. It also holds odd sizes (22), 1-D, 2-D,
3-D and, except in the preset cases, a 0-size tensor: a backend must hold one (by its
own implementation if its native class cannot) or fail the case, visibly.

:func:`default_cases` exercises every knob of sgd, adam and adamw with
hyperparameters chosen so that the knob changes the numbers far beyond float32
rounding (eps 1e-3 so its placement shows, changing learning rates so the lr
placement and schedule step semantics show), and every native lowering row: the
frameworks' own classes appear through their presets.
"""

from __future__ import annotations

import fnmatch
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

import unified_opt as uo
from unified_opt import _validation as v
from unified_opt.lowering import PATHS
from unified_opt.schedules import Cosine, Exponential, LinearWarmup, Step

from .gradients import gradients_at

#: Bump when the default cases, the gradient stream or the comparison rule change.
SUITE_VERSION = "1"
MIN_STEPS = 50
DEFAULT_STEPS = 50

#: the standard parameter set: name -> shape
PARAMS = {"w": (8, 6), "bias": (6,), "ln.gamma": (6,), "ln.beta": (6,), "v22": (22,),
          "w3d": (3, 4, 5), "empty": (0,)}

#: the preset cases model a network being ported: no 0-size parameter, so that native
#: classes which cannot hold one (MindSpore's) run natively there; every other case
#: keeps it
DENSE_PARAMS = {name: shape for name, shape in PARAMS.items() if 0 not in shape}

#: "own" runs only when "auto" lowered to a native class (else it would repeat "auto")
DEFAULT_PATHS = ("auto", "own")


@dataclass(frozen=True)
class Case:
    """One conformance case. ``paths`` are build paths ("auto", "own", "native"); a
    worker skips a path whose lowering repeats one it already ran."""

    id: str
    spec: uo.Spec
    params: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: dict(PARAMS))
    steps: int = DEFAULT_STEPS
    seed: int | None = None            # None: derived from the id (stable across edits)
    paths: tuple[str, ...] = DEFAULT_PATHS
    description: str = ""

    def __post_init__(self) -> None:
        owner = f"Case {self.id!r}"
        if not isinstance(self.id, str) or not self.id or any(c in self.id for c in " /:"):
            raise ValueError(f"Case: id must be a non-empty str without spaces, '/' or ':', "
                             f"got {self.id!r}")
        if not isinstance(self.spec, uo.Spec):
            raise TypeError(f"{owner}: spec must be a unified_opt spec, got {self.spec!r}")
        if not isinstance(self.params, Mapping) or not self.params:
            raise TypeError(f"{owner}: params must be a non-empty mapping name -> shape, "
                            f"got {self.params!r}")
        shapes = {}
        for name, shape in self.params.items():
            if not isinstance(name, str) or not name or ":" in name:
                raise ValueError(f"{owner}: parameter names must be non-empty str without "
                                 f"':', got {name!r}")
            if not isinstance(shape, (tuple, list)):
                raise TypeError(f"{owner}: shape of {name!r} must be a tuple, got {shape!r}")
            shapes[name] = tuple(v.check_int(owner, f"shape of {name!r}", d, low=0)
                                 for d in shape)
        object.__setattr__(self, "params", shapes)
        object.__setattr__(self, "steps", v.check_int(owner, "steps", self.steps,
                                                      low=MIN_STEPS))
        seed = zlib.crc32(self.id.encode()) if self.seed is None else self.seed
        object.__setattr__(self, "seed", v.check_int(owner, "seed", seed, low=0))
        paths = tuple(self.paths) if isinstance(self.paths, (list, tuple)) else self.paths
        if not isinstance(paths, tuple) or not paths or any(p not in PATHS for p in paths):
            raise ValueError(f"{owner}: paths must be a non-empty sequence of {PATHS}, "
                             f"got {self.paths!r}")
        object.__setattr__(self, "paths", paths)

    # -- data the worker and the parent both derive from the case ---------------------
    def initial_params(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        return {name: rng.standard_normal(shape).astype(np.float32)
                for name, shape in self.params.items()}

    def gradients(self, step: int) -> dict[str, np.ndarray]:
        """The float32 gradients of 0-based ``step``."""
        return gradients_at(self.seed, step, self.params)

    def with_steps(self, steps: int) -> "Case":
        return Case(id=self.id, spec=self.spec, params=self.params, steps=steps,
                    seed=self.seed, paths=self.paths, description=self.description)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "spec": self.spec.to_dict(),
                "params": {n: list(s) for n, s in self.params.items()},
                "steps": self.steps, "seed": self.seed, "paths": list(self.paths),
                "description": self.description}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Case":
        return cls(id=data["id"], spec=uo.spec_from_dict(data["spec"]),
                   params={n: tuple(s) for n, s in data["params"].items()},
                   steps=data["steps"], seed=data["seed"], paths=tuple(data["paths"]),
                   description=data.get("description", ""))


def _preset(**fields) -> Case:
    return Case(params=DENSE_PARAMS, **fields)


def _sgd_cases() -> list[Case]:
    cosine = Cosine(lr=0.1, T_max=50, eta_min=0.005)
    m = {"lr": 0.05, "momentum": 0.9}
    return [
        Case(id="sgd_plain", spec=uo.SGD(lr=0.05)),
        Case(id="sgd_momentum", spec=uo.SGD(**m)),
        Case(id="sgd_nesterov", spec=uo.SGD(**m, nesterov=True)),
        Case(id="sgd_dampening_grad_init",
             spec=uo.SGD(**m, dampening=0.5, momentum_init="grad"),
             description="torch/MindSpore first step: buffer = gradient, no dampening"),
        Case(id="sgd_dampening_zeros_init",
             spec=uo.SGD(**m, dampening=0.5, momentum_init="zeros"),
             description="buffer starts at 0, so dampening acts on the first step"),
        Case(id="sgd_zeros_init_no_dampening", spec=uo.SGD(**m, momentum_init="zeros"),
             description="with dampening 0 both first-step rules coincide"),
        Case(id="sgd_lr_inside_cosine",
             spec=uo.SGD(lr=cosine, momentum=0.9, lr_placement="inside"),
             description="lr inside the buffer; the lr changes every step"),
        Case(id="sgd_lr_inside_nesterov",
             spec=uo.SGD(lr=cosine, momentum=0.9, nesterov=True, lr_placement="inside")),
        Case(id="sgd_cosine", spec=uo.SGD(lr=cosine, momentum=0.9)),
        Case(id="sgd_step_schedule",
             spec=uo.SGD(lr=Step(lr=0.1, step_size=10, gamma=0.5), momentum=0.9)),
        Case(id="sgd_warmup_exponential",
             spec=uo.SGD(lr=LinearWarmup(after=Exponential(lr=0.1, gamma=0.97),
                                         warmup_steps=8, start_lr=0.01))),
        Case(id="sgd_weight_decay", spec=uo.SGD(**m, weight_decay=0.05)),
        Case(id="sgd_maximize", spec=uo.SGD(**m, maximize=True)),
        Case(id="sgd_no_decay_names",
             spec=uo.SGD(**m, weight_decay=0.1, no_decay_names=("beta", "gamma"))),
        _preset(id="preset_torch_sgd",
             spec=uo.preset("torch.optim.SGD", lr=0.05, momentum=0.9, dampening=0.2,
                            weight_decay=0.01)),
        _preset(id="preset_paddle_momentum",
             spec=uo.preset("paddle.optimizer.Momentum", learning_rate=0.05, momentum=0.9,
                            weight_decay=0.01)),
        _preset(id="preset_paddle_momentum_nesterov",
             spec=uo.preset("paddle.optimizer.Momentum", learning_rate=0.05, momentum=0.9,
                            use_nesterov=True)),
        _preset(id="preset_paddle_sgd",
             spec=uo.preset("paddle.optimizer.SGD", learning_rate=0.05, weight_decay=0.01)),
        _preset(id="preset_mindspore_nn_momentum",
             spec=uo.preset("mindspore.nn.Momentum", learning_rate=0.05, momentum=0.9,
                            weight_decay=0.05)),
        _preset(id="preset_mindspore_nn_momentum_nesterov",
             spec=uo.preset("mindspore.nn.Momentum", learning_rate=0.05, momentum=0.9,
                            use_nesterov=True)),
        _preset(id="preset_mindspore_nn_sgd",
             spec=uo.preset("mindspore.nn.SGD", learning_rate=0.05, momentum=0.9,
                            dampening=0.3, weight_decay=0.05, nesterov=False)),
        _preset(id="preset_mindspore_nn_sgd_nesterov",
             spec=uo.preset("mindspore.nn.SGD", learning_rate=0.05, momentum=0.9,
                            nesterov=True)),
        _preset(id="preset_mindspore_experimental_sgd",
             spec=uo.preset("mindspore.experimental.optim.SGD", lr=0.05, momentum=0.9,
                            dampening=0.3, weight_decay=0.01, maximize=True)),
    ]


def _adam_cases() -> list[Case]:
    a = {"lr": 0.01, "eps": 1e-3}
    cosine = Cosine(lr=0.02, T_max=50, eta_min=0.001)
    return [
        Case(id="adam_default", spec=uo.Adam(**a)),
        Case(id="adam_eps_hat", spec=uo.Adam(**a, eps_placement="eps_hat")),
        Case(id="adam_eps_inside", spec=uo.Adam(**a, eps_placement="inside")),
        Case(id="adam_no_bias_correction", spec=uo.Adam(**a, bias_correction=False)),
        Case(id="adam_amsgrad", spec=uo.Adam(**a, amsgrad=True)),
        Case(id="adam_amsgrad_eps_hat",
             spec=uo.Adam(**a, amsgrad=True, eps_placement="eps_hat")),
        Case(id="adam_nesterov", spec=uo.Adam(**a, nesterov=True)),
        Case(id="adam_nesterov_eps_hat",
             spec=uo.Adam(**a, nesterov=True, eps_placement="eps_hat")),
        Case(id="adam_weight_decay", spec=uo.Adam(**a, weight_decay=0.1)),
        Case(id="adam_maximize", spec=uo.Adam(**a, maximize=True, betas=(0.8, 0.99))),
        Case(id="adam_no_decay_names",
             spec=uo.Adam(**a, weight_decay=0.1, no_decay_names=("beta", "gamma"))),
        Case(id="adam_cosine", spec=uo.Adam(lr=cosine, eps=1e-3, weight_decay=0.05)),
        _preset(id="preset_torch_adam",
             spec=uo.preset("torch.optim.Adam", lr=0.01, eps=1e-3, weight_decay=0.01)),
        _preset(id="preset_paddle_adam",
             spec=uo.preset("paddle.optimizer.Adam", learning_rate=0.01, epsilon=1e-3,
                            weight_decay=0.01)),
        _preset(id="preset_paddle_adam_amsgrad",
             spec=uo.preset("paddle.optimizer.Adam", learning_rate=0.01, epsilon=1e-3,
                            amsgrad=True)),
        _preset(id="preset_mindspore_nn_adam",
             spec=uo.preset("mindspore.nn.Adam", learning_rate=0.01, eps=1e-3,
                            weight_decay=0.1)),
        _preset(id="preset_mindspore_nn_adam_nesterov",
             spec=uo.preset("mindspore.nn.Adam", learning_rate=0.01, eps=1e-3,
                            use_nesterov=True)),
        _preset(id="preset_mindspore_nn_adam_amsgrad",
             spec=uo.preset("mindspore.nn.Adam", learning_rate=0.01, eps=1e-3,
                            use_amsgrad=True)),
        _preset(id="preset_mindspore_experimental_adam",
             spec=uo.preset("mindspore.experimental.optim.Adam", lr=0.01, eps=1e-3,
                            weight_decay=0.01, maximize=True)),
        _preset(id="preset_mindspore_experimental_adam_amsgrad",
             spec=uo.preset("mindspore.experimental.optim.Adam", lr=0.01, eps=1e-3,
                            amsgrad=True)),
    ]


def _adamw_cases() -> list[Case]:
    a = {"lr": 0.01, "eps": 1e-3, "weight_decay": 0.1}
    cosine = Cosine(lr=0.02, T_max=50, eta_min=0.001)
    return [
        Case(id="adamw_default", spec=uo.AdamW(**a)),
        Case(id="adamw_decay_not_times_lr",
             spec=uo.AdamW(**{**a, "weight_decay": 0.005}, decay_times_lr=False)),
        Case(id="adamw_in_update", spec=uo.AdamW(**a, decay_form="in_update")),
        Case(id="adamw_no_decay_names", spec=uo.AdamW(**a, no_decay_names=("beta", "gamma"))),
        Case(id="adamw_amsgrad", spec=uo.AdamW(**a, amsgrad=True)),
        Case(id="adamw_maximize", spec=uo.AdamW(**a, maximize=True)),
        Case(id="adamw_eps_hat", spec=uo.AdamW(**a, eps_placement="eps_hat")),
        Case(id="adamw_no_bias_correction", spec=uo.AdamW(**a, bias_correction=False)),
        Case(id="adamw_cosine", spec=uo.AdamW(**{**a, "lr": cosine})),
        _preset(id="preset_torch_adamw",
             spec=uo.preset("torch.optim.AdamW", lr=0.01, eps=1e-3, weight_decay=0.1)),
        _preset(id="preset_paddle_adamw",
             spec=uo.preset("paddle.optimizer.AdamW", learning_rate=0.01, epsilon=1e-3,
                            weight_decay=0.1)),
        _preset(id="preset_paddle_adamw_amsgrad",
             spec=uo.preset("paddle.optimizer.AdamW", learning_rate=0.01, epsilon=1e-3,
                            weight_decay=0.1, amsgrad=True)),
        _preset(id="preset_mindspore_nn_adamweightdecay",
             spec=uo.preset("mindspore.nn.AdamWeightDecay", learning_rate=0.01, eps=1e-3,
                            weight_decay=0.1),
             description="no bias correction, decay inside the update, beta/gamma not decayed"),
        _preset(id="preset_mindspore_experimental_adamw",
             spec=uo.preset("mindspore.experimental.optim.AdamW", lr=0.01, eps=1e-3,
                            weight_decay=0.1, maximize=True)),
    ]


_BUILDERS = (_sgd_cases, _adam_cases, _adamw_cases)


def default_cases(algorithms: Iterable[str] | None = None) -> list[Case]:
    """The default suite, optionally only the cases of the given algorithm names."""
    cases = [case for build in _BUILDERS for case in build()]
    if algorithms is None:
        return cases
    if isinstance(algorithms, str) or not isinstance(algorithms, Iterable):
        raise TypeError(f"default_cases: algorithms must be a list of names, got "
                        f"{algorithms!r}")
    names = list(algorithms)
    unknown = [n for n in names if n not in uo.algorithms()]
    if unknown:
        raise ValueError(f"default_cases: unknown algorithm(s) {unknown}; registered: "
                         f"{uo.algorithms()}")
    covered = sorted({c.spec.name for c in cases})
    missing = [n for n in names if n not in covered]
    if missing:
        raise ValueError(f"default_cases: no conformance cases yet for {missing}; cases "
                         f"exist for {covered}")
    return [c for c in cases if c.spec.name in names]


def select(cases: list[Case], patterns: Iterable[str]) -> list[Case]:
    """The cases whose id matches one of the shell-style ``patterns``."""
    patterns = list(patterns)
    chosen = [c for c in cases if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    if not chosen:
        raise ValueError(f"no case id matches {patterns}; ids: {[c.id for c in cases]}")
    return chosen


def uncovered_rows(cases: list[Case], backend: str) -> list[str]:
    """Native lowering rows of ``backend`` (for the algorithms of ``cases``) that no
    case's "auto" build selects, judged
    from the spec alone (conditions on the parameters, such as MindSpore's "no 0-size
    parameter", are the report's business: it lists the rows no run built with)."""
    import importlib

    lowering = importlib.import_module(f"unified_opt.backends.{backend}.lowering")
    chosen = set()
    for case in cases:
        decision = lowering.decide_for(case.spec)
        if decision.path == "native":
            chosen.add((decision.algorithm, decision.native))
    algorithms = {case.spec.name for case in cases}
    return [f"{row.algorithm} -> {row.native}" for row in lowering.TABLE
            if row.algorithm in algorithms and (row.algorithm, row.native) not in chosen]
