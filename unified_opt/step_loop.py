"""The own optimizers' step, written once for every framework.

A backend's own optimizer (``backends/<framework>/optimizer.py``) is a thin class of its
framework: it holds the parameters and state the framework's way and answers the
questions of a :class:`Host`. :class:`StepLoop` runs the step the same way on every
backend:

0. every gradient checked against its parameter (:func:`check_gradients`: the same
   shape, dtype, device and dense form), all of them before anything changes: a
   mismatch raises naming the parameter, and no parameter or state has changed (no
   partial step). An engine reads a parameter's elements and its gradient's as arrays
   of one size and dtype, so a shorter gradient would be read past its end (measured
   before this check: a segmentation fault on torch, garbage and Inf written into the
   parameter), a broadcast one silently used, a float64 one turn Paddle's parameter
   into float64;
1. the gradient pre-step (:func:`unified_opt.pre_step.prepare_gradients`: unscale, skip
   a non-finite step, clip, centralise) once over every parameter; a skipped step
   changes nothing and returns False;
2. ``t``, the optimizer's count of steps taken (skipped ones not counted: the schedule
   position), and per parameter group the spec of this step, ``plan.spec.at_step(t)``:
   the same ``t`` for every parameter, whether or not a parameter had a gradient at
   every earlier step (the per-step hyperparameters follow the optimizer's steps, as the
   lr schedule does);
3. per parameter with a gradient, its own count of updates advances (the ``step`` of
   its update: bias corrections count the updates the parameter received, as in
   torch's and Paddle's native optimizers); a parameter without a gradient is left
   alone, its count too;
4. the updates run on the *engines*: each parameter group has an ordered list of them
   (say, the CUDA kernels, then eager operations); an engine runs what it can of a
   :class:`Batch` in place and hands back the rest to the next one. The last engine of
   every list runs everything (the spec's ``update`` with the framework's ops binding).

Parameter groups here are the parameters that share a plan spec (the same object: name
rules give parameters their own specs), an lr group of the host and an engine list; the
loop forms them once. Nothing here imports a framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .pre_step import prepare_gradients


@dataclass
class Batch:
    """Updates of one parameter group in one step, run together by an engine.

    ``params``, ``grads`` and ``states`` (the spec's state arrays by name) are the
    framework's tensors; ``steps`` the 1-based count of each parameter's updates, this one
    included; ``indices`` their positions in the optimizer's parameter list."""

    spec: Any
    lr: float
    indices: list[int]
    params: list
    grads: list
    states: list[dict]
    steps: list[int]

    def subset(self, positions: Sequence[int]) -> "Batch":
        return Batch(self.spec, self.lr, [self.indices[k] for k in positions],
                     [self.params[k] for k in positions], [self.grads[k] for k in positions],
                     [self.states[k] for k in positions], [self.steps[k] for k in positions])

    def __len__(self) -> int:
        return len(self.indices)


class Engine:
    """One way of running own updates in place: a plug-in of :class:`StepLoop`.

    :meth:`claims` says (once, when the loop forms its groups) whether a parameter's
    updates go to this engine first; :meth:`run` runs a batch and returns the positions
    it left for the next engine (an empty list: all done)."""

    name = "engine"

    def claims(self, param, spec) -> bool:
        return True

    def run(self, batch: Batch) -> list[int]:
        raise NotImplementedError


#: what :meth:`Host.describe` gives of a tensor, in order (a gradient's must equal its
#: parameter's); ``form`` is "dense" or the name of a sparse form
DESCRIBED = ("shape", "dtype", "device", "form")
DENSE = "dense"


def gradient_mismatch(owner: str, name: str, parameter: tuple, gradient: tuple,
                      hint: str = "") -> Exception:
    """The error for a gradient described ``gradient`` of a parameter described
    ``parameter`` (:meth:`Host.describe`; they differ): each field that differs, with
    both values. A sparse gradient is a RuntimeError (torch's own refusals of sparse
    gradients are), a dtype that differs a TypeError (torch's optimizers require the
    parameter's dtype), a shape or device that differs a ValueError."""
    differs = [(field, want, have) for field, want, have in zip(DESCRIBED, parameter, gradient)
               if want != have]
    parts = ", ".join(f"{field} {_shown(field, have)} (the parameter's: "
                      f"{_shown(field, want)})"
                      for field, want, have in differs)
    fields = {field for field, _, _ in differs}
    dense = " (sparse gradients are not supported here" + hint + ")" \
        if "form" in fields else ""
    message = (f"{owner}: the gradient of {name} does not fit its parameter: {parts}; "
               f"every gradient must have its parameter's shape (no broadcasting), dtype "
               f"and device, and be dense{dense}. Nothing was changed: every gradient is "
               f"checked before the step changes any parameter or state")
    if "form" in fields:
        return RuntimeError(message)
    if "dtype" in fields:
        return TypeError(message)
    return ValueError(message)


def _shown(field: str, value) -> str:
    if field == "shape" and value is not None:     # a tuple, torch.Size, paddle.Size
        return str([int(n) for n in value])
    return str(value).removeprefix("torch.").removeprefix("paddle.")


def check_gradients(owner: str, names: Sequence, params: Sequence, grads: Sequence,
                    describe, accepts=None, hint: str = "") -> None:
    """Raise :func:`gradient_mismatch` for the first gradient (None: no gradient) whose
    description differs from its parameter's, before anything changes. ``names``: each
    parameter's name (None: named by its index); ``describe``: :meth:`Host.describe`;
    ``accepts(index, parameter_description, gradient_description)``: True where a
    caller's optimizer steps that form anyway (torch's SGD and Adagrad step sparse
    gradients). The cost per parameter
    is two descriptions (a few attribute reads) and a tuple compare."""
    for i, (p, g) in enumerate(zip(params, grads)):
        if g is None:
            continue
        want, have = describe(p), describe(g)
        if want != have and not (accepts is not None and accepts(i, want, have)):
            name = names[i] if names[i] is not None else f"parameter {i}"
            raise gradient_mismatch(owner, name, want, have, hint)


class Host:
    """What the loop asks the framework's optimizer (see the module)."""

    ops: Any                                     # the framework's ops binding
    owner = "step"                               # who raises: the optimizer class's name
    sparse_hint = ""                             # where sparse gradients are stepped

    def gradients(self) -> list:
        """Every parameter's gradient, None where it has none."""
        raise NotImplementedError

    def describe(self, tensor) -> tuple:
        """``(shape, dtype, device, form)`` of a parameter or gradient (:data:`DESCRIBED`),
        values that compare with ``==``: a gradient must have its parameter's."""
        raise NotImplementedError

    def set_gradients(self, prepared: list) -> None:
        """The pre-step's results (the update reads them; torch leaves them in
        ``p.grad``)."""

    def prepare(self, spec, plans: Sequence, grads: list) -> list | None:
        """The gradient pre-step over ``grads`` (:meth:`gradients`, checked; None: the
        step is skipped). A framework may run it elsewhere (MindSpore: in numpy over
        host memory)."""
        return prepare_gradients(spec, plans, grads, self.ops)

    def steps_taken(self) -> int:
        raise NotImplementedError

    def lr_group(self, index: int) -> object:
        """A key of the parameter's lr (parameters with equal keys share an lr)."""
        return 0

    def lr(self, index: int, t: int) -> float:
        """The lr of the parameter at ``index`` for 0-based step ``t``."""
        raise NotImplementedError

    def group_spec(self, index: int, spec):
        """The plan spec the parameter at ``index`` steps with: ``spec``, or it with the
        values written into the parameter's param group
        (:meth:`unified_opt.param_groups.GroupSurface.step_spec`)."""
        return spec

    def state(self, index: int, spec) -> dict:
        """The spec's state arrays of a parameter (made with ``spec.init`` the first time)."""
        raise NotImplementedError

    def states(self, indices: list[int], spec) -> list[dict]:
        """:meth:`state` of each parameter (a host may look them up faster at once)."""
        return [self.state(i, spec) for i in indices]

    def advance(self, indices: list[int], states: list[dict]) -> list[int]:
        """Count one more update of each parameter (``states``: theirs, from
        :meth:`states`); their counts (1-based) after it."""
        raise NotImplementedError

    def finish(self, t: int) -> None:
        """The step is done: ``t`` steps taken now."""
        raise NotImplementedError


@dataclass
class _Group:
    spec: Any                  # the plan spec (at_step gives the step's)
    engines: list
    indices: list[int] = field(default_factory=list)


class StepLoop:
    """The step of an own optimizer (see the module). ``plans``: one
    :class:`unified_opt.groups.ParameterPlan` per parameter; ``engines(index, spec)``
    gives a parameter's engine list (the last runs anything)."""

    def __init__(self, spec, plans: Sequence, params: Sequence, engines, host: Host):
        self.spec = spec
        self.plans = list(plans)
        self.params = list(params)
        self.host = host
        self._engines = engines
        self._groups: list[_Group] | None = None
        #: each parameter's name in errors (None: its index)
        self.names = [plan.name for plan in self.plans]

    def extend(self, params: Sequence, plans: Sequence) -> None:
        """Parameters added after the build (``add_param_group``): the groups are formed
        again at the next step."""
        self.params.extend(params)
        self.plans.extend(plans)
        self.names.extend(plan.name for plan in plans)
        self._groups = None

    def groups(self) -> list[_Group]:
        if self._groups is None:
            groups: dict = {}
            for i, (p, plan) in enumerate(zip(self.params, self.plans)):
                engines = self._engines(i, plan.spec)
                key = (id(plan.spec), self.host.lr_group(i), tuple(id(e) for e in engines))
                if key not in groups:
                    groups[key] = _Group(plan.spec, engines)
                groups[key].indices.append(i)
            self._groups = list(groups.values())
        return self._groups

    def step(self) -> bool:
        """One optimizer step; False when the pre-step skipped it."""
        host = self.host
        grads = host.gradients()
        check_gradients(host.owner, self.names, self.params, grads, host.describe,
                        hint=host.sparse_hint)
        prepared = host.prepare(self.spec, self.plans, grads)
        if prepared is None:
            return False
        host.set_gradients(prepared)
        t = host.steps_taken()
        for group in self.groups():
            present = [i for i in group.indices if prepared[i] is not None]
            if not present:
                continue
            spec = host.group_spec(present[0], group.spec).at_step(t)
            states = host.states(present, group.spec)
            steps = host.advance(present, states)
            batch = Batch(spec, host.lr(present[0], t), present,
                          [self.params[i] for i in present], [prepared[i] for i in present],
                          states, steps)
            for engine in group.engines:
                rest = engine.run(batch)
                if not rest:
                    break
                batch = batch.subset(rest)
            else:
                raise RuntimeError(f"no engine ran the updates of parameters {batch.indices}")
        host.finish(t + 1)
        return True
