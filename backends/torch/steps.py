"""What runs around a torch optimizer's step: parameter groups from the plans, the
gradient pre-step (:mod:`unified_opt.pre_step`), per-step hyperparameters
(``spec.at_step``) and the count of steps taken.

A native ``torch.optim`` class computes the spec's update; :class:`NativeStepHooks`
runs the rest with ``Optimizer.register_step_pre_hook`` / ``register_step_post_hook``:

* before the step, first: every ``p.grad`` checked against its parameter
  (:func:`describe`, :func:`unified_opt.step_loop.check_gradients`: the same shape, no
  broadcasting, dtype, device, and dense), all before anything changes: torch's fused
  and foreach kernels read a shorter gradient past its end (measured: a segmentation
  fault on a 10M-element parameter given a 1-element gradient; garbage and Inf at 1000
  elements). A sparse gradient is passed on where the class steps it
  (:func:`steps_sparse`: SGD without momentum or weight decay, Adagrad without weight
  decay, and no pre-step), its group run unfused for the step (the fused kernels refuse
  sparse gradients); elsewhere refused naming the parameter. With a closure, the
  closure runs first (it makes the gradients);
* then ``prepare_gradients`` over every parameter (the torch binding of
  the one implementation), its results written into ``p.grad`` laid out like the
  parameter (:func:`laid_out_like`: the fused kernels take no other); then each param
  group's per-step hyperparameters (``weight_decay`` of a weight-decay schedule,
  ``momentum`` / ``betas`` of a momentum-cycling lr schedule), which every torch class
  in the table reads from the group at every step;
* a skipped step (``skip_nonfinite``, non-finite unscaled gradients): every ``p.grad``
  is set to None, so torch leaves every parameter and its state (``state["step"]``
  too) alone, and put back afterwards;
* a fused CPU group: each gradient laid out like its parameter, and a group holding a
  parameter with gaps run unfused for the step (:func:`_fused_cpu_layouts`: torch's
  fused CPU kernels pair elements by memory order); after ``load_state_dict``, the
  loaded state laid out like its parameters (:func:`lay_out_state`);
* after the step: the count of steps taken, kept in ``param_groups[0]["steps_taken"]``
  (so ``state_dict`` carries it), advances unless the step was skipped.

Each step call appends whether it was skipped to the build record's ``skipped`` list.

``add_param_group`` after the build (:meth:`NativeStepHooks.add_group`) gives the class
a group in its own form and extends all of the above, and the build's record, to the
new parameters.
"""

from __future__ import annotations

import torch

from unified_opt.pre_step import has_pre_step, prepare_gradients
from unified_opt.step_loop import DENSE, check_gradients

from .ops import is_dtensor, torch_ops
from .state_dict import attach as attach_state_dict

STEPS_TAKEN = "steps_taken"


def steps_taken(optimizer) -> int:
    """Optimizer steps taken so far (skipped ones not counted): the schedule position."""
    return optimizer.param_groups[0].setdefault(STEPS_TAKEN, 0)


#: where a sparse gradient is refused, which torch classes step one
SPARSE_HINT = (": torch.optim.SGD (momentum=0, weight_decay=0) and torch.optim.Adagrad "
               "(weight_decay=0) step sparse gradients, so uo.build(uo.SGD(...) or "
               "uo.Adagrad(...), params) on those native classes (the default path, or "
               "prefer='native'), without a gradient pre-step (clipping, loss scale, "
               "skip_nonfinite, centralisation), takes them")


def describe(tensor) -> tuple:
    """``(shape, dtype, device, form)`` of a parameter or gradient
    (:data:`unified_opt.step_loop.DESCRIBED`): a gradient must have its parameter's.
    ``form`` is "dense" for a strided tensor, else its layout ("sparse_coo", ...)."""
    layout = tensor.layout
    return (tensor.shape, tensor.dtype, tensor.device,
            DENSE if layout is torch.strided else str(layout).removeprefix("torch."))


def steps_sparse(optimizer, group: dict) -> bool:
    """Whether torch's class steps a sparse gradient of a parameter in ``group`` (torch
    2.13, ``torch/optim/sgd.py`` and ``adagrad.py``, their for-loop form; the fused ones
    raise): SGD without momentum (a momentum buffer made from a sparse gradient is sparse,
    and a later dense gradient cannot be added to it) and weight decay (``add(sparse,
    dense)`` raises), Adagrad without weight decay (torch raises "weight_decay option is
    not compatible with sparse gradients")."""
    if isinstance(optimizer, torch.optim.SGD):
        return group.get("momentum", 0) == 0 and group.get("weight_decay", 0) == 0
    if isinstance(optimizer, torch.optim.Adagrad):
        return group.get("weight_decay", 0) == 0
    return False


def closure_first(args, kwargs):
    """(loss, args, kwargs with the closure replaced by one returning that loss): the
    closure must run before the pre-step sees the gradients it makes."""
    closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
    if closure is None:
        return None, args, kwargs
    with torch.enable_grad():
        loss = closure()
    args = args[:1]
    kwargs = dict(kwargs, closure=lambda: loss)
    return loss, args, kwargs


def same_strides(a, b) -> bool:
    """Whether ``a`` and ``b`` (of one shape) have the same strides in every dimension of
    a size other than 1: the condition of torch's fused and foreach kernels
    (``check_fast_path_restrictions``: ``_check_tensors_share_sizes_and_strides``)."""
    return all(n == 1 or x == y for n, x, y in zip(a.shape, a.stride(), b.stride()))


def laid_out_like(grad, param):
    """``grad`` with ``param``'s strides: itself where they agree, else a copy laid out
    like the parameter.

    The pre-step's torch operations return new tensors in the default layout, while a
    parameter (and the state a native class makes ``like`` it) may have others: a
    zero-size dimension has any stride (``torch.from_numpy`` of an empty array gives
    stride 0, ``torch.zeros(0)`` stride 1), a transposed parameter has permuted ones.
    The CUDA fused kernels refuse a gradient whose strides differ from its parameter's
    (``_fused_sgd_``: "check_fast_path_restrictions"; ``_fused_adam_``: "params, grads,
    exp_avgs, and exp_avg_sqs must have same dtype, device, and layout"); autograd lays a
    gradient out like its parameter for the same reason. A DTensor (never fused) is
    left as it is."""
    if is_dtensor(grad) or same_strides(grad, param):
        return grad
    # empty_like keeps the strides of a parameter without gaps or overlaps (every one
    # a fused kernel takes); of any other, it gives a dense layout
    out = torch.empty_like(param, dtype=grad.dtype, device=grad.device)
    out.copy_(grad)
    return out


def dense(tensor) -> bool:
    """Whether ``tensor``'s elements fill its memory without gaps or overlaps, in any
    order of its dimensions (a transposed matrix is dense, a strided slice is not)."""
    if tensor.numel() == 0:
        return True
    expected = 1
    for size, stride in sorted(((n, s) for n, s in zip(tensor.shape, tensor.stride())
                                if n != 1), key=lambda d: d[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def _fused_cpu_layouts(optimizer) -> list[dict]:
    """Each CPU parameter of a fused group given a gradient laid out like itself; the
    groups that cannot run fused this step (a parameter with gaps).

    torch's fused CPU kernels (SGD, Adam, AdamW, Adagrad; torch 2.13) walk a parameter,
    its gradient and its state as flat arrays in memory order, whatever their strides,
    and raise nothing: a gradient laid out otherwise than its parameter is paired with
    other elements (measured: 0.6 off after three Adam steps of lr 0.1 where a transposed
    gradient was given to a contiguous parameter), and so is every element of a
    parameter with gaps (a strided slice: its state and gradient are dense). Autograd
    lays a gradient out like a dense parameter, but a gradient assigned by hand need not
    be. A dense parameter's gradient is copied into its layout (:func:`laid_out_like`,
    as the pre-step's are), and so is its state where a parameter not contiguous has
    state in another layout (a contiguous parameter's is laid out at load:
    :func:`lay_out_state`); a group holding a parameter with gaps runs unfused (torch's
    for-loop and foreach kernels follow strides). CUDA's fused kernels check the layouts
    and raise instead."""
    unfused = []
    for group in optimizer.param_groups:
        if not group.get("fused"):
            continue
        for p in group["params"]:
            if not p.is_cpu:        # (first: on CUDA this loop is the whole cost)
                continue
            grad = p.grad
            if grad is None or grad.layout is not torch.strided or \
                    (p.is_contiguous() and grad.is_contiguous()):
                continue
            if not dense(p):
                unfused.append(group)
                break
            if not same_strides(grad, p):
                p.grad = laid_out_like(grad, p)
            lay_out_state(optimizer.state.get(p, {}), p)
    return unfused


def lay_out_state(state: dict, param) -> None:
    """``param``'s state tensors of its shape laid out like it (:func:`laid_out_like`),
    for a dense parameter. torch makes state ``zeros_like`` the parameter, so only a
    loaded state (``load_state_dict`` keeps the saved strides: a checkpoint of a
    transposed parameter loaded for a contiguous one) or one written by hand differs;
    a fused CPU kernel would pair its elements with others (see
    :func:`_fused_cpu_layouts`)."""
    if not dense(param):
        return
    for key, value in state.items():
        if (isinstance(value, torch.Tensor) and value.shape == param.shape
                and not same_strides(value, param)):
            state[key] = laid_out_like(value, param)


def _late_momentum_buffers(optimizer) -> list[dict]:
    """The fused SGD groups whose step would mix parameters with a momentum buffer and
    parameters getting their first gradient now (a layer unfrozen later): torch's fused
    SGD kernel (torch 2.13 and 2.11) raises a TypeError on such a mix, while its
    for-loop starts the new buffers as torch's SGD defines. Those groups run this one
    step unfused (the same update; the kernels may round an element differently)."""
    if not isinstance(optimizer, torch.optim.SGD):
        return []
    out = []
    for group in optimizer.param_groups:
        if not group.get("fused") or group.get("momentum", 0) == 0:
            continue
        made = [optimizer.state.get(p, {}).get("momentum_buffer") is not None
                for p in group["params"] if p.grad is not None]
        if any(made) and not all(made):
            out.append(group)
    return out


class NativeStepHooks:
    """The pre-step, per-step hyperparameters and the skip rule around a native class.

    ``params``/``plans``: every parameter in build order with its plan; ``group_specs``:
    the spec of each param group (in ``optimizer.param_groups`` order); ``lowering``: the
    native class's lowering (its ``to_native`` gives the group values of a step's spec)."""

    def __init__(self, optimizer, spec, lowering, params, plans, group_specs, skipped: list):
        self.spec = spec
        self.lowering = lowering
        self.params = list(params)
        self.plans = list(plans)
        self.group_specs = list(group_specs)
        self.skipped = skipped
        self.pre_step = has_pre_step(spec)
        self.varies = spec.varies_per_step()
        self._stash: list | None = None
        self._unfused: list = []
        #: each parameter's name in errors (None: its index)
        self.names = [plan.name for plan in self.plans]
        self._optimizer = optimizer
        steps_taken(optimizer)
        optimizer.register_step_pre_hook(self.before)
        optimizer.register_step_post_hook(self.after)
        optimizer.register_load_state_dict_pre_hook(self.check_loaded)
        optimizer.register_load_state_dict_post_hook(self.lay_out_loaded)
        attach_state_dict(optimizer)       # state_dict(): the portable form
        # an instance attribute: torch.optim.Optimizer.__init__ has made the build's
        # groups through the class's method already
        optimizer.add_param_group = self.add_group

    def add_group(self, param_group) -> None:
        """torch's ``add_param_group`` after ``uo.build``: the group dict read as the own
        path reads it (:func:`unified_opt.param_groups.added_group`: torch's absolute
        ``lr``, any of the spec's hyperparameters, validated as the spec validates them;
        a scheduled spec lr refused), given to the native class in its own group form
        (the lowering's ``to_native`` of the group's spec at the steps taken, and its lr),
        and covered by what runs around the class: the gradient pre-step (a global-norm
        clip spans every group), per-step hyperparameters and the gradient checks. The
        build's record takes the parameters, so ``uo.save_state`` writes their state and
        the group (as ``uo.Group`` rules: give ``(name, parameter)`` pairs). Refused, a
        ValueError naming ``path='own'`` with nothing changed, where the native class
        would not compute the spec exactly with the group
        (:func:`unified_opt.native_groups.check_still_exact`)."""
        from unified_opt.backend import load, record_of
        from unified_opt.native_groups import check_still_exact, kept_on_failure, one_plan
        from unified_opt.param_groups import added_group

        optimizer = self._optimizer
        caller = f"{type(optimizer).__name__}.add_param_group"
        record = record_of(optimizer)
        with kept_on_failure(record):
            _, params, plans = added_group(record, param_group, type(optimizer).__name__,
                                           "torch", lambda p: None)
            plan = one_plan(plans, caller)
            check_still_exact(load("torch"), record, caller)
            values = self.lowering.to_native(plan.spec.at_step(steps_taken(optimizer)))
            # the class's own method (the instance attribute is this one); torch fills
            # the keys not given (fused, foreach, ...) from the constructor's defaults
            type(optimizer).add_param_group(
                optimizer, {"params": params, **values, "lr": plan.lr(record.spec.lr)})
        self.params.extend(params)
        self.plans.extend(plans)
        self.names.extend(added.name for added in plans)
        self.group_specs.append(plan.spec)

    def check_loaded(self, optimizer, state_dict) -> None:
        """``load_state_dict``'s pre-hook: every saved group holds the hyperparameters the
        class reads from it (a state_dict of an own-path optimizer holds only lr), or a
        ValueError before anything is loaded (torch's load checks no group keys: the
        step would fail on a missing one)."""
        needed = set(self.lowering.to_native(self.group_specs[0])) | {"lr"}
        for g, group in enumerate(state_dict["param_groups"]):
            missing = sorted(needed - group.keys())
            if missing:
                raise ValueError(f"load_state_dict: param_groups[{g}] lacks {missing}, which "
                                 f"{type(optimizer).__name__} reads from each group (a "
                                 f"state_dict of another optimizer?)")

    @staticmethod
    def lay_out_loaded(optimizer) -> None:
        """``load_state_dict``'s post-hook: each fused group's loaded state laid out like
        its parameters (:func:`lay_out_state`; the steps check only the state of
        parameters that are not contiguous)."""
        for group in optimizer.param_groups:
            if group.get("fused"):
                for p in group["params"]:
                    lay_out_state(optimizer.state.get(p, {}), p)

    def _accepts_sparse(self, index: int, parameter: tuple, gradient: tuple) -> bool:
        """A gradient that differs from its parameter only in being sparse, where the
        class steps it (:func:`steps_sparse`) and no pre-step reads it (the pre-step
        takes dense gradients)."""
        return (gradient[3] == "sparse_coo" and gradient[:3] == parameter[:3]
                and not self.pre_step
                and steps_sparse(self._optimizer, self._group(index)))

    def _group(self, index: int) -> dict:
        """The param group holding parameter ``index`` (looked up at the step:
        ``load_state_dict`` replaces the group dicts)."""
        p = self.params[index]
        return next(g for g in self._optimizer.param_groups
                    if any(p is q for q in g["params"]))

    def check(self, optimizer) -> list:
        """Every ``p.grad`` checked against its parameter before anything changes
        (:func:`unified_opt.step_loop.check_gradients`: shape, dtype, device, dense, a
        sparse gradient where :meth:`_accepts_sparse`); the param groups holding a sparse
        gradient (they run unfused: the fused kernels refuse sparse gradients)."""
        grads = [p.grad for p in self.params]
        check_gradients(type(optimizer).__name__, self.names, self.params, grads,
                        describe, self._accepts_sparse, SPARSE_HINT)
        sparse = []
        for i, g in enumerate(grads):
            if g is not None and g.layout is not torch.strided:
                group = self._group(i)
                if not any(group is s for s in sparse):
                    sparse.append(group)
        return sparse

    @torch.no_grad()
    def before(self, optimizer, args, kwargs):
        changed, self._stash = None, None
        if self.pre_step or args[1:] or kwargs.get("closure") is not None:
            # the closure makes the gradients the check and the pre-step read
            _, args, kwargs = closure_first(args, kwargs)
            changed = (args, kwargs)
        if self.varies:
            # the step's values first: whether a sparse gradient is stepped reads them
            # (rewritten at every step, so a refused step leaves nothing behind)
            t = steps_taken(optimizer)
            for group, spec in zip(optimizer.param_groups, self.group_specs):
                for key, value in self.lowering.to_native(spec.at_step(t)).items():
                    if group[key] != value:
                        group[key] = value
        sparse = self.check(optimizer)
        if self.pre_step:
            grads = [p.grad for p in self.params]
            prepared = prepare_gradients(self.spec, self.plans, grads, torch_ops)
            if prepared is None:
                self._stash = grads
                for p in self.params:
                    p.grad = None
                self.skipped.append(True)
                return changed
            for p, g, new in zip(self.params, grads, prepared):
                if new is not g:
                    p.grad = laid_out_like(new, p)
        self._unfused = _late_momentum_buffers(optimizer)
        self._unfused += [g for g in sparse if g.get("fused")
                          and not any(g is u for u in self._unfused)]
        self._unfused += [g for g in _fused_cpu_layouts(optimizer)
                          if not any(g is u for u in self._unfused)]
        for group in self._unfused:
            group["fused"] = False
        self.skipped.append(False)
        return changed

    def after(self, optimizer, args, kwargs):
        for group in self._unfused:
            group["fused"] = True
        self._unfused = []
        if self._stash is not None:
            for p, g in zip(self.params, self._stash):
                p.grad = g
            self._stash = None
            return
        optimizer.param_groups[0][STEPS_TAKEN] = steps_taken(optimizer) + 1
