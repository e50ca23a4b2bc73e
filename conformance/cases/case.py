"""Conformance cases: a spec, named parameter shapes, a seed, a number of steps, paths.

Parameter names matter: name rules (``no_decay_names``, MindSpore's
``("*beta*", "*gamma*")``) pick parameters by name, so the standard set has a ``ln.gamma``
and a ``ln.beta`` next to ``w`` and ``bias``. Sizes matter too: CPU kernels run 8-wide
vector code with a scalar tail, and cut large tensors into chunks, each with its own
tail (MindSpore 2.10's non-centered ``nn.RMSProp`` computes another formula in the
vector code than in the tail), so the set has tensors of 1, 7, 8, 9, 64 and 4225
(> 4096) elements (:data:`KERNEL_SIZES`), 1-D, 2-D and 3-D, and, except in the preset
cases, a 0-size tensor: a backend must hold one (by its own implementation if its native
class cannot) or fail the case, visibly.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

import unified_opt as uo
from unified_opt import _validation as v
from unified_opt.backend import BACKENDS, PATHS
from unified_opt.pre_step import has_pre_step
from unified_opt.storage import LOW_PRECISION, round_to

from ..gradients import gradients_at, with_nonfinite
from .functions import decode_spec, encode_spec
from .native import Native

#: Bump when the default cases, the gradient stream or the comparison rule change.
SUITE_VERSION = "10"  # 3: kernel sizes (1, 7, 8, 9, 64, 4225), a non-finite case per
#                       algorithm, NaN and Inf interchangeable where both are non-finite;
#                       4: parameters without a gradient at some steps; 5: bfloat16
#                       parameters and state_dtype (judged in bfloat16 ulps); 6: the
#                       float32 references keep 0-d values in float32 (NEP 50); 7:
#                       gradients from a real backward in both zero_grad modes; 8: the
#                       oracle's machine eps is the run's dtype's (Adafactor eps[0]=None);
#                       9: a parameter element whose state holds NaN against NaN/Inf is
#                       excused, Adafactor decays as p*(1-lr*wd), lamb_bias_correction_
#                       first_moment_step; 10: lr and weight decay written into
#                       param_groups before each step (Case.param_group_writes)
MIN_STEPS = 50
DEFAULT_STEPS = 50

#: element counts every case covers: a single element, a vector tail alone (7), one
#: 8-wide vector block (8), a block and a tail (9), whole blocks (64), and more than 4096
#: elements, which CPU kernels split into chunks with a tail each
KERNEL_SIZES = (1, 7, 8, 9, 64, 4225)

#: the standard parameter set: name -> shape
PARAMS = {"w": (65, 65), "bias": (7,), "ln.gamma": (8,), "ln.beta": (9,), "w3d": (4, 4, 4),
          "scale": (1,), "empty": (0,)}

#: the preset cases model a network being ported: no 0-size parameter, so that native
#: classes which cannot hold one (MindSpore's) run natively there; every other case
#: keeps it
DENSE_PARAMS = {name: shape for name, shape in PARAMS.items() if 0 not in shape}

#: "own" runs only when "auto" lowered to a native class (else it would repeat "auto");
#: "native" only when "auto" took the own implementation over an exact native class
#: (``uo.build``'s ``prefer="speed"``), so that every native row stays covered: a case
#: runs each exact path once
DEFAULT_PATHS = ("auto", "own", "native")
#: the one path of a case with a native optimizer built by hand (``Case.native``)
HAND = "hand"

#: why a backend cannot run a case of bfloat16 parameters (``Case.storage``)
STORAGE_REFUSED = {
    backend: "its own optimizer refuses bfloat16 and float16 parameters and a spec's "
             "state_dtype (the update in float32 with the values rounded once, "
             "unified_opt.storage, is written for torch only so far)"
    for backend in ("paddle", "mindspore")}

#: why a backend cannot run a case with missing gradients (``Case.missing_gradients``)
#: how a case's gradients reach the optimizer (``Case.backward``): None, assigned to
#: ``p.grad`` and dropped after the step; otherwise a real backward of the loss
#: ``sum(p * g)`` (whose gradient is ``g`` exactly) and, between steps, torch's
#: ``zero_grad(set_to_none=...)`` / Paddle's ``clear_grad(set_to_zero=...)`` in that mode
#: (not on MindSpore: :data:`BACKWARD_REFUSED`)
BACKWARD_MODES = ("set_to_none", "set_to_zero")
#: why a backend does not run a case with ``backward`` (``Case.backward``)
BACKWARD_REFUSED = {
    "mindspore": "MindSpore's optimizers take the gradients as the call's argument, new "
                 "tensors from mindspore.grad at every step, and keep no gradient on a "
                 "parameter to clear (torch's zero_grad, Paddle's clear_grad): the "
                 "assigned-gradient cases drive it as its training loops do (a real "
                 "autodiff here costs a graph compile of about 2 s per run)",
}

#: what a case may write into the optimizer's param groups (``Case.param_group_writes``)
PARAM_GROUP_WRITES = ("lr", "weight_decay")

MISSING_GRADIENTS_REFUSED = {
    "mindspore": "MindSpore's optimizers take a tuple of one gradient per parameter (a "
                 "parameter the loss does not reach gets zeros from GradOperation, and "
                 "its update runs on them): a parameter without a gradient at a step "
                 "cannot be expressed there",
}


@dataclass(frozen=True)
class Case:
    """One conformance case. ``paths`` are build paths ("auto", "own", "native"); a
    worker skips a path whose lowering repeats one it already ran, and "native" where the
    "auto" build found no exact native class.

    With ``native`` (a :class:`.native.Native`: a framework's own optimizer built by
    hand) the case runs that optimizer instead of ``uo.build``, on its framework only,
    on the one path "hand"; ``spec`` (with ``groups``) is what it claims to compute.
    ``backends``: the backends the case runs on (empty: every one)."""

    id: str
    spec: uo.Spec
    params: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: dict(PARAMS))
    steps: int = DEFAULT_STEPS
    seed: int | None = None            # None: derived from the id (stable across edits)
    paths: tuple[str, ...] = DEFAULT_PATHS
    description: str = ""
    groups: tuple[uo.Group, ...] = ()   # name rules (patterns only: they travel as JSON)
    #: 0-based steps whose gradients get one non-finite element (see ``gradients``)
    nonfinite_steps: tuple[int, ...] = ()
    native: Native | None = None
    backends: tuple[str, ...] = ()
    #: ranks of a distributed case (data-parallel specs: ``dgc_momentum``): the runner
    #: launches that many processes in the framework's process group, rank ``r`` on the
    #: gradient stream of seed ``seed + r``; see :mod:`..distributed`
    workers: int = 1
    #: the rank this case stands for: its gradient stream and, in the oracle, its state
    #: (``at_rank``; 0 for the case as written)
    rank: int = 0
    #: parameter name -> 0-based steps at which it has no gradient (torch's ``p.grad =
    #: None``): it is left alone there and its own count of updates stays, while the
    #: step counts for the optimizer (lr schedule, per-step hyperparameters). Backends
    #: that cannot express it (:data:`MISSING_GRADIENTS_REFUSED`) do not run the case,
    #: and the report says why (:meth:`refused_on`)
    missing_gradients: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: the dtype the parameters are kept in (None: float32): with ``"bfloat16"`` the
    #: parameters, their initial values and every gradient are bfloat16 values, the
    #: update computes in float32 and rounds what it keeps (:mod:`unified_opt.storage`),
    #: and the oracle and the floors round the same way. Backends whose own path cannot
    #: keep parameters so (:data:`STORAGE_REFUSED`) do not run the case
    storage: str | None = None
    #: None: the gradients are assigned (``p.grad = g``); one of :data:`BACKWARD_MODES`:
    #: the driver takes them from a real backward and clears them that way between steps
    #: (a gradient zeroed in place and written by the next backward: an optimizer that
    #: kept a reference to it would follow it)
    backward: str | None = None
    #: hyperparameters (of :data:`PARAM_GROUP_WRITES`) that the driver writes into every
    #: param group of the optimizer before each step, as a script's lr loop or a
    #: ``uo.lr_scheduler`` does: the optimizer is built with the spec's schedule of each
    #: at its step-0 value, and before step ``t`` each group gets the schedule's value
    #: at ``t`` (its lr factor applied). The oracle runs the spec with the schedules
    param_group_writes: tuple[str, ...] = ()

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
        if self.native is not None and paths == DEFAULT_PATHS:
            paths = (HAND,)
        if self.native is not None and paths != (HAND,):
            raise ValueError(f"{owner}: a case with a native optimizer built by hand runs "
                             f"the one path {(HAND,)}, got {self.paths!r}")
        if self.native is None and (not isinstance(paths, tuple) or not paths
                                    or any(p not in PATHS for p in paths)):
            raise ValueError(f"{owner}: paths must be a non-empty sequence of {PATHS}, "
                             f"got {self.paths!r}")
        object.__setattr__(self, "paths", paths)
        self._check_native(owner, shapes)
        groups = tuple(self.groups) if isinstance(self.groups, (list, tuple)) else self.groups
        if not isinstance(groups, tuple) or not all(isinstance(g, uo.Group) for g in groups):
            raise TypeError(f"{owner}: groups must be a sequence of uo.Group, got "
                            f"{self.groups!r}")
        for g in groups:
            g.to_dict()   # a callable match cannot travel to a worker: say so now
        object.__setattr__(self, "groups", groups)
        steps = self.nonfinite_steps
        if isinstance(steps, (str, bytes)) or not isinstance(steps, (list, tuple)):
            raise TypeError(f"{owner}: nonfinite_steps must be a sequence of step indices, "
                            f"got {steps!r}")
        steps = tuple(v.check_int(owner, f"nonfinite_steps[{i}]", s, low=0)
                      for i, s in enumerate(steps))
        if list(steps) != sorted(set(steps)):
            raise ValueError(f"{owner}: nonfinite_steps must be increasing, got {list(steps)}")
        if not any(0 not in shape for shape in shapes.values()) and steps:
            raise ValueError(f"{owner}: nonfinite_steps needs a parameter with elements")
        object.__setattr__(self, "nonfinite_steps", steps)
        self._check_missing_gradients(owner, shapes)
        self._check_workers(owner)
        if self.storage is not None and self.storage not in LOW_PRECISION:
            raise ValueError(f"{owner}: storage must be None or one of {LOW_PRECISION}, got "
                             f"{self.storage!r}")
        if self.storage is not None and (self.workers > 1 or self.native is not None):
            raise ValueError(f"{owner}: storage={self.storage!r} is for uo.build's "
                             "optimizers on one process (no native built by hand, no workers)")
        if self.backward is not None:
            if self.backward not in BACKWARD_MODES:
                raise ValueError(f"{owner}: backward must be None or one of "
                                 f"{BACKWARD_MODES}, got {self.backward!r}")
            if self.missing_gradients or self.storage is not None or self.workers > 1 \
                    or self.nonfinite_steps:
                raise ValueError(f"{owner}: backward={self.backward!r} takes every gradient "
                                 "from one backward of finite float32 values on one process "
                                 "(no missing_gradients, storage, workers or "
                                 "nonfinite_steps)")
        self._check_param_group_writes(owner)
        encode_spec(self.spec)   # a callable that cannot travel to a worker: say so now

    def _check_param_group_writes(self, owner: str) -> None:
        writes = self.param_group_writes
        if isinstance(writes, (str, bytes)) or not isinstance(writes, (list, tuple)):
            raise TypeError(f"{owner}: param_group_writes must be a sequence of "
                            f"{PARAM_GROUP_WRITES}, got {writes!r}")
        writes = tuple(writes)
        for key in writes:
            if key not in PARAM_GROUP_WRITES:
                raise ValueError(f"{owner}: param_group_writes holds {key!r}; it may hold "
                                 f"{PARAM_GROUP_WRITES}")
            if not isinstance(getattr(self.spec, key, None), uo.schedules.Schedule):
                raise ValueError(f"{owner}: param_group_writes holds {key!r}, but the spec's "
                                 f"{key} is no schedule to write")
        if writes and (self.native is not None or self.workers > 1 or any(
                g.lr is not None or g.weight_decay is not None for g in self.groups)):
            raise ValueError(f"{owner}: param_group_writes is for uo.build's optimizers on one "
                             "process, with groups that set no lr or weight_decay of their own")
        object.__setattr__(self, "param_group_writes", writes)

    def _check_missing_gradients(self, owner: str, shapes: dict) -> None:
        missing = self.missing_gradients
        if not isinstance(missing, Mapping):
            raise TypeError(f"{owner}: missing_gradients must be a mapping parameter name "
                            f"-> steps, got {missing!r}")
        checked = {}
        for name, steps in missing.items():
            if name not in shapes:
                raise ValueError(f"{owner}: missing_gradients names {name!r}, which is not "
                                 f"a parameter of the case ({sorted(shapes)})")
            if isinstance(steps, (str, bytes)) or not isinstance(steps, (list, tuple)):
                raise TypeError(f"{owner}: missing_gradients[{name!r}] must be a sequence "
                                f"of step indices, got {steps!r}")
            steps = tuple(v.check_int(owner, f"missing_gradients[{name!r}][{i}]", s, low=0)
                          for i, s in enumerate(steps))
            if list(steps) != sorted(set(steps)):
                raise ValueError(f"{owner}: missing_gradients[{name!r}] must be increasing, "
                                 f"got {list(steps)}")
            if steps:
                checked[name] = steps
        if checked and self.workers > 1:
            raise ValueError(f"{owner}: a distributed case (workers={self.workers}) has "
                             "every gradient on every rank; missing_gradients is not for it")
        object.__setattr__(self, "missing_gradients", checked)

    def _check_workers(self, owner: str) -> None:
        workers = v.check_int(owner, "workers", self.workers, low=1)
        rank = v.check_int(owner, "rank", self.rank, low=0)
        if rank >= workers:
            raise ValueError(f"{owner}: rank must be below workers={workers}, got {rank}")
        if workers > 1:
            if not getattr(type(self.spec), "data_parallel", False):
                raise ValueError(f"{owner}: workers={workers} needs a data-parallel spec "
                                 f"(one that exchanges gradients, e.g. dgc_momentum), got "
                                 f"{self.spec.name}")
            if self.native is not None or self.groups:
                raise ValueError(f"{owner}: a distributed case (workers={workers}) runs "
                                 "uo.build without groups; native and groups are not for it")
            if has_pre_step(self.spec):
                raise ValueError(f"{owner}: a distributed case (workers={workers}) has no "
                                 "gradient pre-step (grad_clip, loss_scale, ...): the "
                                 "reference over workers does not run one")

    def _check_native(self, owner: str, shapes: dict) -> None:
        backends = self.backends
        if isinstance(backends, str) or not isinstance(backends, (list, tuple)) \
                or any(b not in BACKENDS for b in backends):
            raise ValueError(f"{owner}: backends must be a sequence of {BACKENDS}, got "
                             f"{backends!r}")
        backends = tuple(backends)
        native = self.native
        if native is not None:
            if not isinstance(native, Native):
                raise TypeError(f"{owner}: native must be a Native, got {native!r}")
            if backends not in ((), (native.framework,)):
                raise ValueError(f"{owner}: {native.optimizer} runs on "
                                 f"{native.framework} only, got backends {backends!r}")
            backends = (native.framework,)
            unknown = sorted(native.names() - set(shapes))
            if unknown:
                raise ValueError(f"{owner}: the native arguments name parameters {unknown} "
                                 f"the case does not have ({sorted(shapes)})")
            if native.lr_param is not None and native.lr_param not in shapes:
                raise ValueError(f"{owner}: lr_param {native.lr_param!r} is not a parameter "
                                 "of the case")
            if self.spec.skip_nonfinite:
                raise ValueError(f"{owner}: skip_nonfinite needs uo.build, which reports the "
                                 "skipped steps; a native optimizer built by hand does not")
        object.__setattr__(self, "backends", backends)

    def runs_on(self, backend: str) -> bool:
        """Does this case run on ``backend``?"""
        return (not self.backends or backend in self.backends) and \
            self.refused_on(backend) is None

    def refused_on(self, backend: str) -> str | None:
        """Why ``backend`` cannot run this case (None: it can, or the case is not for it):
        the report lists the case as not run there, with this reason."""
        if self.backends and backend not in self.backends:
            return None
        if self.missing_gradients and backend in MISSING_GRADIENTS_REFUSED:
            return f"not run on {backend}: {MISSING_GRADIENTS_REFUSED[backend]}"
        if self.backward is not None and backend in BACKWARD_REFUSED:
            return f"not run on {backend}: {BACKWARD_REFUSED[backend]}"
        if backend in STORAGE_REFUSED and (self.storage is not None or
                                           getattr(self.spec, "state_dtype", None) is not None):
            return f"not run on {backend}: {STORAGE_REFUSED[backend]}"
        return None

    # -- data the worker and the parent both derive from the case ---------------------
    def initial_params(self) -> dict[str, np.ndarray]:
        """float32 arrays (holding values of ``storage`` where the case sets one)."""
        rng = np.random.default_rng(self.seed)
        return {name: self._kept(rng.standard_normal(shape).astype(np.float32))
                for name, shape in self.params.items()}

    def _kept(self, array):
        return array if self.storage is None or array is None else round_to(array,
                                                                            self.storage)

    def gradients(self, step: int) -> dict[str, np.ndarray | None]:
        """The float32 gradients of 0-based ``step`` (with a non-finite element at the
        ``nonfinite_steps``) on this case's rank; None for a parameter without one at
        this step (``missing_gradients``)."""
        grads = gradients_at(self.seed + self.rank, step, self.params)
        if step in self.nonfinite_steps:
            grads = with_nonfinite(grads, self.nonfinite_steps.index(step))
        if self.missing_gradients:
            grads = {name: None if step in self.missing_gradients.get(name, ()) else g
                     for name, g in grads.items()}
        return {name: self._kept(g) for name, g in grads.items()}

    def at_rank(self, rank: int) -> "Case":
        """This case as rank ``rank`` of its workers sees it."""
        return dataclasses.replace(self, rank=rank)

    def with_steps(self, steps: int) -> "Case":
        return dataclasses.replace(self, steps=steps)

    def to_dict(self) -> dict[str, Any]:
        """JSON data (``native`` and ``backends`` only where set)."""
        return {"id": self.id, "spec": encode_spec(self.spec),
                "params": {n: list(s) for n, s in self.params.items()},
                "steps": self.steps, "seed": self.seed, "paths": list(self.paths),
                "description": self.description,
                "groups": [g.to_dict() for g in self.groups],
                "nonfinite_steps": list(self.nonfinite_steps),
                **({"native": self.native.to_dict()} if self.native is not None else {}),
                **({"backends": list(self.backends)} if self.backends else {}),
                **({"workers": self.workers} if self.workers > 1 else {}),
                **({"rank": self.rank} if self.rank else {}),
                **({"missing_gradients": {n: list(s) for n, s in
                                          self.missing_gradients.items()}}
                   if self.missing_gradients else {}),
                **({"storage": self.storage} if self.storage is not None else {}),
                **({"backward": self.backward} if self.backward is not None else {}),
                **({"param_group_writes": list(self.param_group_writes)}
                   if self.param_group_writes else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Case":
        return cls(id=data["id"], spec=decode_spec(data["spec"]),
                   params={n: tuple(s) for n, s in data["params"].items()},
                   steps=data["steps"], seed=data["seed"], paths=tuple(data["paths"]),
                   description=data.get("description", ""),
                   groups=tuple(uo.Group.from_dict(g) for g in data.get("groups", ())),
                   nonfinite_steps=tuple(data.get("nonfinite_steps", ())),
                   native=None if data.get("native") is None
                   else Native.from_dict(data["native"]),
                   backends=tuple(data.get("backends", ())),
                   workers=data.get("workers", 1), rank=data.get("rank", 0),
                   missing_gradients={n: tuple(s) for n, s in
                                      data.get("missing_gradients", {}).items()},
                   storage=data.get("storage"), backward=data.get("backward"),
                   param_group_writes=tuple(data.get("param_group_writes", ())))


def dense(**fields) -> Case:
    """A case over :data:`DENSE_PARAMS` (the preset cases: a network being ported)."""
    return Case(params=DENSE_PARAMS, **fields)
