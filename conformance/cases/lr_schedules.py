"""Conformance cases of the lr schedules: one per native scheduler preset
(``uo.schedules.presets()``: every torch, Paddle and MindSpore scheduler), each driving
that framework's own optimizer preset, so the lr used at each of the 50 steps is
compared on every backend (the ``lr`` quantity: float32 rounding is inside the floor).

The arguments are :data:`unified_opt.schedules.examples.PRESETS`. The momentum-cycling
torch presets (``OneCycleLR``, ``CyclicLR``: ``cycle_momentum=True`` by default) run with their
momentum cycling. A few more cases cover what the presets alone do not (a torch
scheduler stepped per epoch, ``scale_fn``, a cyclic schedule without momentum cycling).
"""

from __future__ import annotations

import unified_opt as uo
from unified_opt.schedules import PerEpoch, preset
from unified_opt.schedules.examples import FUNCTIONS, MS_EXP, PRESETS, TORCH

from .case import DENSE_PARAMS, Case

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


def case_id(qualified: str) -> str:
    """``torch.optim.lr_scheduler.StepLR`` -> ``preset_lr_torch_steplr``."""
    framework = qualified.split(".")[0]
    if qualified.startswith(MS_EXP):
        framework = "mindspore_experimental"
    return f"preset_lr_{framework}_{qualified.rpartition('.')[2].lower()}"


def preset_cases() -> list[Case]:
    optimizers = _optimizers()
    return [Case(id=case_id(qualified), params=DENSE_PARAMS,
                 spec=optimizers[optimizer].replace(lr=preset(qualified, **kwargs)),
                 description=f"{qualified} on {optimizer}")
            for qualified, optimizer, kwargs in PRESETS]


def extra_cases() -> list[Case]:
    sgd = _optimizers()["torch"]
    per_epoch = PerEpoch(epoch_schedule=preset(f"{TORCH}.StepLR", base_lr=0.1, step_size=2,
                                               gamma=0.5), steps_per_epoch=5)
    return [
        Case(id="preset_lr_torch_steplr_per_epoch", params=DENSE_PARAMS,
             spec=sgd.replace(lr=per_epoch),
             description="StepLR stepped once per epoch of 5 steps"),
        Case(id="preset_lr_torch_cycliclr_scale_fn", params=DENSE_PARAMS,
             spec=sgd.replace(lr=preset(f"{TORCH}.CyclicLR", base_lr=0.01, max_lr=0.1,
                                        step_size_up=4, scale_fn=F["half_per_cycle"],
                                        cycle_momentum=False))),
        Case(id="preset_lr_torch_onecyclelr_three_phase_sgd", params=DENSE_PARAMS,
             spec=sgd.replace(lr=preset(f"{TORCH}.OneCycleLR", max_lr=0.1, total_steps=50,
                                        three_phase=True, anneal_strategy="linear",
                                        base_momentum=0.8, max_momentum=0.95)),
             description="momentum cycling on SGD's momentum, three phases"),
    ]


def cases() -> list[Case]:
    return preset_cases() + extra_cases()
