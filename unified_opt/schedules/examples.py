"""Example native arguments for every scheduler preset, and the named Python callables
they use (a ``LambdaLR`` factor, a ``CyclicLR`` ``scale_fn``).

Arguments are chosen so that every schedule moves inside 50 steps: milestones, warm
restarts, cycles and the end of a warm-up or decay fall inside the window, and
epoch-based MindSpore functions run with 5 steps per epoch. The compatibility matrix
shows each scheduler's path with them, and the conformance suite runs each one (a case
travels to its worker as JSON, where a registered callable is written by name).
"""

from __future__ import annotations

import math
from typing import Callable

from ._preset_registry import preset

FUNCTIONS: dict[str, Callable] = {}


def named(fn: Callable) -> Callable:
    """Register ``fn`` under its ``__name__``."""
    if fn.__name__ in FUNCTIONS:
        raise ValueError(f"example function {fn.__name__!r} is registered twice")
    FUNCTIONS[fn.__name__] = fn
    return fn


@named
def warm_then_decay(t):
    """A LambdaLR factor: linear warm-up over 5 steps, then ``0.93 ** (t - 5)``."""
    return (t + 1) / 5.0 if t < 5 else 0.93 ** (t - 5)


@named
def wavy_decay(t):
    """A LambdaLR factor that falls and rises: ``(1 + cos(t / 3)) / 2 * 0.98 ** t``."""
    return (1.0 + math.cos(t / 3.0)) / 2.0 * 0.98 ** t + 0.05


@named
def times_097(t):
    """A MultiplicativeLR factor: 0.97 every step."""
    return 0.97


@named
def times_alternating(t):
    """A MultiplicativeLR factor that alternates 0.9 and 1.05."""
    return 0.9 if t % 2 else 1.05


@named
def half_per_cycle(x):
    """A CyclicLR ``scale_fn``: halves the height every cycle (``triangular2``)."""
    return 0.5 ** (x - 1)


TORCH = "torch.optim.lr_scheduler"
PADDLE = "paddle.optimizer.lr"
MS = "mindspore.nn"
MS_EXP = "mindspore.experimental.optim.lr_scheduler"
HF = "transformers"
F = FUNCTIONS

#: (qualified scheduler, the optimizer preset it drives in the conformance case, native
#: kwargs)
PRESETS = [
    (f"{TORCH}.ChainedScheduler", "torch", dict(base_lr=0.1, schedulers=[
        ("ConstantLR", {"factor": 0.5, "total_iters": 10}),
        ("ExponentialLR", {"gamma": 0.95})])),
    (f"{TORCH}.ConstantLR", "torch", dict(base_lr=0.1, factor=0.25, total_iters=20)),
    (f"{TORCH}.CosineAnnealingLR", "torch", dict(base_lr=0.1, T_max=30, eta_min=0.01)),
    (f"{TORCH}.CosineAnnealingWarmRestarts", "torch",
     dict(base_lr=0.1, T_0=8, T_mult=2, eta_min=0.005)),
    (f"{TORCH}.CyclicLR", "torch", dict(base_lr=0.01, max_lr=0.1, step_size_up=6,
                                        step_size_down=4, mode="triangular2")),
    (f"{TORCH}.ExponentialLR", "torch", dict(base_lr=0.1, gamma=0.95)),
    (f"{TORCH}.LambdaLR", "torch", dict(base_lr=0.1, lr_lambda=F["warm_then_decay"])),
    (f"{TORCH}.LinearLR", "torch", dict(base_lr=0.1, start_factor=0.2, total_iters=15)),
    (f"{TORCH}.MultiStepLR", "torch", dict(base_lr=0.1, milestones=[10, 25, 40], gamma=0.5)),
    (f"{TORCH}.MultiplicativeLR", "torch", dict(base_lr=0.1, lr_lambda=F["times_097"])),
    (f"{TORCH}.OneCycleLR", "torch_adamw", dict(max_lr=0.02, epochs=5, steps_per_epoch=10)),
    (f"{TORCH}.PolynomialLR", "torch", dict(base_lr=0.1, total_iters=40, power=2.0)),
    (f"{TORCH}.SequentialLR", "torch", dict(base_lr=0.1, schedulers=[
        ("LinearLR", {"start_factor": 0.1, "total_iters": 10}),
        ("CosineAnnealingLR", {"T_max": 40})], milestones=[10])),
    (f"{TORCH}.StepLR", "torch", dict(base_lr=0.1, step_size=8, gamma=0.6)),
    (f"{HF}.get_constant_schedule_with_warmup", "torch", dict(base_lr=0.1,
                                                              num_warmup_steps=10)),
    (f"{HF}.get_cosine_schedule_with_warmup", "torch_adamw", dict(
        base_lr=0.01, num_warmup_steps=8, num_training_steps=40, num_cycles=0.75)),
    (f"{HF}.get_linear_schedule_with_warmup", "torch", dict(base_lr=0.1, num_warmup_steps=10,
                                                            num_training_steps=45)),
    (f"{PADDLE}.CosineAnnealingDecay", "paddle", dict(learning_rate=0.1, T_max=20,
                                                      eta_min=0.01)),
    (f"{PADDLE}.CosineAnnealingWarmRestarts", "paddle",
     dict(learning_rate=0.1, T_0=10, eta_min=0.01)),
    (f"{PADDLE}.CyclicLR", "paddle", dict(base_learning_rate=0.01, max_learning_rate=0.1,
                                          step_size_up=7, mode="exp_range", exp_gamma=0.97)),
    (f"{PADDLE}.ExponentialDecay", "paddle", dict(learning_rate=0.1, gamma=0.95)),
    (f"{PADDLE}.InverseTimeDecay", "paddle", dict(learning_rate=0.1, gamma=0.2)),
    (f"{PADDLE}.LambdaDecay", "paddle", dict(learning_rate=0.1, lr_lambda=F["wavy_decay"])),
    (f"{PADDLE}.LinearLR", "paddle", dict(learning_rate=0.1, total_steps=20,
                                          start_factor=0.1, end_factor=0.5)),
    (f"{PADDLE}.LinearWarmup", "paddle_lamb", dict(
        learning_rate=preset(f"{PADDLE}.CosineAnnealingDecay", learning_rate=0.01, T_max=40),
        warmup_steps=10, start_lr=0.0, end_lr=0.01)),
    (f"{PADDLE}.MultiStepDecay", "paddle", dict(learning_rate=0.1, milestones=[10, 25, 40],
                                                gamma=0.5)),
    (f"{PADDLE}.MultiplicativeDecay", "paddle",
     dict(learning_rate=0.1, lr_lambda=F["times_alternating"])),
    (f"{PADDLE}.NaturalExpDecay", "paddle", dict(learning_rate=0.1, gamma=0.05)),
    (f"{PADDLE}.NoamDecay", "paddle", dict(d_model=64, warmup_steps=10, learning_rate=2.0)),
    (f"{PADDLE}.OneCycleLR", "paddle", dict(max_learning_rate=0.1, total_steps=50,
                                            three_phase=True, anneal_strategy="linear")),
    (f"{PADDLE}.PiecewiseDecay", "paddle", dict(boundaries=[10, 30],
                                                values=[0.1, 0.05, 0.01])),
    (f"{PADDLE}.PolynomialDecay", "paddle", dict(learning_rate=0.1, decay_steps=15,
                                                 end_lr=0.01, power=1.5, cycle=True)),
    (f"{PADDLE}.StepDecay", "paddle", dict(learning_rate=0.1, step_size=8, gamma=0.6)),
    (f"{MS}.CosineDecayLR", "mindspore", dict(min_lr=0.01, max_lr=0.1, decay_steps=30)),
    (f"{MS}.ExponentialDecayLR", "mindspore", dict(learning_rate=0.1, decay_rate=0.9,
                                                   decay_steps=5, is_stair=True)),
    (f"{MS}.InverseDecayLR", "mindspore", dict(learning_rate=0.1, decay_rate=0.5,
                                               decay_steps=10)),
    (f"{MS}.NaturalExpDecayLR", "mindspore", dict(learning_rate=0.1, decay_rate=0.05,
                                                  decay_steps=10, is_stair=True)),
    (f"{MS}.PolynomialDecayLR", "mindspore", dict(learning_rate=0.1, end_learning_rate=0.01,
                                                  decay_steps=20, power=2.0,
                                                  update_decay_steps=True)),
    (f"{MS}.WarmUpLR", "mindspore", dict(learning_rate=0.1, warmup_steps=20)),
    (f"{MS}.cosine_decay_lr", "mindspore", dict(min_lr=0.01, max_lr=0.1, total_step=50,
                                                step_per_epoch=5, decay_epoch=8)),
    (f"{MS}.exponential_decay_lr", "mindspore", dict(learning_rate=0.1, decay_rate=0.8,
                                                     total_step=50, step_per_epoch=5,
                                                     decay_epoch=2, is_stair=True)),
    (f"{MS}.inverse_decay_lr", "mindspore", dict(learning_rate=0.1, decay_rate=0.5,
                                                 total_step=50, step_per_epoch=5,
                                                 decay_epoch=2)),
    (f"{MS}.natural_exp_decay_lr", "mindspore", dict(learning_rate=0.1, decay_rate=0.3,
                                                     total_step=50, step_per_epoch=5,
                                                     decay_epoch=2, is_stair=True)),
    (f"{MS}.piecewise_constant_lr", "mindspore", dict(milestone=[10, 30, 50],
                                                      learning_rates=[0.1, 0.05, 0.01])),
    (f"{MS}.polynomial_decay_lr", "mindspore", dict(
        learning_rate=0.1, end_learning_rate=0.01, total_step=50, step_per_epoch=5,
        decay_epoch=3, power=2.0, update_decay_epoch=True)),
    (f"{MS}.warmup_lr", "mindspore", dict(learning_rate=0.1, total_step=50, step_per_epoch=5,
                                          warmup_epoch=4)),
    (f"{MS_EXP}.ConstantLR", "mindspore_exp", dict(base_lr=0.1, factor=0.25, total_iters=20)),
    (f"{MS_EXP}.CosineAnnealingLR", "mindspore_exp", dict(base_lr=0.1, T_max=20,
                                                          eta_min=0.01)),
    (f"{MS_EXP}.CosineAnnealingWarmRestarts", "mindspore_exp_adam",
     dict(base_lr=0.01, T_0=6, T_mult=2, eta_min=0.001)),
    (f"{MS_EXP}.CyclicLR", "mindspore_exp", dict(base_lr=0.01, max_lr=0.1, step_size_up=5,
                                                 mode="exp_range", gamma=0.98)),
    (f"{MS_EXP}.ExponentialLR", "mindspore_exp", dict(base_lr=0.1, gamma=0.95)),
    (f"{MS_EXP}.LambdaLR", "mindspore_exp", dict(base_lr=0.1, lr_lambda=F["wavy_decay"])),
    (f"{MS_EXP}.LinearLR", "mindspore_exp", dict(base_lr=0.1, start_factor=0.2,
                                                 end_factor=0.8, total_iters=25)),
    (f"{MS_EXP}.MultiStepLR", "mindspore_exp_adam", dict(base_lr=0.01, milestones=[10, 25, 40],
                                                         gamma=0.5)),
    (f"{MS_EXP}.MultiplicativeLR", "mindspore_exp", dict(base_lr=0.1,
                                                         lr_lambda=F["times_097"])),
    (f"{MS_EXP}.PolynomialLR", "mindspore_exp", dict(base_lr=0.1, total_iters=40, power=2.0)),
    (f"{MS_EXP}.SequentialLR", "mindspore_exp", dict(base_lr=0.1, schedulers=[
        ("ConstantLR", {"factor": 0.5, "total_iters": 12}),
        ("ExponentialLR", {"gamma": 0.93})], milestones=[15])),
    (f"{MS_EXP}.StepLR", "mindspore_exp", dict(base_lr=0.1, step_size=8, gamma=0.6)),
]
