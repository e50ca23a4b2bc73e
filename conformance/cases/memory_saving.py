"""Conformance cases of the memory-saving optimizers: adafactor and came (factored second
moments) and adam_offload (state on the host). Every knob and every framework's own
class through its preset."""

from __future__ import annotations

import unified_opt as uo
from unified_opt.schedules import Cosine

from .case import Case, dense

COSINE = Cosine(lr=0.02, T_max=50, eta_min=0.001)


def _adafactor() -> list[Case]:
    hf = {"eps": (1e-30, 1e-3), "eps_mode": "add", "beta1": 0.9, "decay_lr": "scaled"}
    return [
        Case(id="adafactor_default", spec=uo.Adafactor(lr=0.01)),
        Case(id="adafactor_weight_decay", spec=uo.Adafactor(lr=0.01, weight_decay=0.5)),
        Case(id="adafactor_maximize_clip",
             spec=uo.Adafactor(lr=0.01, maximize=True, clip_threshold=0.3)),
        Case(id="adafactor_eps1_clamp", spec=uo.Adafactor(lr=0.01, eps=(0.05, 1e-3))),
        Case(id="adafactor_eps1_add",
             spec=uo.Adafactor(lr=0.01, eps=(0.05, 1e-3), eps_mode="add")),
        # an lr above 1/sqrt(t) for t > 11: the relative step caps it
        Case(id="adafactor_relative_step_cap", spec=uo.Adafactor(lr=0.3)),
        Case(id="adafactor_hugging_face",
             spec=uo.Adafactor(lr=0.01, weight_decay=0.5, **hf)),
        Case(id="adafactor_manual_lr",
             spec=uo.Adafactor(lr=COSINE, relative_step=False, scale_parameter=False, **hf)),
        Case(id="adafactor_warmup_init",
             spec=uo.Adafactor(lr=1e-3, warmup_init=True, eps_mode="add", eps=(1e-30, 1e-3))),
        Case(id="adafactor_constant_beta2",
             spec=uo.Adafactor(lr=0.01, beta2=0.9, decay_rate=None, beta1=0.5)),
        dense(id="preset_torch_adafactor", spec=uo.preset("torch.optim.Adafactor", lr=0.01)),
        dense(id="preset_torch_adafactor_decay", spec=uo.preset(
            "torch.optim.Adafactor", lr=0.01, weight_decay=0.5, beta2_decay=-0.5)),
        # lr above 1/sqrt(t) from step 12: the relative step caps it; eps[0] large enough
        # that clamping and adding it differ; eps[1] above the
        # parameters' RMS, so its clamp acts
        dense(id="preset_torch_adafactor_capped_eps", spec=uo.preset(
            "torch.optim.Adafactor", lr=0.3, eps=(0.5, 1.5))),
        dense(id="preset_mindspore_nn_adafactor", spec=uo.preset("mindspore.nn.AdaFactor")),
        dense(id="preset_mindspore_nn_adafactor_eps", spec=uo.preset(
            "mindspore.nn.AdaFactor", eps=(0.05, 1.5), weight_decay=0.1)),
        dense(id="preset_mindspore_nn_adafactor_manual", spec=uo.preset(
            "mindspore.nn.AdaFactor", learning_rate=0.01, relative_step=False,
            scale_parameter=False, weight_decay=0.1)),
    ]


def _came() -> list[Case]:
    a = {"lr": 0.01, "betas": (0.9, 0.999, 0.99)}
    return [
        Case(id="came_default", spec=uo.CAME(**a)),
        Case(id="came_weight_decay", spec=uo.CAME(**a, weight_decay=0.5, clip_threshold=0.5)),
        Case(id="came_beta2_schedule",
             spec=uo.CAME(lr=0.01, betas=(0.9, None, 0.99), decay_rate=0.8)),
        Case(id="came_scale_parameter",
             spec=uo.CAME(lr=0.05, betas=(0.9, 0.999, 0.99), scale_parameter=True,
                          eps_scale=0.5)),
        Case(id="came_relative_step",
             spec=uo.CAME(lr=0.01, betas=(0.9, 0.999, 0.99), relative_step=True)),
        Case(id="came_cosine", spec=uo.CAME(lr=COSINE, eps=(1e-3, 1e-3))),
        dense(id="preset_mindformers_came", spec=uo.preset(
            "mindformers.core.Came", learning_rate=0.01, weight_decay=0.1)),
        dense(id="preset_mindformers_came_scale", spec=uo.preset(
            "mindformers.core.Came", learning_rate=0.05, scale_parameter=True)),
    ]


def _adam_offload() -> list[Case]:
    a = {"lr": 0.01, "eps": 1e-3}
    return [
        Case(id="adam_offload_default", spec=uo.AdamOffload(**a)),
        Case(id="adam_offload_amsgrad_decay",
             spec=uo.AdamOffload(**a, amsgrad=True, weight_decay=0.1)),
        Case(id="adam_offload_eps_hat_nesterov",
             spec=uo.AdamOffload(**a, eps_placement="eps_hat", nesterov=True)),
        dense(id="preset_mindspore_nn_adam_offload", spec=uo.preset(
            "mindspore.nn.AdamOffload", learning_rate=0.01, eps=1e-3, weight_decay=0.1)),
        dense(id="preset_mindspore_nn_adam_use_offload", spec=uo.preset(
            "mindspore.nn.Adam", learning_rate=0.01, eps=1e-3, use_nesterov=True,
            use_offload=True)),
    ]


def cases() -> list[Case]:
    return _adafactor() + _came() + _adam_offload()
