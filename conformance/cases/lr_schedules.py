"""Conformance cases of the lr schedules: one per native scheduler preset
(``uo.schedules.presets()``: every torch, Paddle and MindSpore scheduler), each driving
that framework's own optimizer preset, so the lr used at each of the 50 steps is
compared on every backend (the ``lr`` quantity: float32 rounding is inside the floor).

Arguments are chosen so that every schedule moves inside the 50 steps: milestones,
warm restarts, cycles and the end of a warm-up or decay fall inside the window, and
epoch-based MindSpore functions run with 5 steps per epoch. The momentum-cycling torch
presets (``OneCycleLR``, ``CyclicLR``: ``cycle_momentum=True`` by default) run with their
momentum cycling. A few more cases cover what the presets alone do not (a torch
scheduler stepped per epoch, ``scale_fn``, a cyclic schedule without momentum cycling).
"""

from __future__ import annotations

import unified_opt as uo
from unified_opt.schedules import PerEpoch, preset

from .case import TRAINING_DENSE_PARAMS, Case
from .functions import FUNCTIONS

TORCH = "torch.optim.lr_scheduler"
PADDLE = "paddle.optimizer.lr"
MS = "mindspore.nn"
MS_EXP = "mindspore.experimental.optim.lr_scheduler"
F = FUNCTIONS


def _optimizers():
    return {
        "torch": uo.preset("torch.optim.SGD", lr=0.1, momentum=0.9),
        "torch_adamw": uo.preset("torch.optim.AdamW", lr=0.01, eps=1e-3, weight_decay=0.1),
        "paddle": uo.preset("paddle.optimizer.Momentum", learning_rate=0.1, momentum=0.9),
        "paddle_lamb": uo.preset("paddle.optimizer.Lamb", learning_rate=0.01,
                                 lamb_weight_decay=0.01),
        "mindspore": uo.preset("mindspore.nn.Momentum", learning_rate=0.1, momentum=0.9),
        "mindspore_exp": uo.preset("mindspore.experimental.optim.SGD", lr=0.1, momentum=0.9),
        "mindspore_exp_adam": uo.preset("mindspore.experimental.optim.Adam", lr=0.01,
                                        eps=1e-3),
    }


#: (qualified scheduler, optimizer key, native kwargs)
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


def case_id(qualified: str) -> str:
    """``torch.optim.lr_scheduler.StepLR`` -> ``preset_lr_torch_steplr``."""
    framework = qualified.split(".")[0]
    if qualified.startswith(MS_EXP):
        framework = "mindspore_experimental"
    return f"preset_lr_{framework}_{qualified.rpartition('.')[2].lower()}"


def preset_cases() -> list[Case]:
    optimizers = _optimizers()
    return [Case(id=case_id(qualified), params=TRAINING_DENSE_PARAMS,
                 spec=optimizers[optimizer].replace(lr=preset(qualified, **kwargs)),
                 description=f"{qualified} on {optimizer}")
            for qualified, optimizer, kwargs in PRESETS]


def extra_cases() -> list[Case]:
    sgd = _optimizers()["torch"]
    per_epoch = PerEpoch(epoch_schedule=preset(f"{TORCH}.StepLR", base_lr=0.1, step_size=2,
                                               gamma=0.5), steps_per_epoch=5)
    return [
        Case(id="preset_lr_torch_steplr_per_epoch", params=TRAINING_DENSE_PARAMS,
             spec=sgd.replace(lr=per_epoch),
             description="StepLR stepped once per epoch of 5 steps"),
        Case(id="preset_lr_torch_cycliclr_scale_fn", params=TRAINING_DENSE_PARAMS,
             spec=sgd.replace(lr=preset(f"{TORCH}.CyclicLR", base_lr=0.01, max_lr=0.1,
                                        step_size_up=4, scale_fn=F["half_per_cycle"],
                                        cycle_momentum=False))),
        Case(id="preset_lr_torch_onecyclelr_three_phase_sgd", params=TRAINING_DENSE_PARAMS,
             spec=sgd.replace(lr=preset(f"{TORCH}.OneCycleLR", max_lr=0.1, total_steps=50,
                                        three_phase=True, anneal_strategy="linear",
                                        base_momentum=0.8, max_momentum=0.95)),
             description="momentum cycling on SGD's momentum, three phases"),
    ]


def cases() -> list[Case]:
    return preset_cases() + extra_cases()
