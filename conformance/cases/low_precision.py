"""Conformance cases of low-precision storage (:mod:`unified_opt.storage`): bfloat16
parameters, whose update computes in float32 and rounds what it keeps once per step, and a
spec's ``state_dtype``. The oracle and the floors round the same way; the comparison
counts in bfloat16 ulps (:mod:`..compare`). Learning rates are large enough that most
steps move a value by more than half a bfloat16 ulp, so the updates show."""

from __future__ import annotations

import unified_opt as uo

from .case import Case


def cases() -> list[Case]:
    bf16 = {"storage": "bfloat16"}
    return [
        Case(id="bfloat16_adamw", spec=uo.AdamW(lr=0.01), **bf16,
             description="bfloat16 parameters and state, the update in float32"),
        Case(id="bfloat16_adamw_float32_state", spec=uo.AdamW(lr=0.01, state_dtype="float32"),
             **bf16, description="bfloat16 parameters, float32 moments"),
        Case(id="bfloat16_lion", spec=uo.Lion(lr=0.01, weight_decay=0.1), **bf16),
        Case(id="bfloat16_sgd_momentum_clipped",
             spec=uo.SGD(lr=0.05, momentum=0.9,
                         grad_clip=uo.ClipByGlobalNorm(max_norm=1.0)), **bf16,
             description="the clipped gradients rounded back to bfloat16, as p.grad keeps them"),
        Case(id="bfloat16_adafactor", spec=uo.Adafactor(lr=0.01), **bf16),
        Case(id="bfloat16_lamb", spec=uo.Lamb(lr=0.01, weight_decay=0.01), **bf16),
        Case(id="float32_adam_bfloat16_state", spec=uo.Adam(lr=0.01, state_dtype="bfloat16"),
             description="float32 parameters, moments kept in bfloat16"),
    ]
