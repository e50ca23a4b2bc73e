"""Paddle classes that run a spec: :class:`SpecOptimizer` (the spec's own update) and
:class:`ScheduleLR` (a scheduled lr as a Paddle LR scheduler)."""

from __future__ import annotations

import paddle
from paddle.optimizer.lr import LRScheduler
from paddle.utils import unique_name

from .ops import paddle_ops

STEP = "step"   # accumulator holding each parameter's count of completed steps


class ScheduleLR(LRScheduler):
    """``paddle.optimizer.lr.LRScheduler`` whose lr at ``last_epoch = t`` is
    ``schedule(t)``: in the usual loop ``opt.step(); sched.step()`` the 0-based step t
    runs with ``schedule(t)``."""

    def __init__(self, schedule):
        self.schedule = schedule
        super().__init__(learning_rate=schedule(0))   # sets last_epoch = 0

    def get_lr(self) -> float:
        return self.schedule(self.last_epoch)


class SpecOptimizer(paddle.optimizer.Optimizer):
    """``paddle.optimizer.Optimizer`` running ``spec.update`` per parameter.

    State lives in Paddle accumulators (so ``state_dict``/``set_state_dict`` carry it):
    the spec's state arrays under the spec's names plus ``step``, an int64 [1] counter.
    They are created here, not at the first step, inside ``unique_name.guard()``: their
    names are then ``<param.name>_<state>_0`` in every build, and a state dict saved
    from one build loads into the next one over the same parameters.
    """

    def __init__(self, params, spec, param_specs, learning_rate):
        super().__init__(learning_rate=learning_rate, parameters=params)
        self.spec = spec
        self._param_specs = {p.name: s for p, s in zip(params, param_specs)}
        # per parameter, the state names its spec.init made (factored specs: they
        # depend on the parameter's shape)
        self._state_names: dict[str, tuple[str, ...]] = {}
        with unique_name.guard():
            for p, s in zip(params, param_specs):
                initial = s.init(p.detach(), paddle_ops)
                if STEP in initial:
                    raise ValueError(f"SpecOptimizer: {s.name} has a state named {STEP!r}, "
                                     "which is the step counter's accumulator")
                self._state_names[p.name] = tuple(initial)
                self._add_accumulator(STEP, p, dtype=paddle.int64, shape=[1])
                for key, value in initial.items():
                    self._add_accumulator(key, p, dtype=value.dtype,
                                          shape=value.shape).set_value(value)

    @paddle.no_grad()
    def step(self) -> None:
        # Not the base class's step: that one skips zero-size parameters (Paddle counts
        # them as uninitialised), while a spec's scalar state (e.g. NAdam's mu_product)
        # advances for them too.
        found_inf = self._get_auxiliary_var("found_inf")
        if found_inf is not None:
            # paddle.amp.GradScaler sets it and reads it back; like Paddle's own
            # optimizers, skip the step when the unscaled gradients hold inf/nan.
            self._set_auxiliary_var("found_inf", bool(found_inf))
            if found_inf:
                return
        for param in self._parameter_list:
            grad = param._grad_ivar()
            if not param.stop_gradient and grad is not None:
                self._append_optimize_op(None, (param, grad))

    def _create_accumulators(self, block, parameters):
        pass   # all made in __init__

    def _append_optimize_op(self, block, param_and_grad):
        """One parameter's update (also what the base class's ``minimize`` calls)."""
        param, grad = param_and_grad
        spec = self._param_specs[param.name]
        counter = self._get_accumulator(STEP, param)
        state = {key: self._get_accumulator(key, param)
                 for key in self._state_names[param.name]}
        new_param, new_state = spec.update(param.detach(), grad, state, lr=self.get_lr(),
                                           step=int(counter.item()) + 1, ops=paddle_ops)
        paddle.assign(new_param, output=param)
        for key, value in new_state.items():
            paddle.assign(value, output=state[key])
        paddle.assign(counter + 1, output=counter)

    def spec_state(self, p) -> dict:
        return {key: self._get_accumulator(key, p) for key in self._state_names[p.name]}
