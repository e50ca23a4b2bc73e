"""Optimizers written by hand in each framework, the way a porting team writes them, for
``uo.conformance.check``: Adam/AdamW, Lamb, CAME and SGD with momentum, each with the
planted bugs the check must name (``bug=``):

* ``eps_inside``: eps inside the square root, ``sqrt(v_hat + eps)``;
* ``no_bias_correction``: Adam without bias correction;
* ``coupled_decay``: AdamW's decay added to the gradient (Adam's L2);
* ``no_clamp``: Lamb without its weight-norm clamp;
* ``momentum_before_decay``: SGD's decay added after the momentum (Adam's: the moments
  of the bare gradient, ``wd * p`` added to the update);
* ``lr_zero_first``: Adam with lr 0 at step 1 (a warmup from 0), the lr it reports
  unchanged;
* Lamb's: ``eps_inside``, ``coupled_decay`` (``wd * p`` into the gradient, the trust
  ratio kept), ``trust_ratio_clip`` (the ratio capped at 10), ``global_trust_ratio``
  (one ratio over all parameters) and ``stale_gradients`` (every update one step late,
  on the previous step's gradients: the last two in the torch class).

(A one-step lr shift is a scheduler built one step ahead: ``test_check.py``.)

The update rules are written once over tensors (``+ - * /`` with Python floats, and the
few calls of :class:`Ops`); each framework gets a thin optimizer class that stores the
state under the names the spec uses (``exp_avg``, ``exp_avg_sq``, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Ops:
    """The calls the rules need beyond arithmetic, for one framework."""

    sqrt: Callable
    mean: Callable          # mean(x, axis) with keepdims
    norm: Callable          # the 2-norm of the whole tensor, as a Python float
    zeros_like: Callable


def torch_ops():
    import torch

    return Ops(torch.sqrt, lambda x, axis: x.mean(dim=axis, keepdim=True),
               lambda x: float(torch.linalg.vector_norm(x)), torch.zeros_like)


def paddle_ops():
    import paddle

    return Ops(paddle.sqrt, lambda x, axis: x.mean(axis=axis, keepdim=True),
               lambda x: float(paddle.linalg.norm(x.flatten())), paddle.zeros_like)


def mindspore_ops():
    import mindspore.ops as F
    import numpy as np

    # the norm on the host: MindSpore 2.10's ops.norm took about 4 ms a call in PyNative
    # here (np.linalg.norm of the same float32 values: 30 us), and Lamb takes two per
    # tensor and step
    return Ops(F.sqrt, lambda x, axis: x.mean(axis=axis, keep_dims=True),
               lambda x: float(np.linalg.norm(x.asnumpy().reshape(-1))), F.zeros_like)


# -- the rules: (ops, param, grad, state, step, hyperparameters) -> (param, state) ------

def adam(o, p, g, s, t, *, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
         decoupled=False, bug=None):
    b1, b2 = betas
    if bug == "lr_zero_first" and t == 1:
        lr = 0.0
    late_decay = weight_decay if bug == "momentum_before_decay" else 0.0
    if weight_decay and (not decoupled or bug == "coupled_decay") and not late_decay:
        g = g + p * weight_decay
    elif weight_decay and not late_decay:
        p = p - p * (lr * weight_decay)
    m = s["exp_avg"] * b1 + g * (1 - b1)
    v = s["exp_avg_sq"] * b2 + g * g * (1 - b2)
    m_hat, v_hat = (m, v) if bug == "no_bias_correction" else (m / (1 - b1 ** t),
                                                               v / (1 - b2 ** t))
    denominator = o.sqrt(v_hat + eps) if bug == "eps_inside" else o.sqrt(v_hat) + eps
    return p - (m_hat / denominator + p * late_decay) * lr, {"exp_avg": m, "exp_avg_sq": v}


def lamb(o, p, g, s, t, *, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
         clamp=None, bug=None, norms=None):
    """``norms``: the (weight, update) norms to use instead of this tensor's (one trust
    ratio over all parameters); with ``norms="direction"`` the direction ``u`` alone."""
    b1, b2 = betas
    if bug == "coupled_decay":
        g, weight_decay = g + p * weight_decay, 0.0
    m = s["exp_avg"] * b1 + g * (1 - b1)
    v = s["exp_avg_sq"] * b2 + g * g * (1 - b2)
    v_hat = v / (1 - b2 ** t)
    root = o.sqrt(v_hat + eps) if bug == "eps_inside" else o.sqrt(v_hat) + eps
    u = (m / (1 - b1 ** t)) / root + p * weight_decay
    if norms == "direction":
        return u
    weight_norm, update_norm = norms if norms is not None else (o.norm(p), o.norm(u))
    phi = weight_norm if clamp is None or bug == "no_clamp" else min(weight_norm, clamp)
    ratio = phi / update_norm if weight_norm > 0 and update_norm > 0 else 1.0
    if bug == "trust_ratio_clip":
        ratio = min(ratio, 10.0)
    return p - u * (lr * ratio), {"exp_avg": m, "exp_avg_sq": v}


def came(o, p, g, s, t, *, lr, betas=(0.9, 0.999, 0.9999), eps=(1e-30, 1e-16),
         clip_threshold=1.0, weight_decay=0.0, bug=None):
    b1, b2, b3 = betas
    square = g * g + eps[0]
    factored = len(p.shape) >= 2
    new = {}
    if factored:
        new["exp_avg_sq_row"] = s["exp_avg_sq_row"] * b2 + o.mean(square, -1) * (1 - b2)
        new["exp_avg_sq_col"] = s["exp_avg_sq_col"] * b2 + o.mean(square, -2) * (1 - b2)
        u = g * _inverse_sqrt(o, new["exp_avg_sq_row"], new["exp_avg_sq_col"])
    else:
        new["exp_avg_sq"] = s["exp_avg_sq"] * b2 + square * (1 - b2)
        u = g / o.sqrt(new["exp_avg_sq"])
    rms = o.norm(u) / math.sqrt(max(_size(p), 1))
    u = u / max(rms / clip_threshold, 1.0)
    new["exp_avg"] = m = s["exp_avg"] * b1 + u * (1 - b1)
    direction = m
    if factored:
        spread = (u - m) * (u - m) + eps[1]
        new["exp_avg_res_row"] = s["exp_avg_res_row"] * b3 + o.mean(spread, -1) * (1 - b3)
        new["exp_avg_res_col"] = s["exp_avg_res_col"] * b3 + o.mean(spread, -2) * (1 - b3)
        direction = m * _inverse_sqrt(o, new["exp_avg_res_row"], new["exp_avg_res_col"])
    if weight_decay:
        p = p - p * (lr * weight_decay)
    return p - direction * lr, new


def sgd(o, p, g, s, t, *, lr, momentum=0.9, weight_decay=0.0, bug=None):
    decayed = g if bug == "momentum_before_decay" else g + p * weight_decay
    # a copy at step 1: Paddle reuses the gradient's buffer for the next gradient
    buf = decayed * 1.0 if t == 1 else s["momentum_buffer"] * momentum + decayed
    step = buf + p * weight_decay if bug == "momentum_before_decay" else buf
    return p - step * lr, {"momentum_buffer": buf}


def _inverse_sqrt(o, row, col):
    return 1.0 / o.sqrt(row / o.mean(row, -2) * col)


def _size(p) -> int:
    return math.prod(int(d) for d in p.shape)


def initial_state(o, rule, p) -> dict:
    """Zero state under the spec's names (CAME's factored moments for >= 2 dims)."""
    if rule is sgd:
        return {"momentum_buffer": o.zeros_like(p)}
    if rule is came:
        if len(p.shape) >= 2:
            row, col = o.mean(p, -1), o.mean(p, -2)
            return {"exp_avg": o.zeros_like(p), "exp_avg_sq_row": o.zeros_like(row),
                    "exp_avg_sq_col": o.zeros_like(col),
                    "exp_avg_res_row": o.zeros_like(row),
                    "exp_avg_res_col": o.zeros_like(col)}
        return {"exp_avg": o.zeros_like(p), "exp_avg_sq": o.zeros_like(p)}
    return {"exp_avg": o.zeros_like(p), "exp_avg_sq": o.zeros_like(p)}


# -- one thin class per framework ------------------------------------------------------

def torch_optimizer(rule, params, **hyper):
    """A ``torch.optim.Optimizer`` running ``rule`` (state in ``optimizer.state[p]``)."""
    import torch

    class HandWritten(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {"lr": hyper.pop("lr")})
            self.ops = torch_ops()

        @torch.no_grad()
        def step(self):
            bug = hyper.get("bug")
            for group in self.param_groups:
                grads = [p.grad for p in group["params"]]
                if bug == "stale_gradients":     # this step's gradient waits for the next
                    held = [None if g is None else g.clone() for g in grads]
                    grads, group["held"] = group.get("held", [None] * len(grads)), held
                norms = self._global_norms(group, grads) if bug == "global_trust_ratio" \
                    else None
                for p, grad in zip(group["params"], grads):
                    if grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state.update(initial_state(self.ops, rule, p), step=0)
                    state["step"] += 1
                    arrays = {k: v for k, v in state.items() if k != "step"}
                    extra = {"norms": norms} if norms is not None else {}
                    new_p, new_state = rule(self.ops, p, grad, arrays, state["step"],
                                            lr=group["lr"], **hyper, **extra)
                    p.copy_(new_p)
                    state.update(new_state)

        def _global_norms(self, group, grads):
            """The norms of all parameters and all of this step's directions."""
            weights, updates = 0.0, 0.0
            for p, grad in zip(group["params"], grads):
                state = self.state[p] or initial_state(self.ops, rule, p)
                t = int(self.state[p].get("step", 0)) + 1
                arrays = {k: v for k, v in state.items() if k != "step"}
                u = rule(self.ops, p, grad, arrays, t, lr=group["lr"], **hyper,
                         norms="direction")
                weights += self.ops.norm(p) ** 2
                updates += self.ops.norm(u) ** 2
            return math.sqrt(weights), math.sqrt(updates)

    return HandWritten(params)


class PaddleHandWritten:
    """A Paddle optimizer as a plain class: ``step()``, ``clear_grad()``, ``get_lr()``."""

    def __init__(self, rule, parameters, *, lr, **hyper):
        self.rule, self.params, self.lr, self.hyper = rule, list(parameters), lr, hyper
        self.ops = paddle_ops()
        self.state = [initial_state(self.ops, rule, p) for p in self.params]
        self.t = 0

    def step(self):
        self.t += 1
        for i, p in enumerate(self.params):
            new_p, self.state[i] = self.rule(self.ops, p.detach(), p.grad, self.state[i],
                                             self.t, lr=self.lr, **self.hyper)
            p.set_value(new_p)

    def clear_grad(self, set_to_zero=True):
        for p in self.params:
            p.clear_gradient(set_to_zero)

    def get_lr(self):
        return self.lr


class MindSporeHandWritten:
    """A MindSpore optimizer as a plain callable: ``opt(grads)`` over ``parameters``."""

    def __init__(self, rule, parameters, *, lr, **hyper):
        self.rule, self.parameters, self.lr, self.hyper = rule, tuple(parameters), lr, hyper
        self.ops = mindspore_ops()
        self.state = [initial_state(self.ops, rule, p) for p in self.parameters]
        self.t = 0
        self.is_group_lr = False

    def __call__(self, grads):
        self.t += 1
        for i, (p, g) in enumerate(zip(self.parameters, grads)):
            new_p, self.state[i] = self.rule(self.ops, p.value(), g, self.state[i], self.t,
                                             lr=self.lr, **self.hyper)
            p.set_data(new_p)

    def get_lr(self):
        from mindspore import Tensor

        return Tensor(self.lr)
